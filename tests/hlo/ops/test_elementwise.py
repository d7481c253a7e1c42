"""Elementwise opcodes against hand-written references (Python's math and int arithmetic).

Every op is built with HloBuilder and evaluated on fresh random inputs; the references
work element by element in float64 or exact Python integers, then XLA's edge semantics
(FTZ/DAZ, wrap-around, division by zero, saturating convert, ...) are checked on the
values where they matter.
"""
import math
import struct

import ml_dtypes
import numpy as np
import pytest

from pyxla.errors import ShapeError
from pyxla.hlo import (
    BF16,
    F16,
    F32,
    F64,
    PRED,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    ArrayShape,
    HloBuilder,
    TupleShape,
    array,
    evaluate_computation,
    evaluate_module,
    from_numpy_dtype,
    op_def,
    scalar,
    scalar_computation,
    verify_module,
)
from pyxla.hlo.ops.elementwise import BINARY, UNARY

FLOATS = [F16, BF16, F32, F64]
INTS = [S8, S16, S32, S64, U8, U16, U32, U64]
N = 48

# rtol covers one rounding to the type (half an ulp) of a float64-accurate reference.
RTOL = {F16: 1e-3, BF16: 8e-3, F32: 1e-6, F64: 1e-14}
ATOL = {F16: 1e-7, BF16: 0.0, F32: 0.0, F64: 0.0}   # f16 subnormal results have absolute error


def run(opcode, *arrays, shape=None, **attrs):
    """opcode applied to parameters holding `arrays`, through a verified module."""
    b = HloBuilder(opcode)
    params = [b.parameter(ArrayShape(from_numpy_dtype(a.dtype), a.shape), f"p{i}")
              for i, a in enumerate(arrays)]
    module = b.module(b.op(opcode, *params, shape=shape, **attrs))
    verify_module(module)
    return evaluate_module(module, list(arrays))


def floats(rng, etype, lo, hi, n=N):
    return rng.uniform(lo, hi, n).astype(etype.np_dtype)


def ints(rng, etype, n=N, lo=None, hi=None):
    info = np.iinfo(etype.np_dtype)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    return rng.integers(lo, hi, n, endpoint=True, dtype=etype.np_dtype)


def elementwise(fn, *arrays):
    """fn on Python numbers, element by element (floats as float64, integers exact)."""
    cols = [a.astype(np.float64).tolist() if a.dtype.kind in "fV" else a.tolist() for a in arrays]
    return [fn(*vals) for vals in zip(*cols)]


def wrap(v, etype):
    """A Python integer as `etype` holds it (two's complement, width bits)."""
    v %= 1 << etype.bits
    return v - (1 << etype.bits) if etype.is_signed and v >= 1 << (etype.bits - 1) else v


def assert_close(got, expected, etype):
    assert got.dtype == etype.np_dtype
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected, np.float64),
                               rtol=RTOL[etype], atol=ATOL[etype])


