"""HLO as people write it by hand in XLA's tests: each habit parses, verifies, prints back
and runs on both backends, with values from NumPy (float64) and the text checked on XLA's
own parser where JAX is installed."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.errors import ParseError, VerifierError
from pyxla.hlo import parse_module, print_module, verify_module
from tests.xla_reference import parse_on_xla, run_on_xla

BACKENDS = ["interpreter", "cpu"]


def run(text, args, backend):
    module = parse_module(text)
    verify_module(module)
    return get_backend(backend).compile(module).run_flat([np.asarray(a) for a in args])


def round_trips(text):
    """pyxla's printed text parses back to itself, and XLA parses both texts."""
    printed = print_module(parse_module(text))
    assert print_module(parse_module(printed)) == printed
    return printed


# --- text habits --------------------------------------------------------------------------

SCOPED_NAMES = """
HloModule scoped
add {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT out = f32[] add(p0, p1)
}
mul {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT out = f32[] multiply(p0, p1)
}
ENTRY main {
  p0 = f32[8] parameter(0)
  zero = f32[] constant(0)
  one = f32[] constant(1)
  sum = f32[] reduce(p0, zero), dimensions={0}, to_apply=add
  prod = f32[] reduce(p0, one), dimensions={0}, to_apply=mul
  ROOT out = (f32[], f32[]) tuple(sum, prod)
}
"""

HAND_WRITTEN = """
HloModule hand_written:

ENTRY main {
  x = f32[4]{0:T(128)} parameter(0)
  ROOT r = tuple(negate(x), add(x, f32[4] broadcast(f32[] constant(2))))
}
"""

INLINE_COMPUTATION = """
HloModule inline
main {
  arg = s32[] parameter(0)
  ROOT c = (s32[]) call(arg), to_apply={
    arg = s32[] parameter(0)
    ROOT t = tuple(multiply(arg, arg))
  }
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_names_are_scoped_to_their_computation(backend, rng):
    x = rng.standard_normal(8).astype(np.float32)
    s, p = run(SCOPED_NAMES, [x], backend)
    np.testing.assert_allclose(s, x.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(p, np.prod(x.astype(np.float64)), rtol=1e-5)
    module = parse_module(SCOPED_NAMES)
    names = [i.name for c in module.computations for i in c.instructions]
    assert len(names) == len(set(names))
    assert [i.name for i in module.entry.instructions][0] == "p0"   # ENTRY keeps its names
    printed = round_trips(SCOPED_NAMES)
    parse_on_xla(SCOPED_NAMES)
    parse_on_xla(printed)


def test_control_predecessors_follow_renames():
    text = SCOPED_NAMES.replace("ROOT out = f32[] multiply(p0, p1)",
                                "ROOT out = f32[] multiply(p0, p1), control-predecessors={p1}")
    module = parse_module(text)
    mul = module.computation("mul")
    assert mul.root.attrs["control-predecessors"] == (mul.parameters[1].name,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_omitted_shapes_inline_operands_tiles_and_old_header(backend, rng):
    x = rng.standard_normal(4).astype(np.float32)
    neg, plus = run(HAND_WRITTEN, [x], backend)
    np.testing.assert_array_equal(neg, -x)
    np.testing.assert_allclose(plus, x.astype(np.float64) + 2, rtol=1e-6)
    module = parse_module(HAND_WRITTEN)
    assert module.entry.root.shape.to_text() == "(f32[4]{0}, f32[4]{0})"
    parse_on_xla(HAND_WRITTEN)
    parse_on_xla(round_trips(HAND_WRITTEN))


@pytest.mark.parametrize("backend", BACKENDS)
def test_computation_written_in_place_and_no_entry_keyword(backend):
    (out,) = run(INLINE_COMPUTATION, [np.int32(7)], backend)
    assert out == 49
    module = parse_module(INLINE_COMPUTATION)
    assert module.entry.name == "main" and len(module.computations) == 2
    parse_on_xla(INLINE_COMPUTATION)
    parse_on_xla(round_trips(INLINE_COMPUTATION))


def test_root_before_last_and_computations_after_use():
    text = """
HloModule later
ENTRY main {
  p = f32[3] parameter(0)
  ROOT r = f32[3] map(p), dimensions={0}, to_apply=twice
  dead = f32[3] negate(p)
}
twice {
  a = f32[] parameter(0)
  ROOT b = f32[] add(a, a)
}
"""
    x = np.array([1, -2, 3], np.float32)
    for backend in BACKENDS:
        np.testing.assert_array_equal(run(text, [x], backend)[0], 2 * x)
    parse_on_xla(round_trips(text))   # printed with the callee first, as XLA's parser needs


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_epsilon_as_decimal(backend, rng):
    text = """
HloModule bn
ENTRY main {
  x = f32[2,3] parameter(0)
  scale = f32[3] parameter(1)
  offset = f32[3] parameter(2)
  ROOT bn = (f32[2,3], f32[3], f32[3]) batch-norm-training(x, scale, offset), epsilon=0.001, feature_index=1
}
"""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    scale, offset = np.ones(3, np.float32), np.zeros(3, np.float32)
    y, mean, var = run(text, [x, scale, offset], backend)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x64.var(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, (x64 - x64.mean(0)) / np.sqrt(x64.var(0) + 0.001), rtol=1e-4, atol=1e-5)
    assert "epsilon=0.001" in print_module(parse_module(text))


# --- ops JAX rarely emits ---------------------------------------------------------------

ONE_DEVICE = """
HloModule one_device
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,2] parameter(0)
  r = u32[] replica-id()
  p = u32[] partition-id()
  ar = f32[4,2] all-reduce(x), replica_groups={}, to_apply=sum
  rs = f32[4,2] reduce-scatter(ar), replica_groups={{0}}, dimensions={0}, to_apply=sum
  d = f32[4,2] domain(rs), domain={kind="sharding", entry={maximal device=0}, exit={maximal device=0}}
  t = token[] after-all()
  dep = f32[4,2] add-dependency(d, t)
  size = s32[] get-dimension-size(dep), dimensions={0}
  same = f32[4,2] set-dimension-size(dep, size), dimensions={0}
  ROOT out = (u32[], u32[], f32[4,2], s32[]) tuple(r, p, same, size)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_device_collectives_and_sizes(backend, rng):
    x = rng.standard_normal((4, 2)).astype(np.float32)
    r, p, same, size = run(ONE_DEVICE, [x], backend)
    assert r == 0 and p == 0 and size == 4
    np.testing.assert_array_equal(same, x)
    parse_on_xla(ONE_DEVICE)


