"""How HLO element types live in LLVM IR: a storage type (in memory) and a compute type.

pred is stored as a byte and computed as i1; f16 is stored as half and bf16 as i16, both
computed in f32 (XLA's CPU backend does the same), rounded to nearest even on store. The
8- and 4-bit floats are stored as a byte each and computed in f32 too (llvm/low_precision.py
converts). The 4- and 2-bit integers are stored as a byte each, the value in its low bits
and the high bits zero (ml_dtypes' layout, so arrays pass to and from NumPy as they are),
and computed as i4/i2, so their arithmetic wraps at their own width.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir
import numpy as np

from .low_precision import f32_to_narrow_bits, narrow_bits_to_f32

if TYPE_CHECKING:   # (annotations only: code that loads cached kernels imports this module)
    from ...hlo.instruction import HloInstruction
    from ...hlo.types import ElementType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def storage_type(t: ElementType) -> ir.Type:
    if t.is_pred or t.bits < 8:
        return I8
    if t.is_float:
        return {"f16": F16, "bf16": I16, "f32": F32, "f64": F64}.get(t.name, I8)
    return ir.IntType(t.bits)


def compute_type(t: ElementType) -> ir.Type:
    if t.is_pred:
        return I1
    if t.is_float:
        return F64 if t.bits == 64 else F32
    return ir.IntType(t.bits)


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def to_compute(b: ir.IRBuilder, value: ir.Value, t: ElementType) -> ir.Value:
    """A loaded storage value as the compute type."""
    if t.is_pred:
        return b.icmp_unsigned("!=", value, ir.Constant(I8, 0))
    if t.name == "f16":
        return b.fpext(value, F32)
    if t.name == "bf16":
        return b.bitcast(b.shl(b.zext(value, I32), ir.Constant(I32, 16)), F32)
    if t.is_float and t.bits < 16:
        return narrow_bits_to_f32(b, value, t.float_format)
    if t.bits < 8:
        return b.trunc(value, ir.IntType(t.bits))
    return value


def to_storage(b: ir.IRBuilder, value: ir.Value, t: ElementType) -> ir.Value:
    """A computed value as the storage type (narrow floats rounded to nearest even)."""
    if t.is_pred:
        return b.zext(value, I8)
    if t.name == "f16":
        return b.fptrunc(value, F16)
    if t.name == "bf16":
        return f32_to_bf16_bits(b, value)
    if t.is_float and t.bits < 16:
        return f32_to_narrow_bits(b, value, t.float_format, I8)
    if t.bits < 8:
        return b.zext(value, I8)
    return value


def f32_to_bf16_bits(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """Round an f32 to bf16 bits, nearest even; NaN stays a (quiet) NaN."""
    bits = b.bitcast(value, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb)), ir.Constant(I32, 16))
    quiet_nan = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
    is_nan = b.fcmp_unordered("uno", value, value)
    return b.trunc(b.select(is_nan, quiet_nan, rounded), I16)


class FunctionPointer(ir.values.Value):
    """A callee known by address (a pointer value): llvmlite reads the call's type from
    `function_type`."""

    def __init__(self, pointer, fnty):
        self.pointer = pointer
        self.function_type = fnty
        self.type = PTR

    def get_reference(self):
        return self.pointer.get_reference()


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The smaller of two signed integers."""
    return b.select(b.icmp_signed("<", x, y), x, y)


def fma_intrinsic(module: ir.Module, ty: ir.Type) -> ir.Function:
    """llvm.fma over `ty`, a float type or a vector of one (a * b + c, rounded once)."""
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    name = "llvm.fma." + (f"v{ty.count}" if isinstance(ty, ir.VectorType) else "") + \
        ("f32" if isinstance(element, ir.FloatType) else "f64")
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * 3), name=name)
    return fn


def prefetch(b: ir.IRBuilder, address: ir.Value) -> None:
    """A hint to bring `address`'s cache line into every cache level for reading (it never
    faults, so an address past the data is harmless)."""
    fn = b.module.globals.get("llvm.prefetch.p0")
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(VOID, [PTR, I32, I32, I32]), name="llvm.prefetch.p0")
    b.call(fn, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])


def splat(b: ir.IRBuilder, vector: ir.VectorType, x: ir.Value) -> ir.Value:
    """A vector with every lane x."""
    one = b.insert_element(ir.Constant(vector, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(vector, ir.Undefined), ir.Constant(ir.VectorType(I32, vector.count), None))


def transpose_square(b: ir.IRBuilder, rows: list) -> list:
    """The transpose of an n x n block held as n vectors of n lanes (n a power of two):
    vector j of the result holds lane j of every row. log2(n) stages of two-input shuffles,
    stage k swapping bit k of the row and column numbers (64 shuffles for 16 x 16, where
    element-wise gathers cost a load each)."""
    n = len(rows)
    rows = list(rows)
    bit = 1
    while bit < n:
        out = [None] * n
        for r in range(n):
            low, high = rows[r & ~bit], rows[r | bit]
            # element c of row r: from the row whose bit is c's, at column c with bit r's
            mask = [(n if c & bit else 0) + ((c & ~bit) | (r & bit)) for c in range(n)]
            out[r] = b.shuffle_vector(low, high, ir.Constant(ir.VectorType(I32, n), mask))
        rows, bit = out, bit * 2
    return rows


def etype(instr: HloInstruction) -> ElementType:
    return instr.shape.dtype


def alloca_in_entry(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    """Stack space in the function's entry block (an alloca in a loop would grow the stack
    every iteration, and mem2reg promotes only entry-block allocas)."""
    here = b.block
    b.position_at_start(b.function.entry_basic_block)
    slot = b.alloca(ty)
    b.position_at_end(here)
    return slot


def scalar_constant(const: HloInstruction) -> ir.Constant | None:
    """A constant of one element as an IR constant of its compute type; None for a larger one
    (a target reads those from memory)."""
    shape = const.shape
    if shape.size != 1:
        return None
    value = np.asarray(const.literal).reshape(-1)[0]
    t = shape.dtype
    if t.is_pred:
        return ir.Constant(compute_type(t), int(bool(value)))
    return ir.Constant(compute_type(t), float(value) if t.is_float else int(value))
