"""pyxla.numpy's elementwise functions against NumPy: values, result dtypes (NumPy 2
promotion, Python scalars weak), broadcasting, edge values; eagerly and under jit."""
import math

import hypothesis.extra.numpy as hnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyxla
import pyxla.numpy as pnp
from pyxla.errors import TraceError

from .pnp_testing import assert_close, check_against_numpy, eager_and_jit, jit, numpy_reference

SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]

# Input ranges inside each function's domain (default: -3..3).
DOMAIN = {
    "log": (0.05, 5), "log2": (0.05, 5), "log10": (0.05, 5), "sqrt": (0, 5), "log1p": (-0.9, 5),
    "arcsin": (-0.99, 0.99), "arccos": (-0.99, 0.99), "arctanh": (-0.95, 0.95), "arccosh": (1.01, 6),
    "reciprocal": (0.25, 3), "tan": (-1.3, 1.3), "exp": (-6, 6), "exp2": (-6, 6), "expm1": (-6, 6),
    "sinh": (-6, 6), "cosh": (-6, 6), "arcsinh": (-30, 30),
}
UNARY_FLOAT = ["negative", "positive", "absolute", "fabs", "sign", "exp", "exp2", "expm1", "log", "log2",
               "log10", "log1p", "sqrt", "cbrt", "square", "reciprocal", "sin", "cos", "tan", "arcsin",
               "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "deg2rad",
               "rad2deg", "floor", "ceil", "trunc", "rint", "isnan", "isinf", "isfinite", "signbit",
               "logical_not", "modf"]
UNARY_INT = ["negative", "positive", "absolute", "sign", "square", "invert", "isnan", "isfinite", "floor",
             "trunc", "sqrt", "exp", "logical_not", "signbit"]
BINARY_FLOAT = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod",
                "fmod", "power", "float_power", "maximum", "minimum", "fmax", "fmin", "arctan2", "hypot",
                "copysign", "heaviside", "logaddexp", "logaddexp2", "equal", "not_equal", "less",
                "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
                "divmod"]
BINARY_INT = ["add", "subtract", "multiply", "divide", "floor_divide", "remainder", "fmod", "maximum",
              "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "equal", "less", "greater_equal",
              "logical_and", "logical_xor", "divmod"]
DIVIDES = {"divide", "true_divide", "floor_divide", "remainder", "mod", "fmod", "divmod"}


def np_fn(name):
    return getattr(np, name)


def pnp_fn(name):
    return getattr(pnp, name)


def floats(rng, shape, dtype, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


def ints(rng, shape, dtype, nonzero=False):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -100), min(info.max, 100)
    x = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
    if nonzero:
        x[x == 0] = 1
    return x