STOCHASTIC = """
HloModule stochastic
ENTRY main {
  x = f32[64] parameter(0)
  r = u32[64] parameter(1)
  ROOT s = s8[64] stochastic-convert(x, r)
}
"""


def stochastic_reference(x, r, bits=8):
    """Round |x| up when r / 2^32 is below its fraction, keep the sign, saturate (NumPy, float64)."""
    x = x.astype(np.float64)
    mag = np.abs(x)
    floor = np.floor(mag)
    fixed = np.minimum(np.float32((mag - floor).astype(np.float32) * np.float32(2.0 ** 32)).astype(np.float64),
                       2.0 ** 32 - 1)
    up = r.astype(np.float64) < np.floor(fixed)
    out = np.where(x < 0, -(floor + up), floor + up)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(np.where(x <= lo, lo, np.where(x >= hi, hi, out)), lo, hi).astype(np.int8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stochastic_convert(backend, rng):
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    r = rng.integers(0, 2 ** 32, 64, dtype=np.uint32)
    (out,) = run(STOCHASTIC, [x, r], backend)
    np.testing.assert_array_equal(out, stochastic_reference(x, r))
    parse_on_xla(STOCHASTIC)


def test_stochastic_convert_matches_xla(rng):
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    r = rng.integers(0, 2 ** 32, 64, dtype=np.uint32)
    (want,) = run_on_xla(STOCHASTIC, [x, r])
    np.testing.assert_array_equal(run(STOCHASTIC, [x, r], "interpreter")[0], want)


MAP_CONDITIONAL = """
HloModule map_conditional
small { p = () parameter(0)
  ROOT c = f32[] constant(-1) }
big { p = () parameter(0)
  ROOT c = f32[] constant(1) }
pick {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  lt = pred[] compare(a, b), direction=LT
  t = () tuple()
  sel = f32[] conditional(lt, t, t), true_computation=small, false_computation=big
  ROOT m = f32[] multiply(sel, add(a, b))
}
ENTRY main {
  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  ROOT m = f32[16] map(x, y), dimensions={0}, to_apply=pick
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_map_of_a_conditional(backend, rng):
    x, y = rng.standard_normal((2, 16)).astype(np.float32)
    (out,) = run(MAP_CONDITIONAL, [x, y], backend)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(out, np.where(x64 < y64, -1, 1) * (x64 + y64), rtol=1e-6)
    parse_on_xla(MAP_CONDITIONAL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dot_of_two_operand_types(backend, rng):
    text = """
HloModule mixed
ENTRY main {
  a = s8[3,4] parameter(0)
  b = s16[4,2] parameter(1)
  ROOT d = s32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    a = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    b = rng.integers(-1000, 1000, (4, 2)).astype(np.int16)
    (out,) = run(text, [a, b], backend)
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


# --- the verifier and the reader, from the bug list ---------------------------------------

def test_reducer_must_take_the_operand_type():
    text = """
HloModule bad_reducer
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b) }
ENTRY main {
  x = f64[8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce-window(x, z), window={size=2 stride=2}, to_apply=add
}
"""
    with pytest.raises(VerifierError, match="operand 0 is f64"):
        verify_module(parse_module(text))


def test_entry_computation_layout_must_match_the_entry():
    text = """
HloModule layout, entry_computation_layout={(f32[4]{0})->f32[4]{0}}
ENTRY main {
  x = f32[2] parameter(0)
  ROOT n = f32[2] negate(x)
}
"""
    with pytest.raises(VerifierError, match=r"entry_computation_layout=\{\(f32\[4\]\{0\}\).*f32\[2\]"):
        verify_module(parse_module(text))
    verify_module(parse_module(text.replace("f32[4]{0}", "f32[2]{0:T(128)}")))


def test_non_utf8_byte_is_a_parse_error_at_its_place(tmp_path):
    data = b"HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0) \xff\n}\n"
    with pytest.raises(ParseError) as info:
        parse_module(data, "bad.hlo")
    assert (info.value.line, info.value.column) == (3, 31)
    path = tmp_path / "bad.hlo"
    path.write_bytes(data)
    from pyxla.cli import main
    assert main(["opt", str(path)]) == 2


def test_infinite_loop_with_identity_body_gives_its_state():
    text = """
HloModule spin
cond { p = (f32[2]) parameter(0)
  ROOT t = pred[] constant(true) }
body { p = (f32[2]) parameter(0)
  g = f32[2] get-tuple-element(p), index=0
  ROOT t = (f32[2]) tuple(g) }
ENTRY main {
  x = f32[2] parameter(0)
  init = (f32[2]) tuple(x)
  ROOT w = (f32[2]) while(init), condition=cond, body=body
}
"""
    x = np.array([1, 2], np.float32)
    for backend in BACKENDS:
        np.testing.assert_array_equal(run(text, [x], backend)[0], x)
