from pyxla.passes.zero_sized import zero_sized_elimination

from .hlo_checks import entry_opcodes, run_pass

BEFORE = """
HloModule empty
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[0,3] parameter(0)
  y = f32[3,4] parameter(1)
  e = f32[0,3] exponential(x)
  d = f32[0,4] dot(e, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  r = f32[4] reduce(d, z), dimensions={0}, to_apply=add_f32
  ROOT out = (f32[0,4], f32[4]) tuple(d, r)
}
"""


def test_empty_values_become_constants(rng):
    after = run_pass(zero_sized_elimination, BEFORE, rng)
    ops = entry_opcodes(after)
    assert ops["exponential"] == 0 and ops["dot"] == 0
    assert ops["reduce"] == 1   # its result has 4 elements: the init value, folded later if at all
    d = after.entry.root.operands[0]
    assert d.opcode == "constant" and d.literal.shape == (0, 4)
