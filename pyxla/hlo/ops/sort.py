"""Sorting: sort (driven by a comparator computation), topk and the TopK custom-call.

The comparator is an arbitrary scalar computation, so sorting cannot be left to NumPy's
argsort: NaN and -0 handling, total order and multi-key ties are whatever the comparator
says. One engine does all three opcodes: a bottom-up merge sort over the sort dimension
that asks its `less` question on arrays of lanes, all rows and all merges of a level at
once. Each element of a left run finds its place in the right run by binary search, so a
sort of n elements costs about log2(n)^2 / 2 comparator evaluations, independent of how
many rows there are. The merge puts left-run elements before equal right-run elements,
so the sort is stable; that satisfies is_stable=true and is one valid order otherwise.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ShapeError
from ..shape import ArrayShape, TupleShape
from ..types import PRED, S32
from .reduction import call_on_lanes, scalar_signature
from .registry import OpDef, register, register_custom_call

if TYPE_CHECKING:
    from ..computation import HloComputation
    from ..evaluator import EvalContext

# less(lhs_columns, rhs_columns) -> bool array: whether lhs sorts strictly before rhs, lane by lane.
Less = Callable[[list[np.ndarray], list[np.ndarray]], np.ndarray]


# --- the engine -------------------------------------------------------------------------


def stable_sort_order(columns: list[np.ndarray], less: Less) -> np.ndarray:
    """The permutation that stably sorts each row of `columns` (arrays of shape (rows, n)).

    Returns `order` of shape (rows, n): row r sorted is columns[k][r, order[r]].
    """
    rows, n = columns[0].shape
    order = np.broadcast_to(np.arange(n), (rows, n)).copy()
    width = 1
    while width < n:
        current = [np.take_along_axis(c, order, axis=1) for c in columns]
        order = np.take_along_axis(order, _merge_runs(current, width, less), axis=1)
        width *= 2
    return order


def _merge_runs(columns: list[np.ndarray], width: int, less: Less) -> np.ndarray:
    """Merge each pair of sorted runs of `width`; returns, per output slot, its source position.

    An element of a left run A moves right by the number of right-run (B) elements that
    sort strictly before it; B elements then fill the remaining slots in their own order.
    That is the merge for any strict weak order, and still a permutation for a comparator
    that is not one (the counts are forced non-decreasing along each run).
    """
    rows, n = columns[0].shape
    position = np.arange(n)
    block = position // (2 * width) * (2 * width)
    b_start = block + width
    b_len = np.clip(n - b_start, 0, width)
    moves = ((position - block) < width) & (b_len > 0)
    a_pos = position[moves]
    a_cols = [c[:, a_pos] for c in columns]

    lo = np.zeros((rows, a_pos.size), dtype=np.int64)
    hi = np.broadcast_to(b_len[a_pos], lo.shape).copy()
    last_b = b_start[a_pos] + b_len[a_pos] - 1
    while True:
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        b_index = np.minimum(b_start[a_pos] + mid, last_b)
        b_cols = [np.take_along_axis(c, b_index, axis=1) for c in columns]
        b_first = less(b_cols, a_cols)
        lo = np.where(active & b_first, mid + 1, lo)
        hi = np.where(active & ~b_first, mid, hi)

    # Offsetting each block by more than any count lets one running maximum stay per block.
    offset = (a_pos // (2 * width)) * (width + 1)
    before = np.maximum.accumulate(lo + offset, axis=1) - offset
    source = np.empty((rows, n), dtype=np.int64)
    taken = np.zeros((rows, n), dtype=bool)
    row = np.arange(rows)[:, None]
    source[row, a_pos + before] = a_pos
    taken[row, a_pos + before] = True
    source[~taken] = np.tile(position[~moves], rows)
    return source


def sort_along(arrays: list[np.ndarray], dimension: int, less: Less) -> list[np.ndarray]:
    """`arrays` (same shape) sorted together along `dimension` by `less` on their values."""
    if arrays[0].size == 0:
        return [a.copy() for a in arrays]
    n = arrays[0].shape[dimension]
    rows = [np.moveaxis(a, dimension, -1).reshape(-1, n) for a in arrays]
    order = stable_sort_order(rows, less)
    moved_shape = np.moveaxis(arrays[0], dimension, -1).shape
    return [np.moveaxis(np.take_along_axis(r, order, axis=1).reshape(moved_shape), -1, dimension)
            for r in rows]


def comparator_less(ctx: EvalContext, comparator: HloComputation) -> Less:
    """`less` from an HLO comparator taking (lhs_0, rhs_0, lhs_1, rhs_1, ...)."""
    def less(lhs, rhs):
        args = [v for pair in zip(lhs, rhs) for v in pair]
        (result,) = call_on_lanes(ctx, comparator, args, lhs[0].shape)
        return result.astype(bool)
    return less


# --- sort -------------------------------------------------------------------------------


def _sort_shape(operands, attrs, declared):
    for i, s in enumerate(operands):
        if not isinstance(s, ArrayShape):
            raise ShapeError(f"sort: operand {i} must be an array, got {s.to_text(False)}")
        if s.dims != operands[0].dims:
            raise ShapeError(f"sort: all operands must have the same dimensions, "
                             f"got {operands[0].to_text(False)} and {s.to_text(False)}")
    dims = tuple(attrs.get("dimensions", ()))
    if len(dims) != 1 or not 0 <= dims[0] < operands[0].rank:
        raise ShapeError(f"sort: dimensions= must name one dimension of the rank-{operands[0].rank} "
                         f"operands, got {{{','.join(map(str, dims))}}}")
    comparator = attrs.get("to_apply")
    if comparator is None:
        raise ShapeError("sort needs the attribute to_apply=")
    params, results, is_tuple = scalar_signature("sort comparator", comparator)
    expected = [s.dtype for s in operands for _ in range(2)]
    if params != expected or is_tuple or results != [PRED]:
        raise ShapeError(f"sort: comparator {comparator.name} must be "
                         f"({', '.join(t.name for t in expected)}) -> pred, got "
                         f"({', '.join(t.name for t in params)}) -> {comparator.result_shape.to_text(False)}")
    if len(operands) == 1:
        return ArrayShape(operands[0].dtype, operands[0].dims)
    return TupleShape(tuple(ArrayShape(s.dtype, s.dims) for s in operands))


def _sort_evaluate(instr, operands, ctx):
    (dimension,) = instr.attrs["dimensions"]
    result = sort_along(list(operands), dimension, comparator_less(ctx, instr.attrs["to_apply"]))
    return tuple(result) if isinstance(instr.shape, TupleShape) else result[0]


register(OpDef("sort", "opaque", _sort_shape, _sort_evaluate, arity=(1, None),
               required_attrs=("dimensions", "to_apply"), optional_attrs=("is_stable",),
               doc="Sorts operands together along one dimension, ordered by a comparator computation."))


# --- topk -------------------------------------------------------------------------------


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Integers that order like `x` in IEEE total order (-NaN < -inf < ... < -0 < +0 < ... < NaN).

    Floats: the bit pattern read as a signed integer, with the magnitude bits of negative
    values flipped. Integers and pred order as they are.
    """
    if x.dtype.kind in "iub":
        return x
    bits = x.view(np.dtype(f"int{x.dtype.itemsize * 8}"))
    magnitude = np.array(np.iinfo(bits.dtype).max, dtype=bits.dtype)
    return np.where(bits < 0, bits ^ magnitude, bits)


