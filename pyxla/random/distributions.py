"""Samplers: uniform, normal, truncated_normal, bernoulli, randint, permutation, choice,
categorical and gumbel, each JAX's algorithm on pyxla.lax and pyxla.numpy, so a key and
a shape give JAX's values, eagerly and inside `jit`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from .. import lax
from .. import numpy as pnp
from ..frontend.tracing import Tracer
from ..hlo.types import from_numpy_dtype
from .fma import fma
from .keys import UINT_DTYPES, canonical_shape, dtype_of, random_bits, shape_of, split

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _float_dtype(name: str, dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if not from_numpy_dtype(dt).is_float:
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {dt}")
    return dt


def _int_dtype(name: str, dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if not from_numpy_dtype(dt).is_integral:
        raise TypeError(f"{name} only accepts integer dtypes, got {dt}")
    return dt


def _check_shape(name: str, shape: tuple[int, ...], *param_shapes: tuple[int, ...]) -> None:
    if param_shapes:
        try:
            full = np.broadcast_shapes(shape, *param_shapes)
        except ValueError:
            full = None
        if full != shape:
            raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape argument, and "
                             f"the result of broadcasting the shapes must equal the shape argument, but got "
                             f"parameter shapes {list(param_shapes)} for shape argument {shape}.")


def _convert(x: Any, dtype: np.dtype) -> Any:
    """`x` (an array, a tracer or a Python number) as `dtype`."""
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else lax.convert_element_type(x, dtype)
    return np.asarray(x).astype(dtype)


def _bits_of(value: float, dtype: np.dtype) -> Any:
    """The bit pattern of `value` in `dtype`, as the unsigned integer of its width."""
    return np.array(value, dtype).view(UINT_DTYPES[dtype.itemsize * 8])


def _nextafter(x: Any, up: bool) -> Any:
    """The next representable float after `x` towards +inf (`up`) or -inf; NaN stays NaN and
    an infinity in that direction stays."""
    dt = dtype_of(x)
    udt = UINT_DTYPES[dt.itemsize * 8]
    zero = np.zeros((), dt)
    b = lax.bitcast_convert_type(x, udt)
    away = lax.add(b, udt.type(1))
    toward = lax.sub(b, udt.type(1))
    moved = lax.select(lax.gt(x, zero) if up else lax.lt(x, zero), away, toward)
    smallest = udt.type(1 if up else (1 << (dt.itemsize * 8 - 1)) | 1)   # the denormal next to 0
    moved = lax.select(lax.eq(x, zero), lax.full_like(b, smallest), moved)
    out = lax.bitcast_convert_type(moved, dt)
    limit = np.array(np.inf if up else -np.inf, dt)
    keep = lax.bitwise_or(lax.ne(x, x), lax.eq(x, limit))
    return lax.select(keep, x, out)


# --- uniform floats ---------------------------------------------------------------------------

def uniform(key: Any, shape: Sequence[int] = (), dtype: Any = np.float32, minval: Any = 0.0,
            maxval: Any = 1.0) -> Any:
    """Uniform floats in [minval, maxval) of `shape` and `dtype` (a float dtype).

    JAX's bit construction: the top mantissa bits of random bits under the exponent of 1.0
    give a float in [1, 2); minus 1, scaled and shifted, and clamped below at minval.
    """
    dt = _float_dtype("uniform", dtype)
    shape = canonical_shape(shape)
    minval = _convert(minval, dt)
    maxval = _convert(maxval, dt)
    _check_shape("uniform", shape, shape_of(minval), shape_of(maxval))
    info = ml_dtypes.finfo(dt)
    nbits, nmant = int(info.bits), int(info.nmant)
    if nbits not in (8, 16, 32, 64):
        raise TypeError(f"uniform only accepts 8-, 16-, 32- or 64-bit dtypes, got {dt}")
    rng_bits = 8 if nmant < 8 else nbits
    udt = UINT_DTYPES[nbits]
    bits = random_bits(key, rng_bits, shape)
    if rng_bits != nbits:
        bits = lax.convert_element_type(bits, udt)
    float_bits = lax.bitwise_or(lax.shift_right_logical(bits, udt.type(rng_bits - nmant)), _bits_of(1.0, dt))
    floats = lax.sub(lax.bitcast_convert_type(float_bits, dt), np.array(1.0, dt))
    span = lax.sub(maxval, minval)
    if dt in (_F32, _F64) and not _scales_exactly(span, info):
        scaled = fma(floats, span, minval)   # one rounding, as JAX's compiled multiply-add
    else:
        scaled = lax.add(lax.mul(floats, span), minval)
    return lax.max(minval, scaled)


def _scales_exactly(span: Any, info: Any) -> bool:
    """Whether `span` is known to be 0 or powers of two large enough to multiply uniform's
    floats (multiples of 2**-nmant in [0, 1)) exactly, so the multiply-add rounds once anyway."""
    if isinstance(span, Tracer):
        return False
    mant, exp = np.frexp(np.asarray(span, np.float64))   # span = mant * 2**exp, |mant| in [0.5, 1)
    power_of_two = (np.abs(mant) == 0.5) & (exp - 1 - int(info.nmant) >= int(info.minexp))
    return bool(np.all((mant == 0) | power_of_two))


def _lower_than_minus_one(dt: np.dtype) -> Any:
    """nextafter(-1, 0) in `dt`: the float just above -1."""
    udt = UINT_DTYPES[dt.itemsize * 8]
    return (_bits_of(-1.0, dt) - udt.type(1)).view(dt)


def normal(key: Any, shape: Sequence[int] = (), dtype: Any = np.float32) -> Any:
    """Standard normal floats: sqrt(2) * erf_inv(u) with u uniform in (-1, 1), as JAX."""
    dt = _float_dtype("normal", dtype)
    shape = canonical_shape(shape)
    u = uniform(key, shape, dt, _lower_than_minus_one(dt), 1.0)
    return lax.mul(np.array(np.sqrt(2), dt), lax.erf_inv(u))


def truncated_normal(key: Any, lower: Any, upper: Any, shape: Sequence[int] | None = None,
                     dtype: Any = np.float32) -> Any:
    """Standard normal floats conditioned on lower < x < upper (bounds broadcast with shape):
    the inverse CDF of a uniform between erf(lower/sqrt 2) and erf(upper/sqrt 2)."""
    dt = _float_dtype("truncated_normal", dtype)
    lower = _convert(lower, dt)
    upper = _convert(upper, dt)
    if shape is None:
        shape = np.broadcast_shapes(shape_of(lower), shape_of(upper))
    else:
        shape = canonical_shape(shape)
        _check_shape("truncated_normal", shape, shape_of(lower), shape_of(upper))
    sqrt2 = np.array(np.sqrt(2), dt)
    a = lax.erf(lax.div(lower, sqrt2))
    b = lax.erf(lax.div(upper, sqrt2))
    u = uniform(key, shape, dt, minval=a, maxval=b)
    out = lax.mul(sqrt2, lax.erf_inv(u))
    return lax.min(lax.max(out, _nextafter(lower, True)), _nextafter(upper, False))


# --- discrete ---------------------------------------------------------------------------------

def bernoulli(key: Any, p: Any = 0.5, shape: Sequence[int] | None = None, mode: str = "low") -> Any:
    """Booleans that are True with probability `p` (broadcast with `shape`; default p's shape).

    A Python float `p` samples in float32 as in JAX; an array `p` in its own float dtype.
    `mode="high"` draws two uniforms per value, for p below about 1e-7.
    """
    if mode not in ("high", "low"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    if isinstance(p, float) and not isinstance(p, np.generic):
        p = np.float32(p)
    elif isinstance(p, Tracer) and p.weak and from_numpy_dtype(p.dtype).is_float:
        p = lax.convert_element_type(p, np.float32)   # a Python float passed into jit
    dt = dtype_of(p)
    if not from_numpy_dtype(dt).is_float:
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dt}.")
    if shape is None:
        shape = shape_of(p)
    else:
        shape = canonical_shape(shape)
        _check_shape("bernoulli", shape, shape_of(p))
    if mode == "high":
        u = uniform(key, (2, *shape), dt)
        u1 = lax.reshape(lax.slice_in_dim(u, 0, 1), shape)
        u2 = lax.reshape(lax.slice_in_dim(u, 1, 2), shape)
        u2 = lax.mul(u2, np.array(2.0 ** -int(ml_dtypes.finfo(dt).nmant), dt))
        return lax.lt(u2, lax.sub(p, u1))
    return lax.lt(uniform(key, shape, dt), p)


def _clip_to(val: Any, dtype: np.dtype) -> Any:
    """Integer `val` converted to `dtype`, clipped to its range instead of wrapping."""
    vdt = dtype_of(val)
    vi, di = np.iinfo(vdt), np.iinfo(dtype)
    lo = np.array(max(vi.min, di.min), vdt)
    hi = np.array(min(vi.max, di.max), vdt)
    return lax.convert_element_type(lax.clamp(lo, val, hi), dtype)


def _int_operand(x: Any) -> Any:
    """An integer bound: Python ints as int64 (wide enough to clip), floats truncated to int."""
    if isinstance(x, Tracer):
        return x if from_numpy_dtype(x.dtype).is_integral else lax.convert_element_type(x, np.int64)
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)
    elif isinstance(x, int):
        arr = np.asarray(x, np.int64)
    return arr


def randint(key: Any, shape: Sequence[int], minval: Any, maxval: Any, dtype: Any = np.int32) -> Any:
    """Uniform integers in [minval, maxval) (bounds broadcast with `shape`), JAX's way: two
    words of random bits per value reduced modulo the span (unbiased for power-of-two spans).
    8- and 16-bit dtypes sample in int32, as JAX does."""
    dt = _int_dtype("randint", dtype)
    shape = canonical_shape(shape)
    minval = _int_operand(minval)
    maxval = _int_operand(maxval)
    if dt.itemsize < 4:
        info = np.iinfo(dt)
        minval = lax.clamp(np.int32(info.min), lax.convert_element_type(minval, np.int32), np.int32(info.max))
        maxval = lax.clamp(np.int32(info.min), lax.convert_element_type(maxval, np.int32), np.int32(info.max + 1))
        return lax.convert_element_type(_randint(key, shape, minval, maxval, np.dtype(np.int32)), dt)
    return _randint(key, shape, minval, maxval, dt)


def _randint(key: Any, shape: tuple[int, ...], minval: Any, maxval: Any, dt: np.dtype) -> Any:
    _check_shape("randint", shape, shape_of(minval), shape_of(maxval))
    vdt = dtype_of(maxval)
    maxval_out_of_range = lax.gt(maxval, _clip_to(np.array(np.iinfo(dt).max, dt), vdt))
    minval = _clip_to(minval, dt)
    maxval = _clip_to(maxval, dt)
    nbits = dt.itemsize * 8
    udt = UINT_DTYPES[nbits]
    keys = split(key)
    higher_bits = random_bits(lax.index_in_dim(keys, 0, keepdims=False), nbits, shape)
    lower_bits = random_bits(lax.index_in_dim(keys, 1, keepdims=False), nbits, shape)
    span = lax.convert_element_type(lax.sub(maxval, minval), udt)
    # maxval <= minval gives minval; a maxval past the dtype's range widens the span by one
    span = lax.select(lax.le(maxval, minval), lax.full_like(span, 1), span)
    span = lax.select(lax.bitwise_and(maxval_out_of_range, lax.gt(maxval, minval)),
                      lax.add(span, udt.type(1)), span)
    # (hi * 2**nbits + lo) mod span, with 2**nbits mod span as ((2**(nbits/2) mod span)^2) mod span
    multiplier = lax.rem(lax.full_like(span, 2 ** (nbits // 2)), span)
    multiplier = lax.rem(lax.mul(multiplier, multiplier), span)
    offset = lax.add(lax.mul(lax.rem(higher_bits, span), multiplier), lax.rem(lower_bits, span))
    offset = lax.rem(offset, span)
    return lax.add(minval, lax.convert_element_type(offset, dt))


def _shuffle(key: Any, x: Any, axis: int) -> Any:
    """x sorted along `axis` by random 32-bit keys, in rounds enough to make ties unlikely."""
    size = math.prod(shape_of(x))
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        keys = split(key)
        key = lax.index_in_dim(keys, 0, keepdims=False)
        sort_keys = random_bits(lax.index_in_dim(keys, 1, keepdims=False), 32, shape_of(x))
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
    """A random permutation of range(x) (an int gives int32 values, as JAX), or of the
    array `x` along `axis` (`independent=True`: each slice along `axis` on its own)."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    rank = len(shape_of(x))
    if rank == 0:
        if isinstance(x, Tracer) or not np.issubdtype(np.asarray(x).dtype, np.integer):
            raise TypeError("x must be a concrete integer or at least 1-dimensional")
        return _shuffle(key, lax.iota(np.int32, int(x)), 0)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"axis {axis} is out of bounds for an array of rank {rank}")
    if independent or rank == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, lax.iota(np.int32, shape_of(x)[axis]), 0)
    return pnp.take(x, ind, axis=axis)


