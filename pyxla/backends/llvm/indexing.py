"""gather and dynamic-slice as elemental rules, for every LLVM target, and the index
arithmetic the targets' scatter and dynamic-update-slice kernels share.

Semantics are the evaluator's (pyxla/hlo/ops/indexing.py), which are XLA's on CPU: gather
clamps each start index so that its whole slice fits in the operand; dynamic-slice clamps
its starts so that the slice fits. Index values are read as i64: signed types sign-extend,
unsigned zero-extend, and u64 values past i64's range saturate (so they clamp to the last
position, or fall out of bounds).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction
from ...hlo.ops.indexing import IndexingDims, gather_dims
from ...hlo.types import ElementType
from .elemental import RULES, ElementalEmitter, Unsupported, clamp_index
from .ir_types import I64, etype, i64

INT64_MAX = (1 << 63) - 1


# --- index values ------------------------------------------------------------------------------

def index_as_i64(b: ir.IRBuilder, value: ir.Value, t: ElementType) -> ir.Value:
    """An integer index as i64; u64 values past i64's range saturate to its maximum."""
    if t.bits < 64:
        return b.sext(value, I64) if t.is_signed else b.zext(value, I64)
    if t.is_signed:
        return value
    return b.select(b.icmp_signed("<", value, i64(0)), i64(INT64_MAX), value)


def index_vector(e: ElementalEmitter, indices: HloInstruction, dn: IndexingDims, batch: tuple) -> list[ir.Value]:
    """The raw start indices (i64, one per index_map entry) at batch position `batch` (an index
    into the indices' dims without index_vector_dim)."""
    t = etype(indices)
    if dn.index_vector_dim == indices.shape.rank:   # an implicit trailing dimension of size 1
        return [index_as_i64(e.b, e.value(indices, batch), t)]
    at = dn.index_vector_dim
    return [index_as_i64(e.b, e.value(indices, batch[:at] + (i64(k),) + batch[at:]), t)
            for k in range(len(dn.index_map))]


def batch_starts(e: ElementalEmitter, indices: HloInstruction, dn: IndexingDims, rank: int,
                 batch: tuple) -> list[ir.Value]:
    """Every operand dimension's start for batch position `batch`: index-mapped dims hold the
    raw index (not clamped or checked), batching dims the batch position, the others 0."""
    starts = [i64(0)] * rank
    for od, raw in zip(dn.index_map, index_vector(e, indices, dn, batch)):
        starts[od] = raw
    for od, idim in zip(dn.operand_batching_dims, dn.indices_batching_dims):
        starts[od] = batch[dn.batch_axis(idim)]
    return starts


def split_index(index: tuple, window_dims: tuple) -> tuple[tuple, tuple]:
    """(batch part, window part) of an index whose `window_dims` are the window's."""
    window = set(window_dims)
    return (tuple(i for d, i in enumerate(index) if d not in window),
            tuple(index[d] for d in window_dims))


def join_index(batch: tuple, window: tuple, window_dims: tuple) -> tuple:
    """The inverse of split_index."""
    rank = len(batch) + len(window)
    placed = dict(zip(window_dims, window))
    rest = iter(batch)
    return tuple(placed[d] if d in placed else next(rest) for d in range(rank))


def at_window(b: ir.IRBuilder, starts: list, window: tuple, window_operand_dims: tuple) -> tuple:
    """The operand index of window element `window` of a window starting at `starts`."""
    index = list(starts)
    for od, w in zip(window_operand_dims, window):
        index[od] = b.add(index[od], w)
    return tuple(index)


# --- gather: an elemental rule ---------------------------------------------------------------------

def _gather(e: ElementalEmitter, instr, index):
    b = e.b
    operand, indices = instr.operands
    dn = gather_dims(instr.attrs)
    sizes = tuple(instr.attrs["slice_sizes"])
    dims = operand.shape.dims
    if 0 in sizes and instr.shape.size:
        raise Unsupported(f"the CPU backend cannot emit a gather with a size-0 collapsed or batching slice "
                          f"dimension and a non-empty result ({instr.describe()})")
    batch, window = split_index(index, dn.window_dims)
    starts = batch_starts(e, indices, dn, operand.shape.rank, batch)
    for od in dn.index_map:   # clamped so that the slice fits
        starts[od] = clamp_index(b, starts[od], dims[od] - sizes[od] + 1)
    return e.value(operand, at_window(b, starts, window, dn.window_operand_dims(operand.shape.rank)))


# --- dynamic-slice: an elemental rule ------------------------------------------------------------

def clamped_starts(e: ElementalEmitter, start_values, dims: tuple, sizes: tuple) -> list[ir.Value]:
    """dynamic-slice's and dynamic-update-slice's scalar starts, clamped so that `sizes` fit."""
    return [clamp_index(e.b, index_as_i64(e.b, e.value(s, ()), etype(s)), n - size + 1)
            for s, n, size in zip(start_values, dims, sizes)]


def _dynamic_slice(e: ElementalEmitter, instr, index):
    operand, *start_values = instr.operands
    starts = clamped_starts(e, start_values, operand.shape.dims, tuple(instr.attrs["dynamic_slice_sizes"]))
    return e.value(operand, tuple(e.b.add(s, i) for s, i in zip(starts, index)))


RULES["gather"] = _gather
RULES["dynamic-slice"] = _dynamic_slice
