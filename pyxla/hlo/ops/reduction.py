"""Reductions: reduce, reduce-window and select-and-scatter.

Each of these applies a scalar computation (the reducer, or select/scatter) many times.
The evaluator never calls it per element: it calls it once per step on arrays of lanes,
one lane per output position, so a reduce over n elements costs O(log n) evaluations
of the reducer and a window op one evaluation per window offset.

Order of combination. XLA leaves it implementation-defined (reducers are meant to be
associative with the init value as identity). We fold pairwise, as a balanced tree that
keeps operand order (the left argument always holds the earlier elements, and the init
value is the leftmost leaf). Two reasons: a float sum's rounding error grows with the tree
depth, O(log n) ulp, instead of O(n) ulp for a sequential fold, so we stay inside the
corpus tolerances on long sums; and because order is kept, reducers that are associative
but not commutative still give XLA's answer exactly (argmax/argmin pick the lowest index
on ties because their reducer says so, and any order-respecting fold agrees with it).
A mixed-precision reducer (accumulator type differs from the element type) cannot be
folded as a tree, since partial results would have to pass through the element
parameter; it is folded sequentially, as XLA's CPU loops do.
"""
from __future__ import annotations

import itertools
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ShapeError
from ..attributes import WindowDim
from ..shape import ArrayShape, Shape, TupleShape
from ..types import ElementType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..computation import HloComputation
    from ..evaluator import EvalContext

# --- called scalar computations ---------------------------------------------------------


def scalar_signature(what: str, comp: HloComputation) -> tuple[list[ElementType], list[ElementType], bool]:
    """(parameter types, result types, whether the root is a tuple) of a scalar computation.

    Reducers, comparators and select/scatter functions take and return scalars only;
    anything else is a ShapeError naming the computation.
    """
    param_types: list[ElementType] = []
    for i, p in enumerate(comp.parameter_shapes()):
        if not (isinstance(p, ArrayShape) and p.rank == 0):
            raise ShapeError(f"{what} computation {comp.name}: parameter {i} must be a scalar, "
                             f"got {p.to_text(False)}")
        param_types.append(p.dtype)
    result = comp.result_shape
    is_tuple = isinstance(result, TupleShape)
    leaves = list(result.elements) if isinstance(result, TupleShape) else [result]
    result_types: list[ElementType] = []
    for leaf in leaves:
        if not (isinstance(leaf, ArrayShape) and leaf.rank == 0):
            raise ShapeError(f"{what} computation {comp.name} must return scalars, "
                             f"got {result.to_text(False)}")
        result_types.append(leaf.dtype)
    return param_types, result_types, is_tuple


def call_on_lanes(ctx: EvalContext, comp: HloComputation, args: list[np.ndarray],
                  lanes: tuple[int, ...]) -> list[np.ndarray]:
    """Evaluate scalar computation `comp` on arrays of lanes; its results as a list of arrays.

    Arguments are converted to the parameters' element types; results are broadcast to
    `lanes` (a computation may return a constant, which has no lanes of its own).
    """
    param_types, result_types, _ = scalar_signature("called", comp)
    args = [np.asarray(a).astype(t.np_dtype, copy=False) for a, t in zip(args, param_types)]
    out = ctx.call(comp, args)
    values = list(out) if isinstance(out, tuple) else [out]
    return [np.broadcast_to(np.asarray(v).astype(t.np_dtype, copy=False), lanes)
            for v, t in zip(values, result_types)]


def _same_ignoring_precision(a: ElementType, b: ElementType) -> bool:
    return a == b or (a.is_float and b.is_float)


