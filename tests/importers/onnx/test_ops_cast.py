"""Cast and CastLike, bit for bit: every result against NumPy's or ml_dtypes' conversion
(`x.astype(to)`, which is also what onnx's reference evaluator computes) and against the
reference evaluator itself, on fresh random inputs.

What ONNX leaves undefined is not asserted: floats out of an integer type's range (or NaN,
or negative to an unsigned type). What it defines is: RNE rounding between float types,
±inf past a float type's range, integers wrapping in two's complement, the float8
`saturate` tables (clamping to ±largest with saturate=1; NaN or inf with 0).

Subnormal f32/f64 values (bf16's too, which share f32's exponent) are left out: the CPU
backend flushes them to zero in arithmetic and conversions, as XLA's CPU backend does (see
the README's Semantics). f16's and the 8-bit floats' subnormals are normal numbers in f32
and are tested. ml_dtypes' array cast converts f64 to bf16 and to the 8-bit floats through
f32 (twice rounded), while pyxla rounds f64 to the 8-bit floats once (as XLA does); f64
inputs to them are random rather than placed next to the target's rounding midpoints, so
that neither way of rounding is pinned there.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from pyxla.importers.onnx import load

from .single_node import refuses

# NumPy warns where a conversion overflows to inf, as ONNX defines it to
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning",
                                        "ignore:invalid value encountered in cast:RuntimeWarning")

F64, F32, F16, BF16 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
WIDE_FLOATS = [F64, F32, F16, BF16]
FLOAT8 = [np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                                ml_dtypes.float8_e5m2fnuz)]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)]
BOOL = np.dtype(np.bool_)
NARROW_INTS = [np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)]
FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn)
F32_TINY = float(np.finfo(np.float32).tiny)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype in (BF16, FLOAT4, *FLOAT8)


def convert(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)


def saturated(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """ONNX's saturate=1 to an 8-bit float: ±inf and values past the largest clamp to it
    (clamped in f32, which holds every narrower float, or in f64)."""
    largest = float(ml_dtypes.finfo(dtype).max)
    wide = x.astype(F64 if x.dtype == F64 else F32)
    return convert(np.clip(wide, -largest, largest), dtype)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal dtype, shape and bits; NaN matches NaN of any sign or payload."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype == BOOL:
        bad = got != want
    elif want.dtype in NARROW_INTS:
        bad = got.astype(np.int64) != want.astype(np.int64)
    elif want.dtype == FLOAT4:   # no NaN; the sign bit tells -0 from 0
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = (g != w) | (np.signbit(g) != np.signbit(w))
    else:
        unsigned = np.dtype(f"u{want.dtype.itemsize}")
        if is_float(want.dtype):
            g_nan, w_nan = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
            bad = (g_nan != w_nan) | (~w_nan & (got.view(unsigned) != want.view(unsigned)))
        else:
            bad = got.view(unsigned) != want.view(unsigned)
    if bad.any():
        i = np.flatnonzero(bad)[:6]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; at {i.tolist()} got "
                             f"{got.ravel()[i]!r}, expected {want.ravel()[i]!r}")


def cast_model(cases: list[tuple[np.ndarray, np.dtype, dict]], opset: int, op: str = "Cast") -> onnx.ModelProto:
    """One node per case, each on an input of its own: x{i} -> y{i}; `Cast` with `to` and the
    case's attributes, or `CastLike` with a one-element initializer of the target type."""
    inputs, outputs, nodes, initializers = [], [], [], []
    for i, (x, to, attrs) in enumerate(cases):
        elem = helper.np_dtype_to_tensor_dtype(to)
        inputs.append(helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
        outputs.append(helper.make_tensor_value_info(f"y{i}", elem, x.shape))
        if op == "Cast":
            nodes.append(helper.make_node("Cast", [f"x{i}"], [f"y{i}"], to=elem, **attrs))
        else:
            initializers.append(onnx.numpy_helper.from_array(np.ones(1, to), f"like{i}"))
            nodes.append(helper.make_node("CastLike", [f"x{i}", f"like{i}"], [f"y{i}"], **attrs))
    graph = helper.make_graph(nodes, "casts", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=min(onnx.IR_VERSION, 10))


def check_casts(cases: list[tuple[np.ndarray, np.dtype, dict, np.ndarray]], opset: int, op: str = "Cast") -> None:
    """Run all (x, to, attributes, expected) cases in one model, with pyxla and with onnx's
    reference evaluator; both must give the expected bits."""
    model = cast_model([(x, to, attrs) for x, to, attrs, _ in cases], opset, op)
    feeds = {f"x{i}": x for i, (x, *_) in enumerate(cases)}
    got = load(model)(**feeds)
    reference = ReferenceEvaluator(model).run(None, feeds)
    for i, (x, to, attrs, want) in enumerate(cases):
        what = f"{op} {x.dtype} -> {to} {attrs or ''}"
        assert_same_bits(reference[i], want, f"{what} (onnx reference)")
        assert_same_bits(np.asarray(got[f"y{i}"]), want, what)


# --- inputs ----------------------------------------------------------------------------------
# Every input has N elements, so that a test's model compiles to the same code on every run.

N = 256


def without_flushed(x: np.ndarray) -> np.ndarray:
    """x with f32/f64 subnormals (bf16's too) replaced by 1.5 (see the docstring)."""
    if x.dtype == F16 or not is_float(x.dtype) or x.dtype.itemsize == 1:
        return x
    x64 = x.astype(np.float64)
    return np.where((np.abs(x64) < F32_TINY) & (x64 != 0), np.asarray(1.5, x.dtype), x)


def next_to_midpoints(rng, src: np.dtype, narrow: np.dtype, n: int) -> np.ndarray:
    """n values of `src` on and one ulp either side of the midpoints between neighbouring
    values of the narrower float type `narrow`, of either sign."""
    grid = np.abs(convert(rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 4, n), narrow))
    largest = float(ml_dtypes.finfo(narrow).max)
    grid = np.where(grid.astype(np.float64) >= largest, np.asarray(1.0, narrow), grid)
    mid = convert(grid.astype(np.float64) + np.spacing(grid).astype(np.float64) / 2, src)
    step = rng.integers(-1, 2, n)
    up, down = np.nextafter(mid, src.type(np.inf)), np.nextafter(mid, src.type(-np.inf))
    near = np.where(step > 0, up, np.where(step < 0, down, mid))
    return near * rng.choice(np.array([-1, 1], src), n)