def divisor(rng, shape, dtype):
    """Values away from zero (a random sign for signed types)."""
    if np.dtype(dtype).kind == "f":
        return (rng.uniform(0.3, 3, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    return ints(rng, shape, dtype, nonzero=True)


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
shape_pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4)


@pytest.mark.parametrize("name", UNARY_FLOAT)
@SETTINGS
@given(shape=shapes, dtype=st.sampled_from(FLOATS))
def test_unary_float_functions_match_numpy(name, shape, dtype, rng):
    lo, hi = DOMAIN.get(name, (-3, 3))
    x = floats(rng, shape, dtype, lo, hi)
    check_against_numpy(pnp_fn(name), np_fn(name), x, what=f"{name}({dtype.__name__}{list(shape)})")


@pytest.mark.parametrize("name", UNARY_INT)
@SETTINGS
@given(shape=shapes, dtype=st.sampled_from(INTS + [np.bool_]))
def test_unary_integer_functions_match_numpy(name, shape, dtype, rng):
    x = rng.integers(0, 2, shape).astype(bool) if dtype is np.bool_ else ints(rng, shape, dtype)
    try:
        numpy_reference(np_fn(name), x)
    except TypeError:   # NumPy has no loop (negative of bool): pyxla says so too
        with pytest.raises(TypeError):
            pnp_fn(name)(x)
        return
    check_against_numpy(pnp_fn(name), np_fn(name), x, what=f"{name}({dtype.__name__})")


@pytest.mark.parametrize("name", BINARY_FLOAT)
@SETTINGS
@given(shapes=shape_pairs, dtypes=st.tuples(st.sampled_from(FLOATS), st.sampled_from(FLOATS)))
def test_binary_float_functions_broadcast_and_promote_like_numpy(name, shapes, dtypes, rng):
    sa, sb = shapes.input_shapes
    if name in ("power", "float_power"):
        a, b = floats(rng, sa, dtypes[0], 0.2, 3), floats(rng, sb, dtypes[1], -2, 2)
    elif name in DIVIDES:
        a, b = floats(rng, sa, dtypes[0], -5, 5), divisor(rng, sb, dtypes[1])
    else:   # on a grid of halves, so that comparisons meet equal values
        a = (np.round(floats(rng, sa, np.float64) * 2) / 2).astype(dtypes[0])
        b = (np.round(floats(rng, sb, np.float64) * 2) / 2).astype(dtypes[1])
    if name == "heaviside":
        a = np.where(rng.random(sa) < 0.3, 0, a).astype(a.dtype)
    # Floor division is discontinuous: compare with NumPy computing in the operands' own dtype.
    exact = {"floor_divide", "remainder", "mod", "divmod"}
    ref_args = [a, b] if name in exact else None
    check_against_numpy(pnp_fn(name), np_fn(name), a, b, reference_args=ref_args,
                        what=f"{name}({a.dtype}{list(sa)}, {b.dtype}{list(sb)})")


@pytest.mark.parametrize("name", BINARY_INT)
@SETTINGS
@given(shapes=shape_pairs, dtypes=st.tuples(st.sampled_from(INTS), st.sampled_from(INTS)))
def test_binary_integer_functions_promote_like_numpy(name, shapes, dtypes, rng):
    sa, sb = shapes.input_shapes
    a = ints(rng, sa, dtypes[0])
    b = divisor(rng, sb, dtypes[1]) if name in DIVIDES else ints(rng, sb, dtypes[1])
    try:
        numpy_reference(np_fn(name), a, b)
    except TypeError:   # int64 with uint64 is float64, which has no bitwise functions
        with pytest.raises(TypeError):
            pnp_fn(name)(a, b)
        return
    check_against_numpy(pnp_fn(name), np_fn(name), a, b, what=f"{name}({a.dtype}, {b.dtype})")


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod", "divmod"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_division_floors_and_division_by_zero_gives_zero(name, dtype, rng):
    a = ints(rng, (40,), dtype)
    b = ints(rng, (40,), dtype)
    b[:8] = 0   # NumPy: x // 0 == x % 0 == 0
    if np.dtype(dtype).kind == "i":
        a[8:16] = -np.abs(a[8:16]) - 1
        b[8:16] = np.abs(b[8:16]) + 1   # negative by positive: floor differs from truncation
    check_against_numpy(pnp_fn(name), np_fn(name), a, b, what=f"{name}({np.dtype(dtype)})")


def test_float_floor_division_and_modulo_follow_numpy_on_edges():
    a = np.array([1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 5.0, np.inf, 3.0, 1.0], np.float64)
    b = np.array([0.1, 0.3, -2.0, 2.0, -3.0, 3.0, 0.0, 2.0, np.inf, -np.inf], np.float64)
    for name in ("floor_divide", "remainder", "divmod"):
        got, traced = eager_and_jit(pnp_fn(name), a, b)
        want = numpy_reference(np_fn(name), a, b)
        for g, w in ((got, want), (traced, want)):
            for gi, wi in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
                np.testing.assert_array_equal(gi, wi)
                np.testing.assert_array_equal(np.signbit(gi), np.signbit(wi), err_msg=name)


def test_true_divide_of_integers_is_float64(rng):
    a, b = ints(rng, (5,), np.int32), ints(rng, (5,), np.int8, nonzero=True)
    out = check_against_numpy(pnp.true_divide, np.true_divide, a, b)
    assert out.dtype == np.float64


@pytest.mark.parametrize("name", ["add", "multiply", "subtract", "maximum", "power", "divide", "less"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8, np.uint16, np.int32])
@pytest.mark.parametrize("scalar", [2, 3.0, True])
def test_python_scalars_are_weak(name, dtype, scalar, rng):
    """NumPy 2: float32_array * 2.0 stays float32, int8_array + 2 stays int8, int + 3.0 is float64.
    Under jit the scalar is a weak traced argument and must promote the same way."""
    x = floats(rng, (3, 2), dtype, 0.5, 3) if np.dtype(dtype).kind == "f" else ints(rng, (3, 2), dtype, nonzero=True)
    if np.dtype(dtype).kind == "u":
        x = np.abs(x).astype(dtype)
    if name == "subtract" and isinstance(scalar, bool):
        scalar = 2
    for args in ((x, scalar), (scalar, x)):
        if name == "power" and isinstance(args[0], (int, float)) and np.dtype(dtype).kind in "iu":
            continue   # int ** negative int is an error in NumPy
        check_against_numpy(pnp_fn(name), np_fn(name), *args, what=f"{name}{tuple(type(a).__name__ for a in args)}")


def test_weak_scalar_results_stay_weak():
    """Two weak operands give a weak result: (2.0 * 3.0) * f32 array is float32 under jit too."""
    f = jit(lambda s, t, x: pnp.multiply(pnp.add(s, t), x))
    x = np.ones(3, np.float32)
    assert f(2.0, 3.0, x).dtype == np.float32
    assert pnp.multiply(pnp.add(2.0, 3.0), x).dtype == np.float64   # eager scalars become float64 arrays


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint64])
def test_bitwise_and_shift_functions(dtype, rng):
    a = ints(rng, (4, 5), dtype)
    bits = np.dtype(dtype).itemsize * 8
    shift = rng.integers(0, bits, (4, 5)).astype(dtype)
    for name in ("left_shift", "right_shift"):
        check_against_numpy(pnp_fn(name), np_fn(name), a, shift, what=name)
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "invert", "bitwise_not"):
        args = (a,) if name in ("invert", "bitwise_not") else (a, ints(rng, (5,), dtype))
        check_against_numpy(pnp_fn(name), np_fn(name), *args, what=name)
    big = np.full((3,), bits + 1, dtype)   # shifts past the width: 0, or the sign fill
    check_against_numpy(pnp.left_shift, np.left_shift, a[0, :3], big)
    check_against_numpy(pnp.right_shift, np.right_shift, a[0, :3], big)