def _topk_shape(operands, attrs, declared):
    (x,) = operands
    if not (isinstance(x, ArrayShape) and x.rank >= 1):
        raise ShapeError(f"topk takes an array of rank >= 1, got {x.to_text(False)}")
    k = attrs.get("k")
    if k is None or not 0 <= k <= x.dims[-1]:
        raise ShapeError(f"topk: k={k} must be between 0 and the last dimension ({x.dims[-1]})")
    dims = x.dims[:-1] + (k,)
    return TupleShape((ArrayShape(x.dtype, dims), ArrayShape(S32, dims)))


def _first_k(values: np.ndarray, keys: np.ndarray | None, k: int, less: Less) -> tuple[np.ndarray, np.ndarray]:
    """The first k values along the last dimension in `less` order, and their s32 indices.

    `less` sees (key, index) lanes, or (value, index) lanes when `keys` is None. The sort is
    stable, so ties keep the lower index first.
    """
    indices = np.broadcast_to(np.arange(values.shape[-1], dtype=np.int32), values.shape)
    _, order = sort_along([values if keys is None else keys, indices], values.ndim - 1, less)
    order = order[..., :k]
    return np.take_along_axis(values, order, axis=-1), order.copy()


def _topk_evaluate(instr, operands, ctx):
    (x,) = operands
    largest = instr.attrs.get("largest", True)

    def less(lhs, rhs):   # total order: NaN above +inf, -0 below +0, as XLA's TopK comparator
        return lhs[0] > rhs[0] if largest else lhs[0] < rhs[0]

    return _first_k(x, total_order_key(x), instr.attrs["k"], less)


register(OpDef("topk", "opaque", _topk_shape, _topk_evaluate, arity=1, required_attrs=("k",),
               optional_attrs=("largest",),
               doc="The k largest (or smallest) entries of each row and their s32 indices, ties to the lower index."))


def _topk_custom_call(instr, operands, ctx):
    """XLA CPU's TopK custom-call: the first k of each row under its comparator, with s32 indices.

    The comparator takes (value_lhs, value_rhs) or (value_lhs, value_rhs, index_lhs,
    index_rhs); k is the last dimension of the result.
    """
    (x,) = operands
    (comparator,) = instr.attrs["called_computations"]
    compare = comparator_less(ctx, comparator)
    takes_indices = len(comparator.parameter_shapes()) == 4

    def less(lhs, rhs):
        return compare(lhs, rhs) if takes_indices else compare(lhs[:1], rhs[:1])

    return _first_k(x, None, instr.shape.elements[0].dims[-1], less)


register_custom_call("TopK", _topk_custom_call)
