"""Bit-level ops on the CPU backend, as elemental rules: bitcast-convert (between types of one
width, and between widths with a minor dimension of pieces) and reduce-precision.

Both work on an element's bit pattern (an integer of the type's width): `as_bits` takes it
from the computed value, `from_bits` makes the value again. bf16 values are computed in f32
whose low 16 bits are zero, so their bits are the f32's high half as it is (NaN payloads
kept). A signalling f16/bf16 NaN that a bitcast-convert makes is quieted when it is stored,
since those types are computed in f32.

Semantics are the evaluator's (pyxla/hlo/ops/elementwise.py):
  - bitcast-convert to a narrower type adds a minor dimension holding the pieces of each
    element, lowest bits first (little-endian); to a wider type it consumes one;
  - reduce-precision is XLA's algorithm on the bit pattern: the mantissa rounded to nearest
    even, exponents too large become +-inf and too small (the target's subnormals included)
    +-0; NaN stays NaN, or becomes +inf when no mantissa bit is kept.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.types import F32, ElementType
from .elemental import RULES, ElementalEmitter
from .ir_types import F16, I16, I32, etype, i64, storage_type, to_compute, to_storage

MANTISSA_BITS = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}


def as_bits(b: ir.IRBuilder, value: ir.Value, t: ElementType) -> ir.Value:
    """The bit pattern of a computed value of type t, as an integer of t's width."""
    if not t.is_float:
        return value
    if t.name == "bf16":
        return b.trunc(b.lshr(b.bitcast(value, I32), ir.Constant(I32, 16)), I16)
    if t.name == "f16":
        return b.bitcast(b.fptrunc(value, F16), I16)   # exact: the value is an f16
    if t.bits < 16:   # 8- and 4-bit floats: their stored byte (exact), cut to the width
        stored = to_storage(b, value, t)
        return stored if t.bits == 8 else b.trunc(stored, ir.IntType(t.bits))
    return b.bitcast(value, ir.IntType(t.bits))


def from_bits(b: ir.IRBuilder, bits: ir.Value, t: ElementType) -> ir.Value:
    """The computed value of type t whose bit pattern is `bits`."""
    if not t.is_float:
        return bits
    if t.name == "bf16":
        return to_compute(b, bits, t)
    if t.bits < 16:
        return to_compute(b, bits if t.bits == 8 else b.zext(bits, storage_type(t)), t)
    return to_compute(b, b.bitcast(bits, storage_type(t)), t)


# --- bitcast-convert ---------------------------------------------------------------------------

def _bitcast_convert(e: ElementalEmitter, instr, index):
    b = e.b
    operand = instr.operands[0]
    src, dst = etype(operand), etype(instr)
    if src.bits == dst.bits:
        return from_bits(b, as_bits(b, e.value(operand, index), src), dst)
    if src.bits > dst.bits:
        # piece p of a wide element: its bits p * width .. (p + 1) * width - 1
        *outer, piece = index
        wide = as_bits(b, e.value(operand, tuple(outer)), src)
        wide_ty = wide.type
        shift = b.mul(b.trunc(piece, wide_ty) if wide_ty.width < 64 else piece, ir.Constant(wide_ty, dst.bits))
        return from_bits(b, b.trunc(b.lshr(wide, shift), ir.IntType(dst.bits)), dst)
    wide_ty = ir.IntType(dst.bits)
    bits = ir.Constant(wide_ty, 0)
    for p in range(dst.bits // src.bits):
        piece = as_bits(b, e.value(operand, tuple(index) + (i64(p),)), src)
        bits = b.or_(bits, b.shl(b.zext(piece, wide_ty), ir.Constant(wide_ty, p * src.bits)))
    return from_bits(b, bits, dst)


# --- reduce-precision ------------------------------------------------------------------------------

def reduce_precision_bits(b: ir.IRBuilder, bits: ir.Value, t: ElementType, exponent_bits: int,
                          mantissa_bits: int) -> ir.Value:
    """XLA's ReducePrecision on the bit pattern of a value of type t."""
    ty = bits.type
    nbits = t.bits
    src_mantissa = MANTISSA_BITS[t.name]
    src_exponent = nbits - 1 - src_mantissa

    def c(v: int) -> ir.Constant:   # written as the signed value of the same bits
        return ir.Constant(ty, v - (1 << nbits) if v >> (nbits - 1) else v)

    sign_mask = 1 << (nbits - 1)
    exponent_mask = ((1 << src_exponent) - 1) << src_mantissa
    is_nan = b.icmp_unsigned(">", b.and_(bits, c(sign_mask - 1)), c(exponent_mask))
    original = bits
    if mantissa_bits < src_mantissa:
        dropped = src_mantissa - mantissa_bits
        last_kept = b.and_(b.lshr(bits, c(dropped)), c(1))
        bias = b.add(last_kept, c((1 << (dropped - 1)) - 1))   # 0111... plus one on an odd last bit
        bits = b.and_(b.add(bits, bias), c(((1 << nbits) - 1) ^ ((1 << dropped) - 1)))
    if exponent_bits < src_exponent:
        src_bias = (1 << (src_exponent - 1)) - 1
        dest_bias = (1 << (exponent_bits - 1)) - 1
        exponent = b.and_(bits, c(exponent_mask))
        signed_zero = b.and_(bits, c(sign_mask))
        overflow = b.icmp_unsigned(">", exponent, c((src_bias + dest_bias) << src_mantissa))
        bits = b.select(overflow, b.or_(signed_zero, c(exponent_mask)), bits)
        underflow = b.icmp_unsigned("<=", exponent, c((src_bias - dest_bias) << src_mantissa))
        bits = b.select(underflow, signed_zero, bits)
    nan_result = original if mantissa_bits > 0 else c(exponent_mask)   # +inf
    return b.select(is_nan, nan_result, bits)


def _reduce_precision(e: ElementalEmitter, instr, index):
    b = e.b
    t = etype(instr)
    if t.bits < 16:
        # 8- and 4-bit floats (not all IEEE layouts): rounded as their f32 value, which the
        # emitter stores back to t, as the evaluator does.
        t = F32
    bits = as_bits(b, e.value(instr.operands[0], index), t)
    rounded = reduce_precision_bits(b, bits, t, instr.attrs["exponent_bits"], instr.attrs["mantissa_bits"])
    return from_bits(b, rounded, t)


RULES["bitcast-convert"] = _bitcast_convert
RULES["reduce-precision"] = _reduce_precision
