"""What the JVP and transpose rules share: zeros, sums of tangents, reducer kinds.

Rules are written with pyxla.lax, so they emit HLO into whichever trace is current (or run
at once eagerly), exactly as user code does.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from .. import lax
from ..frontend.tracing import bind, shape_of
from ..hlo.builder import HloBuilder
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape, Shape
from ..hlo.types import ElementType
from ..numpy.core import computation_name, scalar_reducer

# The pair reducers of the windowed max/min JVP ("gather the tangent at each window's chosen
# element"), by the reducer computation, with the comparison that chooses: their transpose
# is select_and_scatter_add with that comparison.
WINDOW_CHOOSERS: weakref.WeakKeyDictionary[HloComputation, Any] = weakref.WeakKeyDictionary()


class MissingRule(Exception):
    """Raised by a rule for a form of its opcode it does not handle (a reduction with a
    reducer it does not know, several operands, ...): the result is then treated as an
    opcode without a rule."""


def array_shape(shape: Shape) -> ArrayShape:
    assert isinstance(shape, ArrayShape), shape
    return shape


def zeros(shape: Shape) -> Any:
    """An array of zeros of `shape` (a broadcast constant in a trace)."""
    s = array_shape(shape)
    return lax.full(s.dims, 0, s.dtype)


def scalar(value: Any, shape: Shape) -> np.ndarray:
    """`value` as a 0-d array of `shape`'s element type."""
    return np.array(value).astype(array_shape(shape).dtype.np_dtype)


def full_like(x: Any, value: Any) -> Any:
    """An array like `x` (shape and type) filled with `value`."""
    return lax.full_like(x, value)


def instantiate(t: Any, shape: Shape) -> Any:
    """A tangent or cotangent as an array: zeros for the symbolic zero None."""
    return zeros(shape) if t is None else t


def add_all(terms: list[Any]) -> Any:
    """The sum of the non-None terms; None when there are none."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else lax.add(total, t)
    return total


def broadcast_to(t: Any, shape: Shape) -> Any:
    """A scalar (or same-shape) value broadcast to `shape`'s dimensions."""
    dims = array_shape(shape).dims
    if shape_of(t).dims == dims:
        return t
    return lax.broadcast_in_dim(t, dims, ())


def sum_to(t: Any, shape: Shape) -> Any:
    """A cotangent of a broadcast scalar operand summed back to `shape` (a scalar)."""
    s = array_shape(shape)
    have = shape_of(t).dims
    if have == s.dims:
        return t
    return lax.reshape(lax.reduce_sum(t, tuple(range(len(have)))), s.dims)


def reducer_kind(computation: HloComputation) -> str | None:
    """'add', 'maximum', 'minimum', 'multiply', ... for a reducer `(a, b) -> op(a, b)` of two
    scalars; 'second' for `(a, b) -> b` (scatter's overwrite); None for anything else."""
    params = computation.parameters
    root = computation.root
    if len(params) != 2 or root is None:
        return None
    if root is params[1]:
        return "second"
    if len(root.operands) == 2 and {id(o) for o in root.operands} == {id(p) for p in params}:
        return root.opcode
    return None


def add_computation(dtype: ElementType) -> HloComputation:
    """`(a, b) -> a + b` on scalars of `dtype`: scatter-add's combiner."""
    return scalar_reducer("add", dtype.np_dtype)


def overwrite_computation(dtype: ElementType) -> HloComputation:
    """`(a, b) -> b` on scalars of `dtype`: the combiner of a scatter that overwrites."""
    b = HloBuilder(computation_name(f"overwrite_{dtype.name}"))
    b.parameter(ArrayShape(dtype, ()), "a")
    return b.build(b.parameter(ArrayShape(dtype, ()), "b"))


def _index_bounds(indices: Any, index_vector_dim: int, bounds: list[int]) -> Any:
    """Per-entry upper bounds of the index vectors, as an array shaped like `indices`."""
    s = array_shape(shape_of(indices))
    upper = np.asarray(bounds, dtype=s.dtype.np_dtype)
    if index_vector_dim == s.rank:
        return lax.broadcast_in_dim(upper.reshape(()), s.dims, ())
    return lax.broadcast_in_dim(upper, s.dims, (index_vector_dim,))


