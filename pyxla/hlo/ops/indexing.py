"""Indexing opcodes: dynamic-slice, dynamic-update-slice, gather and scatter.

Their positions are runtime values, so each defines what happens out of bounds, as XLA
does on CPU:
  - dynamic-slice and dynamic-update-slice clamp the start indices so the slice fits;
  - gather clamps each start index so its whole slice fits in the operand;
  - scatter skips an update window if any part of it would fall outside the operand.

Gather and scatter share XLA's dimension numbers (gather's names / scatter's names):
  window dims        offset_dims / update_window_dims: result (updates) dims of the slice
  collapsed dims     collapsed_slice_dims / inserted_window_dims: size-1 slice dims dropped
  operand batching   operand_batching_dims / input_batching_dims
  indices batching   start_indices_batching_dims / scatter_indices_batching_dims
  index map          start_index_map / scatter_dims_to_operand_dims
  index_vector_dim   the indices dimension holding each index vector; equal to the
                     indices' rank, it is an implicit trailing dimension of size 1.
Every other indices dimension is a batch dimension: one slice (one update window) per
position. An operand batching dim is indexed by the position along its paired indices
batching dim. Both ops are evaluated with whole-array NumPy indexing.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import cast

import numpy as np

from ...errors import ShapeError
from ..shape import ArrayShape, Shape, TupleShape
from .registry import OpDef, register
from .shape_ops import dimension_list, expect_array, expect_attr, expect_same_dtype, int_list


def _join(values) -> str:
    return ",".join(str(v) for v in values)


def _expect_integral(opcode: str, shape: ArrayShape, what: str) -> None:
    if not shape.dtype.is_integral:
        raise ShapeError(f"{opcode}: {what} must have an integer element type, got {shape.to_text(False)}")


def _as_int64(indices: np.ndarray) -> np.ndarray:
    """Integer indices as int64; unsigned values past int64's range saturate, which keeps
    them out of bounds (scatter) or clamps them to the last position (gather)."""
    indices = np.asarray(indices)
    if indices.dtype.kind == "u":
        indices = np.minimum(indices, np.uint64(np.iinfo(np.int64).max))
    return indices.astype(np.int64)


def _row_major_strides(dims) -> np.ndarray:
    strides = np.ones(len(dims), dtype=np.int64)
    for d in range(len(dims) - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]
    return strides


def _flat_positions(starts: np.ndarray, window, dims) -> np.ndarray:
    """Row-major flat positions in an array of `dims` of every element of a `window`-sized
    block starting at each row of `starts` (shape (n, rank)): shape (n, prod(window))."""
    strides = _row_major_strides(dims)
    base = starts @ strides if len(dims) else np.zeros(len(starts), np.int64)
    offsets = np.zeros((), np.int64)
    for size, stride in zip(window, strides):
        offsets = np.add.outer(offsets, np.arange(size, dtype=np.int64) * stride)
    return base[:, None] + offsets.reshape(1, -1)


# --- dynamic-slice and dynamic-update-slice -----------------------------------------------

def _check_start_operands(opcode: str, operand: ArrayShape, starts: list[Shape]) -> None:
    if len(starts) != operand.rank:
        raise ShapeError(f"{opcode}: {len(starts)} start indices given for an operand of rank {operand.rank}")
    for i, s in enumerate(starts):
        s = expect_array(opcode, s, f"start index {i}")
        if s.rank != 0:
            raise ShapeError(f"{opcode}: start index {i} must be a scalar, got {s.to_text(False)}")
        _expect_integral(opcode, s, f"start index {i}")
        first = cast(ArrayShape, starts[0])   # checked at i == 0
        if s.dtype != first.dtype:
            raise ShapeError(f"{opcode}: start indices must share one element type, "
                             f"got {first.dtype} and {s.dtype}")


def _clamped_starts(starts, dims, sizes) -> tuple[int, ...]:
    """Each start clamped to [0, dim - size], so that the slice fits."""
    return tuple(min(max(int(s), 0), d - z) for s, d, z in zip(starts, dims, sizes))


def _block(starts, sizes) -> tuple[slice, ...]:
    return tuple(slice(s, s + z) for s, z in zip(starts, sizes))


def _dynamic_slice_shape(operands, attrs, declared):
    operand = expect_array("dynamic-slice", operands[0])
    _check_start_operands("dynamic-slice", operand, operands[1:])
    sizes = int_list("dynamic-slice", attrs, "dynamic_slice_sizes")
    if len(sizes) != operand.rank:
        raise ShapeError(f"dynamic-slice: dynamic_slice_sizes={{{_join(sizes)}}} must give one size "
                         f"per operand dimension ({operand.rank})")
    for d, (z, size) in enumerate(zip(sizes, operand.dims)):
        if not 0 <= z <= size:
            raise ShapeError(f"dynamic-slice: slice size {z} in dimension {d} does not fit 0..{size}")
    return ArrayShape(operand.dtype, sizes)


def _dynamic_slice_evaluate(instr, operands, ctx):
    x, *starts = operands
    sizes = tuple(instr.attrs["dynamic_slice_sizes"])
    return x[_block(_clamped_starts(starts, x.shape, sizes), sizes)]


def _dynamic_update_slice_shape(operands, attrs, declared):
    operand = expect_array("dynamic-update-slice", operands[0])
    update = expect_array("dynamic-update-slice", operands[1], "update")
    expect_same_dtype("dynamic-update-slice", operand, update, "the update")
    if update.rank != operand.rank or any(u > o for u, o in zip(update.dims, operand.dims)):
        raise ShapeError(f"dynamic-update-slice: update {update.to_text(False)} does not fit in "
                         f"operand {operand.to_text(False)}")
    _check_start_operands("dynamic-update-slice", operand, operands[2:])
    return ArrayShape(operand.dtype, operand.dims)


def _dynamic_update_slice_evaluate(instr, operands, ctx):
    x, update, *starts = operands
    out = np.array(x, copy=True)
    out[_block(_clamped_starts(starts, x.shape, update.shape), update.shape)] = update
    return out


register(OpDef("dynamic-slice", "injective", _dynamic_slice_shape, _dynamic_slice_evaluate,
               arity=(1, None), required_attrs=("dynamic_slice_sizes",),
               doc="A slice of dynamic_slice_sizes at runtime scalar starts, clamped to fit."))

# Updates in place in XLA (the result aliases the operand buffer): "opaque".
register(OpDef("dynamic-update-slice", "opaque", _dynamic_update_slice_shape,
               _dynamic_update_slice_evaluate, arity=(2, None),
               doc="The operand with `update` written at runtime scalar starts, clamped to fit."))


# --- dimension numbers shared by gather and scatter -----------------------------------

@dataclass(frozen=True)
class IndexingDims:
    """Gather's or scatter's dimension numbers under neutral names (see the module doc)."""
    opcode: str
    names: dict          # neutral field name -> the opcode's attribute name, for messages
    window_dims: tuple[int, ...]
    collapsed_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    indices_batching_dims: tuple[int, ...]
    index_map: tuple[int, ...]
    index_vector_dim: int

    @classmethod
    def from_attrs(cls, opcode: str, names: dict, attrs: dict) -> IndexingDims:
        def dims(field, optional=False):
            return int_list(opcode, attrs, names[field], () if optional else None)
        return cls(opcode, names, dims("window_dims"), dims("collapsed_dims"),
                   dims("operand_batching_dims", True), dims("indices_batching_dims", True),
                   dims("index_map"), int(expect_attr(opcode, attrs, "index_vector_dim")))

    def _list(self, field: str, dims, rank: int, ascending: bool = False) -> tuple[int, ...]:
        return dimension_list(self.opcode, self.names[field], dims, rank, ascending)

    def check(self, operand: ArrayShape, indices: ArrayShape) -> None:
        """The checks gather and scatter share (XLA's and StableHLO's constraints)."""
        op, n = self.opcode, self.names
        _expect_integral(op, indices, "the indices")
        if not 0 <= self.index_vector_dim <= indices.rank:
            raise ShapeError(f"{op}: index_vector_dim={self.index_vector_dim} is outside "
                             f"[0, {indices.rank}] for indices {indices.to_text(False)}")
        self._list("collapsed_dims", self.collapsed_dims, operand.rank, ascending=True)
        self._list("operand_batching_dims", self.operand_batching_dims, operand.rank, ascending=True)
        if set(self.collapsed_dims) & set(self.operand_batching_dims):
            raise ShapeError(f"{op}: {n['collapsed_dims']} and {n['operand_batching_dims']} overlap")
        self._list("index_map", self.index_map, operand.rank)
        if set(self.index_map) & set(self.operand_batching_dims):
            raise ShapeError(f"{op}: {n['index_map']} and {n['operand_batching_dims']} overlap")
        if len(self.index_map) != self.index_vector_size(indices):
            raise ShapeError(f"{op}: {n['index_map']}={{{_join(self.index_map)}}} has "
                             f"{len(self.index_map)} entries, but the index vectors have "
                             f"{self.index_vector_size(indices)} elements")
        self._list("indices_batching_dims", self.indices_batching_dims, indices.rank)
        if self.index_vector_dim in self.indices_batching_dims:
            raise ShapeError(f"{op}: index_vector_dim={self.index_vector_dim} cannot be one of "
                             f"{n['indices_batching_dims']}")
        if len(self.operand_batching_dims) != len(self.indices_batching_dims):
            raise ShapeError(f"{op}: {n['operand_batching_dims']} and {n['indices_batching_dims']} "
                             "must have the same length")
        for od, idim in zip(self.operand_batching_dims, self.indices_batching_dims):
            if operand.dims[od] != indices.dims[idim]:
                raise ShapeError(f"{op}: batching dimension {od} of the operand has size "
                                 f"{operand.dims[od]}, its paired indices dimension {idim} has "
                                 f"{indices.dims[idim]}")
        if len(self.window_dims) + len(self.collapsed_dims) + len(self.operand_batching_dims) != operand.rank:
            raise ShapeError(f"{op}: {n['window_dims']}, {n['collapsed_dims']} and "
                             f"{n['operand_batching_dims']} must together have one entry per "
                             f"operand dimension ({operand.rank})")

    def index_vector_size(self, indices: ArrayShape) -> int:
        return indices.dims[self.index_vector_dim] if self.index_vector_dim < indices.rank else 1

    def batch_shape(self, indices_dims: Sequence[int]) -> tuple[int, ...]:
        """The indices' dims without index_vector_dim: one slice per position."""
        return tuple(s for d, s in enumerate(indices_dims) if d != self.index_vector_dim)

    def batch_axis(self, indices_dim: int) -> int:
        """Where indices dimension `indices_dim` sits among the batch dimensions."""
        return indices_dim - (indices_dim > self.index_vector_dim)

    def window_operand_dims(self, rank: int) -> tuple[int, ...]:
        """The operand dims that the window keeps (not collapsed, not batching), ascending."""
        dropped = set(self.collapsed_dims) | set(self.operand_batching_dims)
        return tuple(d for d in range(rank) if d not in dropped)

    def scatter_window(self, rank: int, update_dims: Sequence[int]) -> tuple[int, ...]:
        """A scatter's update window as an extent per operand dimension (1 where the window
        does not reach: collapsed and batching dims)."""
        window = [1] * rank
        for od, d in zip(self.window_operand_dims(rank), self.window_dims):
            window[od] = update_dims[d]
        return tuple(window)

    def full_starts(self, indices: np.ndarray, operand_rank: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """Every slice's start in the operand, one row per batch position (row-major), and
        the batch shape. Index-mapped dims hold the raw indices (not yet clamped or
        checked); batching dims hold the batch position; the others 0."""
        vectors = _as_int64(indices)
        if self.index_vector_dim == vectors.ndim:
            vectors = vectors[..., None]
        vectors = np.moveaxis(vectors, self.index_vector_dim, -1)
        batch_shape = vectors.shape[:-1]
        count = prod(batch_shape)
        starts = np.zeros((count, operand_rank), dtype=np.int64)
        starts[:, list(self.index_map)] = vectors.reshape(count, len(self.index_map))
        if self.operand_batching_dims:
            position = np.unravel_index(np.arange(count), batch_shape)
            for od, idim in zip(self.operand_batching_dims, self.indices_batching_dims):
                starts[:, od] = position[self.batch_axis(idim)]
        return starts, batch_shape


def _interleave(rank: int, placed: tuple[int, ...]) -> list[int]:
    """The permutation that moves axes [others..., placed...] so that the k-th placed axis
    lands on position placed[k] and the others fill the remaining positions in order."""
    others = [p for p in range(rank) if p not in placed]
    perm = [0] * rank
    for j, p in enumerate(others):
        perm[p] = j
    for k, p in enumerate(placed):
        perm[p] = len(others) + k
    return perm


# --- gather ---------------------------------------------------------------------------------

GATHER_NAMES = {"window_dims": "offset_dims", "collapsed_dims": "collapsed_slice_dims",
                "operand_batching_dims": "operand_batching_dims",
                "indices_batching_dims": "start_indices_batching_dims", "index_map": "start_index_map"}


def gather_dims(attrs) -> IndexingDims:
    return IndexingDims.from_attrs("gather", GATHER_NAMES, attrs)


def _gather_shape(operands, attrs, declared):
    operand = expect_array("gather", operands[0])
    indices = expect_array("gather", operands[1], "start indices")
    dn = gather_dims(attrs)
    dn.check(operand, indices)
    sizes = int_list("gather", attrs, "slice_sizes")
    if len(sizes) != operand.rank:
        raise ShapeError(f"gather: slice_sizes={{{_join(sizes)}}} must give one size per operand "
                         f"dimension ({operand.rank})")
    for d, (z, size) in enumerate(zip(sizes, operand.dims)):
        if not 0 <= z <= size:
            raise ShapeError(f"gather: slice size {z} in dimension {d} does not fit 0..{size}")
    for d in dn.collapsed_dims + dn.operand_batching_dims:
        if sizes[d] > 1:
            raise ShapeError(f"gather: dimension {d} is collapsed or batching, so its slice size "
                             f"must be at most 1, got {sizes[d]}")
    batch = dn.batch_shape(indices.dims)
    offsets = tuple(sizes[d] for d in dn.window_operand_dims(operand.rank))
    rank = len(batch) + len(offsets)
    dimension_list("gather", "offset_dims", dn.window_dims, rank, ascending=True)
    dims = batch + offsets
    return ArrayShape(operand.dtype, tuple(dims[p] for p in _interleave(rank, dn.window_dims)))


def _gather_evaluate(instr, operands, ctx):
    x, indices = operands
    dn = gather_dims(instr.attrs)
    sizes = tuple(instr.attrs["slice_sizes"])
    starts, batch_shape = dn.full_starts(indices, x.ndim)
    # Clamp so that each slice fits; batching dims already hold in-range positions.
    mapped = list(dn.index_map)
    starts[:, mapped] = np.clip(starts[:, mapped], 0, np.array([x.shape[d] - sizes[d] for d in mapped]))
    offsets = tuple(sizes[d] for d in dn.window_operand_dims(x.ndim))
    if prod(sizes) == 0 and prod(batch_shape + offsets) != 0:
        raise NotImplementedError("gather with a size-0 collapsed or batching slice dimension "
                                  "and a non-empty result")
    values = x.reshape(-1)[_flat_positions(starts, sizes, x.shape)]
    values = values.reshape(batch_shape + offsets)
    return np.transpose(values, _interleave(values.ndim, dn.window_dims))


register(OpDef("gather", "injective", _gather_shape, _gather_evaluate, arity=2,
               required_attrs=("offset_dims", "collapsed_slice_dims", "start_index_map",
                               "index_vector_dim", "slice_sizes"),
               optional_attrs=("operand_batching_dims", "start_indices_batching_dims",
                               "indices_are_sorted"),
               doc="Slices of slice_sizes at start indices read from an array (clamped to fit)."))


# --- scatter --------------------------------------------------------------------------------

SCATTER_NAMES = {"window_dims": "update_window_dims", "collapsed_dims": "inserted_window_dims",
                 "operand_batching_dims": "input_batching_dims",
                 "indices_batching_dims": "scatter_indices_batching_dims",
                 "index_map": "scatter_dims_to_operand_dims"}


def scatter_dims(attrs) -> IndexingDims:
    return IndexingDims.from_attrs("scatter", SCATTER_NAMES, attrs)


def scatter_operand_groups(operands: list) -> tuple[list, object, list]:
    """(inputs, indices, updates) of scatter(inputs..., indices, updates...)."""
    n = (len(operands) - 1) // 2
    return list(operands[:n]), operands[n], list(operands[n + 1:])


def _check_combiner(comp, dtypes) -> None:
    """to_apply takes (input values..., update values...) as scalars and returns the new
    input values: a scalar for one input, a tuple of scalars for several."""
    scalars = [ArrayShape(t, ()) for t in dtypes]
    params = comp.parameter_shapes()
    expected = scalars + scalars
    if len(params) != len(expected) or not all(p.compatible(e) for p, e in zip(params, expected)):
        raise ShapeError(f"scatter: to_apply {comp.name} must take "
                         f"({', '.join(e.to_text(False) for e in expected)}), takes "
                         f"({', '.join(p.to_text(False) for p in params)})")
    result = scalars[0] if len(scalars) == 1 else TupleShape(tuple(scalars))
    if not comp.result_shape.compatible(result):
        raise ShapeError(f"scatter: to_apply {comp.name} must return {result.to_text(False)}, "
                         f"returns {comp.result_shape.to_text(False)}")


def _scatter_shape(operands, attrs, declared):
    if len(operands) % 2 == 0:
        raise ShapeError(f"scatter takes N inputs, the indices and N updates, got {len(operands)} operands")
    inputs, indices, updates = scatter_operand_groups(operands)
    inputs = [expect_array("scatter", s, f"input {i}") for i, s in enumerate(inputs)]
    updates = [expect_array("scatter", s, f"updates {i}") for i, s in enumerate(updates)]
    indices = expect_array("scatter", indices, "scatter indices")
    operand = inputs[0]
    for i, (x, u) in enumerate(zip(inputs, updates)):
        if x.dims != operand.dims:
            raise ShapeError(f"scatter: input {i} {x.to_text(False)} differs in dimensions from "
                             f"input 0 {operand.to_text(False)}")
        if u.dims != updates[0].dims:
            raise ShapeError(f"scatter: updates {i} {u.to_text(False)} differs in dimensions from "
                             f"updates 0 {updates[0].to_text(False)}")
        expect_same_dtype("scatter", x, u, f"updates {i}")
    dn = scatter_dims(attrs)
    dn.check(operand, indices)
    upd = updates[0]
    dimension_list("scatter", "update_window_dims", dn.window_dims, upd.rank, ascending=True)
    batch = dn.batch_shape(indices.dims)
    if upd.rank != len(batch) + len(dn.window_dims):
        raise ShapeError(f"scatter: updates {upd.to_text(False)} must have {len(batch)} scatter "
                         f"dimensions and {len(dn.window_dims)} window dimensions")
    scatter_sizes = tuple(s for d, s in enumerate(upd.dims) if d not in dn.window_dims)
    if scatter_sizes != batch:
        raise ShapeError(f"scatter: the scatter dimensions of updates {upd.to_text(False)} are "
                         f"{list(scatter_sizes)}, the indices' batch dimensions are {list(batch)}")
    for wd, od in zip(dn.window_dims, dn.window_operand_dims(operand.rank)):
        if upd.dims[wd] > operand.dims[od]:
            raise ShapeError(f"scatter: update window dimension {wd} has size {upd.dims[wd]}, larger "
                             f"than operand dimension {od} ({operand.dims[od]})")
    _check_combiner(expect_attr("scatter", attrs, "to_apply"), [x.dtype for x in inputs])
    if len(inputs) == 1:
        return ArrayShape(operand.dtype, operand.dims)
    return TupleShape(tuple(ArrayShape(x.dtype, x.dims) for x in inputs))


def _rounds_without_repeats(targets: np.ndarray) -> list[np.ndarray]:
    """Positions 0..n-1 of `targets` split into rounds, in order, such that no round hits a
    target twice and the k-th update of any target is in round k: applying the rounds one
    after another applies every target's updates in their original order."""
    n = len(targets)
    if n == 0:
        return []
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    run_start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    run_lengths = np.diff(np.r_[run_start, n])
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - np.repeat(run_start, run_lengths)
    by_round = np.argsort(occurrence, kind="stable")
    return np.split(by_round, np.cumsum(np.bincount(occurrence))[:-1])


def _scatter_evaluate(instr, operands, ctx):
    inputs, indices, updates = scatter_operand_groups(operands)
    dn = scatter_dims(instr.attrs)
    dims = inputs[0].shape
    starts, batch_shape = dn.full_starts(indices, len(dims))
    # The window spans one element of every collapsed and batching dim.
    window = [1] * len(dims)
    for wd, od in zip(dn.window_dims, dn.window_operand_dims(len(dims))):
        window[od] = updates[0].shape[wd]
    window = np.array(window, dtype=np.int64)
    # A window with any element outside the operand is skipped whole (compared as
    # start <= dim - window so that huge starts cannot overflow).
    inside = np.all((starts >= 0) & (starts <= np.array(dims) - window), axis=1)
    targets = _flat_positions(starts[inside], window, dims).reshape(-1)
    # Updates as (batch position, window element), both row-major: the order of application.
    scatter_axes = [d for d in range(updates[0].ndim) if d not in dn.window_dims]
    per_window = (len(starts), int(prod(window)))
    values = [np.transpose(u, scatter_axes + list(dn.window_dims)).reshape(per_window)[inside].reshape(-1)
              for u in updates]
    results = [np.array(x, copy=True).reshape(-1) for x in inputs]
    combiner = instr.attrs["to_apply"]
    for lanes in _rounds_without_repeats(targets):
        hit = targets[lanes]
        combined = ctx.call(combiner, [r[hit] for r in results] + [v[lanes] for v in values])
        if len(results) == 1:
            combined = (combined,)
        for r, c in zip(results, combined):
            r[hit] = np.broadcast_to(c, hit.shape)
    results = [r.reshape(dims) for r in results]
    return results[0] if len(results) == 1 else tuple(results)


# Updates in place in XLA (the result aliases the operand buffer): "opaque".
register(OpDef("scatter", "opaque", _scatter_shape, _scatter_evaluate, arity=(3, None),
               required_attrs=("update_window_dims", "inserted_window_dims",
                               "scatter_dims_to_operand_dims", "index_vector_dim", "to_apply"),
               optional_attrs=("input_batching_dims", "scatter_indices_batching_dims",
                               "indices_are_sorted", "unique_indices"),
               doc="Combines update windows into the inputs at indexed positions with to_apply; "
                   "out-of-bounds windows are skipped, duplicates applied in order."))
