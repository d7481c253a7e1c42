"""Keys and random bits: the threefry2x32 hash, PRNGKey, split, fold_in and bits.

A key is a uint32[2] array, JAX's raw key. Every function here is written on pyxla.lax, so
it runs eagerly on concrete keys and traces into HLO on keys passed into `jit`, and both
give JAX's bits: JAX's threefry2x32 (20 rounds, its rotations and key schedule) with the
counters of `jax_threefry_partitionable=True`, JAX's default since 0.5.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.tracing import Tracer

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = np.uint32(0x1BD11BDA)
_U32 = np.dtype(np.uint32)
UINT_DTYPES: dict[int, np.dtype] = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32, 64: np.dtype(np.uint64)}


def dtype_of(x: Any) -> np.dtype:
    """The NumPy dtype of an array, tracer or scalar."""
    return x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, Tracer) else np.shape(x)


def canonical_shape(shape: Any) -> tuple[int, ...]:
    """A shape given as an int or a sequence of ints, as a tuple of non-negative ints."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    dims = tuple(operator.index(d) for d in dims)
    if any(d < 0 for d in dims):
        raise ValueError(f"a shape has non-negative dimensions, got {dims}")
    return dims


# --- the hash -------------------------------------------------------------------------------

def _rotate_left(x: Any, r: int) -> Any:
    return lax.bitwise_or(lax.shift_left(x, np.uint32(r)), lax.shift_right_logical(x, np.uint32(32 - r)))


def threefry2x32(k1: Any, k2: Any, x1: Any, x2: Any) -> tuple[Any, Any]:
    """Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as
    1, 2, 3", 2011) of the counter pair (x1, x2) under the key (k1, k2), elementwise.

    All four are uint32 and broadcast together; returns the two uint32 output words.
    Traced, the five groups of four rounds are one `fori_loop` (as JAX lowers it for
    CPUs), which keeps the program small; on concrete values they run unrolled.
    """
    ks = (k1, k2, lax.bitwise_xor(lax.bitwise_xor(k1, k2), _KS_PARITY))
    x1 = lax.add(x1, ks[0])
    x2 = lax.add(x2, ks[1])
    if not any(isinstance(v, Tracer) for v in (k1, k2, x1, x2)):
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                x1 = lax.add(x1, x2)
                x2 = lax.bitwise_xor(x1, _rotate_left(x2, r))
            x1 = lax.add(x1, ks[(i + 1) % 3])
            x2 = lax.add(lax.add(x2, ks[(i + 2) % 3]), np.uint32(i + 1))
        return x1, x2
    x1, x2 = _broadcast_pair(x1, x2)

    def group(i: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
        x1, x2, ka, kb, kc = state
        odd = lax.convert_element_type(lax.bitwise_and(i, 1), np.uint32)
        for even_r, odd_r in zip(*_ROTATIONS):
            r = lax.add(np.uint32(even_r), lax.mul(odd, np.uint32((odd_r - even_r) % 2**32)))
            x1 = lax.add(x1, x2)
            x2 = lax.bitwise_xor(x1, lax.bitwise_or(lax.shift_left(x2, r),
                                                    lax.shift_right_logical(x2, lax.sub(np.uint32(32), r))))
        x1 = lax.add(x1, ka)
        x2 = lax.add(lax.add(x2, kb), lax.convert_element_type(lax.add(i, 1), np.uint32))
        return x1, x2, kb, kc, ka

    x1, x2, *_ = lax.fori_loop(0, 5, group, (x1, x2, ks[1], ks[2], ks[0]))
    return x1, x2


def _broadcast_pair(a: Any, b: Any) -> tuple[Any, Any]:
    shape = np.broadcast_shapes(shape_of(a), shape_of(b))
    return tuple(v if shape_of(v) == shape else lax.broadcast_in_dim(v, shape, tuple(
        range(len(shape) - len(shape_of(v)), len(shape)))) for v in (a, b))


def iota_2x32(shape: tuple[int, ...]) -> tuple[Any, Any]:
    """The row-major index of each element of `shape` as a 64-bit counter: (high, low) words."""
    n = math.prod(shape)
    if n <= 2 ** 32:
        hi = lax.full(shape, 0, np.uint32)
        lo = lax.reshape(lax.iota(np.uint32, n), shape)
        return hi, lo
    idx = lax.reshape(lax.iota(np.uint64, n), shape)
    return (lax.convert_element_type(lax.shift_right_logical(idx, np.uint64(32)), np.uint32),
            lax.convert_element_type(idx, np.uint32))


# --- keys -----------------------------------------------------------------------------------

def check_key(name: str, key: Any) -> tuple[Any, Any]:
    """The two uint32 words of a single key."""
    if isinstance(key, (list, tuple)):
        key = np.asarray(key, np.uint32)
    if dtype_of(key) != _U32 or shape_of(key) != (2,):
        if shape_of(key)[-1:] == (2,) and dtype_of(key) == _U32:
            raise ValueError(f"{name} takes a single key, uint32[2], but was given keys of shape "
                             f"{shape_of(key)}; index them (keys[i]) or loop over them")
        raise TypeError(f"{name}: a key is a uint32[2] array from PRNGKey, split or fold_in; got "
                        f"{dtype_of(key)}{list(shape_of(key))}")
    return (lax.reshape(lax.slice(key, (0,), (1,)), ()), lax.reshape(lax.slice(key, (1,), (2,)), ()))


def _stack_words(b1: Any, b2: Any) -> Any:
    rank = len(shape_of(b1))
    return lax.concatenate([lax.expand_dims(b1, (rank,)), lax.expand_dims(b2, (rank,))], rank)


def PRNGKey(seed: Any) -> Any:
    """A key from an integer seed: uint32[2] = [0, seed mod 2**32].

    As JAX without `jax_enable_x64` (its default), a seed keeps its low 32 bits; a traced
    integer seed works too.
    """
    if isinstance(seed, Tracer):
        if seed.shape:
            raise TypeError(f"PRNGKey takes a scalar seed, got an array of shape {seed.shape}")
        if not np.issubdtype(seed.dtype, np.integer):
            raise TypeError(f"PRNGKey takes an integer seed, got {seed.dtype}")
        lo = lax.convert_element_type(seed, np.uint32)
        return _stack_words(lax.full((), 0, np.uint32), lo)
    if isinstance(seed, (bool, np.bool_)) or np.ndim(seed):
        raise TypeError(f"PRNGKey takes a scalar integer seed, got {seed!r}")
    arr = np.asarray(seed)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"PRNGKey takes an integer seed, got {seed!r}")
    return np.array([0, int(seed) & 0xFFFFFFFF], np.uint32)


