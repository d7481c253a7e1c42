"""Numeric conventions of XLA on CPU that several op families share.

- f32/f64 arithmetic flushes subnormals: inputs are read as zero (DAZ) and subnormal
  results become signed zeros (FTZ). Bit operations (negate, abs, select, copies) keep them.
- f16 and bf16 arithmetic runs in f32 and is rounded back to the narrow type.
"""
from __future__ import annotations

import numpy as np

from ..types import ElementType

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
    if etype.is_float and etype.bits == 16:
        return np.dtype(np.float32)
    return etype.np_dtype


def widen(x: np.ndarray) -> np.ndarray:
    """A float operand as it takes part in arithmetic: f16/bf16 widened to f32, DAZ applied."""
    x = np.asarray(x)
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        if x.dtype.itemsize == 2:
            return x.astype(np.float32)
        return flush_denormals(x)
    return x


def narrow(x: np.ndarray, etype: ElementType) -> np.ndarray:
    """An arithmetic result stored as `etype`: FTZ for f32/f64, rounding for f16/bf16."""
    x = np.asarray(x)
    if etype.is_float:
        if etype.bits == 16:
            return x.astype(etype.np_dtype)
        return flush_denormals(x.astype(etype.np_dtype))
    return x.astype(etype.np_dtype)