def clamp_indices(indices: Any, index_vector_dim: int, bounds: list[int]) -> Any:
    """Each index vector's entries clamped to [0, bound]: where gather puts a slice that
    does not fit (XLA clamps the start so that it does)."""
    s = array_shape(shape_of(indices))
    return lax.clamp(lax.full(s.dims, 0, s.dtype), indices, _index_bounds(indices, index_vector_dim, bounds))


def in_bounds(indices: Any, index_vector_dim: int, bounds: list[int]) -> Any:
    """pred per index vector: whether every entry lies in [0, bound] (scatter applies only
    the windows that fit)."""
    s = array_shape(shape_of(indices))
    ok = lax.bitwise_and(lax.ge(indices, lax.full(s.dims, 0, s.dtype)),
                         lax.le(indices, _index_bounds(indices, index_vector_dim, bounds)))
    return lax.reduce_and(ok, (index_vector_dim,)) if index_vector_dim < s.rank else ok


def scatter_windows(instr: HloInstruction, x: Any, indices: Any) -> tuple[Any, Any]:
    """For a scatter `instr` of one array: the windows of `x` (shaped like the operand) that
    its updates were written to, shaped like the updates, and a pred per scatter position
    (shaped like the updates) that says whether the window fit, so that scatter applied it."""
    a = instr.attrs
    op_shape, upd_shape = array_shape(instr.operands[0].shape), array_shape(instr.operands[2].shape)
    dropped = set(a["inserted_window_dims"]) | set(a.get("input_batching_dims", ()))
    window = iter(a["update_window_dims"])
    sizes = [1 if d in dropped else upd_shape.dims[next(window)] for d in range(op_shape.rank)]
    attrs = {"offset_dims": a["update_window_dims"], "collapsed_slice_dims": a["inserted_window_dims"],
             "start_index_map": a["scatter_dims_to_operand_dims"], "index_vector_dim": a["index_vector_dim"],
             "slice_sizes": tuple(sizes)}
    if a.get("input_batching_dims"):
        attrs["operand_batching_dims"] = a["input_batching_dims"]
        attrs["start_indices_batching_dims"] = a["scatter_indices_batching_dims"]
    x_type = array_shape(shape_of(x)).dtype
    gathered = bind("gather", x, indices, shape=ArrayShape(x_type, upd_shape.dims), **attrs)
    bounds = [op_shape.dims[d] - sizes[d] for d in a["scatter_dims_to_operand_dims"]]
    scatter_dims = [d for d in range(upd_shape.rank) if d not in a["update_window_dims"]]
    fits = lax.broadcast_in_dim(in_bounds(indices, a["index_vector_dim"], bounds), upd_shape.dims, scatter_dims)
    return gathered, fits


def gather_chosen(values: Any, tangents: Any, chooses: Any, window: Any, init: Any) -> Any:
    """For each window of `values` (HLO WindowDims, no dilation), the element of `tangents` at
    the position `chooses(kept, candidate)` keeps (the first of ties, as select_and_scatter
    picks): a reduction of (value, tangent) pairs, JAX's select_and_gather_add. Linear in
    `tangents`; its transpose is select_and_scatter_add with the same choice."""
    def pairs(a, b):
        (a_value, a_tangent), (b_value, b_tangent) = a, b
        keep = chooses(a_value, b_value)
        return lax.select(keep, a_value, b_value), lax.select(keep, a_tangent, b_tangent)

    zero = np.zeros((), array_shape(shape_of(tangents)).dtype.np_dtype)
    _, gathered = lax.reduce_window((values, tangents), (init, zero), pairs, [w.size for w in window],
                                    [w.stride for w in window], [(w.pad_low, w.pad_high) for w in window])
    if hasattr(gathered, "instr"):   # traced: the transpose rule recognises the reducer
        WINDOW_CHOOSERS[gathered.instr.operands[0].attrs["to_apply"]] = chooses
    return gathered


_CHOICES = {"GE": lax.ge, "GT": lax.gt, "LE": lax.le, "LT": lax.lt}