def assert_bits_equal(got, expected):
    """Exact equality including the sign of zero and NaN positions."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    g, e = got.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
    fin = ~np.isnan(e)
    np.testing.assert_array_equal(g[fin], e[fin])
    np.testing.assert_array_equal(np.signbit(g[fin]), np.signbit(e[fin]))


# --- unary float math ---------------------------------------------------------------------

def _afz(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


# opcode -> (input range, Python reference)
FLOAT_UNARY = {
    "exponential": ((-10, 10), math.exp),
    "exponential-minus-one": ((-2, 2), math.expm1),
    "log": ((1e-3, 1e3), math.log),
    "log-plus-one": ((-0.9, 50), math.log1p),
    "sqrt": ((0, 1e4), math.sqrt),
    "rsqrt": ((1e-3, 1e4), lambda v: 1 / math.sqrt(v)),
    "cbrt": ((-1e3, 1e3), math.cbrt),
    "sine": ((-7, 7), math.sin),
    "cosine": ((-7, 7), math.cos),
    "tan": ((-1.5, 1.5), math.tan),
    "tanh": ((-6, 6), math.tanh),
    "logistic": ((-30, 30), lambda v: 1 / (1 + math.exp(-v))),
    "erf": ((-3, 3), math.erf),
    "floor": ((-20, 20), math.floor),
    "ceil": ((-20, 20), math.ceil),
    "round-nearest-afz": ((-20, 20), _afz),
    "round-nearest-even": ((-20, 20), round),       # Python's round is half-to-even
    "sign": ((-5, 5), lambda v: math.copysign(1.0, v) if v else v),
    "abs": ((-5, 5), abs),
    "negate": ((-5, 5), lambda v: -v),
}
ROUNDING = {"floor", "ceil", "round-nearest-afz", "round-nearest-even"}


@pytest.mark.parametrize("etype", FLOATS, ids=str)
@pytest.mark.parametrize("opcode", FLOAT_UNARY)
def test_float_unary(rng, opcode, etype):
    (lo, hi), reference = FLOAT_UNARY[opcode]
    x = floats(rng, etype, lo, hi)
    if opcode in ROUNDING:   # put exact halves in, where the rounding rules differ
        x[: N // 2] = (np.round(rng.uniform(-40, 40, N // 2)) / 2).astype(etype.np_dtype)
    expected = elementwise(reference, x)
    got = run(opcode, x)
    if opcode in ROUNDING or opcode in ("sign", "abs", "negate"):
        np.testing.assert_array_equal(got.astype(np.float64), expected)
        assert got.dtype == etype.np_dtype
    else:
        assert_close(got, expected, etype)


SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, -0.3])


@pytest.mark.parametrize("etype", FLOATS, ids=str)
def test_float_unary_special_values(etype):
    x = SPECIALS.astype(etype.np_dtype)
    nan = np.nan
    cases = {
        "sign": [nan, nan, 1, -1, 0.0, -0.0, 1, -1, 1, -1, 1, -1],
        "floor": [nan, nan, np.inf, -np.inf, 0.0, -0.0, 0, -1, 1, -3, 2, -1],
        "ceil": [nan, nan, np.inf, -np.inf, 0.0, -0.0, 1, -0.0, 2, -2, 3, -0.0],
        "round-nearest-afz": [nan, nan, np.inf, -np.inf, 0.0, -0.0, 1, -1, 2, -3, 3, -0.0],
        "round-nearest-even": [nan, nan, np.inf, -np.inf, 0.0, -0.0, 0, -0.0, 2, -2, 2, -0.0],
        "abs": [nan, nan, np.inf, np.inf, 0.0, 0.0, 0.5, 0.5, 1.5, 2.5, 2.5, 0.3],
        "negate": [nan, nan, -np.inf, np.inf, -0.0, 0.0, -0.5, 0.5, -1.5, 2.5, -2.5, 0.3],
        "exponential": [nan, nan, np.inf, 0, 1, 1] + [math.exp(v) for v in SPECIALS[6:]],
        "sqrt": [nan, nan, np.inf, nan, 0.0, -0.0, math.sqrt(0.5), nan, math.sqrt(1.5), nan, math.sqrt(2.5), nan],
        "rsqrt": [nan, nan, 0.0, nan, np.inf, -np.inf] + [1 / math.sqrt(v) if v > 0 else nan for v in SPECIALS[6:]],
        "log": [nan, nan, np.inf, nan, -np.inf, -np.inf] + [math.log(v) if v > 0 else nan for v in SPECIALS[6:]],
        "tanh": [nan, nan, 1, -1, 0.0, -0.0] + [math.tanh(v) for v in SPECIALS[6:]],
        "logistic": [nan, nan, 1, 0, 0.5, 0.5] + [1 / (1 + math.exp(-v)) for v in SPECIALS[6:]],
        "erf": [nan, nan, 1, -1, 0.0, -0.0] + [math.erf(v) for v in SPECIALS[6:]],
        "cbrt": [nan, nan, np.inf, -np.inf, 0.0, -0.0] + [math.cbrt(v) for v in SPECIALS[6:]],
    }
    for opcode, expected in cases.items():
        got = run(opcode, x).astype(np.float64)
        want = np.array(expected, np.float64).astype(etype.np_dtype).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=RTOL[etype], err_msg=opcode)
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=opcode)
    finite = run("is-finite", x)
    assert finite.dtype == np.bool_
    np.testing.assert_array_equal(finite, np.isfinite(SPECIALS))


@pytest.mark.parametrize("etype, magnitudes", [(F32, [80.0, 50.0]), (F64, [700.0, 200.0])], ids=["f32", "f64"])
def test_logistic_is_stable_at_large_magnitudes(etype, magnitudes):
    # Neither exp(-x) overflowing for very negative x nor 1 - tiny cancelling may spoil it.
    x = np.array([-m for m in magnitudes] + [m * 10 for m in magnitudes], etype.np_dtype)
    got = run("logistic", x)
    expected = [math.exp(-m) / (1 + math.exp(-m)) for m in magnitudes] + [1.0, 1.0]
    np.testing.assert_allclose(got, expected, rtol=RTOL[etype])


# --- binary float math ----------------------------------------------------------------------

FLOAT_BINARY = {
    "add": ((-100, 100), lambda a, b: a + b),
    "subtract": ((-100, 100), lambda a, b: a - b),
    "multiply": ((-100, 100), lambda a, b: a * b),
    "divide": ((-100, 100), lambda a, b: a / b),
    "maximum": ((-100, 100), max),
    "minimum": ((-100, 100), min),
    "remainder": ((-100, 100), math.fmod),
    "power": ((0.1, 4), math.pow),
    "atan2": ((-10, 10), math.atan2),
}
EXACT_IN_F32 = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder"}


@pytest.mark.parametrize("etype", FLOATS, ids=str)
@pytest.mark.parametrize("opcode", FLOAT_BINARY)
def test_float_binary(rng, opcode, etype):
    (lo, hi), reference = FLOAT_BINARY[opcode]
    a, b = floats(rng, etype, lo, hi), floats(rng, etype, lo, hi)
    expected = elementwise(reference, a, b)
    got = run(opcode, a, b)
    if etype == F32 and opcode in EXACT_IN_F32:
        # IEEE rounds these once; the f64 result rounded to f32 is the same single rounding.
        assert_bits_equal(got, np.array(expected).astype(np.float32))
    else:
        assert_close(got, expected, etype)


@pytest.mark.parametrize("etype", [F32, F64, F16], ids=str)
def test_maximum_minimum_propagate_nan_and_order_zeros(etype):
    a = np.array([np.nan, 1.0, np.nan, -0.0, 0.0, -np.inf, 2.0], etype.np_dtype)
    b = np.array([1.0, np.nan, np.nan, 0.0, -0.0, np.inf, -3.0], etype.np_dtype)
    nan = np.nan
    assert_bits_equal(run("maximum", a, b), np.array([nan, nan, nan, 0.0, 0.0, np.inf, 2.0], etype.np_dtype))
    assert_bits_equal(run("minimum", a, b), np.array([nan, nan, nan, -0.0, -0.0, -np.inf, -3.0], etype.np_dtype))


def test_float_binary_special_values():
    y = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.inf, 5.5, 1.0, 0.0], np.float32)
    x = np.array([1.0, 1.0, -1.0, -1.0, np.inf, -np.inf, 2.0, 0.0, 0.0, 0.0], np.float32)
    assert_bits_equal(run("atan2", y, x), np.array(elementwise(math.atan2, y, x), np.float32))
    n = np.array([5.5, -5.5, 5.5, np.inf, 3.0, -0.0], np.float32)
    d = np.array([2.0, 2.0, 0.0, 2.0, np.inf, 1.0], np.float32)
    assert_bits_equal(run("remainder", n, d), np.array([1.5, -1.5, np.nan, np.nan, 3.0, -0.0], np.float32))
    assert_bits_equal(run("divide", np.array([1.0, -1.0, 0.0], np.float32), np.array([0.0, 0.0, 0.0], np.float32)),
                      np.array([np.inf, -np.inf, np.nan], np.float32))
    base = np.array([0.0, -0.0, -8.0, np.nan, 1.0, -2.0], np.float32)
    exponent = np.array([-1.0, -3.0, 1 / 3, 0.0, np.nan, 3.0], np.float32)
    assert_bits_equal(run("power", base, exponent),
                      np.array([np.inf, -np.inf, np.nan, 1.0, 1.0, -8.0], np.float32))


# --- denormals: FTZ/DAZ in f32/f64 arithmetic, kept by bit ops -----------------------------

@pytest.mark.parametrize("etype, tiny", [(F32, 1e-20), (F64, 1e-160)], ids=["f32", "f64"])
def test_arithmetic_flushes_subnormals_bit_ops_keep_them(rng, etype, tiny):
    dt = etype.np_dtype
    scale = rng.uniform(1, 2, 4)
    small = (tiny * scale).astype(dt)
    product = run("multiply", small, (-small).astype(dt))      # exact result is subnormal
    assert_bits_equal(product, np.full(4, -0.0, dt))
    sub = (small.astype(np.float64) ** 2).astype(dt)
    assert np.all(sub != 0) and np.all(np.abs(sub) < np.finfo(dt).tiny)
    big = np.full(4, 2.0 ** 60, dt)    # sub * big is a normal number: only DAZ makes it zero
    assert_bits_equal(run("multiply", sub, big), np.zeros(4, dt))   # DAZ: read as zero
    assert_bits_equal(run("add", sub, np.zeros(4, dt)), np.zeros(4, dt))
    assert_bits_equal(run("exponential", sub), np.ones(4, dt))
    assert_bits_equal(run("log", sub), np.full(4, -np.inf, dt))
    assert_bits_equal(run("negate", sub), -sub)
    assert_bits_equal(run("abs", (-sub).astype(dt)), sub)
    pred = np.array([True, False, True, False])
    assert_bits_equal(run("select", pred, sub, big), np.where(pred, sub, big))
    assert not run("compare", sub, np.zeros(4, dt), direction="GT").any()
    assert_bits_equal(run("reduce-precision", sub, exponent_bits=11, mantissa_bits=52), sub)


def test_f16_arithmetic_produces_f16_subnormals(rng):
    a = rng.uniform(1e-3, 2e-3, 8).astype(np.float16)
    got = run("multiply", a, a)
    expected = (a.astype(np.float64) ** 2).astype(np.float16)   # one rounding of the f32 product
    assert np.all(np.abs(got) < np.finfo(np.float16).tiny) and np.all(got != 0)
    np.testing.assert_array_equal(got, expected)


def test_bf16_arithmetic_rounds_the_f32_result(rng):
    a = floats(rng, BF16, -10, 10)
    b = floats(rng, BF16, -10, 10)
    expected = (a.astype(np.float32) * b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    got = run("multiply", a, b)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


# --- integers ---------------------------------------------------------------------------------

def _int_divide(a, b, t):
    if b == 0:
        return -1
    if t.is_signed and a == -(1 << (t.bits - 1)) and b == -1:
        return a
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _int_remainder(a, b, t):
    return a if b == 0 else a - b * _int_divide(a, b, t)


def _int_power(a, b, t):
    if wrap(b, signed_of(t)) < 0:           # XLA reads the exponent as signed
        return int(a == 1)
    return pow(a, (b % (1 << t.bits)) & 63, 1 << t.bits)   # six square-and-multiply steps


def signed_of(t):
    return {8: S8, 16: S16, 32: S32, 64: S64}[t.bits]


def _shift(kind):
    def ref(a, b, t):
        amount = b % (1 << t.bits)
        signed_a = wrap(a, signed_of(t))
        if amount >= t.bits:
            return -1 if kind == "arithmetic" and signed_a < 0 else 0
        if kind == "left":
            return a << amount
        if kind == "logical":
            return (a % (1 << t.bits)) >> amount
        return signed_a >> amount
    return ref


INT_BINARY = {
    "add": lambda a, b, t: a + b,
    "subtract": lambda a, b, t: a - b,
    "multiply": lambda a, b, t: a * b,
    "divide": _int_divide,
    "remainder": _int_remainder,
    "maximum": lambda a, b, t: max(a, b),
    "minimum": lambda a, b, t: min(a, b),
    "and": lambda a, b, t: a & b,
    "or": lambda a, b, t: a | b,
    "xor": lambda a, b, t: a ^ b,
    "power": _int_power,
    "shift-left": _shift("left"),
    "shift-right-logical": _shift("logical"),
    "shift-right-arithmetic": _shift("arithmetic"),
}


def _int_operands(rng, opcode, t):
    info = np.iinfo(t.np_dtype)
    a = ints(rng, t)
    if opcode == "power":
        return ints(rng, t, lo=-3, hi=5), ints(rng, t, lo=-4, hi=70)
    if opcode.startswith("shift"):
        return a, ints(rng, t, lo=-3, hi=t.bits + 3)
    b = ints(rng, t)
    if opcode in ("divide", "remainder"):
        b[:6] = [0, 0, 1, info.max, 3, 7]
        a[:6] = [info.min, 5, info.min, 4, info.max, info.min + 1]
        if t.is_signed:
            a[6:10] = [info.min, info.min, -7, 7]
            b[6:10] = [-1, 0, 2, -2]
    return a, b


@pytest.mark.parametrize("etype", INTS, ids=str)
@pytest.mark.parametrize("opcode", INT_BINARY)
def test_integer_binary(rng, opcode, etype):
    a, b = _int_operands(rng, opcode, etype)
    expected = np.array([wrap(v, etype) for v in elementwise(lambda p, q: INT_BINARY[opcode](p, q, etype), a, b)],
                        etype.np_dtype)
    got = run(opcode, a, b)
    assert got.dtype == etype.np_dtype
    np.testing.assert_array_equal(got, expected)


INT_UNARY = {
    "negate": lambda a, t: -a,
    "not": lambda a, t: ~a,
    "popcnt": lambda a, t: bin(a % (1 << t.bits)).count("1"),
    "count-leading-zeros": lambda a, t: t.bits - (a % (1 << t.bits)).bit_length(),
    "abs": lambda a, t: abs(a),
    "sign": lambda a, t: (a > 0) - (a < 0),
}


# abs and sign take signed integers only (the shape-rule test checks that).
@pytest.mark.parametrize("opcode, etype", [(op, t) for op in INT_UNARY for t in INTS
                                           if t.is_signed or op not in ("abs", "sign")], ids=str)
def test_integer_unary(rng, opcode, etype):
    info = np.iinfo(etype.np_dtype)
    a = ints(rng, etype)
    a[:4] = [info.min, info.max, 0, 1]
    if etype.is_signed:
        a[4] = -1
    expected = np.array([wrap(INT_UNARY[opcode](v, etype), etype) for v in a.tolist()], etype.np_dtype)
    np.testing.assert_array_equal(run(opcode, a), expected)


PRED_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor, "add": np.logical_or,
            "multiply": np.logical_and, "maximum": np.logical_or, "minimum": np.logical_and}


@pytest.mark.parametrize("opcode", PRED_OPS)
def test_pred_binary(rng, opcode):
    a, b = rng.random(N) < 0.5, rng.random(N) < 0.5
    got = run(opcode, a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, PRED_OPS[opcode](a, b))


def test_pred_not(rng):
    a = rng.random(N) < 0.5
    np.testing.assert_array_equal(run("not", a), ~a)


# --- compare ----------------------------------------------------------------------------------

DIRECTIONS = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
              "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}


def _with_specials(rng, etype):
    x = floats(rng, etype, -3, 3)
    x[:8] = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -np.nan, 2.0]).astype(etype.np_dtype)
    return x


@pytest.mark.parametrize("etype", FLOATS, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_floats_ieee(rng, direction, etype):
    a = _with_specials(rng, etype)
    b = np.concatenate([a[:8][::-1], a[8:]]).astype(etype.np_dtype)
    b[8::3] = a[8::3]    # some equal pairs
    expected = elementwise(DIRECTIONS[direction], a, b)   # Python floats: IEEE, -0 == 0
    got = run("compare", a, b, direction=direction)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(run("compare", a, b, direction=direction, type="FLOAT"), expected)


def _total_order_rank(v: float) -> int:
    bits = struct.unpack("<q", struct.pack("<d", v))[0]
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF) - 1


@pytest.mark.parametrize("etype", FLOATS, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_total_order(rng, direction, etype):
    a = _with_specials(rng, etype)
    b = rng.permutation(a)
    # Widening to f64 keeps the sign and the order of every value including NaN's sign.
    expected = elementwise(lambda p, q: DIRECTIONS[direction](_total_order_rank(p), _total_order_rank(q)), a, b)
    np.testing.assert_array_equal(run("compare", a, b, direction=direction, type="TOTALORDER"), expected)


def test_total_order_sorts_nan_and_zeros():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32)
    x[1] = -np.abs(x[1])    # a NaN with the sign bit set
    less = run("compare", np.repeat(x[:, None], 7, axis=1), np.repeat(x[None, :], 7, axis=0),
               direction="LT", type="TOTALORDER")
    rank = less.sum(axis=1)   # how many elements are above each
    order = [x.tolist()[i] for i in np.argsort(-rank)]
    assert math.isnan(order[0]) and math.copysign(1, order[0]) < 0
    assert order[1:6] == [-np.inf, -0.0, 0.0, 1.0, np.inf] and math.copysign(1, order[2]) < 0
    assert math.isnan(order[6])


@pytest.mark.parametrize("etype", INTS + [PRED], ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_integers_and_pred(rng, direction, etype):
    if etype == PRED:
        a, b = rng.random(N) < 0.5, rng.random(N) < 0.5
    else:
        a, b = ints(rng, etype), ints(rng, etype)
        b[::4] = a[::4]
    expected = elementwise(DIRECTIONS[direction], a, b)
    kind = "SIGNED" if etype.is_signed else "UNSIGNED"
    np.testing.assert_array_equal(run("compare", a, b, direction=direction), expected)
    np.testing.assert_array_equal(run("compare", a, b, direction=direction, type=kind), expected)


# --- select and clamp -----------------------------------------------------------------------------

@pytest.mark.parametrize("etype", [F32, BF16, S32, U8, PRED], ids=str)
def test_select(rng, etype):
    pred = rng.random((3, 5)) < 0.5
    if etype == PRED:
        t, f = rng.random((3, 5)) < 0.5, rng.random((3, 5)) < 0.5
    elif etype.is_float:
        t, f = floats(rng, etype, -5, 5, (3, 5)), floats(rng, etype, -5, 5, (3, 5))
    else:
        t, f = ints(rng, etype, (3, 5)), ints(rng, etype, (3, 5))
    got = run("select", pred, t, f)
    assert got.dtype == etype.np_dtype
    expected = [[tv if p else fv for p, tv, fv in zip(*rows)] for rows in zip(pred.tolist(), t.tolist(), f.tolist())]
    np.testing.assert_array_equal(got.tolist(), expected)


@pytest.mark.parametrize("etype", [F32, F16, S32, U8, S64], ids=str)
@pytest.mark.parametrize("scalar_bounds", [False, True], ids=["array_bounds", "scalar_bounds"])
def test_clamp(rng, etype, scalar_bounds):
    n = 1 if scalar_bounds else N
    if etype.is_float:
        x = floats(rng, etype, -10, 10)
        lo, hi = floats(rng, etype, -6, -1, n), floats(rng, etype, 1, 6, n)
    else:
        x = ints(rng, etype, lo=-100, hi=100)
        lo, hi = ints(rng, etype, n, lo=10, hi=30), ints(rng, etype, n, lo=50, hi=80)
    if scalar_bounds:
        lo, hi = lo.reshape(()), hi.reshape(())
    expected = elementwise(lambda low, v, high: min(high, max(low, v)),
                           np.broadcast_to(lo, x.shape), x, np.broadcast_to(hi, x.shape))
    got = run("clamp", lo, x, hi)
    assert got.dtype == etype.np_dtype
    np.testing.assert_array_equal(got.astype(np.float64), expected)


def test_clamp_propagates_nan():
    low, high = np.array(-1, np.float32), np.array(1, np.float32)
    got = run("clamp", low, np.array([np.nan, 5, -5, -0.0], np.float32), high)
    assert_bits_equal(got, np.array([np.nan, 1, -1, -0.0], np.float32))


# --- convert -----------------------------------------------------------------------------------------

def _float_to_int_reference(v, t):
    info = np.iinfo(t.np_dtype)
    if math.isnan(v):
        return 0
    if v <= int(info.min):
        return int(info.min)
    if v >= int(info.max):
        return int(info.max)
    return int(v)    # truncates toward zero


@pytest.mark.parametrize("source", [F32, F64, F16, BF16], ids=str)
@pytest.mark.parametrize("target", INTS, ids=str)
def test_convert_float_to_int_saturates(rng, source, target):
    reach = min(1.5 * 2.0 ** target.bits, float(ml_dtypes.finfo(source.np_dtype).max) / 2)
    x = floats(rng, source, -reach, reach)
    with np.errstate(over="ignore"):   # the limits of wide targets are inf in f16
        x[:12] = np.array([np.nan, np.inf, -np.inf, -0.7, 0.7, -1.5, 2.5, 0.0,
                           float(np.iinfo(target.np_dtype).max), float(np.iinfo(target.np_dtype).min), 1e30, -1e30]
                          ).astype(source.np_dtype)
    expected = np.array(elementwise(lambda v: _float_to_int_reference(v, target), x), target.np_dtype)
    np.testing.assert_array_equal(run("convert", x, shape=array(target, N)), expected)


@pytest.mark.parametrize("source", INTS, ids=str)
@pytest.mark.parametrize("target", INTS, ids=str)
def test_convert_int_to_int_wraps(rng, source, target):
    x = ints(rng, source)
    expected = np.array([wrap(v, target) for v in x.tolist()], target.np_dtype)
    np.testing.assert_array_equal(run("convert", x, shape=array(target, N)), expected)


@pytest.mark.parametrize("source", [S32, U32, S64, U8], ids=str)
@pytest.mark.parametrize("target", [F32, F64], ids=str)
def test_convert_int_to_float_rounds_once(rng, source, target):
    x = ints(rng, source)
    nearest = (lambda v: float(v)) if target == F64 else _nearest_f32   # Python's float() rounds once
    assert_bits_equal(run("convert", x, shape=array(target, N)),
                      np.array([nearest(v) for v in x.tolist()], target.np_dtype))


def _nearest_f32(v: int) -> np.float32:
    """The f32 nearest to the integer v, ties to the even mantissa. float32(float(v)) rounds
    twice, so it is only a neighbour of the answer: pick among it and its two neighbours."""
    f = np.float32(float(v))
    candidates = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(int(c) - v), int(c.view(np.uint32)) & 1))


def test_convert_float_narrowing_rounds_to_nearest_even():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, -65520.0, 2**-25, 2**-24 * 1.5, np.nan, -0.0,
                  1 + 2**-8, 1 + 3 * 2**-8, 3.4028234e38, 1e-40], np.float32)
    to_f16 = run("convert", x, shape=array(F16, len(x)))
    assert_bits_equal(to_f16, np.array([1.0, 1 + 2**-9, 65504, np.inf, -np.inf, 0.0, 2**-23, np.nan, -0.0,
                                        1 + 2**-8, 1 + 3 * 2**-8, np.inf, 0.0], np.float16))
    to_bf16 = run("convert", x, shape=array(BF16, len(x)))
    # f32 -> bf16 is a bit op: the subnormal 1e-40 rounds to a bf16 subnormal (2**-133).
    assert_bits_equal(to_bf16, np.array([1.0, 1.0, 65536, 65536, -65536, 2**-25, 2**-24 * 1.5, np.nan, -0.0,
                                         1.0, 1 + 2**-6, np.inf, 2.0**-133]).astype(ml_dtypes.bfloat16))


def test_convert_f64_to_bf16_rounds_through_f32():
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8 - 2**-30], np.float64)
    got = run("convert", x, shape=array(BF16, 2))
    # Through f32 the first becomes 1 + 2**-8, a tie, which goes to even (1.0).
    np.testing.assert_array_equal(got.astype(np.float64), [1.0, 1.0])


def test_convert_f32_f64_flush_subnormals():
    assert_bits_equal(run("convert", np.array([1e-40, -1e-40], np.float32), shape=array(F64, 2)),
                      np.array([0.0, -0.0]))
    assert_bits_equal(run("convert", np.array([1e-300, 1e-40, -1e-40], np.float64), shape=array(F32, 3)),
                      np.array([0.0, 0.0, -0.0], np.float32))


@pytest.mark.parametrize("etype", [F32, F16, BF16, S32, U8, S64], ids=str)
def test_convert_pred_round_trip(rng, etype):
    pred = rng.random(N) < 0.5
    numbers = run("convert", pred, shape=array(etype, N))
    assert numbers.dtype == etype.np_dtype
    np.testing.assert_array_equal(numbers.astype(np.float64), pred.astype(np.float64))
    values = floats(rng, etype, -3, 3) if etype.is_float else ints(rng, etype, lo=-2, hi=2)
    values[:2] = [0, 1]
    if etype.is_float:
        values[2] = np.nan
    np.testing.assert_array_equal(run("convert", values, shape=array(PRED, N)),
                                  [v != 0 for v in values.astype(np.float64).tolist()])


# --- bitcast-convert and reduce-precision --------------------------------------------------------------

def test_bitcast_convert_same_width(rng):
    x = floats(rng, F32, -100, 100, 6)
    as_int = run("bitcast-convert", x, shape=array(S32, 6))
    np.testing.assert_array_equal(as_int, [struct.unpack("<i", struct.pack("<f", v))[0] for v in x.tolist()])
    back = run("bitcast-convert", as_int, shape=array(F32, 6))
    assert_bits_equal(back, x)
    h = floats(rng, F16, -5, 5, 4)
    np.testing.assert_array_equal(run("bitcast-convert", h, shape=array(U16, 4)),
                                  [struct.unpack("<H", struct.pack("<e", v))[0] for v in h.astype(np.float64).tolist()])


def test_bitcast_convert_between_widths_is_little_endian(rng):
    x = floats(rng, F32, -100, 100, (2, 3))
    pieces = run("bitcast-convert", x, shape=array(U8, 2, 3, 4))
    expected = [[list(struct.pack("<f", v)) for v in row] for row in x.tolist()]
    np.testing.assert_array_equal(pieces, expected)
    assert_bits_equal(run("bitcast-convert", pieces, shape=array(F32, 2, 3)), x)
    b = ints(rng, U8, (3, 2))
    np.testing.assert_array_equal(run("bitcast-convert", b, shape=array(S16, 3)),
                                  [struct.unpack("<h", bytes(row))[0] for row in b.tolist()])
    w = ints(rng, U64, 1).reshape(())
    np.testing.assert_array_equal(run("bitcast-convert", w, shape=array(U32, 2)),
                                  [int(w) & 0xFFFFFFFF, int(w) >> 32])


def _reduce_to_f16_reference(x):
    """e5m10: rounding as f16, but values below f16's normal range go to zero."""
    with np.errstate(over="ignore"):
        r = x.astype(np.float16).astype(np.float32)
    return np.where(np.abs(r) < 2.0**-14, np.copysign(np.float32(0), x), r)


