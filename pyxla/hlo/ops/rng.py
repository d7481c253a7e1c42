"""rng-bit-generator: counter-based random bits from a u64 state, as XLA's expander makes them.

`rng-bit-generator(state), algorithm=A` returns (new state, bits). XLA rewrites it into
integer HLO (RngBitGeneratorExpander over xla/hlo/builder/lib/prng.cc); this file follows
that expansion word for word, so the bits are the ones XLA produces:

  Philox4x32-10 (rng_philox; rng_default on CPU). key = state[0] (low word k0, high
    word k1). The 128-bit counter is (low 64 = state[1], high 64 = state[0]) for a u64[2]
    state, (state[1], state[2]) for u64[3]. Block i encrypts counter + i into four u32
    words w0..w3; 32-bit outputs are w0 w1 w2 w3 of block 0, then of block 1, ...;
    64-bit outputs are (w0 | w1 << 32), (w2 | w3 << 32) per block. The new state is
    (key, counter + blocks) with the counter cut to the state's size.
  ThreeFry2x32-20 (rng_three_fry), u64[2] state = (key, counter). 64-bit outputs
    encrypt counter + linear index; 32-bit outputs split one even (else the largest)
    dimension into pairs, so element 2h + c of that dimension is word c of the pair
    at half-index h. The new state is (key, counter + pairs used).
"""
from __future__ import annotations

import zlib
from math import prod

import numpy as np

from ...errors import ShapeError
from ..attributes import SliceDim
from ..expansion import evaluate_expanded
from ..instruction import HloInstruction
from ..shape import ArrayShape, TupleShape
from ..types import F32, F64, U32, U64
from .registry import OpDef, register, require_declared

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def _u32(value: int) -> np.uint32:
    return np.uint32(value & MASK32)


def _split_u64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) 32-bit words of u64 values."""
    x = np.asarray(x, np.uint64)
    return x.astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)


def _join_u32(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return low.astype(np.uint64) | (high.astype(np.uint64) << np.uint64(32))


# --- the two block ciphers ---------------------------------------------------------------

PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)


@np.errstate(over="ignore")   # u32/u64 arithmetic wraps on purpose (warned on 0-d values)
def philox4x32(counter: tuple[np.ndarray, ...], key: tuple[int, int],
               rounds: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32 on four arrays of u32 counter words with a (k0, k1) key."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint32) for c in counter)
    k0, k1 = key
    m0, m1 = (np.uint64(m) for m in PHILOX_MULTIPLIERS)
    for _ in range(rounds):
        p0 = c0.astype(np.uint64) * m0
        p1 = c2.astype(np.uint64) * m1
        hi0, lo0 = _split_u64(p0)[::-1]
        hi1, lo1 = _split_u64(p1)[::-1]
        c0, c1, c2, c3 = hi1 ^ c1 ^ _u32(k0), lo1, hi0 ^ c3 ^ _u32(k1), lo0
        k0, k1 = k0 + PHILOX_WEYL[0], k1 + PHILOX_WEYL[1]
    return c0, c1, c2, c3


THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = 0x1BD11BDA


def _rotate_left(x: np.ndarray, distance: int) -> np.ndarray:
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


@np.errstate(over="ignore")
def threefry2x32(counter: tuple[np.ndarray, np.ndarray], key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds on two arrays of u32 counter words."""
    ks = (key[0] & MASK32, key[1] & MASK32, THREEFRY_PARITY ^ key[0] ^ key[1])
    x0 = np.asarray(counter[0], np.uint32) + _u32(ks[0])
    x1 = np.asarray(counter[1], np.uint32) + _u32(ks[1])
    for block in range(5):
        for distance in THREEFRY_ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, distance) ^ x0
        # Key injection after every four rounds.
        x0 = x0 + _u32(ks[(block + 1) % 3])
        x1 = x1 + _u32(ks[(block + 2) % 3] + block + 1)
    return x0, x1


# --- bit generators: state -> (new state, words of the requested shape) -----------------------