def _check_reducer(opcode: str, comp, input_types: list[ElementType],
                   init_types: list[ElementType]) -> tuple[list[ElementType], bool]:
    """XLA's reducer rule for N inputs: (acc_1..acc_N, x_1..x_N) -> acc or (acc_1..acc_N).

    Accumulators have the init values' types, which may differ from the inputs' only in float
    precision (bf16 summed in f32); an element parameter has its input's type. Returns (result
    types, whether the result is a tuple).
    """
    n = len(input_types)
    params, results, is_tuple = scalar_signature(f"{opcode} to_apply", comp)
    if len(params) != 2 * n:
        raise ShapeError(f"{opcode}: reducer {comp.name} takes {len(params)} parameters, "
                         f"expected {2 * n} (an accumulator and an element per operand)")
    if len(results) != n or (n > 1 and not is_tuple):
        raise ShapeError(f"{opcode}: reducer {comp.name} returns {comp.result_shape.to_text(False)}, "
                         f"expected {n} scalar(s)" + (" in a tuple" if n > 1 else ""))
    for i in range(n):
        if not (results[i] == params[i] == init_types[i]):
            raise ShapeError(f"{opcode}: accumulator {i} of {comp.name} is {params[i]} -> {results[i]}, "
                             f"but init value {i} is {init_types[i]}")
        if not _same_ignoring_precision(init_types[i], input_types[i]):
            raise ShapeError(f"{opcode}: operand {i} is {input_types[i]}, but init value {i} and the "
                             f"accumulator of {comp.name} are {init_types[i]}")
        # The element parameter takes the operand's elements as they are: a reducer of another
        # width (an f32 reducer over f64 elements) would need a convert nobody wrote.
        if params[n + i] != input_types[i]:
            raise ShapeError(f"{opcode}: operand {i} is {input_types[i]}, but reducer {comp.name} takes "
                             f"{params[n + i]} elements (parameter {n + i})")
    return results, is_tuple


def _split_inputs_and_inits(opcode: str, operands: list[Shape]) -> tuple[list[ArrayShape], list[ArrayShape]]:
    """The N arrays and N scalar init values of a variadic reduction, checked."""
    if len(operands) % 2:
        raise ShapeError(f"{opcode} takes as many init values as operands, got {len(operands)} in all")
    n = len(operands) // 2
    inputs: list[ArrayShape] = []
    for i, s in enumerate(operands[:n]):
        if not isinstance(s, ArrayShape):
            raise ShapeError(f"{opcode}: operand {i} must be an array, got {s.to_text(False)}")
        inputs.append(s)
        if s.dims != inputs[0].dims:
            raise ShapeError(f"{opcode}: all operands must have the same dimensions, "
                             f"got {inputs[0].to_text(False)} and {s.to_text(False)}")
    inits: list[ArrayShape] = []
    for i, s in enumerate(operands[n:]):
        if not (isinstance(s, ArrayShape) and s.rank == 0):
            raise ShapeError(f"{opcode}: init value {i} must be a scalar, got {s.to_text(False)}")
        inits.append(s)
    return inputs, inits


def _results_shape(dtypes: list[ElementType], dims: tuple[int, ...], is_tuple: bool) -> Shape:
    arrays = [ArrayShape(t, dims) for t in dtypes]
    return TupleShape(tuple(arrays)) if is_tuple else arrays[0]


def _computation(attrs: dict, name: str, opcode: str):
    comp = attrs.get(name)
    if comp is None:
        raise ShapeError(f"{opcode} needs the attribute {name}=")
    return comp


# --- folding lanes ----------------------------------------------------------------------


def fold_lanes(ctx: EvalContext, comp: HloComputation, inits: list[np.ndarray],
               xs: list[np.ndarray]) -> list[np.ndarray]:
    """Reduce the last axis of each array in `xs` with reducer `comp`, starting from `inits`.

    xs[i] has shape lanes + (n,); the result is N arrays of shape lanes. An empty last axis
    gives the init values.
    """
    lanes = xs[0].shape[:-1]
    param_types, _, _ = scalar_signature("reducer", comp)
    n_ops = len(xs)
    accs = [np.broadcast_to(np.asarray(v).astype(t.np_dtype), lanes)
            for v, t in zip(inits, param_types[:n_ops])]
    xs = [x.astype(t.np_dtype, copy=False) for x, t in zip(xs, param_types[n_ops:])]
    if xs[0].shape[-1] == 0:
        return [np.array(a) for a in accs]
    if param_types[:n_ops] == param_types[n_ops:]:
        xs = _pairwise_fold(ctx, comp, xs)
        return call_on_lanes(ctx, comp, accs + [x[..., 0] for x in xs], lanes)
    for k in range(xs[0].shape[-1]):
        accs = call_on_lanes(ctx, comp, accs + [x[..., k] for x in xs], lanes)
    return accs