def select_choice(computation: HloComputation) -> Any:
    """The lax comparison a select-and-scatter's `select` computation makes, `(kept,
    candidate) -> compare(kept, candidate)`; None for any other computation."""
    params, root = computation.parameters, computation.root
    if (len(params) == 2 and root is not None and root.opcode == "compare" and not root.attrs.get("type")
            and root.operands[0] is params[0] and root.operands[1] is params[1]):
        return _CHOICES.get(root.attrs["direction"])
    return None


def lowest_for(chooses: Any, dtype: ElementType) -> np.ndarray:
    """The value a `chooses` window never picks over a real element: -inf for max, +inf for min."""
    info = np.inf if dtype.is_float else np.iinfo(dtype.np_dtype).max
    value = -info if chooses in (lax.ge, lax.gt) else info
    return np.array(value).astype(dtype.np_dtype)


def with_ignored_parameters(computation: HloComputation, extra: list[Shape]) -> HloComputation:
    """A copy of `computation` with parameters of `extra` shapes after its own, unused (a sort
    comparator that also carries an index operand along)."""
    b = HloBuilder(computation_name(f"{computation.name.split('.')[0]}_indexed"))
    copies: dict[int, HloInstruction] = {}
    for param in computation.parameters:
        copies[id(param)] = b.parameter(param.shape, param.name)
    for shape in extra:
        b.parameter(shape, "ignored")
    for instr in computation.post_order():
        if instr.opcode == "parameter":
            continue
        if instr.opcode == "constant":
            copies[id(instr)] = b.constant(instr.literal, array_shape(instr.shape).dtype)
        else:
            copies[id(instr)] = b.op(instr.opcode, *[copies[id(o)] for o in instr.operands], shape=instr.shape,
                                     attrs=dict(instr.attrs))
    assert computation.root is not None
    return b.build(copies[id(computation.root)])


def window_views(x: Any, pad_value: Any, window: Any) -> list[Any]:
    """For each position of the window (HLO WindowDims, row-major over its dimensions), the
    elements every output of a reduce-window reads there, shaped like the output: strided
    slices of `x` dilated and padded with `pad_value` (a scalar), as reduce-window sees it."""
    padded = lax.pad(x, pad_value, [(w.pad_low, w.pad_high, w.lhs_dilate - 1) for w in window])
    dims = array_shape(shape_of(padded)).dims
    out = [(d - (w.size - 1) * w.rhs_dilate - 1) // w.stride + 1 for d, w in zip(dims, window)]
    views = []
    for offset in itertools.product(*[range(w.size) for w in window]):
        start = [k * w.rhs_dilate for k, w in zip(offset, window)]
        limit = [b + (n - 1) * w.stride + 1 for b, n, w in zip(start, out, window)]
        views.append(lax.slice(padded, start, limit, [w.stride for w in window]))
    return views


def running_product_tangent(x: Any, t: Any, axis: int, reverse: bool) -> Any:
    """The tangent of the running product of `x` along `axis` (cumprod), along `t`: the scan
    of (product, tangent) pairs combined as (a b, t_a b + a t_b), in log2(n) doubling steps
    (JAX differentiates cumprod through an associative scan too). No division, so zeros in
    `x` are fine; linear in `t` (shifts, and products with primal values)."""
    n = array_shape(shape_of(x)).dims[axis]
    rank = array_shape(shape_of(x)).rank
    one, zero = scalar(1, shape_of(x)), scalar(0, shape_of(x))

    def shifted(v: Any, by: int, fill: Any) -> Any:
        """`v` moved `by` places along the axis (towards the end, or the start when reversed)."""
        config = [(0, 0, 0)] * rank
        config[axis] = (0, by, 0) if reverse else (by, 0, 0)
        kept = lax.slice_in_dim(v, by, n, 1, axis) if reverse else lax.slice_in_dim(v, 0, n - by, 1, axis)
        return lax.pad(kept, fill, config)

    y, ty, step = x, t, 1
    while step < n:
        y_before, ty_before = shifted(y, step, one), shifted(ty, step, zero)
        ty = lax.add(lax.mul(ty_before, y), lax.mul(y_before, ty))
        y = lax.mul(y_before, y)
        step *= 2
    return ty
