"""Conversions between f32 and the 8- and 4-bit floats, as bit manipulation in LLVM IR.

Those types are stored one per byte and computed in f32 (llvm/ir_types.py). Both directions are
branch-free integer arithmetic and selects on each element, so loops over them vectorise,
and no library is called. Every type is described by its FloatFormat (hlo/types.py), and the
results are ml_dtypes' bit for bit (which is XLA's convert):

- f32 -> narrow: one rounding to nearest even, the target's subnormals included. A value
  past the largest finite one becomes inf (IEEE-like types), NaN (f8e4m3fn: its NaN is the
  pattern after the largest value; fnuz types: 0x80), or the largest value (f4e2m1fn, which
  has neither); inf and NaN become what overflow gives, NaN of an IEEE-like type the quiet
  NaN of its sign, and NaN of f4e2m1fn a zero of the opposite sign (as ml_dtypes does).
  The fnuz types have no negative zero: a result of zero is +0.
- narrow -> f32: exact; a NaN becomes the quiet f32 NaN of its sign (fnuz: negative).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.types import FloatFormat

_I32 = ir.IntType(32)
_F32 = ir.FloatType()

# f32's layout
_MANTISSA = 23
_BIAS = 127
_ABS_MASK = 0x7FFFFFFF
_INF = 0x7F800000
_QUIET_NAN = 0x7FC00000


def _c(v: int) -> ir.Constant:
    """An i32 constant written as the signed value of the same bits."""
    return ir.Constant(_I32, v - (1 << 32) if v >> 31 else v)


def _round_shift(b: ir.IRBuilder, x: ir.Value, shift: ir.Value) -> ir.Value:
    """x >> shift rounded to nearest even (shift >= 1): add half minus one, plus one more
    when the lowest kept bit is odd, then drop the bits."""
    half_minus_one = b.sub(b.shl(_c(1), b.sub(shift, _c(1))), _c(1))
    odd = b.and_(b.lshr(x, shift), _c(1))
    return b.lshr(b.add(x, b.add(half_minus_one, odd)), shift)


def _umin(b: ir.IRBuilder, x: ir.Value, limit: int) -> ir.Value:
    return b.select(b.icmp_unsigned(">", x, _c(limit)), _c(limit), x)


def f32_to_narrow_bits(b: ir.IRBuilder, value: ir.Value, fmt: FloatFormat, storage: ir.IntType) -> ir.Value:
    """The bits of f32 `value` rounded to the narrow float `fmt`, as an integer of type `storage`."""
    m_bits, bias = fmt.mantissa_bits, fmt.bias
    bits = b.bitcast(value, _I32)
    sign = b.lshr(bits, _c(31))
    a = b.and_(bits, _c(_ABS_MASK))

    # Normal results: rebias the exponent, then round the mantissa; a carry out of the
    # mantissa steps the exponent, as it should.
    normal = _round_shift(b, b.sub(a, _c((_BIAS - bias) << _MANTISSA)), _c(_MANTISSA - m_bits))
    # Subnormal results: the significand (implicit bit set) shifted right by how far the
    # value lies below the target's least normal exponent. Shifts past 25 give 0 as 25 does
    # (the significand is below 2**24), so the shift is capped there and never reaches 32.
    # (An f32 subnormal gets an implicit bit it lacks: it is far below every target's
    # subnormals, so it rounds to 0 either way.)
    exponent = b.lshr(a, _c(_MANTISSA))
    significand = b.or_(b.and_(a, _c((1 << _MANTISSA) - 1)), _c(1 << _MANTISSA))
    shift = b.sub(_c(_BIAS + _MANTISSA + 1 - bias - m_bits), exponent)
    subnormal = _round_shift(b, significand, _umin(b, shift, _MANTISSA + 2))
    is_normal = b.icmp_unsigned(">=", a, _c((_BIAS + 1 - bias) << _MANTISSA))
    r = b.select(is_normal, normal, subnormal)

    # Overflow (inf and NaN inputs round to huge patterns, so they overflow too): the
    # pattern after the largest finite value is inf (IEEE-like) or NaN (fn); the largest
    # value stands in for f4e2m1fn, which has neither.
    largest = fmt.max_finite_bits
    sign_bit = fmt.bits - 1
    if fmt.nan in ("ieee", "fn"):
        r = _umin(b, r, largest + 1)
    elif fmt.nan == "none":
        r = _umin(b, r, largest)
    is_nan = b.icmp_unsigned(">", a, _c(_INF))
    if fmt.nan == "ieee":
        r = b.select(is_nan, _c((largest + 1) | (1 << (m_bits - 1))), r)
    elif fmt.nan == "none":
        r = b.select(is_nan, _c(0), r)
        sign = b.select(is_nan, b.xor(sign, _c(1)), sign)
    result = b.or_(r, b.shl(sign, _c(sign_bit)))
    if fmt.nan == "fnuz":
        # One NaN, the negative-zero pattern, for overflow and NaN; no -0.
        nan = b.or_(is_nan, b.icmp_unsigned(">", r, _c(largest)))
        result = b.select(b.icmp_unsigned("==", r, _c(0)), _c(0), result)
        result = b.select(nan, _c(1 << sign_bit), result)
    return b.trunc(result, storage)


def narrow_bits_to_f32(b: ir.IRBuilder, stored: ir.Value, fmt: FloatFormat) -> ir.Value:
    """The f32 value of narrow float bits `stored` (an integer holding them in its low bits)."""
    m_bits, bias = fmt.mantissa_bits, fmt.bias
    sign_bit = fmt.bits - 1
    x = b.and_(b.zext(stored, _I32), _c((1 << fmt.bits) - 1))
    sign = b.shl(b.lshr(x, _c(sign_bit)), _c(31))
    magnitude = b.and_(x, _c((1 << sign_bit) - 1))
    exponent = b.lshr(magnitude, _c(m_bits))
    mantissa = b.and_(magnitude, _c((1 << m_bits) - 1))
    normal = b.add(b.shl(magnitude, _c(_MANTISSA - m_bits)), _c((_BIAS - bias) << _MANTISSA))
    # A subnormal is mantissa * 2**(1 - bias - m_bits): exact in f32, and a normal f32
    # for every narrow type (so flushing subnormals does not touch it).
    subnormal = b.bitcast(b.fmul(b.uitofp(mantissa, _F32), ir.Constant(_F32, 2.0 ** (1 - bias - m_bits))), _I32)
    r = b.select(b.icmp_unsigned("==", exponent, _c(0)), subnormal, normal)
    all_ones = (1 << fmt.exponent_bits) - 1
    if fmt.nan == "ieee":
        special = b.icmp_unsigned("==", exponent, _c(all_ones))
        inf_or_nan = b.select(b.icmp_unsigned("==", mantissa, _c(0)), _c(_INF), _c(_QUIET_NAN))
        r = b.select(special, inf_or_nan, r)
    elif fmt.nan == "fn":
        r = b.select(b.icmp_unsigned("==", magnitude, _c((1 << sign_bit) - 1)), _c(_QUIET_NAN), r)
    result = b.or_(r, sign)
    if fmt.nan == "fnuz":
        result = b.select(b.icmp_unsigned("==", x, _c(1 << sign_bit)), _c(_QUIET_NAN | (1 << 31)), result)
    return b.bitcast(result, _F32)
