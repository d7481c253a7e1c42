"""Each rule of the algebraic simplifier: HLO before, HLO after, same values on random inputs."""
import pytest

from pyxla.passes.algebraic_simplifier import RULES, algebraic_simplifier

from .hlo_checks import assert_structure, run_pass

REDUCERS = """
add_f32 {
  ra = f32[] parameter(0)
  rb = f32[] parameter(1)
  ROOT rs = f32[] add(ra, rb)
}
max_f32 {
  ma = f32[] parameter(0)
  mb = f32[] parameter(1)
  ROOT mm = f32[] maximum(ma, mb)
}
"""


def module(body: str) -> str:
    return f"HloModule t\n{REDUCERS}\nENTRY main {{\n{body}\n}}\n"


X = "x = f32[4] parameter(0)"
I = "i = s32[4] parameter(0)"  # noqa: E741  (the integer parameter, beside X)

# (rule, body before, body after)
CASES = [
    ("add_zero float -0", f"""{X}
  z = f32[] constant(-0)
  b = f32[4] broadcast(z), dimensions={{}}
  ROOT r = f32[4] add(x, b)""", f"ROOT {X}"),
    ("add_zero integer", f"""{I}
  z = s32[4] constant({{0, 0, 0, 0}})
  ROOT r = s32[4] add(z, i)""", f"ROOT {I}"),
    ("subtract_zero", f"""{X}
  z = f32[4] constant({{0, 0, 0, 0}})
  ROOT r = f32[4] subtract(x, z)""", f"ROOT {X}"),
    ("subtract_self_integer", f"""{I}
  ROOT r = s32[4] subtract(i, i)""", """c = s32[] constant(0)
  ROOT b = s32[4] broadcast(c), dimensions={}"""),
    ("add_negated", f"""{X}
  y = f32[4] parameter(1)
  n = f32[4] negate(y)
  ROOT r = f32[4] add(n, x)""", f"""{X}
  y = f32[4] parameter(1)
  ROOT r = f32[4] subtract(x, y)"""),
    ("subtract_negated", f"""{X}
  y = f32[4] parameter(1)
  n = f32[4] negate(y)
  ROOT r = f32[4] subtract(x, n)""", f"""{X}
  y = f32[4] parameter(1)
  ROOT r = f32[4] add(x, y)"""),
    ("multiply_one", f"""{X}
  one = f32[] constant(1)
  b = f32[4] broadcast(one), dimensions={{}}
  ROOT r = f32[4] multiply(b, x)""", f"ROOT {X}"),
    ("multiply_zero_integer", f"""{I}
  z = s32[] constant(0)
  b = s32[4] broadcast(z), dimensions={{}}
  ROOT r = s32[4] multiply(i, b)""", """z = s32[] constant(0)
  ROOT b = s32[4] broadcast(z), dimensions={}"""),
    ("multiply_minus_one", f"""{X}
  m = f32[] constant(-1)
  b = f32[4] broadcast(m), dimensions={{}}
  ROOT r = f32[4] multiply(x, b)""", f"""{X}
  ROOT r = f32[4] negate(x)"""),
    ("divide_one", f"""{X}
  one = f32[4] constant({{1, 1, 1, 1}})
  ROOT r = f32[4] divide(x, one)""", f"ROOT {X}"),
    ("divide_by_power_of_two", f"""{X}
  c = f32[] constant(8)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] divide(x, b)""", f"""{X}
  c = f32[] constant(0.125)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] multiply(x, b)"""),
    ("power_small_integer 2", f"""{X}
  c = f32[] constant(2)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] power(x, b)""", f"""{X}
  ROOT r = f32[4] multiply(x, x)"""),
    ("power_small_integer 1", f"""{X}
  c = f32[4] constant({{1, 1, 1, 1}})
  ROOT r = f32[4] power(x, c)""", f"ROOT {X}"),
    ("power_small_integer 0", f"""{X}
  c = f32[] constant(0)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] power(x, b)""", """c = f32[] constant(1)
  ROOT b = f32[4] broadcast(c), dimensions={}"""),
    ("power_small_integer -1", f"""{X}
  c = f32[] constant(-1)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] power(x, b)""", f"""{X}
  c = f32[] constant(1)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] divide(b, x)"""),
    ("double_inverse negate", f"""{X}
  n = f32[4] negate(x)
  ROOT r = f32[4] negate(n)""", f"ROOT {X}"),
    ("double_inverse not", """p = pred[4] parameter(0)
  n = pred[4] not(p)
  ROOT r = pred[4] not(n)""", "ROOT p = pred[4] parameter(0)"),
    ("idempotent_twice abs", f"""{X}
  a = f32[4] abs(x)
  ROOT r = f32[4] abs(a)""", f"""{X}
  ROOT a = f32[4] abs(x)"""),
    ("rounding_of_rounded", f"""{X}
  c = f32[4] ceil(x)
  ROOT r = f32[4] floor(c)""", f"""{X}
  ROOT c = f32[4] ceil(x)"""),
    ("abs_of_negate", f"""{X}
  n = f32[4] negate(x)
  ROOT r = f32[4] abs(n)""", f"""{X}
  ROOT r = f32[4] abs(x)"""),
    ("idempotent_binary", f"""{X}
  ROOT r = f32[4] maximum(x, x)""", f"ROOT {X}"),
    ("and_constants all ones", f"""{I}
  c = s32[] constant(-1)
  b = s32[4] broadcast(c), dimensions={{}}
  ROOT r = s32[4] and(i, b)""", f"ROOT {I}"),
    ("and_constants zero", """p = pred[4] parameter(0)
  c = pred[4] constant({0, 0, 0, 0})
  ROOT r = pred[4] and(c, p)""", "ROOT c = pred[4] constant({0, 0, 0, 0})"),
    ("or_constants zero", f"""{I}
  c = s32[] constant(0)
  b = s32[4] broadcast(c), dimensions={{}}
  ROOT r = s32[4] or(i, b)""", f"ROOT {I}"),
    ("or_constants true", """p = pred[4] parameter(0)
  c = pred[] constant(true)
  b = pred[4] broadcast(c), dimensions={}
  ROOT r = pred[4] or(p, b)""", """c = pred[] constant(true)
  ROOT b = pred[4] broadcast(c), dimensions={}"""),
    ("xor_zero", """u = u8[4] parameter(0)
  c = u8[4] constant({0, 0, 0, 0})
  ROOT r = u8[4] xor(u, c)""", "ROOT u = u8[4] parameter(0)"),
    ("compare_self_integer", f"""{I}
  ROOT r = pred[4] compare(i, i), direction=LE""", """c = pred[] constant(true)
  ROOT b = pred[4] broadcast(c), dimensions={}"""),
    ("select_known", f"""{X}
  y = f32[4] parameter(1)
  c = pred[] constant(false)
  p = pred[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] select(p, x, y)""", "ROOT y = f32[4] parameter(1)"),
    ("select_known same branches", f"""{X}
  p = pred[4] parameter(1)
  ROOT r = f32[4] select(p, x, x)""", f"ROOT {X}"),
    ("convert_to_same_type", f"""{X}
  ROOT r = f32[4] convert(x)""", f"ROOT {X}"),
    ("convert_round_trip", """s = s8[4] parameter(0)
  w = f32[4] convert(s)
  ROOT r = s8[4] convert(w)""", "ROOT s = s8[4] parameter(0)"),
    ("same_shape_no_op reshape", f"""{X}
  ROOT r = f32[4] reshape(x)""", f"ROOT {X}"),
    ("reshape_of_reshape", """m = f32[2,6] parameter(0)
  a = f32[3,4] reshape(m)
  ROOT r = f32[12] reshape(a)""", """m = f32[2,6] parameter(0)
  ROOT r = f32[12] reshape(m)"""),
    ("movement_of_scalar_broadcast", """c = f32[] parameter(0)
  b = f32[4,6] broadcast(c), dimensions={}
  ROOT r = f32[6,4] transpose(b), dimensions={1,0}""", """c = f32[] parameter(0)
  ROOT b = f32[6,4] broadcast(c), dimensions={}"""),
    ("identity_transpose", """m = f32[2,3] parameter(0)
  ROOT r = f32[2,3] transpose(m), dimensions={0,1}""", "ROOT m = f32[2,3] parameter(0)"),
    ("transpose_of_transpose", """m = f32[2,3,4] parameter(0)
  a = f32[3,4,2] transpose(m), dimensions={1,2,0}
  ROOT r = f32[4,3,2] transpose(a), dimensions={1,0,2}""", """m = f32[2,3,4] parameter(0)
  ROOT r = f32[4,3,2] transpose(m), dimensions={2,1,0}"""),
    ("identity_broadcast", """m = f32[2,3] parameter(0)
  ROOT r = f32[2,3] broadcast(m), dimensions={0,1}""", "ROOT m = f32[2,3] parameter(0)"),
    ("broadcast_of_broadcast", """v = f32[3] parameter(0)
  a = f32[2,3] broadcast(v), dimensions={1}
  ROOT r = f32[2,5,3] broadcast(a), dimensions={0,2}""", """v = f32[3] parameter(0)
  ROOT r = f32[2,5,3] broadcast(v), dimensions={2}"""),
    ("full_slice", """m = f32[2,3] parameter(0)
  ROOT r = f32[2,3] slice(m), slice={[0:2], [0:3]}""", "ROOT m = f32[2,3] parameter(0)"),
    ("slice_of_slice", """v = f32[20] parameter(0)
  a = f32[9] slice(v), slice={[2:20:2]}
  ROOT r = f32[3] slice(a), slice={[1:8:3]}""", """v = f32[20] parameter(0)
  ROOT r = f32[3] slice(v), slice={[4:17:6]}"""),
    ("slice_of_concatenate", """a = f32[3] parameter(0)
  b = f32[5] parameter(1)
  c = f32[8] concatenate(a, b), dimensions={0}
  ROOT r = f32[2] slice(c), slice={[4:6]}""", """b = f32[5] parameter(1)
  ROOT r = f32[2] slice(b), slice={[1:3]}"""),
    ("no_op_pad", f"""{X}
  z = f32[] constant(0)
  ROOT r = f32[4] pad(x, z), padding=0_0""", f"ROOT {X}"),
    ("trivial_reverse", f"""{X}
  a = f32[4] reverse(x), dimensions={{0}}
  ROOT r = f32[4] reverse(a), dimensions={{0}}""", f"ROOT {X}"),
    ("concatenate_trivial", f"""{X}
  e = f32[0] parameter(1)
  ROOT r = f32[4] concatenate(e, x), dimensions={{0}}""", f"ROOT {X}"),
    ("concatenate_flatten", """a = f32[2,3] parameter(0)
  b = f32[2,1] parameter(1)
  c = f32[2,4] parameter(2)
  ab = f32[2,4] concatenate(a, b), dimensions={1}
  ROOT r = f32[2,8] concatenate(ab, c), dimensions={1}""", """a = f32[2,3] parameter(0)
  b = f32[2,1] parameter(1)
  c = f32[2,4] parameter(2)
  ROOT r = f32[2,8] concatenate(a, b, c), dimensions={1}"""),
    ("dynamic_slice_constant_starts", """v = f32[10] parameter(0)
  s = s32[] constant(8)
  ROOT r = f32[4] dynamic-slice(v, s), dynamic_slice_sizes={4}""", """v = f32[10] parameter(0)
  ROOT r = f32[4] slice(v), slice={[6:10]}"""),
    ("unary_of_broadcast", """v = f32[3] parameter(0)
  b = f32[4,3] broadcast(v), dimensions={1}
  ROOT r = f32[4,3] exponential(b)""", """v = f32[3] parameter(0)
  e = f32[3] exponential(v)
  ROOT r = f32[4,3] broadcast(e), dimensions={1}"""),
    ("binary_of_broadcasts", """v = f32[3] parameter(0)
  w = f32[3] parameter(1)
  a = f32[4,3] broadcast(v), dimensions={1}
  b = f32[4,3] broadcast(w), dimensions={1}
  ROOT r = f32[4,3] multiply(a, b)""", """v = f32[3] parameter(0)
  w = f32[3] parameter(1)
  m = f32[3] multiply(v, w)
  ROOT r = f32[4,3] broadcast(m), dimensions={1}"""),
    ("reduce_of_unit_dims", """m = f32[4,1] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(m, z), dimensions={1}, to_apply=add_f32""", """m = f32[4,1] parameter(0)
  ROOT r = f32[4] reshape(m)"""),
    ("reduce_of_unit_dims max", """m = f32[1,4] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[4] reduce(m, z), dimensions={0}, to_apply=max_f32""", """m = f32[1,4] parameter(0)
  ROOT r = f32[4] reshape(m)"""),
    ("dot_of_transpose", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  t = f32[3,5] transpose(a), dimensions={1,0}
  ROOT r = f32[3,4] dot(t, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}""", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  ROOT r = f32[3,4] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}"""),
    ("transpose_of_dot", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  d = f32[3,4] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = f32[4,3] transpose(d), dimensions={1,0}""", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  ROOT t = f32[4,3] dot(b, a), lhs_contracting_dims={0}, rhs_contracting_dims={0}"""),
    ("transpose_of_dot kept when the product has another user", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  d = f32[3,4] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t = f32[4,3] transpose(d), dimensions={1,0}
  ROOT r = (f32[3,4], f32[4,3]) tuple(d, t)""", """a = f32[5,3] parameter(0)
  b = f32[5,4] parameter(1)
  d = f32[3,4] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t = f32[4,3] transpose(d), dimensions={1,0}
  ROOT r = (f32[3,4], f32[4,3]) tuple(d, t)"""),
]


@pytest.mark.parametrize("rule,before,after", CASES, ids=[c[0] for c in CASES])
def test_rule(rule, before, after, rng):
    result = run_pass(algebraic_simplifier, module(before), rng)
    assert_structure(result, module(after))


def test_every_rule_has_a_case():
    tested = {c[0].split()[0] for c in CASES}
    names = {fn.__name__ for fn in RULES.all_rules}
    assert names <= tested, f"rules without a test: {sorted(names - tested)}"
    assert len(names) >= 40


# Identities that IEEE arithmetic forbids must be left alone.
UNSAFE = [
    ("x + 0.0 (x = -0 gives +0)", f"""{X}
  z = f32[] constant(0)
  b = f32[4] broadcast(z), dimensions={{}}
  ROOT r = f32[4] add(x, b)"""),
    ("x * 0.0 (NaN, inf, sign)", f"""{X}
  z = f32[] constant(0)
  b = f32[4] broadcast(z), dimensions={{}}
  ROOT r = f32[4] multiply(x, b)"""),
    ("x - x for floats (NaN, inf)", f"""{X}
  ROOT r = f32[4] subtract(x, x)"""),
    ("x / 3 (not a power of two)", f"""{X}
  c = f32[] constant(3)
  b = f32[4] broadcast(c), dimensions={{}}
  ROOT r = f32[4] divide(x, b)"""),
    ("compare(x, x) for floats (NaN)", f"""{X}
  ROOT r = pred[4] compare(x, x), direction=EQ"""),
    ("convert f32->s8->f32 (lossy)", f"""{X}
  n = s8[4] convert(x)
  ROOT r = f32[4] convert(n)"""),
    ("reduce of unit dims with a non-identity init", """m = f32[4,1] parameter(0)
  z = f32[] constant(1)
  ROOT r = f32[4] reduce(m, z), dimensions={1}, to_apply=add_f32"""),
]


@pytest.mark.parametrize("why,body", UNSAFE, ids=[u[0] for u in UNSAFE])
def test_unsafe_identity_is_kept(why, body, rng):
    result = run_pass(algebraic_simplifier, module(body), rng)
    assert_structure(result, module(body))
