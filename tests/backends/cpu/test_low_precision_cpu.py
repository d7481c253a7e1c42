"""The 8- and 4-bit floats and the 4- and 2-bit integers on the CPU backend: converts to and
from f32 agree with ml_dtypes bit for bit over every bit pattern of the narrow type and over
f32 values that round, tie, overflow and underflow in it; arithmetic in a narrow type is
computed in f32 and rounded once, as the evaluator does; the types parse and print."""
import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module
from pyxla.hlo.types import ELEMENT_TYPES

NARROW_FLOATS = ["f8e5m2", "f8e4m3", "f8e4m3fn", "f8e4m3b11fnuz", "f8e3m4", "f8e5m2fnuz", "f8e4m3fnuz",
                 "f4e2m1fn"]
NARROW_INTS = ["s4", "u4", "s2", "u2"]


def run_cpu(text: str, inputs: list) -> list[np.ndarray]:
    return get_backend("cpu").compile(parse_module(text)).run_flat(inputs)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def every_pattern(dtype) -> np.ndarray:
    bits = np.arange(1 << ml_dtypes.finfo(dtype).bits, dtype=np.uint8)
    return bits.view(dtype)


def f32_cases(rng, dtype, n: int = 4096) -> np.ndarray:
    """f32 values across the narrow type's range and past it: halfway points between its
    neighbours (ties), subnormals, overflow, NaN, +-inf, +-0."""
    info = ml_dtypes.finfo(dtype)
    values = every_pattern(dtype).astype(np.float32)
    finite = np.sort(np.unique(values[np.isfinite(values)]))
    ties = (finite[:-1] + finite[1:]) / 2
    scale = np.exp2(rng.uniform(np.log2(float(info.smallest_subnormal)) - 2, np.log2(float(info.max)) + 2, n))
    random = (rng.choice([-1.0, 1.0], n) * scale).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max) * 1.5, -float(info.max) * 4],
                        np.float32)
    return np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), random, specials]).astype(np.float32)


@pytest.mark.parametrize("name", NARROW_FLOATS)
def test_narrow_float_to_f32_is_exact(name):
    dtype = ELEMENT_TYPES[name].np_dtype
    x = every_pattern(dtype)
    (got,) = run_cpu(f"HloModule m\nENTRY e {{ p = {name}[{x.size}] parameter(0)\n"
                     f"ROOT c = f32[{x.size}] convert(p) }}", [x])
    same_bits(got, x.astype(np.float32))


@pytest.mark.parametrize("name", NARROW_FLOATS)
def test_f32_to_narrow_float_rounds_as_ml_dtypes(name, rng):
    dtype = ELEMENT_TYPES[name].np_dtype
    x = f32_cases(rng, dtype)
    (got,) = run_cpu(f"HloModule m\nENTRY e {{ p = f32[{x.size}] parameter(0)\n"
                     f"ROOT c = {name}[{x.size}] convert(p) }}", [x])
    same_bits(got, x.astype(dtype))


@pytest.mark.parametrize("name", NARROW_FLOATS)
def test_narrow_float_arithmetic_matches_the_evaluator(name, rng):
    """(a * b + a) in the narrow type: each op computed in f32 and rounded to the type."""
    dtype = ELEMENT_TYPES[name].np_dtype
    finite = every_pattern(dtype)
    finite = finite[np.isfinite(finite.astype(np.float32))]
    a, b = (rng.choice(finite, (7, 13)) for _ in range(2))
    text = (f"HloModule m\nENTRY e {{ a = {name}[7,13] parameter(0)\n b = {name}[7,13] parameter(1)\n"
            f" m = {name}[7,13] multiply(a, b)\n ROOT s = {name}[7,13] add(m, a) }}")
    (want,) = flatten_result(evaluate_module(parse_module(text), [a, b]))
    (got,) = run_cpu(text, [a, b])
    same_bits(got, want)
    expected = ((a.astype(np.float32) * b.astype(np.float32)).astype(dtype).astype(np.float32)
                + a.astype(np.float32)).astype(dtype)
    same_bits(got, expected)