def test_logical_and_comparison_of_booleans(rng):
    a, b = rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5
    for name in ("logical_and", "logical_or", "logical_xor", "equal", "not_equal", "bitwise_and", "add",
                 "multiply", "maximum", "minimum", "less"):
        check_against_numpy(pnp_fn(name), np_fn(name), a, b, what=name)
    check_against_numpy(pnp.logical_not, np.logical_not, a)
    check_against_numpy(pnp.invert, np.invert, a)


def test_nan_inf_and_signed_zero_edges():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5], np.float32)
    y = np.array([1.0, np.nan, 2.0, -0.0, 0.0, np.inf, -np.inf], np.float32)
    for name in ("maximum", "minimum", "fmax", "fmin", "copysign", "arctan2", "hypot", "logaddexp",
                 "logaddexp2", "heaviside", "add", "multiply", "equal", "less", "not_equal"):
        check_against_numpy(pnp_fn(name), np_fn(name), x, y, what=name)
    for name in ("isnan", "isinf", "isfinite", "signbit", "sign", "absolute", "negative", "floor", "rint",
                 "trunc", "exp", "tanh", "arctan", "sqrt", "sinh", "cosh", "arcsinh"):
        check_against_numpy(pnp_fn(name), np_fn(name), x, what=name)
    edges = np.array([-1.0, 1.0, 0.0, -0.0], np.float64)
    for name in ("arccos", "arcsin", "arctanh"):
        check_against_numpy(pnp_fn(name), np_fn(name), edges, what=name)
    logs = np.array([0.0, -1.0, np.inf, 1.0], np.float32)
    for name in ("log", "log2", "log10", "log1p", "sqrt", "reciprocal"):
        check_against_numpy(pnp_fn(name), np_fn(name), logs, what=name)


