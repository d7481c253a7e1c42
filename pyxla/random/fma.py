"""Fused multiply-add, a*b + c rounded once, written on lax's elementwise operations.

XLA's CPU and GPU compilers contract a multiply feeding an add into one FMA instruction,
so JAX's `uniform` computes `floats * (maxval - minval) + minval` with a single rounding
(on every host with FMA). HLO has no FMA operation, so pyxla gets the same bits with
error-free transformations:

- float32: the product of two float32 is exact in float64; the float64 sum is rounded
  to odd, and rounding that to float32 is then the correctly rounded result (float64 has
  more than 24 + 2 bits).
- float64: Dekker's exact product (Veltkamp splitting) and Knuth's TwoSum give a*b + c as
  three doubles, and Boldo and Melquiond's rounding to odd of the small part gives the
  correctly rounded sum ("Emulation of FMA and correctly rounded sums: proved
  algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).

Exact while nothing overflows or underflows, which holds for uniform's operands; a float64
product that overflows falls back to a*b + c rounded twice.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import lax

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """(s, e) with s = a + b rounded and s + e = a + b exactly (Knuth)."""
    s = lax.add(a, b)
    bb = lax.sub(s, a)
    e = lax.add(lax.sub(a, lax.sub(s, bb)), lax.sub(b, bb))
    return s, e


def add_round_to_odd(a: Any, b: Any, dtype: np.dtype) -> Any:
    """a + b rounded to odd: exact sums as they are; an inexact one to whichever of its two
    neighbouring floats has an odd last mantissa bit."""
    s, e = two_sum(a, b)
    udt = np.dtype(np.uint64) if dtype == _F64 else np.dtype(np.uint32)
    bits = lax.bitcast_convert_type(s, udt)
    zero = np.zeros((), dtype)
    even = lax.eq(lax.bitwise_and(bits, udt.type(1)), udt.type(0))
    inexact = lax.bitwise_and(lax.ne(e, zero), lax.is_finite(s))
    away = lax.eq(lax.gt(e, zero), lax.gt(s, zero))   # the exact sum lies further from zero than s
    moved = lax.select(away, lax.add(bits, udt.type(1)), lax.sub(bits, udt.type(1)))
    bits = lax.select(lax.bitwise_and(inexact, even), moved, bits)
    return lax.bitcast_convert_type(bits, dtype)


def _split(a: Any) -> tuple[Any, Any]:
    """Veltkamp's split of a double into two 26-bit halves, a = hi + lo."""
    t = lax.mul(a, np.float64(2.0 ** 27 + 1))
    hi = lax.sub(t, lax.sub(t, a))
    return hi, lax.sub(a, hi)


def two_product(a: Any, b: Any) -> tuple[Any, Any]:
    """(p, e) with p = a*b rounded and p + e = a*b exactly (Dekker), for doubles."""
    p = lax.mul(a, b)
    ah, al = _split(a)
    bh, bl = _split(b)
    e = lax.add(lax.add(lax.add(lax.sub(lax.mul(ah, bh), p), lax.mul(ah, bl)), lax.mul(al, bh)), lax.mul(al, bl))
    return p, e


def fma(a: Any, b: Any, c: Any) -> Any:
    """a*b + c with one rounding, for float32 and float64 operands of one dtype (broadcast)."""
    dtype = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
    if dtype == _F32:
        wide = [lax.convert_element_type(v, _F64) for v in (a, b, c)]
        return lax.convert_element_type(add_round_to_odd(lax.mul(wide[0], wide[1]), wide[2], _F64), _F32)
    if dtype != _F64:
        raise TypeError(f"fma emulates float32 and float64, not {dtype}")
    ph, pl = two_product(a, b)
    th, tl = two_sum(c, ph)
    out = lax.add(th, add_round_to_odd(tl, pl, _F64))
    # an infinite or overflowing product leaves the error terms NaN: fall back to a*b + c
    return lax.select(lax.is_finite(out), out, lax.add(ph, c))
