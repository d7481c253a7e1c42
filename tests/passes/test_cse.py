from pyxla.passes.cse import common_subexpression_elimination as cse

from .hlo_checks import entry_opcodes, run_pass

BEFORE = """
HloModule cse
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}
add_f32_copy {
  a2 = f32[] parameter(0)
  bb2 = f32[] parameter(1)
  ROOT s2 = f32[] add(a2, bb2)
}
ENTRY main {
  x = f32[3,4] parameter(0)
  e1 = f32[3,4] exponential(x), metadata={op_name="first"}
  e2 = f32[3,4] exponential(x), metadata={op_name="second"}
  c1 = f32[] constant(2)
  c2 = f32[] constant(2)
  c3 = f32[] constant(3)
  b1 = f32[3,4] broadcast(c1), dimensions={}
  b2 = f32[3,4] broadcast(c2), dimensions={}
  b3 = f32[3,4] broadcast(c3), dimensions={}
  m1 = f32[3,4] multiply(e1, b1)
  m2 = f32[3,4] multiply(e2, b2)
  m3 = f32[3,4] multiply(e2, b3)
  zero = f32[] constant(0)
  r1 = f32[3] reduce(m1, zero), dimensions={1}, to_apply=add_f32
  r2 = f32[3] reduce(m2, zero), dimensions={1}, to_apply=add_f32
  r3 = f32[3] reduce(m2, zero), dimensions={1}, to_apply=add_f32_copy
  s = f32[3] add(r1, r2)
  t = f32[3] add(s, r3)
  u = f32[3,4] add(m3, m1)
  ROOT out = (f32[3], f32[3,4]) tuple(t, u)
}
"""


def test_merges_identical_instructions_and_constants(rng):
    after = run_pass(cse, BEFORE, rng)
    ops = entry_opcodes(after)
    assert ops["exponential"] == 1
    assert ops["multiply"] == 2          # by 2 and by 3
    assert ops["broadcast"] == 2
    assert ops["reduce"] == 1            # add_f32 and add_f32_copy compute the same: one reduce
    assert ops["constant"] == 3          # 2, 3 and 0


def test_structure_after(rng):
    after = run_pass(cse, BEFORE, rng)
    t = after.entry.root.operands[0]
    s = t.operands[0]
    assert s.operands[0] is s.operands[1]   # r1 and r2 became one reduce


def test_nothing_to_merge_reports_no_change(rng):
    after = run_pass(cse, BEFORE, rng)
    assert not cse(after)


def test_does_not_merge_rng(rng):
    text = """
HloModule rng
ENTRY main {
  s = u64[2] parameter(0)
  a = (u64[2], u32[4]) rng-bit-generator(s), algorithm=rng_default
  b = (u64[2], u32[4]) rng-bit-generator(s), algorithm=rng_default
  ga = u32[4] get-tuple-element(a), index=1
  gb = u32[4] get-tuple-element(b), index=1
  ROOT x = u32[4] xor(ga, gb)
}
"""
    after = run_pass(cse, text, rng)
    assert entry_opcodes(after)["rng-bit-generator"] == 2
