"""Batching rules for dynamic-slice, dynamic-update-slice, gather and scatter.

gather and scatter carry batches in their own dimension numbers: a batched operand gets the
batch as one more window dimension (the whole batch is read or written at every index), a
batched index array as one more batch dimension of the indices, and both as a pair of
batching dimensions (operand_batching_dims / start_indices_batching_dims): example b's
indices read example b's operand.

dynamic-slice and dynamic-update-slice with the same start for every example keep their
opcode (the batch dimension starts at 0 and is taken whole). Starts that differ per example
turn them into a gather and a scatter (which overwrites): XLA clamps a dynamic slice's
start so the slice fits, and gather does the same; scatter would skip an update that does
not fit, so those starts are clamped first.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import lax
from ..autodiff.rule_helpers import overwrite_computation
from ..autodiff.staging import semantic_attrs
from ..frontend.tracing import bind, shape_of
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape
from .interpreter import BATCH_RULES
from .rule_helpers import all_front, batch_size, shifted, to_front, with_batch


def _gather(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    (operand, indices), (od, idx_d) = values, dims
    a = instr.attrs
    attrs = dict(semantic_attrs(instr))
    obd, ibd = a.get("operand_batching_dims", ()), a.get("start_indices_batching_dims", ())
    common = {"collapsed_slice_dims": shifted(a["collapsed_slice_dims"]),
              "start_index_map": shifted(a["start_index_map"])}
    if idx_d is None:   # the batch is a window dimension read whole
        attrs.update(common, offset_dims=(0, *shifted(a["offset_dims"])), slice_sizes=(size, *a["slice_sizes"]))
        if obd:
            attrs["operand_batching_dims"] = shifted(obd)
        operand = to_front(operand, od, size)
    elif od is None:    # the batch is one more batch dimension of the indices
        attrs.update(offset_dims=shifted(a["offset_dims"]), index_vector_dim=a["index_vector_dim"] + 1)
        if ibd:
            attrs["start_indices_batching_dims"] = shifted(ibd)
        indices = to_front(indices, idx_d, size)
    else:               # example b's indices read example b's operand
        attrs.update(common, offset_dims=shifted(a["offset_dims"]), slice_sizes=(1, *a["slice_sizes"]),
                     index_vector_dim=a["index_vector_dim"] + 1, operand_batching_dims=(0, *shifted(obd)),
                     start_indices_batching_dims=(0, *shifted(ibd)))
        operand, indices = to_front(operand, od, size), to_front(indices, idx_d, size)
    return bind("gather", operand, indices, shape=with_batch(instr.shape, size), **attrs), 0


def _scatter(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)
    n = (len(values) - 1) // 2
    a = instr.attrs
    attrs = dict(semantic_attrs(instr))
    ibd, sibd = a.get("input_batching_dims", ()), a.get("scatter_indices_batching_dims", ())
    attrs.update(inserted_window_dims=shifted(a["inserted_window_dims"]),
                 scatter_dims_to_operand_dims=shifted(a["scatter_dims_to_operand_dims"]))
    indices = values[n]
    if dims[n] is None:   # the batch is a window dimension written whole
        attrs["update_window_dims"] = (0, *shifted(a["update_window_dims"]))
        if ibd:
            attrs["input_batching_dims"] = shifted(ibd)
    else:                 # example b's indices write into example b's operand
        attrs.update(update_window_dims=shifted(a["update_window_dims"]),
                     index_vector_dim=a["index_vector_dim"] + 1, input_batching_dims=(0, *shifted(ibd)),
                     scatter_indices_batching_dims=(0, *shifted(sibd)))
        indices = to_front(indices, dims[n], size)
    operands = all_front(values[:n], dims[:n], size)
    updates = all_front(values[n + 1:], dims[n + 1:], size)
    out = bind("scatter", *operands, indices, *updates, shape=with_batch(instr.shape, size), **attrs)
    return out, (tuple([0] * n) if n > 1 else 0)


def _index_vectors(starts: list[Any], dims: list[Any], size: int) -> Any:
    """Scalar starts (some batched) as one s32/s64 array of index vectors, [size, len(starts)]."""
    dtype = np.int64 if any(_dtype(s).itemsize > 4 for s in starts) else np.int32
    columns = [lax.reshape(lax.convert_element_type(to_front(s, d, size), dtype), (size, 1))
               for s, d in zip(starts, dims)]
    return lax.concatenate(columns, 1)


def _dtype(x: Any) -> np.dtype:
    return np.dtype(shape_of(x).dtype.np_dtype)


def _dynamic_slice(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    operand, starts = values[0], values[1:]
    sizes = tuple(instr.attrs["dynamic_slice_sizes"])
    out = with_batch(instr.shape, size)
    if all(d is None for d in dims[1:]):
        zero = np.zeros((), _dtype(starts[0])) if starts else np.zeros((), np.int32)
        return bind("dynamic-slice", to_front(operand, dims[0], size), zero, *starts, shape=out,
                    dynamic_slice_sizes=(size, *sizes)), 0
    indices = _index_vectors(starts, dims[1:], size)
    rank = len(sizes)
    attrs = {"offset_dims": tuple(range(1, rank + 1)), "collapsed_slice_dims": (), "index_vector_dim": 1}
    if dims[0] is None:
        attrs.update(start_index_map=tuple(range(rank)), slice_sizes=sizes)
    else:
        operand = to_front(operand, dims[0], size)
        attrs.update(start_index_map=tuple(range(1, rank + 1)), slice_sizes=(1, *sizes),
                     operand_batching_dims=(0,), start_indices_batching_dims=(0,))
    return bind("gather", operand, indices, shape=out, **attrs), 0


def _dynamic_update_slice(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    starts = values[2:]
    operand, update = all_front(values[:2], dims[:2], size)
    out = with_batch(instr.shape, size)
    if all(d is None for d in dims[2:]):
        zero = np.zeros((), _dtype(starts[0])) if starts else np.zeros((), np.int32)
        return bind("dynamic-update-slice", operand, update, zero, *starts, shape=out), 0
    indices = _index_vectors(starts, dims[2:], size)
    rank = len(starts)
    bounds = np.array([o - u for o, u in zip(instr.operands[0].shape.dims, instr.operands[1].shape.dims)],
                      _dtype(indices))
    indices = lax.clamp(np.zeros((), _dtype(indices)), indices,
                        lax.broadcast_in_dim(bounds, (size, rank), (1,)))
    dtype = instr.shape.dtype
    assert isinstance(instr.shape, ArrayShape)
    return bind("scatter", operand, indices, update, shape=out, update_window_dims=tuple(range(1, rank + 1)),
                inserted_window_dims=(), scatter_dims_to_operand_dims=tuple(range(1, rank + 1)),
                index_vector_dim=1, input_batching_dims=(0,), scatter_indices_batching_dims=(0,),
                to_apply=overwrite_computation(dtype)), 0


BATCH_RULES["gather"] = _gather
BATCH_RULES["scatter"] = _scatter
BATCH_RULES["dynamic-slice"] = _dynamic_slice
BATCH_RULES["dynamic-update-slice"] = _dynamic_update_slice