@pytest.mark.parametrize("name", NARROW_INTS)
def test_narrow_int_converts_and_wraps(name, rng):
    """Every value of the type to s32 and back; integer add wraps within the type's bits."""
    dtype = ELEMENT_TYPES[name].np_dtype
    info = ml_dtypes.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    y = rng.integers(info.min, info.max + 1, x.size).astype(dtype)
    n = x.size
    text = (f"HloModule m\nENTRY e {{ x = {name}[{n}] parameter(0)\n y = {name}[{n}] parameter(1)\n"
            f" w = s32[{n}] convert(x)\n s = {name}[{n}] add(x, y)\n ROOT t = ({name}[{n}], s32[{n}]) tuple(s, w) }}")
    want = flatten_result(evaluate_module(parse_module(text), [x, y]))
    got = run_cpu(text, [x, y])
    np.testing.assert_array_equal(got[1], x.astype(np.int32))
    span = 1 << info.bits
    wrapped = (x.astype(np.int64) + y.astype(np.int64) - info.min) % span + info.min
    np.testing.assert_array_equal(got[0].astype(np.int64), wrapped)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64))


@pytest.mark.parametrize("name", NARROW_FLOATS + NARROW_INTS)
def test_narrow_types_parse_and_print(name):
    text = f"HloModule m\n\nENTRY e {{\n  p = {name}[3,2]{{1,0}} parameter(0)\n  ROOT n = {name}[3,2]{{1,0}} negate(p)\n}}\n"
    module = parse_module(text)
    assert f"{name}[3,2]" in module.to_text()
    assert parse_module(module.to_text()).to_text() == module.to_text()


def off_midpoints(rng, dtype, n: int = 2048) -> np.ndarray:
    """f64 values a little off the midpoints between neighbours of `dtype`, both sides, and
    the midpoints themselves: rounding to f32 first would put the near ones on the midpoint,
    then the narrow rounding would go to even, not to the nearer neighbour."""
    info = ml_dtypes.finfo(dtype)
    patterns = every_pattern(dtype) if info.bits <= 8 else np.arange(1 << 16, dtype=np.uint16).view(dtype)
    with np.errstate(invalid="ignore"):   # (the NaN patterns)
        finite = np.unique(patterns.astype(np.float64))
    finite = finite[np.isfinite(finite)]
    mids = (finite[:-1] + finite[1:]) / 2
    picks = rng.choice(mids, n)
    offsets = np.abs(picks) * np.exp2(-rng.integers(30, 52, n))
    return np.concatenate([picks + offsets, picks - offsets, mids[:64]])



@pytest.mark.parametrize("name", ["f16", "bf16", "f8e4m3fn", "f8e5m2"])
def test_f64_to_narrow_float_rounds_as_the_evaluator(name, rng):
    """convert f64 -> a type computed in f32 agrees with the evaluator bit for bit on values
    just off the type's midpoints. f16 rounds once, to the value nearest the f64 (NumPy's and
    XLA's convert), not twice through f32; bf16 and the 8-bit floats go through f32 as
    ml_dtypes and XLA's CPU emitter convert them."""
    dtype = ELEMENT_TYPES[name].np_dtype
    x = off_midpoints(rng, dtype)
    text = (f"HloModule m\n\nENTRY e {{\n  p = f64[{x.size}] parameter(0)\n"
            f"  ROOT c = {name}[{x.size}] convert(p)\n}}\n")
    want = np.asarray(flatten_result(evaluate_module(parse_module(text), [x]))[0])
    same_bits(run_cpu(text, [x])[0], want)
    if name == "f16":
        assert (x.astype(np.float32).astype(dtype) != x.astype(dtype)).any()   # the inputs tell them apart
        same_bits(want, x.astype(dtype))