def _pairwise_fold(ctx, comp, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Combine neighbours (0,1), (2,3), ... until one element is left; order is kept."""
    while xs[0].shape[-1] > 1:
        n = xs[0].shape[-1]
        even = n - n % 2
        left = [x[..., 0:even:2] for x in xs]
        right = [x[..., 1:even:2] for x in xs]
        combined = call_on_lanes(ctx, comp, left + right, left[0].shape)
        if n % 2:   # the odd one out moves up a level unchanged, still last
            combined = [np.concatenate([c, x[..., n - 1:]], axis=-1) for c, x in zip(combined, xs)]
        xs = combined
    return xs


# --- reduce -----------------------------------------------------------------------------


def _reduced_dims(attrs: dict, rank: int) -> tuple[int, ...]:
    dims = tuple(attrs.get("dimensions", ()))
    if len(set(dims)) != len(dims):
        raise ShapeError(f"reduce: dimensions={{{','.join(map(str, dims))}}} repeats a dimension")
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"reduce: dimension {d} is out of range for an operand of rank {rank}")
    return dims


def _reduce_shape(operands, attrs, declared):
    inputs, inits = _split_inputs_and_inits("reduce", operands)
    reduced = _reduced_dims(attrs, inputs[0].rank)
    dtypes, is_tuple = _check_reducer("reduce", _computation(attrs, "to_apply", "reduce"),
                                      [s.dtype for s in inputs], [s.dtype for s in inits])
    kept = tuple(d for i, d in enumerate(inputs[0].dims) if i not in reduced)
    return _results_shape(dtypes, kept, is_tuple)


def _reduce_evaluate(instr, operands, ctx):
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    rank = inputs[0].ndim
    reduced = sorted(instr.attrs["dimensions"])
    kept = [d for d in range(rank) if d not in reduced]
    kept_dims = tuple(inputs[0].shape[d] for d in kept)
    count = prod(inputs[0].shape[d] for d in reduced)
    # Reduced dims last, in row-major order, so lane position k is the k-th element in
    # index order (what "lowest index" means for argmax ties).
    xs = [np.transpose(x, kept + reduced).reshape(kept_dims + (count,)) for x in inputs]
    results = fold_lanes(ctx, instr.attrs["to_apply"], inits, xs)
    results = [np.array(r) for r in results]
    return tuple(results) if isinstance(instr.shape, TupleShape) else results[0]


register(OpDef("reduce", "reduce", _reduce_shape, _reduce_evaluate, arity=(2, None),
               required_attrs=("dimensions", "to_apply"),
               doc="Reduces the given dimensions of N operands with a reducer of 2N scalars."))


# --- windows ----------------------------------------------------------------------------


def _window(opcode: str, attrs: dict, rank: int) -> tuple[WindowDim, ...]:
    window = attrs.get("window")
    if window is None:
        raise ShapeError(f"{opcode} needs the attribute window=")
    if len(window) != rank:
        raise ShapeError(f"{opcode}: window has {len(window)} dimensions, the operand has rank {rank}")
    for i, w in enumerate(window):
        if w.size < 1 or w.stride < 1 or w.lhs_dilate < 1 or w.rhs_dilate < 1:
            raise ShapeError(f"{opcode}: window dimension {i} needs size, stride and dilations >= 1, "
                             f"got {w}")
        if w.reversal:
            raise ShapeError(f"{opcode}: window dimension {i} is reversed; only convolution reverses windows")
    return tuple(window)


def _dilated_size(size: int, w: WindowDim) -> int:
    """The length of one dimension after base dilation (lhs_dilate - 1 holes between elements)."""
    return (size - 1) * w.lhs_dilate + 1 if size > 0 else 0


def _padded_size(opcode: str, size: int, w: WindowDim) -> int:
    """The length of one dimension after base dilation and padding."""
    dilated = _dilated_size(size, w)
    padded = dilated + w.pad_low + w.pad_high
    if padded < 0:
        raise ShapeError(f"{opcode}: padding {w.pad_low}_{w.pad_high} removes more than the "
                         f"{dilated} elements of a dimension")
    return padded


def window_output_dims(opcode: str, dims: tuple[int, ...], window: tuple[WindowDim, ...]) -> tuple[int, ...]:
    """How many window positions fit along each dimension (XLA's window output shape)."""
    out = []
    for size, w in zip(dims, window):
        padded = _padded_size(opcode, size, w)
        span = (w.size - 1) * w.rhs_dilate + 1
        out.append((padded - span) // w.stride + 1 if padded >= span else 0)
    return tuple(out)


def _reduce_window_shape(operands, attrs, declared):
    inputs, inits = _split_inputs_and_inits("reduce-window", operands)
    window = _window("reduce-window", attrs, inputs[0].rank)
    dtypes, is_tuple = _check_reducer("reduce-window", _computation(attrs, "to_apply", "reduce-window"),
                                      [s.dtype for s in inputs], [s.dtype for s in inits])
    return _results_shape(dtypes, window_output_dims("reduce-window", inputs[0].dims, window), is_tuple)


def _pad_with_init(x: np.ndarray, init: np.ndarray, window: tuple[WindowDim, ...]) -> np.ndarray:
    """`x` base-dilated and padded (negative padding crops), holes and pads set to `init`."""
    dilated = [_dilated_size(size, w) for size, w in zip(x.shape, window)]
    grown = [d + max(w.pad_low, 0) + max(w.pad_high, 0) for d, w in zip(dilated, window)]
    padded = np.full(grown, init, dtype=x.dtype)
    padded[tuple(slice(max(w.pad_low, 0), max(w.pad_low, 0) + d, w.lhs_dilate)
                 for d, w in zip(dilated, window))] = x
    crop = tuple(slice(max(-w.pad_low, 0), g - max(-w.pad_high, 0)) for g, w in zip(grown, window))
    return padded[crop + (Ellipsis,)]   # the Ellipsis keeps a rank-0 result an array


def _window_lanes(x: np.ndarray, init: np.ndarray, window: tuple[WindowDim, ...],
                  out_dims: tuple[int, ...]) -> np.ndarray:
    """Every window's elements: shape out_dims + (window elements,), row-major offsets."""
    padded = _pad_with_init(x, init, window)
    spans = tuple((w.size - 1) * w.rhs_dilate + 1 for w in window)
    views = np.lib.stride_tricks.sliding_window_view(padded, spans)
    picked = views[tuple(slice(0, n * w.stride, w.stride) for n, w in zip(out_dims, window))
                   + tuple(slice(None, None, w.rhs_dilate) for w in window)]
    return picked.reshape(out_dims + (prod(w.size for w in window),))


def _reduce_window_evaluate(instr, operands, ctx):
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    window = tuple(instr.attrs["window"])
    out_dims = window_output_dims("reduce-window", inputs[0].shape, window)
    comp = instr.attrs["to_apply"]
    if prod(out_dims) == 0:
        results = [np.full(out_dims, v, dtype=np.asarray(v).dtype) for v in inits]
    else:
        lanes = [_window_lanes(x, v, window, out_dims) for x, v in zip(inputs, inits)]
        results = [np.array(r) for r in fold_lanes(ctx, comp, inits, lanes)]
    return tuple(results) if isinstance(instr.shape, TupleShape) else results[0]


register(OpDef("reduce-window", "reduce", _reduce_window_shape, _reduce_window_evaluate, arity=(2, None),
               required_attrs=("window", "to_apply"),
               doc="Reduces every window position of N operands; padding holds the init values."))


# --- select-and-scatter -----------------------------------------------------------------


def _select_and_scatter_shape(operands, attrs, declared):
    operand, source, init = operands
    for what, s in (("operand", operand), ("source", source)):
        if not isinstance(s, ArrayShape):
            raise ShapeError(f"select-and-scatter: {what} must be an array, got {s.to_text(False)}")
    if not (isinstance(init, ArrayShape) and init.rank == 0):
        raise ShapeError(f"select-and-scatter: init value must be a scalar, got {init.to_text(False)}")
    if not (operand.dtype == source.dtype == init.dtype):
        raise ShapeError(f"select-and-scatter: operand, source and init value must have one element type, "
                         f"got {operand.dtype}, {source.dtype}, {init.dtype}")
    window = _window("select-and-scatter", attrs, operand.rank)
    expected = window_output_dims("select-and-scatter", operand.dims, window)
    if source.dims != expected:
        raise ShapeError(f"select-and-scatter: source is {source.to_text(False)}, but the window fits "
                         f"{list(expected)} times over the operand")
    t = operand.dtype
    select = _computation(attrs, "select", "select-and-scatter")
    params, results, is_tuple = scalar_signature("select-and-scatter select", select)
    if params != [t, t] or is_tuple or results[0].name != "pred":
        raise ShapeError(f"select-and-scatter: select computation {select.name} must be ({t}, {t}) -> pred")
    scatter = _computation(attrs, "scatter", "select-and-scatter")
    params, results, is_tuple = scalar_signature("select-and-scatter scatter", scatter)
    if params != [t, t] or is_tuple or results[0] != t:
        raise ShapeError(f"select-and-scatter: scatter computation {scatter.name} must be ({t}, {t}) -> {t}")
    return ArrayShape(t, operand.dims)


def _window_positions(size: int, out: int, w: WindowDim, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Operand indices seen at window `offset` by each of `out` window positions, and which exist.

    A position in padding or in a base-dilation hole has no operand element.
    """
    padded = np.arange(out) * w.stride + offset * w.rhs_dilate - w.pad_low
    index, rest = np.divmod(padded, w.lhs_dilate)
    valid = (padded >= 0) & (rest == 0) & (index < size)
    return np.clip(index, 0, max(size - 1, 0)), valid


def _along(axis: int, rank: int, a: np.ndarray) -> np.ndarray:
    """A 1-D array shaped to broadcast along `axis` of a rank-`rank` array (like np.ix_)."""
    return a.reshape([-1 if d == axis else 1 for d in range(rank)])


def _select_in_windows(ctx, select, x: np.ndarray, out_dims, window) -> np.ndarray:
    """Flat operand index of the element each window selects (-1: the window is all padding).

    Offsets are visited in row-major order; the current choice is replaced by an element
    whenever select(choice, element) is false, as XLA does.
    """
    chosen_value = None
    chosen_index = np.full(out_dims, -1, dtype=np.int64)
    rank = x.ndim
    for offset in itertools.product(*(range(w.size) for w in window)):
        per_dim = [_window_positions(s, n, w, k) for s, n, w, k in zip(x.shape, out_dims, window, offset)]
        index = tuple(_along(axis, rank, i) for axis, (i, _) in enumerate(per_dim))
        valid = np.ones(out_dims, dtype=bool)
        for axis, (_, v) in enumerate(per_dim):
            valid = valid & _along(axis, rank, v)
        value = x[index]
        flat = np.broadcast_to(np.ravel_multi_index(index, x.shape), out_dims)
        if chosen_value is None:
            take = valid
            chosen_value = value
        else:
            (keep,) = call_on_lanes(ctx, select, [chosen_value, value], out_dims)
            take = valid & ((chosen_index < 0) | ~keep.astype(bool))
            chosen_value = np.where(take, value, chosen_value)
        chosen_index = np.where(take, flat, chosen_index)
    return chosen_index


def occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries have the same key (0 for a first occurrence)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    position = np.arange(keys.size)
    starts = np.ones(keys.size, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    rank = np.empty(keys.size, dtype=np.int64)
    rank[order] = position - np.maximum.accumulate(np.where(starts, position, 0))
    return rank


def _select_and_scatter_evaluate(instr, operands, ctx):
    x, source, init = operands
    window = tuple(instr.attrs["window"])
    result = np.full(x.size, init, dtype=x.dtype)
    if source.size and x.size:
        targets = _select_in_windows(ctx, instr.attrs["select"], x, source.shape, window).ravel()
        values = source.ravel()
        chosen = targets >= 0
        targets, values = targets[chosen], values[chosen]
        # Overlapping windows can pick the same element: combine in rounds, each round
        # touching every element at most once, in source order as XLA's loop does.
        rank = occurrence_rank(targets)
        scatter = instr.attrs["scatter"]
        for r in range(int(rank.max(initial=-1)) + 1):
            at, src = targets[rank == r], values[rank == r]
            combined = call_on_lanes(ctx, scatter, [result[at], src], at.shape)
            result[at] = combined[0]
    return result.reshape(x.shape)


register(OpDef("select-and-scatter", "opaque", _select_and_scatter_shape, _select_and_scatter_evaluate,
               arity=3, required_attrs=("window", "select", "scatter"),
               doc="Scatters each source value onto the element its window selects (max-pool gradient)."))
