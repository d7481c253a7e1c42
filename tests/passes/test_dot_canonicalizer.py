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