def choice(key: Any, a: Any, shape: Sequence[int] = (), replace: bool = True, p: Any = None,
           axis: int = 0) -> Any:
    """A random sample of `shape` from the array `a` along `axis` (or from range(a) for an
    int), with or without replacement, uniform or with probabilities `p`."""
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of choice must be a sequence, got {shape}")
    shape = canonical_shape(shape)
    arr = a if isinstance(a, Tracer) else np.asarray(a)
    rank = len(shape_of(arr))
    if rank == 0:
        if isinstance(a, Tracer):
            raise TypeError("choice needs a concrete integer `a` or an array")
        n_inputs = int(a)
    else:
        axis = axis + rank if axis < 0 else axis
        n_inputs = shape_of(arr)[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return pnp.zeros(shape, dtype=np.int32 if rank == 0 else dtype_of(arr))
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size {n_inputs}) "
                         "when 'replace=False'")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if rank == 0 else pnp.take(arr, ind, axis=axis)
        else:
            perm = permutation(key, n_inputs if rank == 0 else arr, axis)
            result = lax.slice_in_dim(perm, 0, n_draws, axis=0 if rank == 0 else axis)
    else:
        if shape_of(p) != (n_inputs,):
            raise ValueError(f"p must be None or a 1D vector with the same size as a.shape[axis]. p has shape "
                             f"{shape_of(p)} and a.shape[axis] is {n_inputs}.")
        p_arr = p if isinstance(p, Tracer) else np.asarray(p)
        if not from_numpy_dtype(dtype_of(p_arr)).is_float:
            p_arr = lax.convert_element_type(p_arr, np.float32)
        pdt = dtype_of(p_arr)
        if replace:
            p_cuml = lax.cumsum(p_arr, 0)
            total = lax.reshape(lax.slice_in_dim(p_cuml, n_inputs - 1, n_inputs), ())
            r = lax.mul(total, lax.sub(np.array(1, pdt), uniform(key, shape, pdt)))
            ind = lax.convert_element_type(pnp.searchsorted(p_cuml, r), np.int32)
        else:
            g = lax.add(gumbel(key, (n_inputs,), pdt), lax.log(p_arr))
            ind = lax.top_k(g, n_draws)[1]
        result = ind if rank == 0 else pnp.take(arr, ind, axis=axis)
    if rank == 0:
        return lax.reshape(result, shape)
    out_shape = shape_of(arr)[:axis] + shape + shape_of(arr)[axis + 1:]
    return lax.reshape(result, out_shape)