def test_large_arguments_of_hyperbolic_functions():
    x = np.array([50.0, -80.0, 1e10, -1e15, 1e-6, -3e-8], np.float64)
    for name in ("sinh", "cosh", "arcsinh", "tanh"):
        check_against_numpy(pnp_fn(name), np_fn(name), x, what=name)
    check_against_numpy(pnp.arccosh, np.arccosh, np.array([1.0, 1 + 1e-9, 1e10, 1e300]))


def test_bfloat16_operands_compute_in_float32(rng):
    x = rng.uniform(0.5, 3, (6,)).astype(ml_dtypes.bfloat16)
    for name in ("exp", "sqrt", "sin", "tanh", "log", "negative"):
        eager, traced = eager_and_jit(pnp_fn(name), x)
        want = np_fn(name)(x.astype(np.float64))
        for got in (eager, traced):
            assert got.dtype == ml_dtypes.bfloat16
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, err_msg=name)
    out = pnp.multiply(x, 2.0)
    assert out.dtype == ml_dtypes.bfloat16   # a weak float keeps bfloat16
    assert pnp.add(x, np.int32(1)).dtype == ml_dtypes.bfloat16   # integers promote to bfloat16 (as in JAX)
    assert pnp.add(x, np.float16(1)).dtype == np.float32


@pytest.mark.parametrize("decimals", [0, 1, 2, -1])
def test_round(decimals, rng):
    x = np.round(rng.uniform(-50, 50, (8,)), 3)
    x[:2] = [2.5, -0.5]
    check_against_numpy(lambda v: pnp.round(v, decimals), lambda v: np.round(v, decimals), x)
    check_against_numpy(lambda v: pnp.round(v, decimals), lambda v: np.round(v, decimals),
                        rng.integers(-500, 500, (6,)))


def test_clip_where_and_friends(rng):
    x = floats(rng, (4, 5), np.float32, -5, 5)
    check_against_numpy(lambda v: pnp.clip(v, -1.5, 2.0), lambda v: np.clip(v, -1.5, 2.0), x)
    lo, hi = floats(rng, (5,), np.float32, -3, 0), floats(rng, (4, 1), np.float64, 0, 3)
    check_against_numpy(pnp.clip, np.clip, x, lo, hi)
    check_against_numpy(lambda v: pnp.clip(v, None, 1), lambda v: np.clip(v, None, 1), ints(rng, (6,), np.int16))
    cond = rng.random((4, 1)) < 0.5
    check_against_numpy(pnp.where, np.where, cond, x, floats(rng, (5,), np.float64))
    check_against_numpy(lambda c, v: pnp.where(c, v, 0.0), lambda c, v: np.where(c, v, 0.0), cond, x)
    check_against_numpy(lambda v: pnp.where(v > 0, v, -1), lambda v: np.where(v > 0, v, -1), ints(rng, (7,), np.int8))
    special = np.array([np.nan, np.inf, -np.inf, 1.5], np.float32)
    check_against_numpy(pnp.nan_to_num, np.nan_to_num, special, reference_args=[special])
    check_against_numpy(pnp.isclose, np.isclose, x, x + np.float32(1e-6) * floats(rng, (4, 5), np.float32))
    check_against_numpy(pnp.sinc, np.sinc, np.array([0.0, 0.5, -1.5, 2.25]))
    check_against_numpy(pnp.ldexp, np.ldexp, x, ints(rng, (5,), np.int32) % 20)


