"""bitcast-convert, reduce-precision and rng-bit-generator on the CPU backend against the
evaluator, bit for bit: NaN, +-inf, -0 and subnormals, rounding ties, overflow and underflow
of the narrower format, every float width; bitcasts between widths (little-endian pieces);
Philox with u64[2] and u64[3] states and 128-bit counter carries, Threefry with odd and
even dimensions, 32- and 64-bit words, non-default layouts."""
import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module

FLOATS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
INTS = {"s8": np.int8, "u8": np.uint8, "s16": np.int16, "u16": np.uint16, "s32": np.int32, "u32": np.uint32,
        "s64": np.int64, "u64": np.uint64}
TYPES = {**FLOATS, **INTS}


def bits_of(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(text: str, inputs: list) -> list[np.ndarray]:
    """The CPU backend's results have exactly the evaluator's bit patterns."""
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    got = get_backend("cpu").compile(parse_module(text)).run_flat(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(bits_of(g), bits_of(w))
    return got


def float_specials(rng, shape, dtype) -> np.ndarray:
    """Normal values over many magnitudes with NaN, +-inf, +-0, subnormals and the largest and
    smallest normals mixed in."""
    info = ml_dtypes.finfo(dtype)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max), -float(info.max),
                         float(info.tiny), float(info.tiny) / 4, -float(info.tiny) / 2,
                         float(info.smallest_subnormal)])
    mask = rng.random(shape) < 0.3
    x[mask] = rng.choice(specials, int(mask.sum()))
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def random_bits(rng, shape, dtype) -> np.ndarray:
    """Any bit pattern at all (signalling NaNs included) of the type's width."""
    width = np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, tuple(shape) + (width,), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def unary_module(op: str, src: str, src_dims: str, dst: str, dst_dims: str, attrs: str = "") -> str:
    return f"""HloModule m
ENTRY main {{
  x = {src}[{src_dims}] parameter(0)
  ROOT r = {dst}[{dst_dims}] {op}(x){attrs}
}}
"""


# --- bitcast-convert ----------------------------------------------------------------------------

SAME_WIDTH = [("f32", "s32"), ("s32", "f32"), ("f32", "u32"), ("u32", "f32"), ("f64", "s64"), ("u64", "f64"),
              ("f16", "s16"), ("u16", "f16"), ("bf16", "u16"), ("s16", "bf16"), ("f16", "bf16"), ("s8", "u8")]


@pytest.mark.parametrize("src,dst", SAME_WIDTH)
def test_bitcast_convert_between_types_of_one_width(src, dst, rng):
    dtype = TYPES[src]
    x = float_specials(rng, (5, 7), dtype) if src in FLOATS else random_bits(rng, (5, 7), dtype)
    if dst in ("f16", "bf16") or src in ("f16", "bf16"):
        # 16-bit floats are computed in f32, which quiets a signalling NaN: give only quiet ones
        x = _quiet_16_bit_nans(x, dst if dst in ("f16", "bf16") else src)
    got = assert_same_bits(unary_module("bitcast-convert", src, "5,7", dst, "5,7"), [x])
    np.testing.assert_array_equal(bits_of(got[0]), bits_of(x))


def _quiet_16_bit_nans(x: np.ndarray, float_type: str) -> np.ndarray:
    bits = bits_of(x).copy()
    exponent_mask, quiet = (0x7C00, 0x0200) if float_type == "f16" else (0x7F80, 0x0040)
    is_nan = ((bits & exponent_mask) == exponent_mask) & ((bits & ~np.uint16(0x8000 | exponent_mask)) != 0)
    bits[is_nan] |= quiet
    return bits.view(x.dtype)


# (source, its dims, destination, its dims): narrowing adds a minor dimension of pieces,
# widening consumes one
BETWEEN_WIDTHS = [
    ("f32", "6", "u8", "6,4"),
    ("f32", "3,5", "s16", "3,5,2"),
    ("f64", "4", "u16", "4,4"),
    ("f64", "2,3", "f32", "2,3,2"),
    ("s64", "7", "s32", "7,2"),
    ("u8", "3,2", "f16", "3"),
    ("u8", "5,8", "f64", "5"),
    ("u16", "2,3,2", "f32", "2,3"),
    ("s32", "4,2", "u64", "4"),
    ("f32", "1", "u8", "1,4"),
    ("f32", "0", "u8", "0,4"),
]


@pytest.mark.parametrize("src,src_dims,dst,dst_dims", BETWEEN_WIDTHS)
def test_bitcast_convert_between_widths_is_little_endian(src, src_dims, dst, dst_dims, rng):
    shape = tuple(int(d) for d in src_dims.split(","))
    dtype = TYPES[src]
    x = float_specials(rng, shape, dtype) if src in FLOATS else random_bits(rng, shape, dtype)
    if dst == "f16":
        x = _quiet_16_bit_nans(np.ascontiguousarray(x).view(np.float16), "f16").view(dtype).reshape(shape)
    got = assert_same_bits(unary_module("bitcast-convert", src, src_dims, dst, dst_dims), [x])
    assert got[0].tobytes() == np.ascontiguousarray(x).tobytes()   # the same bytes, in order