def test_reduce_precision(rng):
    x = (rng.standard_normal(N) * 10.0 ** rng.uniform(-8, 6, N)).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 65519.0, 65520.0, 1e-7, -1e-7, 1 + 2**-11]
    assert_bits_equal(run("reduce-precision", x, exponent_bits=5, mantissa_bits=10), _reduce_to_f16_reference(x))
    to_bf16 = run("reduce-precision", x, exponent_bits=8, mantissa_bits=7)
    assert_bits_equal(to_bf16, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    no_mantissa = run("reduce-precision", np.array([np.nan, 3.0, 1.4], np.float32), exponent_bits=8, mantissa_bits=0)
    # With no mantissa bits the last kept bit is the exponent's: the tie 3.0 goes to 2.0.
    assert_bits_equal(no_mantissa, np.array([np.inf, 2.0, 1.0], np.float32))
    f64 = rng.standard_normal(N)
    assert_bits_equal(run("reduce-precision", f64, exponent_bits=8, mantissa_bits=23),
                      np.where(np.abs(f64) < 2.0**-126, 0, f64.astype(np.float32)).astype(np.float64))


# --- lanes: scalar computations run on whole arrays ------------------------------------------------------

def test_scalar_computation_runs_on_lanes(rng):
    a, b = floats(rng, F32, -5, 5), floats(rng, F32, -5, 5)
    a[0] = np.nan
    got = evaluate_computation(scalar_computation("maximum", F32), [a, b])
    assert_bits_equal(got, np.array(elementwise(lambda p, q: p if math.isnan(p) or p >= q else q, a, b), np.float32))
    b_ = HloBuilder("lanes")
    x = b_.parameter(scalar(S32), "x")
    c = b_.constant(np.int32(3))
    comp = b_.build(b_.op("shift-left", x, c))
    v = ints(rng, S32, lo=-1000, hi=1000)
    np.testing.assert_array_equal(evaluate_computation(comp, [v]), v * 8)


# --- registry facts and shape rules ----------------------------------------------------------------------

def test_every_opcode_is_registered_as_elementwise():
    names = set(UNARY) | set(BINARY) | {"compare", "select", "clamp", "convert", "bitcast-convert",
                                        "reduce-precision"}
    assert len(names) == 45
    for name in names:
        record = op_def(name)
        assert record.fusion_kind == "elementwise"
        assert {"accepts", "transcendental", "bit_op"} <= set(record.extra)
    assert op_def("exponential").extra["transcendental"] and op_def("exponential").extra["numpy"] is np.exp
    assert op_def("negate").extra["bit_op"] and not op_def("add").extra["bit_op"]


def _shape_error(opcode, shapes, declared=None, **attrs):
    with pytest.raises(ShapeError) as info:
        op_def(opcode).shape(shapes, attrs, declared)
    return str(info.value)


F32_3, F32_4, S32_3, PRED_3 = array(F32, 3), array(F32, 4), array(S32, 3), array(PRED, 3)


@pytest.mark.parametrize("opcode, shapes, declared, attrs, message", [
    ("add", [F32_3, F32_4], None, {}, "dimensions differ"),
    ("add", [F32_3, S32_3], None, {}, "element types differ"),
    ("add", [F32_3, TupleShape((F32_3,))], None, {}, "must be an array"),
    ("exponential", [S32_3], None, {}, "not accepted"),
    ("and", [F32_3, F32_3], None, {}, "not accepted"),
    ("shift-left", [F32_3, F32_3], None, {}, "not accepted"),
    ("atan2", [S32_3, S32_3], None, {}, "not accepted"),
    ("subtract", [PRED_3, PRED_3], None, {}, "not accepted"),
    ("sign", [array(U32, 3)], None, {}, "not accepted"),
    ("abs", [array(U8, 3)], None, {}, "not accepted"),
    ("not", [F32_3], None, {}, "not accepted"),
    ("popcnt", [F32_3], None, {}, "not accepted"),
    ("add", [F32_3, F32_3], array(F32, 4), {}, "declared"),
    ("add", [F32_3, F32_3], S32_3, {}, "declared"),
    ("is-finite", [F32_3], F32_3, {}, "declared"),
    ("compare", [F32_3, F32_3], None, {"direction": "LQ"}, "direction"),
    ("compare", [F32_3, F32_3], None, {}, "direction"),
    ("compare", [F32_3, F32_3], None, {"direction": "LT", "type": "SIGNED"}, "type=SIGNED"),
    ("compare", [S32_3, S32_3], None, {"direction": "LT", "type": "TOTALORDER"}, "type=TOTALORDER"),
    ("compare", [F32_3, F32_3], None, {"direction": "LT", "type": "BOGUS"}, "type=BOGUS"),
    ("select", [array(PRED, 4), F32_3, F32_3], None, {}, "dimensions"),
    ("select", [scalar(PRED), F32_3, F32_3], None, {}, "dimensions"),
    ("select", [S32_3, F32_3, F32_3], None, {}, "must be pred"),
    ("select", [PRED_3, F32_3, S32_3], None, {}, "element types differ"),
    ("clamp", [F32_4, F32_3, F32_3], None, {}, "scalar or have"),
    ("clamp", [scalar(S32), F32_3, F32_3], None, {}, "element type"),
    ("clamp", [scalar(PRED), PRED_3, scalar(PRED)], None, {}, "not accepted"),
    ("convert", [F32_3], None, {}, "result shape"),
    ("convert", [F32_3], array(S32, 4), {}, "declared"),
    ("bitcast-convert", [F32_3], None, {}, "result shape"),
    ("bitcast-convert", [array(U8, 3, 2)], array(F32, 3), {}, "minor-most dimension of 4"),
    ("bitcast-convert", [F32_3], array(U8, 3, 2), {}, "declared"),
    ("bitcast-convert", [PRED_3], array(U8, 3), {}, "pred"),
    ("reduce-precision", [F32_3], None, {"exponent_bits": 0, "mantissa_bits": 3}, "exponent_bits"),
    ("reduce-precision", [F32_3], None, {"exponent_bits": 5}, "mantissa_bits"),
    ("reduce-precision", [S32_3], None, {"exponent_bits": 5, "mantissa_bits": 2}, "not accepted"),
])
def test_shape_rule_errors(opcode, shapes, declared, attrs, message):
    assert message in _shape_error(opcode, shapes, declared, **attrs)


def test_shape_rules_infer_results():
    assert op_def("compare").shape([F32_3, F32_3], {"direction": "LT"}, None) == PRED_3
    assert op_def("is-finite").shape([F32_3], {}, None) == PRED_3
    assert op_def("clamp").shape([scalar(F32), F32_3, scalar(F32)], {}, None) == F32_3
    assert op_def("select").shape([PRED_3, S32_3, S32_3], {}, None) == S32_3
    assert op_def("bitcast-convert").shape([array(F32, 2, 3)], {}, array(U8, 2, 3, 4)) == array(U8, 2, 3, 4)
    assert op_def("convert").shape([F32_3], {}, array(BF16, 3)) == array(BF16, 3)
    laid_out = ArrayShape(F32, (2, 3), (0, 1))
    assert op_def("add").shape([array(F32, 2, 3)] * 2, {}, laid_out) is laid_out
    b = HloBuilder("bad")
    x, y = b.parameter(F32_3, "x"), b.parameter(F32_4, "y")
    with pytest.raises(ShapeError):
        b.op("multiply", x, y)


def test_scipy_special_is_imported_on_first_use():
    """`import pyxla` leaves scipy.special (half its import time) until erf or logistic is
    evaluated."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, pyxla\n"
            "assert 'scipy.special' not in sys.modules\n"
            "from pyxla.hlo.ops import op_def\n"
            "print(op_def('erf').extra['numpy'](np.array([0.5]))[0])\n"
            "assert 'scipy.special' in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert abs(float(out) - 0.5204998778130465) < 1e-15