def key(seed: Any) -> Any:
    """The same key as PRNGKey (pyxla has no typed key arrays; keys are uint32[2])."""
    return PRNGKey(seed)


def key_data(keys: Any) -> Any:
    """The uint32 words of keys: the keys themselves."""
    return keys


def wrap_key_data(key_bits_array: Any) -> Any:
    """Keys from their uint32 words: the words themselves."""
    return key_bits_array


def split(key: Any, num: int | Sequence[int] = 2) -> Any:
    """`num` new keys (or keys of shape `num` when it is a tuple), uint32[*num, 2]."""
    k1, k2 = check_key("split", key)
    shape = canonical_shape(num)
    b1, b2 = threefry2x32(k1, k2, *iota_2x32(shape))
    return _stack_words(b1, b2)


def fold_in(key: Any, data: Any) -> Any:
    """A new key from a key and a 32-bit integer (a step number, a device index)."""
    k1, k2 = check_key("fold_in", key)
    if shape_of(data):
        raise TypeError(f"fold_in takes a scalar, but was given an array of shape {shape_of(data)}")
    if isinstance(data, Tracer):
        if not np.issubdtype(data.dtype, np.integer):
            raise TypeError(f"fold_in takes integer data, got {data.dtype}")
        word = lax.convert_element_type(data, np.uint32)
    else:
        if not np.issubdtype(np.asarray(data).dtype, np.integer):
            raise TypeError(f"fold_in takes integer data, got {data!r}")
        word = np.uint32(int(data) & 0xFFFFFFFF)
    b1, b2 = threefry2x32(k1, k2, np.uint32(0), word)
    return _stack_words(b1, b2)


def random_bits(key: Any, bit_width: int, shape: tuple[int, ...]) -> Any:
    """Uniform bits of `shape` as unsigned integers of `bit_width` (8, 16, 32 or 64)."""
    k1, k2 = check_key("random_bits", key)
    if bit_width not in UINT_DTYPES:
        raise TypeError(f"random bits are 8, 16, 32 or 64 wide, not {bit_width}")
    b1, b2 = threefry2x32(k1, k2, *iota_2x32(shape))
    if bit_width == 64:
        hi = lax.convert_element_type(b1, np.uint64)
        return lax.bitwise_or(lax.shift_left(hi, np.uint64(32)), lax.convert_element_type(b2, np.uint64))
    bits = lax.bitwise_xor(b1, b2)
    return bits if bit_width == 32 else lax.convert_element_type(bits, UINT_DTYPES[bit_width])


def bits(key: Any, shape: Sequence[int] = (), dtype: Any = np.uint32) -> Any:
    """Uniform random bits: unsigned integers of `shape` and `dtype` (uint8 to uint64)."""
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.unsignedinteger):
        raise ValueError(f"bits takes an unsigned integer dtype, got {dt}")
    return random_bits(key, dt.itemsize * 8, canonical_shape(shape))