def test_bitcast_convert_fused_with_shifts_and_a_transposed_result(rng):
    # The exponent field of every piece of a f64, through a fusion and a column-major output.
    text = """HloModule m
ENTRY main {
  x = f64[3,5] parameter(0)
  b = u16[3,5,4] bitcast-convert(x)
  s = u16[] constant(7)
  ss = u16[3,5,4] broadcast(s), dimensions={}
  r = u16[3,5,4] shift-right-logical(b, ss)
  ROOT t = u16[4,5,3]{0,1,2} transpose(r), dimensions={2,1,0}
}
"""
    assert_same_bits(text, [float_specials(rng, (3, 5), np.float64)])


# --- reduce-precision --------------------------------------------------------------------------------

FORMATS = [(5, 10), (8, 7), (8, 23), (4, 3), (11, 52), (6, 0), (2, 1), (10, 30)]


@pytest.mark.parametrize("dtype", list(FLOATS))
@pytest.mark.parametrize("exponent_bits,mantissa_bits", FORMATS)
def test_reduce_precision_every_float_type_and_format(dtype, exponent_bits, mantissa_bits, rng):
    x = float_specials(rng, (9, 13), FLOATS[dtype])
    attrs = f", exponent_bits={exponent_bits}, mantissa_bits={mantissa_bits}"
    assert_same_bits(unary_module("reduce-precision", dtype, "9,13", dtype, "9,13", attrs), [x])


def test_reduce_precision_rounds_ties_to_even(rng):
    # f32 values exactly halfway between two f16 neighbours, and one ulp either side
    base = rng.integers(0x3800, 0x4800, 64).astype(np.uint16).view(np.float16).astype(np.float32)
    half_ulp = np.spacing(base.astype(np.float16)).astype(np.float32) / 2
    x = np.concatenate([base + half_ulp, base + half_ulp + np.spacing(base), base + half_ulp - np.spacing(base)])
    got = assert_same_bits(unary_module("reduce-precision", "f32", "192", "f32", "192",
                                        ", exponent_bits=5, mantissa_bits=10"), [x])
    np.testing.assert_array_equal(got[0], x.astype(np.float16).astype(np.float32))   # NumPy rounds f16 to even


def test_reduce_precision_fused_after_a_multiply(rng):
    text = """HloModule m
ENTRY main {
  x = f32[4,33] parameter(0)
  two = f32[] constant(2)
  twos = f32[4,33] broadcast(two), dimensions={}
  m = f32[4,33] multiply(x, twos)
  ROOT r = f32[4,33] reduce-precision(m), exponent_bits=5, mantissa_bits=10
}
"""
    assert_same_bits(text, [float_specials(rng, (4, 33), np.float32)])


# --- rng-bit-generator ---------------------------------------------------------------------------------

def rng_module(algorithm: str, state_size: int, bits: str, dims: str, layout: str = "") -> str:
    return f"""HloModule r
ENTRY main {{
  s = u64[{state_size}] parameter(0)
  ROOT r = (u64[{state_size}], {bits}[{dims}]{layout}) rng-bit-generator(s), algorithm={algorithm}
}}
"""


def random_state(rng, size: int) -> np.ndarray:
    return rng.integers(0, 2**64, size, dtype=np.uint64, endpoint=False)


@pytest.mark.parametrize("algorithm", ["rng_default", "rng_philox"])
@pytest.mark.parametrize("state_size", [2, 3])
@pytest.mark.parametrize("bits,dims", [("u32", "3,4"), ("u32", "7"), ("s32", "2,3,5"), ("u64", "5"),
                                       ("s64", "2,2"), ("u32", ""), ("u64", "0,3"), ("u32", "1")])
def test_philox_bits_and_new_state(algorithm, state_size, bits, dims, rng):
    got = assert_same_bits(rng_module(algorithm, state_size, bits, dims), [random_state(rng, state_size)])
    assert got[0].shape == (state_size,)


@pytest.mark.parametrize("state_size", [2, 3])
def test_philox_counter_carries_into_its_high_word(state_size, rng):
    state = random_state(rng, state_size)
    state[1] = np.uint64(2**64 - 2)   # the low counter word wraps within the 5 blocks
    if state_size == 3:
        state[2] = np.uint64(2**64 - 1)   # and the high word wraps too
    got = assert_same_bits(rng_module("rng_philox", state_size, "u32", "5,4"), [state])
    assert got[0][1] == np.uint64(3)


@pytest.mark.parametrize("bits,dims", [("u32", "3,4"), ("u32", "5,3"), ("u32", "3,5,7"), ("u32", "7"), ("u32", ""),
                                       ("u64", "4,3"), ("s64", "5"), ("s32", "0,3"), ("u32", "1,1")])
def test_threefry_bits_and_new_state(bits, dims, rng):
    assert_same_bits(rng_module("rng_three_fry", 2, bits, dims), [random_state(rng, 2)])


@pytest.mark.parametrize("algorithm", ["rng_philox", "rng_three_fry"])
def test_rng_bits_in_a_column_major_layout(algorithm, rng):
    assert_same_bits(rng_module(algorithm, 2, "u32", "5,6", "{0,1}"), [random_state(rng, 2)])