def _philox_bits(state: np.ndarray, dims: tuple[int, ...], bits: int):
    key = int(state[0])
    low = int(state[1])
    high = int(state[2]) if state.size >= 3 else key   # u64[2]: the state reversed is the counter
    count = prod(dims)
    words32 = count * (bits // 32)
    blocks = -(-words32 // 4)
    lows = np.uint64(low) + np.arange(blocks, dtype=np.uint64)     # wraps modulo 2^64
    highs = np.where(lows < np.uint64(low), np.uint64((high + 1) & MASK64), np.uint64(high))
    w = philox4x32(_split_u64(lows) + _split_u64(highs), (key & MASK32, key >> 32))
    if bits == 32:
        out = np.stack(w, axis=1).reshape(-1)
    else:
        out = np.stack([_join_u32(w[0], w[1]), _join_u32(w[2], w[3])], axis=1).reshape(-1)
    new_low = (low + blocks) & MASK64
    new_counter = [new_low] if state.size < 3 else [new_low, (high + (new_low < low)) & MASK64]
    return np.array([key] + new_counter, np.uint64), out[:count].reshape(dims)


def threefry_split_dim(dims: tuple[int, ...]) -> int:
    """The dimension XLA splits into pairs: the first even one, else the first largest."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _threefry_bits(state: np.ndarray, dims: tuple[int, ...], bits: int):
    key, counter = int(state[0]), int(state[1])
    key_words = (key & MASK32, key >> 32)
    if bits == 64:
        inputs = np.uint64(counter) + np.arange(prod(dims), dtype=np.uint64)
        x0, x1 = threefry2x32(_split_u64(inputs), key_words)
        return np.array([key, (counter + prod(dims)) & MASK64], np.uint64), _join_u32(x0, x1).reshape(dims)
    if not dims:
        x0, _ = threefry2x32(_split_u64(np.uint64(counter)), key_words)
        return np.array([key, (counter + 1) & MASK64], np.uint64), x0.reshape(())
    split = threefry_split_dim(dims)
    half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
    inputs = (np.uint64(counter) + np.arange(prod(half), dtype=np.uint64)).reshape(half)
    pair = threefry2x32(_split_u64(inputs), key_words)
    interleaved = np.stack(pair, axis=split + 1).reshape(dims[:split] + (2 * half[split],) + dims[split + 1:])
    out = interleaved[(slice(None),) * split + (slice(0, dims[split]),)]
    return np.array([key, (counter + prod(half)) & MASK64], np.uint64), out


# algorithm attribute -> (generator, the u64 state sizes it accepts)
ALGORITHMS = {
    "rng_default": (_philox_bits, (2, 3)),    # XLA CPU's default is Philox
    "rng_philox": (_philox_bits, (2, 3)),
    "rng_three_fry": (_threefry_bits, (2,)),
}


def rng_algorithm(attrs: dict) -> str:
    name = attrs.get("algorithm", "rng_default")
    if name not in ALGORITHMS:
        raise ShapeError(f"rng-bit-generator algorithm={name} is unknown; "
                         f"known: {', '.join(ALGORITHMS)}")
    return name


def _rng_shape(operands, attrs, declared):
    (state,) = operands
    name = rng_algorithm(attrs)
    sizes = ALGORITHMS[name][1]
    if not (isinstance(state, ArrayShape) and state.dtype == U64 and state.rank == 1
            and state.dims[0] in sizes):
        want = " or ".join(f"u64[{n}]" for n in sizes)
        raise ShapeError(f"rng-bit-generator with algorithm={name} needs a {want} state, "
                         f"got {state.to_text(False)}")
    declared = require_declared("rng-bit-generator", declared)
    if not (isinstance(declared, TupleShape) and len(declared.elements) == 2
            and isinstance(declared.elements[1], ArrayShape)):
        raise ShapeError("rng-bit-generator result must be a tuple (state, bits array), "
                         f"declared {declared.to_text(False)}")
    new_state, bits = declared.elements
    if not new_state.compatible(state):
        raise ShapeError(f"rng-bit-generator returns its state as {state.to_text(False)}, "
                         f"declared {new_state.to_text(False)}")
    if not bits.dtype.is_integral:
        raise ShapeError(f"rng-bit-generator produces integer bits, declared {bits.to_text(False)}")
    return TupleShape((state.without_layout(), bits.without_layout()))


def _rng_evaluate(instr, operands, ctx):
    (state,) = operands
    bits_shape = instr.shape.elements[1]
    name = rng_algorithm(instr.attrs)
    width = bits_shape.dtype.bits
    if width not in (32, 64):
        raise NotImplementedError(f"rng-bit-generator algorithm={name} producing {width}-bit "
                                  f"{bits_shape.dtype} (XLA's generators make 32- and 64-bit words)")
    new_state, words = ALGORITHMS[name][0](np.asarray(state, np.uint64), bits_shape.dims, width)
    # (np.ascontiguousarray would make a rank-0 result 1-d)
    return new_state, np.asarray(words, order="C").view(bits_shape.dtype.np_dtype)


register(OpDef("rng-bit-generator", "opaque", _rng_shape, _rng_evaluate, arity=1,
               optional_attrs=("algorithm",),
               doc="Random bits and the advanced state (Philox4x32-10 or Threefry2x32)."))


# --- rng: a distribution's values, from rng-bit-generator --------------------------------------

# rng(a, b), distribution=rng_uniform|rng_normal: values of the instruction's shape, uniform in
# [a, b) or normal with mean a (mu) and standard deviation b (sigma); a and b are scalars of
# the result's element type. XLA's RngExpander draws them from a bit generator seeded by the
# module's configuration; pyxla seeds a Philox state from the instruction's name, so a module
# gives the same values on every run and on every backend, and two rng instructions of one
# module draw different values.
#   uniform float: the top mantissa bits of a word, as [1, 2) - 1, scaled to [a, b) (f16 and
#     bf16 through f32); an integer: a + (word mod (b - a)), for 32- and 64-bit integers.
#   normal: Box-Muller, sqrt(-2 log(1 - u1)) cos(2 pi u2) from two uniforms per element.
DISTRIBUTIONS = ("rng_uniform", "rng_normal")
_RNG_SEED = 0x5059584C41524E47   # "PYXLARNG"


def _rng_distribution_shape(operands, attrs, declared):
    result = require_declared("rng", declared)
    if not isinstance(result, ArrayShape):
        raise ShapeError(f"rng makes an array, declared {result.to_text(False)}")
    distribution = attrs.get("distribution")
    if distribution not in DISTRIBUTIONS:
        raise ShapeError(f"rng needs distribution= one of {', '.join(DISTRIBUTIONS)}, got {distribution}")
    for what, s in zip(("a", "b"), operands):
        if not (isinstance(s, ArrayShape) and s.rank == 0 and s.dtype == result.dtype):
            raise ShapeError(f"rng's {what} must be a {result.dtype}[] scalar, got {s.to_text(False)}")
    dtype = result.dtype
    if distribution == "rng_normal" and not dtype.is_float:
        raise ShapeError(f"rng_normal makes floating-point values, declared {dtype}")
    if not (dtype.is_float or (dtype.is_integral and dtype.bits in (32, 64))):
        raise ShapeError(f"rng_uniform makes floats or 32- and 64-bit integers, declared {dtype}")
    return result.without_layout()


def _random_words(instr, emit, dims: tuple[int, ...], bits: int):
    """Random unsigned words of `dims` from a Philox state seeded by the instruction's name."""
    words = ArrayShape(U32 if bits == 32 else U64, dims)
    seed = np.array([_RNG_SEED, zlib.crc32(instr.name.encode()) << 32], np.uint64)
    state_shape = ArrayShape(U64, (2,))
    state = emit.comp.add_instruction(HloInstruction(emit.fresh_name("constant"), "constant", state_shape,
                                                     literal=seed))
    pair = emit.op("rng-bit-generator", state, shape=TupleShape((state_shape, words)), algorithm="rng_philox")
    return emit.op("get-tuple-element", pair, shape=words, index=1)


def _unit_floats(emit, words):
    """Uniform floats in [0, 1) from unsigned words: the top mantissa bits as [1, 2) - 1."""
    shape = words.array_shape
    wide = shape.dtype.bits == 64
    mantissa = 52 if wide else 23
    ftype = F64 if wide else F32
    top = emit.binary("shift-right-logical", words, emit.constant(shape.dtype.bits - mantissa, shape))
    one = emit.constant(0x3FF0000000000000 if wide else 0x3F800000, shape)
    floats = emit.op("bitcast-convert", emit.binary("or", top, one), shape=shape.with_dtype(ftype))
    return emit.binary("subtract", floats, emit.constant(1.0, floats.array_shape))


def _expand_rng(instr, emit):
    a, b = instr.operands
    result = instr.array_shape
    dtype, dims = result.dtype, result.dims
    if not dtype.is_float:
        return _uniform_integers(instr, emit, a, b)
    bits = 64 if dtype.bits == 64 else 32
    if instr.attrs["distribution"] == "rng_uniform":
        u = _unit_floats(emit, _random_words(instr, emit, dims, bits))
        lo, hi = (emit.op("convert", v, shape=ArrayShape(u.array_shape.dtype, ())) for v in (a, b))
        lo, hi = (emit.op("broadcast", v, shape=u.array_shape, dimensions=()) for v in (lo, hi))
        value = emit.binary("add", lo, emit.binary("multiply", emit.binary("subtract", hi, lo), u))
        value = emit.unary("convert", value, dtype)
        lo, hi = (emit.op("broadcast", v, shape=result, dimensions=()) for v in (a, b))
        return emit.select(emit.compare("LT", value, hi), value, lo)   # rounded up to b: a
    u = _unit_floats(emit, _random_words(instr, emit, (2, *dims), bits))
    half = u.array_shape.dims[1:]
    u1, u2 = (emit.op("reshape", emit.op("slice", u, shape=ArrayShape(u.array_shape.dtype, (1, *half)),
                                         slice=(SliceDim(k, k + 1),) + tuple(SliceDim(0, d) for d in half)),
                      shape=ArrayShape(u.array_shape.dtype, half)) for k in (0, 1))
    ones = emit.constant(1.0, u1.array_shape)
    radius = emit.unary("sqrt", emit.binary("multiply", emit.constant(-2.0, u1.array_shape),
                                            emit.unary("log", emit.binary("subtract", ones, u1))))
    angle = emit.binary("multiply", emit.constant(2 * np.pi, u2.array_shape), u2)
    z = emit.unary("convert", emit.binary("multiply", radius, emit.unary("cosine", angle)), dtype)
    mu, sigma = (emit.op("broadcast", v, shape=result, dimensions=()) for v in (a, b))
    return emit.binary("add", mu, emit.binary("multiply", sigma, z))


def _uniform_integers(instr, emit, a, b):
    result = instr.array_shape
    words = _random_words(instr, emit, result.dims, result.dtype.bits)
    unsigned = words.array_shape.dtype
    lo, hi = (emit.op("broadcast", v, shape=result, dimensions=()) for v in (a, b))
    span = emit.binary("subtract", hi, lo)      # b - a, modulo 2^bits: the span as unsigned
    if not result.dtype.is_unsigned:
        span = emit.op("bitcast-convert", span, shape=result.with_dtype(unsigned))
    offset = emit.binary("remainder", words, span)
    if not result.dtype.is_unsigned:
        offset = emit.op("bitcast-convert", offset, shape=result)
    return emit.binary("add", lo, offset)


register(OpDef("rng", "opaque", _rng_distribution_shape, evaluate_expanded, arity=2,
               required_attrs=("distribution",), side_effects=True,
               doc="Random values of a distribution (uniform in [a, b), or normal(mu, sigma)).",
               extra={"expand": _expand_rng}))
