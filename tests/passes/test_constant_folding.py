import numpy as np

from pyxla.passes.constant_folding import MAX_FOLDED_ELEMENTS, constant_folding

from .hlo_checks import entry_opcodes, run_pass

BEFORE = """
HloModule fold
ENTRY main {
  x = f32[3] parameter(0)
  a = f32[3] constant({1.5, -2, 4})
  b = f32[3] constant({0.25, 8, -1})
  prod = f32[3] multiply(a, b)
  e = f32[3] exponential(prod)
  i = s32[3] constant({7, -7, 2147483647})
  j = s32[3] constant({2, 2, 1})
  q = s32[3] divide(i, j)
  w = s32[3] add(q, j)
  qf = f32[3] convert(w)
  y = f32[3] add(e, qf)
  ROOT out = f32[3] add(x, y)
}
"""


def test_folds_constant_subexpressions_exactly(rng):
    after = run_pass(constant_folding, BEFORE, rng)
    assert entry_opcodes(after) == {"add": 1, "constant": 1}
    folded = after.entry.root.operands[1].literal
    q = np.array([7 // 2 + 2, -3 + 2, 2147483647 + 1 - 2**32], np.int64)   # truncating divide, wrapping add
    expected = np.exp(np.float32([1.5 * 0.25, -16, -4])) + q.astype(np.float32)
    np.testing.assert_allclose(folded, expected, rtol=1e-6)


def test_never_folds_broadcast_iota_or_rng(rng):
    text = """
HloModule restraint
ENTRY main {
  x = f32[64,64] parameter(0)
  c = f32[] constant(3)
  b = f32[64,64] broadcast(c), dimensions={}
  i = f32[64,64] iota(), iota_dimension=1
  s = u64[2] constant({1, 2})
  r = (u64[2], u32[64,64]) rng-bit-generator(s), algorithm=rng_default
  bits = u32[64,64] get-tuple-element(r), index=1
  bf = f32[64,64] convert(bits)
  t = f32[64,64] add(b, i)
  u = f32[64,64] add(t, bf)
  ROOT out = f32[64,64] multiply(x, u)
}
"""
    after = run_pass(constant_folding, text, rng)
    ops = entry_opcodes(after)
    assert ops["broadcast"] == 1 and ops["iota"] == 1 and ops["rng-bit-generator"] == 1


def test_large_results_are_left_alone(rng):
    n = MAX_FOLDED_ELEMENTS + 1
    text = f"""
HloModule big
ENTRY main {{
  x = f32[{n}] parameter(0)
  c = f32[] constant(3)
  t = f32[] tanh(c)
  b = f32[{n}] broadcast(t), dimensions={{}}
  e = f32[{n}] exponential(b)
  ROOT out = f32[{n}] add(x, e)
}}
"""
    after = run_pass(constant_folding, text, rng)
    ops = entry_opcodes(after)
    assert ops["exponential"] == 1 and ops["tanh"] == 0 and ops["constant"] == 1