def test_operators_on_tracers_and_reflected_forms(rng):
    x = floats(rng, (3, 4), np.float32, 0.5, 2)
    y = floats(rng, (4,), np.float32, 0.5, 2)
    i = ints(rng, (3, 4), np.int32, nonzero=True)

    def expressions(a, b, k):
        return (a + b, 2 - a, a * 3, 1 / a, a / b, a // b, 7 % b, a ** 2, 2.0 ** b, -a, +a, abs(-a),
                a < b, b >= a, a == b, a != 1.0, k & 6, 5 | k, k ^ k, ~k, k << 2, 64 >> (k & 3),
                divmod(a, b), a @ b, b @ a.T, np.float32(2) * a, np.ones(4, np.float32) + b)

    want = expressions(x, y, i)
    got = pyxla.jit(expressions)(x, y, i)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for gi, wi in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
            assert_close(gi, wi, what=str(wi))


def test_numpy_ufuncs_and_functions_dispatch_to_pyxla_on_tracers(rng):
    x = floats(rng, (3, 4), np.float32)
    got = jit(lambda v: (np.sin(v), np.maximum(v, 0.5), np.sum(v, axis=0), np.mean(v)))(x)
    want = (np.sin(x), np.maximum(x, 0.5), x.sum(0), x.mean())
    for g, w in zip(got, want):
        assert_close(g, w, tol={"float32": (1e-5, 1e-5)})


def test_broadcast_mismatch_names_function_shapes_and_line():
    with pytest.raises(TraceError, match=r"pyxla\.numpy\.add.*\(3, 4\).*\(5,\).*test_numpy_elementwise\.py:\d+"):
        pnp.add(np.ones((3, 4)), np.ones(5))
    with pytest.raises(TraceError, match=r"multiply.*\(3, 4\).*\(5,\).*test_numpy_elementwise\.py"):
        jit(lambda a, b: a * b)(np.ones((3, 4), np.float32), np.ones(5, np.float32))


def test_unsupported_dtypes_are_clear_errors():
    with pytest.raises(TypeError, match="complex"):
        pnp.exp(np.ones(3, np.complex64))
    with pytest.raises(TypeError, match="cannot use|not supported"):
        pnp.add(np.array(["a", "b"]), 1)
    with pytest.raises(TypeError, match="subtract.*bool"):
        pnp.subtract(np.ones(2, bool), np.ones(2, bool))
    with pytest.raises(NotImplementedError, match="out="):
        pnp.add(np.ones(2), np.ones(2), out=np.ones(2))


def test_negative_integer_powers_are_an_error_like_numpy():
    with pytest.raises(ValueError, match="negative integer powers"):
        pnp.power(np.array([2, 3]), np.array([1, -1]))


def test_weak_integer_that_does_not_fit_overflows_like_numpy():
    with pytest.raises(OverflowError):
        pnp.add(np.ones(2, np.int8), 300)


def test_mathematical_identities_hold_on_random_inputs(rng):
    """Composite implementations against their defining identities (no NumPy involved)."""
    x = rng.uniform(-4, 4, 50)
    np.testing.assert_allclose(pnp.sinh(pnp.arcsinh(x)), x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pnp.tanh(pnp.arctanh(x / 5)), x / 5, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pnp.cosh(pnp.arccosh(np.abs(x) + 1)), np.abs(x) + 1, rtol=1e-12)
    np.testing.assert_allclose(pnp.hypot(3 * x, 4 * x), 5 * np.abs(x), rtol=1e-12)
    np.testing.assert_allclose(pnp.logaddexp(x, x), x + math.log(2), rtol=1e-12)


def test_ufunc_dtype_argument_and_promotion_helpers(rng):
    a, b = ints(rng, (4,), np.int8), ints(rng, (4,), np.int8)
    check_against_numpy(lambda x, y: pnp.add(x, y, dtype=np.float32), lambda x, y: np.add(x, y, dtype=np.float32), a, b)
    check_against_numpy(lambda x: pnp.ldexp(x, 3), lambda x: np.ldexp(x, 3), floats(rng, (4,), np.float32))
    assert pnp.result_type(np.float32, 2.0) == np.float32
    assert pnp.result_type(np.int8, np.uint8) == np.int16
    assert pnp.result_type(np.int32, 1.5) == np.float64
    assert pnp.promote_types(ml_dtypes.bfloat16, np.float16) == np.float32