# --- Gumbel and categorical -------------------------------------------------------------------

def gumbel(key: Any, shape: Sequence[int] = (), dtype: Any = np.float32, mode: str = "low") -> Any:
    """Standard Gumbel floats, -log(-log(u)); `mode="high"` builds u from two uniforms so the
    tail reaches further (about 32 instead of 16 in float32)."""
    dt = _float_dtype("gumbel", dtype)
    shape = canonical_shape(shape)
    info = ml_dtypes.finfo(dt)
    if mode == "low":
        u = uniform(key, shape, dt, minval=float(info.tiny), maxval=1.0)
        return lax.neg(lax.log(lax.neg(lax.log(u))))
    if mode != "high":
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    hl = uniform(key, (2, *shape), dt)
    high = lax.reshape(lax.slice_in_dim(hl, 0, 1), shape)
    low = lax.reshape(lax.slice_in_dim(hl, 1, 2), shape)
    small = lax.add(lax.add(high, lax.mul(np.array(2.0 ** -int(info.nmant), dt), low)), np.array(info.tiny, dt))
    x = lax.select(lax.ge(high, np.array(0.5, dt)), high, small)
    return lax.neg(lax.log(lax.neg(lax.log1p(lax.neg(x)))))


def categorical(key: Any, logits: Any, axis: int = -1, shape: Sequence[int] | None = None,
                replace: bool = True, mode: str = "low") -> Any:
    """Indices (int32) drawn from softmax(logits) along `axis` by the Gumbel-max trick (with
    `replace=False`, Gumbel top-k: distinct indices along the leading sample dimensions).

    The result has `shape`, which ends in the batch shape (logits' shape without `axis`);
    by default it is that batch shape.
    """
    if not isinstance(logits, Tracer):
        logits = np.asarray(logits)
        if not from_numpy_dtype(logits.dtype).is_float:
            logits = logits.astype(np.float32)
    lshape = shape_of(logits)
    rank = len(lshape)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"axis {axis} is out of bounds for logits of rank {rank}")
    batch_shape = lshape[:axis] + lshape[axis + 1:]
    if shape is None:
        shape = batch_shape
    else:
        shape = canonical_shape(shape)
        _check_shape("categorical", shape, batch_shape)
    prefix = shape[:len(shape) - len(batch_shape)]
    dt = dtype_of(logits)
    if replace:
        neg_axis = axis - rank
        logits_shape = list(shape[len(shape) - len(batch_shape):])
        logits_shape.insert(neg_axis % rank, lshape[neg_axis])
        full_shape = (*prefix, *logits_shape)
        noisy = lax.add(gumbel(key, full_shape, dt, mode=mode),
                        lax.expand_dims(logits, tuple(range(len(prefix)))))
        return lax.argmax(noisy, len(full_shape) + neg_axis, np.int32)
    noisy = lax.add(logits, gumbel(key, lshape, dt, mode=mode))
    k = math.prod(prefix)
    if k > lshape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number of categories "
                         f"({lshape[axis]}).")
    _, indices = lax.top_k(pnp.moveaxis(noisy, axis, -1), k)
    dimensions = (len(batch_shape), *range(len(batch_shape)))
    return lax.reshape(indices, shape, dimensions)
