import pytest

from pyxla.passes.dot_canonicalizer import dot_canonicalizer, is_canonical

from .hlo_checks import assert_structure, run_pass


def dot_module(lhs, rhs, out, attrs):
    return f"""
HloModule d
ENTRY main {{
  a = f32[{lhs}] parameter(0)
  b = f32[{rhs}] parameter(1)
  ROOT d = f32[{out}] dot(a, b), {attrs}
}}
"""


CASES = [
    # batch dims in the middle, two contracting dims, free dims on both sides
    ("3,2,4,5", "4,2,5,6", "2,3,6", "lhs_batch_dims={1}, rhs_batch_dims={1}, lhs_contracting_dims={2,3}, "
                                    "rhs_contracting_dims={0,2}"),
    ("5,3", "5,4", "3,4", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("4,6,7", "7,6,2", "4,2", "lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}"),
    ("2,3,4,5", "2,5,7", "2,3,4,7", "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={3}, "
                                    "rhs_contracting_dims={1}"),
    ("6", "6,3", "3", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
]


@pytest.mark.parametrize("lhs,rhs,out,attrs", CASES)
def test_every_dot_becomes_canonical(lhs, rhs, out, attrs, rng):
    after = run_pass(dot_canonicalizer, dot_module(lhs, rhs, out, attrs), rng, rtol=1e-5)
    dots = [i for i in after.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1
    d = dots[0]
    assert is_canonical(d.operands[0].shape, d.operands[1].shape, d.attrs)


def test_canonical_dot_is_left_alone(rng):
    text = dot_module("3,4", "4,5", "3,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    after = run_pass(dot_canonicalizer, text, rng)
    assert_structure(after, text)
    assert not dot_canonicalizer(after)


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_transpose_moving_the_minor_dimension_is_folded(side, rng):
    """Attention's K^T ([b, s, h, d] -> [b, h, d, s]) is read as [b, h, s, d] with the dot
    contracting its last dimension; the lhs case ([b, h, d, s] as A^T) likewise."""
    if side == "rhs":
        text = """
HloModule d
ENTRY main {
  q = f32[2,3,5,4] parameter(0)
  k = f32[2,6,3,4] parameter(1)
  kt = f32[2,3,4,6] transpose(k), dimensions={0,2,3,1}
  ROOT d = f32[2,3,5,6] dot(q, kt), lhs_batch_dims={0,1}, rhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_contracting_dims={2}
}
"""
    else:
        text = """
HloModule d
ENTRY main {
  a = f32[2,7,3,4] parameter(0)
  at = f32[2,3,4,7] transpose(a), dimensions={0,2,3,1}
  v = f32[2,3,4,5] parameter(1)
  ROOT d = f32[2,3,7,5] dot(at, v), lhs_batch_dims={0,1}, rhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_contracting_dims={2}
}
"""
    after = run_pass(dot_canonicalizer, text, rng, rtol=1e-5)
    (d,) = [i for i in after.entry.instructions if i.opcode == "dot"]
    operand = d.operands[0 if side == "lhs" else 1]
    assert operand.opcode == "transpose" and operand.attrs["dimensions"] == (0, 2, 1, 3)
    if side == "rhs":
        assert d.attrs["rhs_contracting_dims"] == (3,) and d.attrs["lhs_contracting_dims"] == (3,)
    else:
        assert d.attrs["lhs_contracting_dims"] == (3,) and d.attrs["rhs_contracting_dims"] == (2,)
    assert is_canonical(d.operands[0].shape, d.operands[1].shape, d.attrs)


def test_swap_of_the_minor_dimensions_alone_disappears(rng):
    text = dot_module("3,4", "5,4", "3,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}").replace(
        "ROOT d = f32[3,5] dot(a, b)", "bt = f32[4,5] transpose(b), dimensions={1,0}\n  ROOT d = f32[3,5] dot(a, bt)")
    after = run_pass(dot_canonicalizer, text, rng, rtol=1e-5)
    (d,) = [i for i in after.entry.instructions if i.opcode == "dot"]
    assert d.operands[1].opcode == "parameter" and d.attrs["rhs_contracting_dims"] == (1,)
