"""Linear quantization: QuantizeLinear, DequantizeLinear, QLinearMatMul.

QuantizeLinear and DequantizeLinear take the integer types (2- to 32-bit) and the 8- and
4-bit floats. Integers: y = clip(rint(x / scale) + zero_point); floats: y = x / scale
converted with one rounding to nearest even, clamped to the type's finite range first when
`saturate` (the default) asks for it; the zero point of an 8-bit float is 0 by the
standard and is not added (as ONNX's reference does), that of f4e2m1fn is added.
QLinearMatMul takes 8-bit integers.

A scale and zero point are one value (per tensor), a vector along `axis` (per axis), or,
with `block_size`, one value per block of `block_size` elements along `axis`.
"""
from __future__ import annotations

import numpy as np

from ..registry import converter
from .common import (
    SATURATING_FLOAT8,
    as_dtype,
    axis_of,
    convert_saturating,
    integer_range,
    is_float_dtype,
    is_int_dtype,
    onnx_dtype,
    shape_of,
)


def _per_element(ctx, xp, v, dims):
    """A scale or zero point shaped to broadcast against an input of shape `dims`."""
    axis = ctx.attr("axis", 1)
    block_size = ctx.attr("block_size", 0) if ctx.opset >= 21 else 0
    vdims = shape_of(v)
    if len(vdims) == 0 or int(np.prod(vdims)) == 1:
        return xp.reshape(v, ())
    axis = axis_of(ctx, axis, len(dims))
    if not block_size:
        if len(vdims) != 1 or vdims[0] != dims[axis]:
            raise ctx.error(f"a scale of shape {vdims} does not match axis {axis} of {dims}")
        return xp.reshape(v, tuple(dims[axis] if d == axis else 1 for d in range(len(dims))))
    # Blocked: each value repeated block_size times along axis (the last block may be short).
    positions = np.arange(dims[axis]) // int(block_size)
    return xp.take(v, positions, axis=axis)


def _quantized_dtype(ctx, zero_point):
    output_dtype = ctx.attr("output_dtype", 0) if ctx.opset >= 21 else 0
    if zero_point is not None:
        return np.dtype(zero_point.dtype)
    return onnx_dtype(ctx, output_dtype, "output type") if output_dtype else np.dtype(np.uint8)


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx, x, scale, zero_point=None):
    xp = ctx.xp
    dims = shape_of(x)
    saturate = ctx.attr("saturate", 1) if ctx.opset >= 19 else 1
    dtype = _quantized_dtype(ctx, zero_point)
    if not (is_int_dtype(dtype) or (is_float_dtype(dtype) and dtype.itemsize == 1)):
        raise ctx.unsupported(f"quantizing to {dtype}")
    precision = ctx.attr("precision", 0) if ctx.opset >= 25 else 0
    work = onnx_dtype(ctx, precision, "'precision'") if precision else np.dtype(x.dtype)
    s = as_dtype(xp, _per_element(ctx, xp, scale, dims), work)
    scaled = xp.divide(as_dtype(xp, x, work), s)
    if dtype in SATURATING_FLOAT8:
        return convert_saturating(xp, scaled, dtype) if saturate else as_dtype(xp, scaled, dtype)
    if is_float_dtype(dtype):       # f4e2m1fn: saturates by itself, as HLO converts to it
        if zero_point is not None:
            scaled = xp.add(as_dtype(xp, scaled, np.float32),
                            as_dtype(xp, _per_element(ctx, xp, zero_point, dims), np.float32))
        return as_dtype(xp, scaled, dtype)
    q = as_dtype(xp, xp.rint(scaled), np.float64)     # exact for every zero point and clip bound
    if zero_point is not None:
        q = xp.add(q, as_dtype(xp, _per_element(ctx, xp, zero_point, dims), q.dtype))
    least, greatest = integer_range(dtype)
    return as_dtype(xp, xp.clip(q, least, greatest), dtype)


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx, x, scale, zero_point=None):
    xp = ctx.xp
    dims = shape_of(x)
    output_dtype = ctx.attr("output_dtype", 0) if ctx.opset >= 23 else 0
    out = onnx_dtype(ctx, output_dtype, "output type") if output_dtype else np.dtype(scale.dtype)
    if not (is_int_dtype(x.dtype) or is_float_dtype(x.dtype)):
        raise ctx.unsupported(f"dequantizing {np.dtype(x.dtype)}")
    # The difference in int32 (int64 for 32-bit inputs) is exact, and so is an 8- or 4-bit
    # float's value in f32 (its zero point is 0 by the standard); then scale in float.
    wide = np.float32 if is_float_dtype(x.dtype) else np.int64 if np.dtype(x.dtype).itemsize >= 4 else np.int32
    centred = as_dtype(xp, x, wide)
    if zero_point is not None:
        centred = xp.subtract(centred, as_dtype(xp, _per_element(ctx, xp, zero_point, dims), wide))
    s = _per_element(ctx, xp, scale, dims)
    return as_dtype(xp, xp.multiply(as_dtype(xp, centred, np.float32 if np.dtype(scale.dtype).itemsize < 4
                                              else scale.dtype), s), out)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
    """(a - a_zero) a_scale @ (b - b_zero) b_scale, requantized with y_scale, y_zero: the
    integer product is exact, then rescaled once in float."""
    xp = ctx.xp
    if any(np.dtype(v.dtype).kind not in "iu" for v in (a, b, y_zero)):
        raise ctx.unsupported("8-bit float operands")
    ai = xp.subtract(as_dtype(xp, a, np.int32), _row_or_scalar(xp, a_zero, rows=True))
    bi = xp.subtract(as_dtype(xp, b, np.int32), _row_or_scalar(xp, b_zero, rows=False))
    # the integer product is exact in f64 (terms at most 255 * 255), and takes the float GEMM
    product = xp.matmul(as_dtype(xp, ai, np.float64), as_dtype(xp, bi, np.float64))
    multiplier = xp.divide(xp.multiply(_row_or_scalar(xp, a_scale, rows=True, dtype=np.float64),
                                       _row_or_scalar(xp, b_scale, rows=False, dtype=np.float64)),
                           as_dtype(xp, y_scale, np.float64))
    y = xp.add(xp.rint(xp.multiply(product, multiplier)), _row_or_scalar(xp, y_zero, rows=True, dtype=np.float64))
    least, greatest = integer_range(y_zero.dtype)
    return as_dtype(xp, xp.clip(y, least, greatest), y_zero.dtype)


def _row_or_scalar(xp, v, rows, dtype=np.int32):
    """A scale or zero point per row of A (a column vector) or per column of B (a row)."""
    v = as_dtype(xp, v, dtype)
    if int(np.prod(shape_of(v))) <= 1:
        return xp.reshape(v, ())
    return xp.reshape(v, (-1, 1)) if rows else xp.reshape(v, (1, -1)) if len(shape_of(v)) == 1 else v