def wide_floats(rng, dtype: np.dtype) -> np.ndarray:
    """The specials; from f32 and f64, values next to the rounding midpoints of f16 and
    bf16; the rest values of every magnitude `dtype` holds."""
    specials = convert(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0, 65520.0, -65536.0,
                                 3.0e38, 3.5e38, -3.5e38]), dtype)
    parts = [specials]
    if dtype in (F32, F64):
        parts += [next_to_midpoints(rng, dtype, F16, N // 4), next_to_midpoints(rng, dtype, BF16, N // 4)]
    rest = N - sum(len(p) for p in parts)
    top, bottom = {F64: (300, -37), F32: (38.5, -37), BF16: (38.5, -37), F16: (4.8, -7.7)}[dtype]
    parts.append(convert(10.0 ** rng.uniform(bottom, top, rest) * rng.choice([-1.0, 1.0], rest), dtype))
    return without_flushed(np.concatenate(parts))


def in_int_range(rng, dtype: np.dtype, to: np.dtype) -> np.ndarray:
    """Floats whose truncation `to` holds (ONNX leaves the others undefined): the range's
    ends (up to ±2^62 for 64-bit types, exact in f64), ±0, whole numbers and halves and
    quarters of either sign, magnitudes across the range; values that round out of the
    range in `dtype` replaced by 0.5."""
    info = ml_dtypes.iinfo(to)
    high = float(min(int(info.max), 65504 if dtype == F16 else 2**62))
    low = float(max(int(info.min), -high))
    ends = np.array([high, low, 0.0, -0.0, 0.5, -0.5, 0.75, -0.75])
    small = rng.integers(-20, 21, N // 4) + rng.choice([0.0, 0.25, 0.5, 0.75], N // 4)
    rest = N - len(ends) - len(small)
    mags = 10.0 ** rng.uniform(-1, np.log10(high), rest)
    mags = np.where(rng.random(rest) < 0.5, np.trunc(mags) + 0.5, mags)
    x = convert(np.concatenate([ends, small, mags * rng.choice([-1.0, 1.0], rest)]), dtype)
    whole = np.trunc(x.astype(np.float64))
    return without_flushed(np.where((whole >= low) & (whole <= high), x, np.asarray(0.5, dtype)))


def random_ints(rng, dtype: np.dtype) -> np.ndarray:
    """Its ends, 0 and ±1, and values across the whole range (magnitudes of every bit
    length, either sign)."""
    info = np.iinfo(dtype)
    ends = np.array([info.min, info.max, 0, 1] + ([-1] if info.min < 0 else []), dtype)
    n = N - len(ends)
    magnitude_bits = info.bits - (1 if info.min < 0 else 0)
    raw = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    x = (raw >> rng.integers(64 - magnitude_bits, 65, n).astype(np.uint64)).astype(dtype)   # a shift by 64 is 0
    if info.min < 0:
        x = x * rng.choice(np.array([-1, 1], dtype), n)
    return np.concatenate([ends, x])


# --- between the wide types: floats, integers, bool -------------------------------------------

WIDE = WIDE_FLOATS + INTS + [BOOL]


def source_values(rng, src: np.dtype, to: np.dtype) -> np.ndarray:
    if src == BOOL:
        return rng.random(N) < 0.5
    if src in INTS:
        return random_ints(rng, src)
    if to in INTS:
        return in_int_range(rng, src, to)
    return wide_floats(rng, src)


def exact_casts(rng, src: np.dtype, targets) -> list:
    cases = []
    for to in targets:
        x = source_values(rng, src, to)
        cases.append((x, to, {}, convert(x, to)))
    return cases


@pytest.mark.parametrize("src", WIDE, ids=str)
def test_cast_between_wide_types(rng, src):
    """From `src` to every other wide type (f64 -> f16 apart: see the test below)."""
    targets = [to for to in WIDE if to != src and (src, to) != (F64, F16)]
    check_casts(exact_casts(rng, src, targets), opset=13)


def _f16_midpoints(rng) -> np.ndarray:
    """f64 values a few f64 ulps off the midpoints between neighbouring f16 values: within
    half an f32 ulp of the midpoint, so that rounding to f32 first lands on it."""
    grid = np.abs(rng.standard_normal(N // 2).astype(np.float16))
    mid = grid.astype(np.float64) + np.spacing(grid).astype(np.float64) / 2
    off = np.where(rng.random(N // 2) < 0.5, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf))
    return np.concatenate([off, -off])


def test_cast_f64_to_f16_off_midpoints_rounds_once(rng):
    """Values next to f16 midpoints in f64: the nearest f16, as NumPy gives (rounding to f32
    first would put them on the midpoint, then round half to even)."""
    x = _f16_midpoints(rng)
    assert (convert(convert(x, F32), F16) != convert(x, F16)).any()   # the inputs tell the two apart
    check_casts([(x, F16, {}, convert(x, F16))], opset=13)


# --- to and from the 8-bit floats ------------------------------------------------------------

def float8_sources(rng, src: np.dtype, to: np.dtype) -> np.ndarray:
    """The specials, ±largest, the band past the largest value (up to 10% past it, where
    some values still round to it), from f32 and f16 values next to the 8-bit type's
    rounding midpoints, and the rest magnitudes across its range and a little past it."""
    info = ml_dtypes.finfo(to)
    largest, smallest = float(info.max), float(info.smallest_subnormal)
    parts = [convert(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, largest, -largest]), src),
             convert(largest * (1 + rng.uniform(0, 0.1, 24)) * rng.choice([-1.0, 1.0], 24), src)]
    if src in (F32, F16):
        parts.append(next_to_midpoints(rng, src, to, N // 3))
    rest = N - sum(len(p) for p in parts)
    parts.append(convert(2.0 ** rng.uniform(np.log2(smallest) - 2, np.log2(largest) + 2, rest)
                         * rng.choice([-1.0, 1.0], rest), src))
    return without_flushed(np.concatenate(parts))


@pytest.mark.parametrize("to", FLOAT8, ids=str)
def test_cast_to_float8(rng, to):
    """From f64, f32, f16 and bf16, with saturate=1 (out-of-range values and ±inf clamp to
    ±largest, NaN stays NaN), saturate=0 (they become inf for e5m2, NaN for the others, as
    ml_dtypes gives), and saturate left out (1)."""
    cases = []
    for src in WIDE_FLOATS:
        x = float8_sources(rng, src, to)
        cases += [(x, to, {"saturate": 1}, saturated(x, to)), (x, to, {"saturate": 0}, convert(x, to))]
    cases.append((x, to, {}, saturated(x, to)))
    check_casts(cases, opset=21)


def in_range_of(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """x with the values whose truncation `to` does not hold (and NaN, ±inf) replaced by 0."""
    x64 = x.astype(np.float64)
    info = ml_dtypes.iinfo(to)
    with np.errstate(invalid="ignore"):
        whole = np.trunc(x64)
        held = np.isfinite(x64) & (whole >= int(info.min)) & (whole <= int(info.max))
    return np.where(held, x, np.zeros((), x.dtype))


@pytest.mark.parametrize("src", FLOAT8, ids=str)
def test_cast_from_float8(src):
    """Every bit pattern of an 8-bit float to the wide floats, to bool, and to the other
    8-bit floats (saturate=0: exactly ml_dtypes' conversion; and saturate=1); to the
    integers where they hold its value."""
    x = np.arange(256, dtype=np.uint8).view(src)
    cases = [(x, to, {}, convert(x, to)) for to in WIDE_FLOATS + [BOOL]]
    for to in FLOAT8:
        if to != src:
            cases += [(x, to, {"saturate": 0}, convert(x, to)), (x, to, {"saturate": 1}, saturated(x, to))]
    for to in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int64)):
        held = in_range_of(x, to)
        cases.append((held, to, {}, convert(held, to)))
    check_casts(cases, opset=21)


@pytest.mark.parametrize("to", FLOAT8, ids=str)
def test_cast_integers_to_float8(rng, to):
    """Integers round to the 8-bit floats as ml_dtypes rounds them (saturate=0) or clamp
    to ±largest first (saturate=1); bool gives 0 and 1."""
    i32 = rng.integers(-70000, 70001, N).astype(np.int32)
    i64 = random_ints(rng, np.dtype(np.int64)) >> rng.integers(0, 64, N)   # magnitudes of every size
    u8 = rng.integers(0, 256, N).astype(np.uint8)
    flags = rng.random(N) < 0.5
    cases = [(i32, to, {"saturate": 0}, convert(i32, to)), (i32, to, {"saturate": 1}, saturated(i32, to)),
             (i64, to, {"saturate": 1}, saturated(i64, to)), (u8, to, {"saturate": 0}, convert(u8, to)),
             (flags, to, {}, convert(flags, to))]
    check_casts(cases, opset=21)


def test_cast_saturate_applies_to_float8_only(rng):
    """saturate=1 on a cast to f16, bf16 or f32 changes nothing: past the range is ±inf."""
    x, x64 = wide_floats(rng, F32), wide_floats(rng, F64)
    cases = [(x, F16, {"saturate": 1}, convert(x, F16)), (x64, F32, {"saturate": 1}, convert(x64, F32)),
             (x, BF16, {"saturate": 1}, convert(x, BF16))]
    check_casts(cases, opset=19)


# --- 4-bit float, 4- and 2-bit integers --------------------------------------------------------

@pytest.mark.parametrize("src", WIDE_FLOATS, ids=str)
def test_cast_floats_to_narrow_types(rng, src):
    """To f4e2m1fn (RNE; past ±6 it saturates, as ml_dtypes does: the type has no inf) and
    to the 4- and 2-bit integers (truncation, where they hold it)."""
    grid = np.arange(-8, 8.25, 0.25)
    x = convert(np.concatenate([grid, [0.0, -0.0, 100.0, -7.0], rng.standard_normal(N - len(grid) - 4) * 4]), src)
    cases = [(x, FLOAT4, {}, convert(x, FLOAT4))]
    for to in NARROW_INTS:
        held = in_range_of(x, to)
        cases.append((held, to, {}, convert(held, to)))
    check_casts(cases, opset=25)


@pytest.mark.parametrize("src", [FLOAT4] + NARROW_INTS, ids=str)
def test_cast_narrow_types_to_wide_types(src):
    """Every value of a 4- or 2-bit type to the wide floats, bool and integers (f4e2m1fn's
    negative values not to unsigned types: undefined in ONNX)."""
    if src == FLOAT4:
        x = np.arange(16, dtype=np.uint8).view(src)
    else:
        info = ml_dtypes.iinfo(src)
        x = np.arange(int(info.min), int(info.max) + 1).astype(src)
    cases = [(x, to, {}, convert(x, to)) for to in WIDE_FLOATS + [BOOL]]
    for to in (np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8), np.dtype(np.uint16)):
        held = in_range_of(x, to) if src == FLOAT4 else x
        cases.append((held, to, {}, convert(held, to)))
    check_casts(cases, opset=25)


@pytest.mark.parametrize("to", [FLOAT4] + NARROW_INTS, ids=str)
def test_cast_integers_to_narrow_types(rng, to):
    """Integers to f4e2m1fn round (and saturate past ±6); to the 4- and 2-bit integers they
    wrap, keeping the low bits."""
    x = rng.integers(-40, 41, N).astype(np.int32)
    cases = [(x, to, {}, convert(x, to)), (x.astype(np.int8), to, {}, convert(x.astype(np.int8), to)),
             (np.abs(x).astype(np.uint16), to, {}, convert(np.abs(x).astype(np.uint16), to))]
    check_casts(cases, opset=25)


# --- CastLike ----------------------------------------------------------------------------------

@pytest.mark.parametrize("src", [F64, F32, F16, BF16, np.dtype(np.int64), np.dtype(np.uint8), BOOL], ids=str)
def test_castlike(rng, src):
    """CastLike takes its target type from its second input and converts as Cast does (at
    opset 15, where it came in; from floats also to the 8-bit floats, with `saturate`, at 21)."""
    targets = [to for to in WIDE if to != src and (src, to) != (F64, F16)]
    cases = exact_casts(rng, src, targets)
    if not is_float(src):
        check_casts(cases, opset=15, op="CastLike")
        return
    e4m3, e5m2 = FLOAT8[0], FLOAT8[2]
    x = float8_sources(rng, src, e4m3)
    cases += [(x, e4m3, {}, saturated(x, e4m3)), (x, e5m2, {"saturate": 0}, convert(x, e5m2))]
    check_casts(cases, opset=21, op="CastLike")


# --- what the converter refuses ------------------------------------------------------------------

@pytest.mark.parametrize("to", [TensorProto.STRING, TensorProto.FLOAT8E8M0])
def test_cast_refuses_types_pyxla_lacks(rng, to):
    name = TensorProto.DataType.Name(to)
    # float8 e8m0 exists from opset 24 on (the checker refuses it in older opsets)
    refuses("Cast", {"x": rng.standard_normal(3).astype(np.float32)}, {"to": to}, opset=24,
            match=f"'to' element type {name}")
