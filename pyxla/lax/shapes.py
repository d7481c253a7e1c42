"""Data movement: broadcast, reshape, transpose, slices, concatenate, pad, rev, iota.

Each function emits one HLO instruction (or none, when the result is the operand), with
JAX's signatures. `broadcast_in_dim` also stretches size-1 dimensions, which XLA's
broadcast cannot: like JAX, it reshapes them away first.
"""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import TraceError
from ..frontend.shape_poly import as_dim
from ..frontend.tracing import Tracer, bind, where
from ..hlo.attributes import PadDim, SliceDim
from ..hlo.shape import ArrayShape
from ..hlo.types import S32
from ._values import (
    as_type,
    aval,
    canonical_axis,
    convert,
    element_type,
    is_python_scalar,
    is_weak,
    op_error,
    unify_types,
)


def _ints(values) -> tuple[int, ...]:
    """Sizes or positions as ints; symbolic sizes (shape-polymorphic traces) stay DimExprs."""
    return tuple(as_dim(v) for v in values)


# --- broadcast ------------------------------------------------------------------------

def broadcast_in_dim(operand: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Any:
    """`operand` with dimension i placed at result dimension broadcast_dimensions[i]; a
    size-1 operand dimension may stretch to any size."""
    a = aval(operand)
    shape, dims = _ints(shape), _ints(broadcast_dimensions)
    if len(dims) != a.rank:
        raise op_error("broadcast", [operand], f"broadcast_dimensions {list(dims)} must name one result "
                                               f"dimension per operand dimension ({a.rank})")
    if a.dims == shape and dims == tuple(range(len(shape))):
        return operand
    stretched = [i for i, d in enumerate(dims) if a.dims[i] == 1 and d < len(shape) and shape[d] != 1]
    if stretched:
        operand = reshape(operand, [s for i, s in enumerate(a.dims) if i not in stretched])
        dims = tuple(d for i, d in enumerate(dims) if i not in stretched)
    return bind("broadcast", operand, shape=ArrayShape(a.dtype, shape), dimensions=dims)


def broadcast(operand: Any, sizes: Sequence[int]) -> Any:
    """`operand` repeated along new leading dimensions of `sizes`."""
    a = aval(operand)
    sizes = _ints(sizes)
    return broadcast_in_dim(operand, sizes + a.dims, range(len(sizes), len(sizes) + a.rank))


def broadcast_to_rank_of(operand: Any, shape: Sequence[int]) -> Any:
    """NumPy-style broadcasting of `operand` to `shape` (trailing dimensions aligned)."""
    a = aval(operand)
    shape = _ints(shape)
    return broadcast_in_dim(operand, shape, range(len(shape) - a.rank, len(shape)))


# --- reshape and transpose --------------------------------------------------------------

def reshape(operand: Any, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None) -> Any:
    """The elements of `operand` (first transposed by `dimensions`, if given) in row-major
    order with dimensions `new_sizes`."""
    if dimensions is not None:
        operand = transpose(operand, dimensions)
    a = aval(operand)
    new_sizes = _ints(new_sizes)
    if new_sizes == a.dims:
        return operand
    return bind("reshape", operand, shape=ArrayShape(a.dtype, new_sizes))


def transpose(operand: Any, permutation: Sequence[int]) -> Any:
    permutation = _ints(permutation)
    if permutation == tuple(range(aval(operand).rank)):
        return operand
    return bind("transpose", operand, dimensions=permutation)


def squeeze(array: Any, dimensions: Sequence[int]) -> Any:
    """`array` without the given size-1 dimensions."""
    a = aval(array)
    dims = {canonical_axis("squeeze", d, a.rank) for d in dimensions}
    for d in dims:
        if a.dims[d] != 1:
            raise op_error("squeeze", [array], f"dimension {d} has size {a.dims[d]}, not 1")
    return reshape(array, [s for d, s in enumerate(a.dims) if d not in dims])


def expand_dims(array: Any, dimensions: Sequence[int]) -> Any:
    """`array` with size-1 dimensions inserted at `dimensions` (positions in the result)."""
    a = aval(array)
    rank = a.rank + len(dimensions)
    dims = {canonical_axis("expand_dims", d, rank) for d in dimensions}
    sizes = iter(a.dims)
    return reshape(array, [1 if d in dims else next(sizes) for d in range(rank)])


# --- slices ---------------------------------------------------------------------------

def slice(operand: Any, start_indices: Sequence[int], limit_indices: Sequence[int],
          strides: Sequence[int] | None = None) -> Any:
    strides = strides or [1] * len(start_indices)
    spec = tuple(SliceDim(int(s), int(e), int(k)) for s, e, k in zip(start_indices, limit_indices, strides))
    if (len(spec) != aval(operand).rank or len(limit_indices) != len(start_indices)
            or len(strides) != len(start_indices)):
        raise op_error("slice", [operand], f"start_indices {list(start_indices)}, limit_indices "
                                           f"{list(limit_indices)} and strides {list(strides)} must give "
                                           "one entry per operand dimension")
    return bind("slice", operand, slice=spec)


def slice_in_dim(operand: Any, start_index: int | None, limit_index: int | None, stride: int = 1,
                 axis: int = 0) -> Any:
    """A slice along one axis; None and negative indices count as in Python."""
    a = aval(operand)
    axis = canonical_axis("slice_in_dim", axis, a.rank)
    start, limit, _ = builtins.slice(start_index, limit_index).indices(a.dims[axis])
    starts, limits, strides = [0] * a.rank, list(a.dims), [1] * a.rank
    starts[axis], limits[axis], strides[axis] = start, max(limit, start), int(stride)
    return slice(operand, starts, limits, strides)


def index_in_dim(operand: Any, index: int, axis: int = 0, keepdims: bool = True) -> Any:
    a = aval(operand)
    axis = canonical_axis("index_in_dim", axis, a.rank)
    index = int(index)
    if index < 0:
        index += a.dims[axis]
    out = slice_in_dim(operand, index, index + 1, 1, axis)
    return out if keepdims else squeeze(out, [axis])


def _start_scalars(opcode: str, operand: Any, start_indices: Any) -> list[Any]:
    """Start indices as scalars of one integer type (XLA wants that): a sequence of
    scalars, or a 1-D array split into its elements."""
    rank = aval(operand).rank
    if isinstance(start_indices, Tracer) or isinstance(start_indices, np.ndarray):
        if aval(start_indices).rank != 1:
            raise op_error(opcode, [operand, start_indices], "start indices must be a sequence of "
                                                             "scalars or a 1-D array")
        start_indices = [reshape(slice(start_indices, [i], [i + 1]), ()) for i in range(aval(start_indices).dims[0])]
    starts = list(start_indices)
    if len(starts) != rank:
        raise op_error(opcode, [operand], f"{len(starts)} start indices given for an operand of rank {rank}")
    types = {aval(s).dtype for s in starts if not is_python_scalar(s)}
    if any(not t.is_integral for t in types) or any(isinstance(s, float) for s in starts):
        raise op_error(opcode, [operand] + starts, "start indices must be integers")
    # One type for all: theirs if they agree, else s32 (JAX converts the same way).
    target = next(iter(types)) if len(types) == 1 else S32
    return [as_type(opcode, s, target) if is_python_scalar(s) else convert(s, target) for s in starts]


def dynamic_slice(operand: Any, start_indices: Any, slice_sizes: Sequence[int]) -> Any:
    """A slice of `slice_sizes` at runtime starts, clamped so that it fits (XLA)."""
    starts = _start_scalars("dynamic-slice", operand, start_indices)
    return bind("dynamic-slice", operand, *starts, dynamic_slice_sizes=_ints(slice_sizes))


def dynamic_update_slice(operand: Any, update: Any, start_indices: Any) -> Any:
    """`operand` with `update` written at runtime starts, clamped so that it fits (XLA)."""
    operand, update = unify_types("dynamic-update-slice", [operand, update])
    starts = _start_scalars("dynamic-update-slice", operand, start_indices)
    return bind("dynamic-update-slice", operand, update, *starts)


def _starts_along(axis: int, rank: int, index: Any) -> list[Any]:
    return [index if d == axis else 0 for d in range(rank)]


def dynamic_slice_in_dim(operand: Any, start_index: Any, slice_size: int, axis: int = 0) -> Any:
    a = aval(operand)
    axis = canonical_axis("dynamic_slice_in_dim", axis, a.rank)
    sizes = list(a.dims)
    sizes[axis] = int(slice_size)
    return dynamic_slice(operand, _starts_along(axis, a.rank, start_index), sizes)


def dynamic_index_in_dim(operand: Any, index: Any, axis: int = 0, keepdims: bool = True) -> Any:
    """Element `index` (a runtime scalar) along `axis`."""
    a = aval(operand)
    axis = canonical_axis("dynamic_index_in_dim", axis, a.rank)
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else squeeze(out, [axis])


def dynamic_update_index_in_dim(operand: Any, update: Any, index: Any, axis: int) -> Any:
    """`operand` with element `index` along `axis` replaced by `update` (which may lack that axis)."""
    a = aval(operand)
    axis = canonical_axis("dynamic_update_index_in_dim", axis, a.rank)
    if aval(update).rank == a.rank - 1:
        update = expand_dims(update, [axis])
    return dynamic_update_slice(operand, update, _starts_along(axis, a.rank, index))


# --- concatenate, pad, rev --------------------------------------------------------------

def concatenate(operands: Sequence[Any], dimension: int) -> Any:
    operands = unify_types("concatenate", list(operands))
    if len(operands) == 1:
        return operands[0]
    dimension = canonical_axis("concatenate", dimension, aval(operands[0]).rank)
    return bind("concatenate", *operands, dimensions=(dimension,))


def pad(operand: Any, padding_value: Any, padding_config: Sequence[tuple[int, int, int]]) -> Any:
    """XLA's pad: per dimension (low, high, interior); negative low/high crop."""
    operand, padding_value = unify_types("pad", [operand, padding_value])
    config = tuple(PadDim(int(lo), int(hi), int(interior)) for lo, hi, interior in padding_config)
    return bind("pad", operand, padding_value, padding=config)


def rev(operand: Any, dimensions: Sequence[int]) -> Any:
    """`operand` with the order of elements reversed along `dimensions`."""
    rank = aval(operand).rank
    dims = tuple(canonical_axis("rev", d, rank) for d in dimensions)
    if not dims:
        return operand
    return bind("reverse", operand, dimensions=dims)


# --- iota and full ----------------------------------------------------------------------

def broadcasted_iota(dtype: Any, shape: Sequence[int], dimension: int) -> Any:
    """Element indices along `dimension`, as `dtype`, in an array of `shape`."""
    shape = _ints(shape)
    dimension = canonical_axis("broadcasted_iota", dimension, len(shape))
    return bind("iota", shape=ArrayShape(element_type(dtype), shape), iota_dimension=dimension)


def iota(dtype: Any, size: int) -> Any:
    """0, 1, ..., size-1 as `dtype`."""
    return broadcasted_iota(dtype, (as_dim(size),), 0)


def full(shape: Sequence[int], fill_value: Any, dtype: Any = None) -> Any:
    """An array of `shape` filled with `fill_value` (a scalar, possibly traced)."""
    if dtype is not None:
        etype = element_type(dtype)
        fill_value = as_type("full", fill_value, etype) if is_weak(fill_value) else convert(fill_value, etype)
    elif not isinstance(fill_value, Tracer):
        fill_value = np.asarray(fill_value)
    if aval(fill_value).rank != 0:
        raise TraceError(f"full: fill_value must be a scalar, got {aval(fill_value).to_text(False)}{where()}")
    return broadcast(fill_value, shape)


def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Sequence[int] | None = None) -> Any:
    a = aval(x)
    return full(a.dims if shape is None else shape, fill_value, a.dtype if dtype is None else dtype)

