"""Contractions: dot (XLA's DotGeneral) and convolution (ConvGeneralDilated).

Both take their result element type from the declared shape (JAX's preferred element
type: bf16 x bf16 -> f32, s8 x s8 -> s32), so operands are converted to one wide
accumulation type before they are multiplied:

  float results    float64, after DAZ on f32/f64 operands (XLA CPU reads subnormals as
                   zero); the sum is rounded to the result type and f32/f64 results are
                   flushed (FTZ). f16/bf16 operands are exact in float64.
  integer results  int64 or uint64 (by the result's signedness); products and sums wrap
                   modulo 2^64, which agrees with wrapping in the narrower result type.
  pred results     int64, then "any product was true".

A convolution is computed in a canonical layout, input (N, C, spatial...) and kernel
(O, I, spatial...): the input is base-dilated and padded (negative padding crops),
windows are gathered as a strided view (im2col without copying) and one einsum per
call contracts them with the kernel, groups included.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ...errors import ShapeError
from ..attributes import ConvDimensionNumbers, WindowDim
from ..shape import ArrayShape
from ..types import ElementType
from .numeric import flush_denormals, narrow
from .reduction import window_output_dims  # the window arithmetic reduce-window shares
from .registry import OpDef, register

# --- shared: operand checks and the accumulation type -------------------------------------

def _array_operands(opcode: str, operands) -> tuple[ArrayShape, ArrayShape]:
    for i, s in enumerate(operands):
        if not isinstance(s, ArrayShape):
            raise ShapeError(f"{opcode} operand {i} must be an array, got {s.to_text(False)}")
    lhs, rhs = operands
    return lhs, rhs


def _wider(a: ElementType, b: ElementType) -> ElementType:
    """Of two operand types, the one XLA's shape inference gives a mixed dot (a float over an
    integer, then more bits)."""
    return max(a, b, key=lambda t: (t.is_float, t.bits))


def _result_dtype(opcode: str, lhs: ArrayShape, rhs: ArrayShape, declared) -> ElementType:
    """The declared (preferred) element type, checked against the operands' types. Operands
    of two types (s8 x s16, f16 x f32, as XLA allows) are both converted to the result type
    (XLA's operand upcaster)."""
    if lhs.dtype != rhs.dtype and lhs.dtype.is_pred != rhs.dtype.is_pred:
        raise ShapeError(f"{opcode} cannot mix pred and {rhs.dtype if lhs.dtype.is_pred else lhs.dtype} operands")
    if declared is None:
        return _wider(lhs.dtype, rhs.dtype)
    if not isinstance(declared, ArrayShape):
        raise ShapeError(f"{opcode} result must be an array, declared {declared.to_text(False)}")
    result = declared.dtype
    for operand in {lhs.dtype, rhs.dtype}:
        if operand.is_pred:
            fits = result.is_pred
        elif operand.is_float:
            fits = result.is_float
        else:   # integer operands may accumulate into an integer or a float type
            fits = result.is_integral or result.is_float
        if not fits:
            raise ShapeError(f"{opcode} of {operand} operands cannot produce {result}")
    return result


def _check_dims(opcode: str, what: str, dims, rank: int) -> tuple[int, ...]:
    dims = tuple(dims)
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{opcode} {what} {list(dims)}: dimension {d} is out of range for rank {rank}")
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{opcode} {what} {list(dims)} repeats a dimension")
    return dims


def _accumulation_operand(x: np.ndarray, result: ElementType) -> np.ndarray:
    """An operand converted to the type its products are summed in (see module doc)."""
    if result.is_float:
        if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
            x = flush_denormals(x)
        return x.astype(np.float64)
    if result.is_unsigned:
        return x.astype(np.uint64)
    return x.astype(np.int64)   # signed results, and pred (counted as 0/1)


def _rounded_result(acc: np.ndarray, result: ElementType) -> np.ndarray:
    """The accumulated sum stored as `result`: rounded and flushed, wrapped, or tested."""
    if result.is_pred:
        return acc != 0
    if result.is_float and result.bits > 16:
        # Round to the result type first, then flush: a sum that rounds to a subnormal goes to zero.
        return flush_denormals(acc.astype(result.np_dtype))
    return narrow(acc, result)


# --- dot ------------------------------------------------------------------------------

DOT_DIM_ATTRS = ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims")


def _dot_dims(lhs: ArrayShape, rhs: ArrayShape, attrs: dict):
    """(lhs batch, rhs batch, lhs contracting, rhs contracting, lhs free, rhs free), checked."""
    lb, rb, lc, rc = (tuple(attrs.get(name, ())) for name in DOT_DIM_ATTRS)
    if len(lb) != len(rb):
        raise ShapeError(f"dot has {len(lb)} lhs batch dimensions but {len(rb)} rhs batch dimensions")
    if len(lc) != len(rc):
        raise ShapeError(f"dot has {len(lc)} lhs contracting dimensions but {len(rc)} rhs contracting dimensions")
    _check_dims("dot", "lhs batch and contracting dimensions", lb + lc, lhs.rank)
    _check_dims("dot", "rhs batch and contracting dimensions", rb + rc, rhs.rank)
    for kind, ls, rs in (("batch", lb, rb), ("contracting", lc, rc)):
        for ld, rd in zip(ls, rs):
            if lhs.dims[ld] != rhs.dims[rd]:
                raise ShapeError(f"dot {kind} dimensions differ in size: lhs dimension {ld} is "
                                 f"{lhs.dims[ld]}, rhs dimension {rd} is {rhs.dims[rd]}")
    lf = tuple(d for d in range(lhs.rank) if d not in lb + lc)
    rf = tuple(d for d in range(rhs.rank) if d not in rb + rc)
    return lb, rb, lc, rc, lf, rf


def _dot_shape(operands, attrs, declared):
    lhs, rhs = _array_operands("dot", operands)
    lb, _, _, _, lf, rf = _dot_dims(lhs, rhs, attrs)
    dims = [lhs.dims[d] for d in lb + lf] + [rhs.dims[d] for d in rf]
    return ArrayShape(_result_dtype("dot", lhs, rhs, declared), dims)


def _as_batched_matrix(x: np.ndarray, batch, rows, cols) -> np.ndarray:
    """`x` transposed to (batch..., rows..., cols...) and flattened to (B, R, C)."""
    shape = x.shape
    return x.transpose(batch + rows + cols).reshape(
        prod(shape[d] for d in batch), prod(shape[d] for d in rows), prod(shape[d] for d in cols))


def _dot_evaluate(instr, operands, ctx):
    lhs, rhs = operands
    result = instr.shape.dtype
    lb, rb, lc, rc, lf, rf = _dot_dims(instr.operands[0].shape, instr.operands[1].shape, instr.attrs)
    a = _as_batched_matrix(_accumulation_operand(lhs, result), lb, lf, lc)
    b = _as_batched_matrix(_accumulation_operand(rhs, result), rb, rc, rf)
    out = np.matmul(a, b).reshape([lhs.shape[d] for d in lb + lf] + [rhs.shape[d] for d in rf])
    return _rounded_result(out, result)


register(OpDef("dot", "opaque", _dot_shape, _dot_evaluate, arity=2,
               optional_attrs=DOT_DIM_ATTRS + ("operand_precision",),
               doc="DotGeneral: result dims are batch, lhs free, then rhs free dimensions."))


# --- convolution: shape -----------------------------------------------------------------

def _check_window(window, spatial_rank: int) -> tuple[WindowDim, ...]:
    window = tuple(window)
    if len(window) != spatial_rank:
        raise ShapeError(f"convolution window has {len(window)} dimensions, "
                         f"but the operands have {spatial_rank} spatial dimensions")
    for i, w in enumerate(window):
        if not isinstance(w, WindowDim):
            raise ShapeError(f"convolution window dimension {i} is not a WindowDim: {w!r}")
        for name in ("size", "stride", "lhs_dilate", "rhs_dilate"):
            if getattr(w, name) < 1:
                raise ShapeError(f"convolution window dimension {i}: {name} must be positive, "
                                 f"got {getattr(w, name)}")
    return window


def _check_dim_labels(dn, rank: int) -> ConvDimensionNumbers:
    if not isinstance(dn, ConvDimensionNumbers):
        raise ShapeError(f"convolution needs dim_labels= (ConvDimensionNumbers), got {dn!r}")
    parts = {"input": (dn.input_batch, dn.input_feature, *dn.input_spatial),
             "kernel": (dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial),
             "output": (dn.output_batch, dn.output_feature, *dn.output_spatial)}
    for what, dims in parts.items():
        if sorted(dims) != list(range(rank)):
            raise ShapeError(f"convolution dim_labels {dn.to_labels()}: the {what} dimensions "
                             f"{list(dims)} are not a permutation of the operands' {rank} dimensions")
    return dn


def _conv_config(lhs: ArrayShape, rhs: ArrayShape, attrs: dict):
    """The checked (dim_labels, window, feature_group_count, batch_group_count)."""
    if lhs.rank != rhs.rank:
        raise ShapeError(f"convolution input has rank {lhs.rank} but kernel has rank {rhs.rank}")
    if lhs.rank < 2:
        raise ShapeError(f"convolution operands need rank >= 2 (batch and feature), got rank {lhs.rank}")
    if "dim_labels" not in attrs:
        raise ShapeError("convolution needs the attribute dim_labels=")
    dn = _check_dim_labels(attrs["dim_labels"], lhs.rank)
    window = _check_window(attrs.get("window", ()), lhs.rank - 2)
    fgc = attrs.get("feature_group_count", 1)
    bgc = attrs.get("batch_group_count", 1)
    if fgc < 1 or bgc < 1:
        raise ShapeError(f"convolution group counts must be positive, got feature_group_count={fgc}, "
                         f"batch_group_count={bgc}")
    if fgc > 1 and bgc > 1:
        raise ShapeError(f"convolution cannot have both feature_group_count={fgc} "
                         f"and batch_group_count={bgc} greater than 1")
    batch, features = lhs.dims[dn.input_batch], lhs.dims[dn.input_feature]
    kernel_in, kernel_out = rhs.dims[dn.kernel_input_feature], rhs.dims[dn.kernel_output_feature]
    if features % fgc or features // fgc != kernel_in:
        raise ShapeError(f"convolution input has {features} features; with feature_group_count={fgc} "
                         f"the kernel's input feature dimension must be {features / fgc:g}, got {kernel_in}")
    if kernel_out % fgc:
        raise ShapeError(f"convolution kernel output features ({kernel_out}) are not divisible by "
                         f"feature_group_count={fgc}")
    if kernel_out % bgc:
        raise ShapeError(f"convolution kernel output features ({kernel_out}) are not divisible by "
                         f"batch_group_count={bgc}")
    if batch % bgc:
        raise ShapeError(f"convolution input batch ({batch}) is not divisible by batch_group_count={bgc}")
    for i, (kd, w) in enumerate(zip(dn.kernel_spatial, window)):
        if rhs.dims[kd] != w.size:
            raise ShapeError(f"convolution window size {w.size} in spatial dimension {i} differs from "
                             f"the kernel's size {rhs.dims[kd]}")
    return dn, window, fgc, bgc


def _conv_shape(operands, attrs, declared):
    lhs, rhs = _array_operands("convolution", operands)
    dn, window, fgc, bgc = _conv_config(lhs, rhs, attrs)
    dims = [0] * lhs.rank
    dims[dn.output_batch] = lhs.dims[dn.input_batch] // bgc
    dims[dn.output_feature] = rhs.dims[dn.kernel_output_feature]
    spatial = window_output_dims("convolution", tuple(lhs.dims[d] for d in dn.input_spatial), window)
    for od, size in zip(dn.output_spatial, spatial):
        dims[od] = size
    return ArrayShape(_result_dtype("convolution", lhs, rhs, declared), dims)


# --- convolution: evaluation ------------------------------------------------------------

def _dilated_bound(size: int, dilation: int) -> int:
    """The length of `size` elements with dilation - 1 holes between neighbours."""
    return 0 if size == 0 else (size - 1) * dilation + 1


def _dilate_and_pad(x: np.ndarray, window) -> np.ndarray:
    """Spatial axes (2, 3, ...) base-dilated with zeros, then padded; negative padding crops."""
    spatial = x.shape[2:]
    dilated = np.zeros(x.shape[:2] + tuple(_dilated_bound(s, w.lhs_dilate) for s, w in zip(spatial, window)),
                       x.dtype)
    dilated[(slice(None), slice(None)) + tuple(slice(None, None, w.lhs_dilate) for w in window)] = x
    grow = [(0, 0), (0, 0)] + [(max(w.pad_low, 0), max(w.pad_high, 0)) for w in window]
    padded = np.pad(dilated, grow)
    crop = tuple(slice(max(-w.pad_low, 0), n - max(-w.pad_high, 0))
                 for n, w in zip(padded.shape[2:], window))
    return padded[(slice(None), slice(None)) + crop]


def _window_patches(x: np.ndarray, window) -> np.ndarray:
    """A view (N, C, out..., k...) of the windows: input[n, c, o*stride + k*rhs_dilate]."""
    rank = len(window)
    extents = tuple(_dilated_bound(w.size, w.rhs_dilate) for w in window)
    views = np.lib.stride_tricks.sliding_window_view(x, extents, axis=tuple(range(2, 2 + rank)))
    return views[(slice(None), slice(None))
                 + tuple(slice(None, None, w.stride) for w in window)
                 + tuple(slice(None, None, w.rhs_dilate) for w in window)]


_OUT_LETTERS = "opqrstuv"
_WINDOW_LETTERS = "KLMNOPQR"


def _grouped_contraction(patches: np.ndarray, kernel: np.ndarray, fgc: int, bgc: int) -> np.ndarray:
    """(N, C, out..., k...) x (O, I, k...) -> (N / bgc, O, out...), groups respected.

    Feature groups split C into fgc blocks of I and O into fgc blocks; batch groups split
    N into bgc blocks (group-major) and O into bgc blocks. At most one count exceeds 1, so
    both become one group axis G of the input.
    """
    rank = kernel.ndim - 2
    if rank > len(_OUT_LETTERS):
        raise NotImplementedError(f"convolution with {rank} spatial dimensions (at most {len(_OUT_LETTERS)})")
    n, c = patches.shape[:2]
    o, i = kernel.shape[:2]
    groups, batch = fgc * bgc, n // bgc
    out_shape, win_shape = patches.shape[2:2 + rank], patches.shape[2 + rank:]
    x = patches.reshape((bgc, batch, fgc, i) + out_shape + win_shape)
    x = np.moveaxis(x, 0, 1).reshape((batch, groups, i) + out_shape + win_shape)
    w = kernel.reshape((groups, o // groups, i) + win_shape)
    outs, wins = _OUT_LETTERS[:rank], _WINDOW_LETTERS[:rank]
    y = np.einsum(f"bgi{outs}{wins},gxi{wins}->bgx{outs}", x, w, optimize=True)
    return y.reshape((batch, o) + out_shape)


def _conv_evaluate(instr, operands, ctx):
    lhs, rhs = operands
    result = instr.shape.dtype
    dn, window, fgc, bgc = _conv_config(instr.operands[0].shape, instr.operands[1].shape, instr.attrs)
    out_order = (dn.output_batch, dn.output_feature, *dn.output_spatial)
    canonical_dims = tuple(instr.shape.dims[d] for d in out_order)
    if prod(canonical_dims) == 0:
        return np.zeros(instr.shape.dims, result.np_dtype)
    x = _accumulation_operand(lhs, result).transpose((dn.input_batch, dn.input_feature, *dn.input_spatial))
    w = _accumulation_operand(rhs, result).transpose(
        (dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial))
    reversed_axes = tuple(2 + k for k, wd in enumerate(window) if wd.reversal)
    if reversed_axes:
        w = np.flip(w, reversed_axes)
    patches = _window_patches(_dilate_and_pad(x, window), window)
    y = _grouped_contraction(patches, w, fgc, bgc)
    # Canonical axis k holds output dimension out_order[k]; put each where the output wants it.
    return _rounded_result(y.transpose(np.argsort(out_order)), result)


register(OpDef("convolution", "opaque", _conv_shape, _conv_evaluate, arity=2,
               required_attrs=("dim_labels",),
               optional_attrs=("window", "feature_group_count", "batch_group_count", "operand_precision"),
               doc="ConvGeneralDilated with padding, base/window dilation, reversal and groups."))
