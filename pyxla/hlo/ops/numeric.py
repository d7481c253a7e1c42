"""Numeric conventions of XLA on CPU that several op families share.

- f32/f64 arithmetic flushes subnormals: inputs are read as zero (DAZ) and subnormal
  results become signed zeros (FTZ). Bit operations (negate, abs, select, copies) keep them.
- f16, bf16 and the 8- and 4-bit floats are storage types: arithmetic runs in f32 and is
  rounded back to the narrow type (ml_dtypes rounds f32 to the 8- and 4-bit floats as XLA
  does).
"""
from __future__ import annotations

import numpy as np

from ..types import BF16, F32, F64, ElementType, from_numpy_dtype, integer_limits

_TINY = {np.dtype(np.float32): np.finfo(np.float32).tiny, np.dtype(np.float64): np.finfo(np.float64).tiny}


def flush_denormals(x: np.ndarray) -> np.ndarray:
    """Subnormal f32/f64 values as signed zeros; other dtypes unchanged."""
    x = np.asarray(x)
    tiny = _TINY.get(x.dtype)
    if tiny is None:
        return x
    sub = (np.abs(x) < tiny) & (x != 0)
    if not sub.any():
        return x
    return np.where(sub, np.copysign(np.zeros((), x.dtype), x), x)


def compute_dtype(etype: ElementType) -> np.dtype:
    """The dtype XLA's CPU backend does arithmetic in for values of `etype`."""
    if etype.computes_in_f32:
        return np.dtype(np.float32)
    return etype.np_dtype


def is_float_array(x: np.ndarray) -> bool:
    """Whether x holds floats (ml_dtypes' float types are NumPy "V" kinds, not "f")."""
    return x.dtype.kind == "f" or (x.dtype.kind == "V" and from_numpy_dtype(x.dtype).is_float)


def widen(x: np.ndarray) -> np.ndarray:
    """A float operand as it takes part in arithmetic: narrow floats widened to f32, DAZ applied."""
    x = np.asarray(x)
    if is_float_array(x):
        if x.dtype.itemsize < 4:
            # f16 and 8-/4-bit float subnormals are normal f32 values; bf16 ones are f32
            # subnormals, which DAZ zeroes.
            return flush_denormals(x.astype(np.float32))
        return flush_denormals(x)
    return x


def narrow(x: np.ndarray, etype: ElementType) -> np.ndarray:
    """An arithmetic result stored as `etype`: FTZ for f32/f64, rounding for narrower floats."""
    x = np.asarray(x)
    if etype.is_float:
        if etype.computes_in_f32:
            # The f32 result is flushed before rounding (bf16 shares f32's exponent range).
            return flush_denormals(x.astype(np.float32)).astype(etype.np_dtype)
        return flush_denormals(x.astype(etype.np_dtype))
    return x.astype(etype.np_dtype)


# --- bit patterns ---------------------------------------------------------------------

def unsigned_bits(x: np.ndarray) -> np.ndarray:
    """The same memory read as unsigned integers of the element's width (no copy)."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def signed_bits(x: np.ndarray) -> np.ndarray:
    """The same memory read as signed (two's complement) integers of the element's width."""
    x = np.asarray(x)
    return x.view(np.dtype(f"i{x.dtype.itemsize}"))


# --- convert --------------------------------------------------------------------------

def convert_elements(x: np.ndarray, source: ElementType, target: ElementType) -> np.ndarray:
    """XLA CPU's `convert` of values of `source` to `target`.

    - to pred: x != 0 (NaN is true; an f32/f64 subnormal reads as zero: DAZ).
    - pred to a number: 0 or 1.
    - integer to integer: two's complement wrap or extension by the source's signedness.
    - integer to float: one rounding to nearest even; to bf16 and the 8- and 4-bit floats
      through f32, as XLA does (exact for every integer those types do not overflow at).
    - float to integer: truncation toward zero, saturating at the target's range, NaN -> 0.
    - float to float: see _float_to_float.
    """
    x = np.asarray(x)
    if source == target:
        return x
    if target.is_pred:
        return (widen(x) if source.is_float else x) != 0
    if source.is_pred:
        x = x.astype(np.uint8)
    if target.is_float:
        if source.is_float:
            return _float_to_float(x, source, target)
        if target == BF16 or target.bits < 16:
            return x.astype(np.float32).astype(target.np_dtype)
        return x.astype(target.np_dtype)
    if source.is_float:
        return _float_to_int_saturating(x, target)
    if target.bits < 8 or source.bits < 8:
        # ml_dtypes casts between the 2- and 4-bit integers and the others only through a
        # NumPy integer; int64 holds every value, so the wrap is the target's.
        x = x.astype(np.int64)
    return x.astype(target.np_dtype)


def _hardware_float_cast(x: np.ndarray, dtype) -> np.ndarray:
    """An f16/f32/f64 conversion instruction: DAZ on its input, FTZ on its output."""
    return flush_denormals(flush_denormals(x).astype(dtype))


def _float_to_float(x: np.ndarray, source: ElementType, target: ElementType) -> np.ndarray:
    """bf16 -> f32 and f32 -> bf16 are bit operations in XLA (they keep subnormals); the
    other conversions between f16, f32 and f64 are conversion instructions (DAZ/FTZ). bf16
    to or from anything but f32 goes through f32, so f64 -> bf16 rounds twice, as XLA does.

    The 8- and 4-bit floats convert through f32 too: to f32 exactly, from f32 with one
    rounding to nearest even (ml_dtypes; overflow -> inf where the type has one, NaN for the
    fn/fnuz types, the largest finite value for f4e2m1fn). From f64 they round once, as XLA
    and ml_dtypes' scalar conversion do: the f64 goes to f32 rounded to odd, which keeps
    the one rounding to nearest even that follows exact (f32 has 2 bits more than enough)."""
    if source == BF16 or source.bits < 16:
        x, source = x.astype(np.float32), F32
        if target == F32:
            return x
    if target == BF16 or target.bits < 16:
        if source == F64 and target != BF16:
            x = _f64_to_f32_round_to_odd(x)
        elif source != F32:
            x = _hardware_float_cast(x, np.float32)
        return x.astype(target.np_dtype)
    return _hardware_float_cast(x, target.np_dtype)


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """f64 values as f32 rounded toward zero, the last bit set when inexact (an overflow
    becomes f32's largest value, which is odd); NaN and exact values unchanged."""
    nearest = x.astype(np.float32)
    back = nearest.astype(np.float64)
    bits = nearest.view(np.uint32)
    toward_zero = np.where(np.abs(back) > np.abs(x), bits - np.uint32(1), bits)
    inexact = (back != x) & np.isfinite(x)
    return np.where(inexact, toward_zero | np.uint32(1), toward_zero).view(np.float32)


def _float_to_int_saturating(x: np.ndarray, target: ElementType) -> np.ndarray:
    least, greatest = integer_limits(target)
    v = x.astype(np.float64)   # exact for every float type
    # Values at or past a limit saturate. XLA compares with the limit rounded to the source
    # type (INT32_MAX as f32 is 2**31); no float lies between a limit and its rounding, so
    # comparing in f64 picks the same elements, and every value inside truncates into range.
    lo, hi = float(least), float(greatest)
    inside = (v > lo) & (v < hi)
    truncated = np.trunc(np.where(inside, v, 0.0)).astype(target.np_dtype)
    low = np.array(least, target.np_dtype)
    high = np.array(greatest, target.np_dtype)
    return np.where(v <= lo, low, np.where(v >= hi, high, truncated))   # NaN: neither, so 0
