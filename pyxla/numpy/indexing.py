"""Indexing: x[index] with NumPy's rules, x.at[index] updates, take, take_along_axis, ...

`getitem` follows NumPy's indexing in two steps:
  1. basic indexing (slices with any step, integers, None, Ellipsis) becomes one reverse
     and one slice of the operand, a dynamic-slice for a traced integer, and a reshape;
  2. advanced indexing (integer arrays, concrete boolean masks, and integers when arrays
     are present) becomes one gather. The broadcast index dims replace the indexed dims
     where they are adjacent in the index, and go first otherwise, as NumPy orders them.
Negative indices are normalised (concrete ones are also bounds-checked, as NumPy does;
traced ones are clamped, as XLA's gather does).

`scatter_update` (x.at[index].set/add/...) indexes an iota of x's flat positions with the
same `getitem`, so every index form works for updates too, and scatters into the
flattened x: duplicates combine in order, like np.add.at.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConcretizationError, TraceError
from ..frontend.tracing import Tracer, bind
from ..frontend.tracing import where as source_line
from ..hlo.attributes import SliceDim
from ..hlo.builder import HloBuilder
from ..hlo.dims import DimExpr, InconclusiveDimensionOperation
from ..hlo.shape import ArrayShape
from ..hlo.types import from_numpy_dtype
from .core import (
    BOOL,
    INT64,
    broadcast_shapes,
    broadcast_to,
    computation_name,
    convert,
    dtype_of,
    eager_result,
    export,
    normalize_axis,
    operand,
    reshape_to,
    shape_of,
    static_int,
)


@dataclass
class _Entry:
    """One item of a normalised index, consuming one operand dimension (except 'new')."""
    kind: str            # 'slice', 'int', 'dynamic' (a traced scalar), 'array' or 'new'
    value: Any = None


def _array_operand(name: str, x: Any) -> Any:
    x = operand(name, x)
    return np.asarray(x) if not isinstance(x, (Tracer, np.ndarray)) else x


# --- parsing the index ----------------------------------------------------------------------

def _classify(item: Any) -> _Entry:
    if item is None:
        return _Entry("new")
    if item is Ellipsis:
        return _Entry("ellipsis")
    if isinstance(item, slice):
        for part in (item.start, item.stop, item.step):
            if isinstance(part, Tracer):
                raise TraceError(f"slice bounds must be static, got a traced value{source_line()}; "
                                 "use pyxla.lax.dynamic_slice for a slice at a traced position")
        return _Entry("slice", item)
    if isinstance(item, Tracer):
        if item.dtype == BOOL:
            raise TraceError(f"a boolean mask index needs concrete values (the result's shape depends on "
                             f"them){source_line()}; use pyxla.numpy.where(mask, x, fill) instead")
        if item.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {item.dtype}")
        return _Entry("dynamic" if item.ndim == 0 else "array", item)
    if isinstance(item, (bool, np.bool_)):
        raise NotImplementedError("indexing with a boolean scalar (x[True]) is not supported")
    if isinstance(item, (int, np.integer)):
        return _Entry("int", int(item))
    arr = np.asarray(item)
    if arr.dtype == BOOL:
        if arr.ndim == 0:
            raise NotImplementedError("indexing with a boolean scalar (x[True]) is not supported")
        return _Entry("mask", arr)
    if arr.dtype.kind in "iu":
        return _Entry("int", int(arr)) if arr.ndim == 0 else _Entry("array", arr)
    if arr.size == 0:   # an empty list indexes nothing
        return _Entry("array", arr.astype(np.int64))
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                     f"integer or boolean arrays are valid indices, got {type(item).__name__}")


def _normalise(index: Any, shape: tuple[int, ...]) -> list[_Entry]:
    """The index as entries that each consume one dimension (masks expanded, Ellipsis filled)."""
    items = index if isinstance(index, tuple) else (index,)
    entries = [_classify(i) for i in items]
    used = sum(e.value.ndim if e.kind == "mask" else e.kind not in ("new", "ellipsis") for e in entries)
    if used > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {used} were indexed")
    ellipses = [i for i, e in enumerate(entries) if e.kind == "ellipsis"]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [_Entry("slice", slice(None))] * (len(shape) - used)
    if ellipses:
        entries[ellipses[0]:ellipses[0] + 1] = fill
    else:
        entries += fill
    out, dim = [], 0
    for e in entries:
        if e.kind == "mask":
            covered = shape[dim:dim + e.value.ndim]
            if e.value.shape != covered:
                raise IndexError(f"boolean index of shape {e.value.shape} does not match the indexed "
                                 f"dimensions {covered}")
            out += [_Entry("array", positions) for positions in np.nonzero(e.value)]
            dim += e.value.ndim
        else:
            out.append(e)
            dim += e.kind != "new"
    return out


# --- basic indexing ------------------------------------------------------------------------------

def _check_bounds(i: int, n: int, dim: int) -> int:
    if isinstance(n, DimExpr):   # a symbolic size: the bounds must decide (else Inconclusive...)
        if not (-n <= i and i < n):
            raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
        return i if i >= 0 else n + i
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
    return i % n


def _symbolic_slice(sl: slice, n: DimExpr, axis: int) -> SliceDim:
    """A slice with unit step of a dimension of symbolic size `n`: its ends, counted from
    the end when negative, are clamped to [0, n] where the symbols' bounds decide it."""
    step = 1 if sl.step is None else int(sl.step)
    if step != 1:
        raise NotImplementedError(f"pyxla.numpy indexing: a slice with step {step} of axis {axis}, whose size {n} "
                                  f"is symbolic (only step 1 is supported){source_line()}")

    def end(value: Any, default: Any) -> Any:
        if value is None:
            return default
        v = int(value)
        if v < 0:
            return n + v if n + v >= 0 else 0
        return v if v <= n else n

    try:
        start, stop = end(sl.start, 0), end(sl.stop, n)
        stop = stop if stop >= start else start
    except InconclusiveDimensionOperation as e:
        raise InconclusiveDimensionOperation(f"pyxla.numpy indexing: the slice {sl.start}:{sl.stop} of axis {axis} "
                                             f"(size {n}): {e}{source_line()}") from None
    return SliceDim(start, stop, 1)


def _traced_position(i: Any, n: int) -> Any:
    """A traced index as int64, negative values counted from the end (i + n)."""
    from .elementwise import add, less, where
    i = convert(i, INT64)
    return where(less(i, 0), add(i, n), i)


def _apply_basic(x: Any, entries: list[_Entry]) -> Any:
    """Slices (any step), static ints (kept as size-1 dims) and traced ints (dynamic-slice)."""
    shape = shape_of(x)
    spec, reverse, dynamic = [], [], {}
    dims = [e for e in entries if e.kind != "new"]
    for d, (e, n) in enumerate(zip(dims, shape)):
        if e.kind == "slice" and isinstance(n, DimExpr):
            spec.append(_symbolic_slice(e.value, n, d))
        elif e.kind == "slice":
            start, stop, step = e.value.indices(n)
            count = len(range(start, stop, step))
            if step < 0:   # reversed, the elements sit at n-1-start, stepping by |step|
                reverse.append(d)
                start = n - 1 - start
                step = -step
            spec.append(SliceDim(start, start + (count - 1) * step + 1 if count else start, step))
        elif e.kind == "int":
            i = _check_bounds(e.value, n, d)
            spec.append(SliceDim(i, i + 1, 1))
        else:
            spec.append(SliceDim(0, n, 1))
            if e.kind == "dynamic":
                dynamic[d] = e.value
    if reverse:
        x = bind("reverse", x, dimensions=tuple(reverse))
    if any((s.start, s.limit, s.stride) != (0, n, 1) for s, n in zip(spec, shape)):
        x = bind("slice", x, slice=tuple(spec))
    if dynamic:
        starts = [_traced_position(dynamic[d], n) if d in dynamic else np.asarray(0, np.int64)
                  for d, n in enumerate(shape_of(x))]
        sizes = tuple(1 if d in dynamic else n for d, n in enumerate(shape_of(x)))
        x = bind("dynamic-slice", x, *starts, dynamic_slice_sizes=sizes)
    return x


# --- advanced indexing ------------------------------------------------------------------------

def _index_positions(idx: Any, n: int, dim: int) -> Any:
    """An integer index array for a dimension of size n, negatives counted from the end."""
    if isinstance(idx, Tracer):
        return _traced_position(idx, n)
    idx = np.asarray(idx, dtype=np.int64)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(f"index {idx[bad].flat[0]} is out of bounds for axis {dim} with size {n}")
    return np.where(idx < 0, idx + n, idx)


def _gather(x: Any, entries: list[_Entry]) -> Any:
    """x (one dim per entry, basic indices applied) gathered at the 'array' entries."""
    shape = shape_of(x)
    adv = [d for d, e in enumerate(entries) if e.kind == "array"]
    positions = [_index_positions(entries[d].value, shape[d], d) for d in adv]
    batch = broadcast_shapes("indexing", *[shape_of(p) for p in positions])
    if all(isinstance(p, np.ndarray) for p in positions):
        indices = np.stack([np.broadcast_to(p, batch) for p in positions], axis=-1)
    else:
        from .manipulation import concatenate
        indices = concatenate([reshape_to(broadcast_to(p, batch), batch + (1,)) for p in positions], axis=-1)
    window = [d for d in range(len(shape)) if d not in adv]
    adjacent = adv[-1] - adv[0] == len(adv) - 1
    before = [d for d in window if d < adv[0]] if adjacent else []
    offset_dims = tuple(range(len(before))) + tuple(
        len(before) + len(batch) + j for j in range(len(window) - len(before)))
    if math.prod(batch) == 0 or any(shape[d] == 0 for d in adv):
        out_dims = [shape[d] for d in before] + list(batch) + [shape[d] for d in window[len(before):]]
        return broadcast_to(np.zeros((), dtype_of(x)), out_dims)
    return bind("gather", x, indices, offset_dims=offset_dims, collapsed_slice_dims=tuple(adv),
                start_index_map=tuple(adv), index_vector_dim=len(batch),
                slice_sizes=tuple(1 if d in adv else n for d, n in enumerate(shape)))


def getitem(x: Any, index: Any) -> Any:
    """x[index] with NumPy's semantics (see the module doc); eagerly a pyxla.Array."""
    return eager_result(_getitem(x, index))


def _getitem(x: Any, index: Any) -> Any:
    x = _array_operand("getitem", x)
    shape = shape_of(x)
    entries = _normalise(index, shape)
    advanced = any(e.kind == "array" for e in entries)
    if advanced:   # integers among advanced indices are 0-d index arrays
        entries = [_Entry("array", e.value) if e.kind in ("int", "dynamic") else e for e in entries]
    x = _apply_basic(x, entries)
    if not advanced:   # drop the integer-indexed dims, insert the new axes
        sizes, out = iter(shape_of(x)), []
        for e in entries:
            n = 1 if e.kind == "new" else next(sizes)
            if e.kind in ("new", "slice"):
                out.append(n)
        return reshape_to(x, out)
    # New axes become size-1 dims of the operand, indexed by full slices.
    sizes, dims = iter(shape_of(x)), []
    for e in entries:
        dims.append(1 if e.kind == "new" else next(sizes))
    x = reshape_to(x, dims)
    entries = [_Entry("slice", slice(None)) if e.kind == "new" else e for e in entries]
    return _gather(x, entries)


# --- updates ----------------------------------------------------------------------------------

_COMBINERS = {"set": None, "add": "add", "multiply": "multiply", "divide": "divide", "power": "power",
              "min": "minimum", "max": "maximum"}


def _combiner(how: str, dtype: np.dtype):
    """(old, new) -> the updated element, as a scalar computation."""
    etype = from_numpy_dtype(dtype)
    b = HloBuilder(computation_name(f"scatter_{how}_{etype.name}"))
    scalar = ArrayShape(etype, ())
    old, new = b.parameter(scalar, "old"), b.parameter(scalar, "new")
    opcode = _COMBINERS[how]
    return b.build(new if opcode is None else b.op(opcode, old, new))


def scatter_update(x: Any, index: Any, values: Any, how: str) -> Any:
    """x with x[index] combined with `values` by `how` (set, add, multiply, ...); eagerly a
    pyxla.Array."""
    return eager_result(_scatter_update(x, index, values, how))


def _scatter_update(x: Any, index: Any, values: Any, how: str) -> Any:
    from .creation import iota
    x = _array_operand(f"at[].{how}", x)
    shape, dt = shape_of(x), dtype_of(x)
    n = math.prod(shape)
    flat_ids = reshape_to(iota(INT64, (n,)), shape) if n else np.zeros(shape, np.int64)
    targets = _getitem(flat_ids, index)
    target_shape = shape_of(targets)
    values = convert(operand(f"at[].{how}", values), dt)
    while len(shape_of(values)) > len(target_shape) and shape_of(values)[0] == 1:
        values = reshape_to(values, shape_of(values)[1:])   # NumPy drops leading 1s of the values
    values = broadcast_to(values, target_shape, f"at[].{how}")
    count = math.prod(target_shape)
    if count == 0:
        return x
    out = bind("scatter", reshape_to(x, (n,)), reshape_to(targets, (count, 1)), reshape_to(values, (count,)),
               update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
               index_vector_dim=1, to_apply=_combiner(how, dt))
    return reshape_to(out, shape)


# --- functions ------------------------------------------------------------------------------

@export
def take(a, indices, axis=None, out=None, mode=None):
    """Elements of `a` at `indices` along `axis` (None: of the flattened array).
    mode None/'raise' checks concrete indices, 'wrap' wraps, 'clip' clamps."""
    from .elementwise import clip, remainder
    from .manipulation import ravel
    a = _array_operand("take", a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis("take", axis, len(shape_of(a)))
    n = shape_of(a)[axis]
    indices = operand("take", indices)
    if mode == "wrap":
        indices = remainder(indices, n)
    elif mode == "clip":
        indices = clip(indices, 0, n - 1)
    elif mode not in (None, "raise", "fill", "promise_in_bounds"):
        raise NotImplementedError(f"pyxla.numpy.take: mode={mode!r}")
    return getitem(a, (slice(None),) * axis + (indices,))


@export
def take_along_axis(arr, indices, axis):
    """arr's elements at `indices` along `axis`, paired position by position elsewhere."""
    from .manipulation import ravel
    arr = _array_operand("take_along_axis", arr)
    indices = _array_operand("take_along_axis", indices)
    if axis is None:
        arr, axis = ravel(arr), 0
    shape = shape_of(arr)
    if len(shape_of(indices)) != len(shape):
        raise ValueError("pyxla.numpy.take_along_axis: indices and arr must have the same number of "
                         f"dimensions, got {shape_of(indices)} and {shape}")
    axis = normalize_axis("take_along_axis", axis, len(shape))
    index = tuple(indices if d == axis else np.arange(n).reshape([n if k == d else 1 for k in range(len(shape))])
                  for d, n in enumerate(shape))
    return getitem(arr, index)


def _concrete(name: str, a: Any) -> np.ndarray:
    if isinstance(a, Tracer):
        raise ConcretizationError(f"pyxla.numpy.{name} needs concrete values: the size of its result "
                                  f"depends on them{source_line()}")
    return np.asarray(a)


@export
def nonzero(a):
    """Indices of the nonzero elements (concrete input only: the result's size depends on values)."""
    return tuple(np.nonzero(_concrete("nonzero", a)))


@export
def flatnonzero(a):
    return np.flatnonzero(_concrete("flatnonzero", a))


@export
def argwhere(a):
    return np.argwhere(_concrete("argwhere", a))


@export
def compress(condition, a, axis=None):
    """Slices of `a` where the (concrete) condition holds."""
    positions = np.nonzero(_concrete("compress", condition))[0]
    return take(a, positions, axis=axis)


@export
def extract(condition, arr):
    from .manipulation import ravel
    return take(ravel(arr), np.flatnonzero(_concrete("extract", condition)))


@export
def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal over axis1 and axis2, as the last axis of the result."""
    from .manipulation import moveaxis
    a = _array_operand("diagonal", a)
    offset = static_int("diagonal", offset, "offset")
    a = moveaxis(a, (axis1, axis2), (-2, -1))
    n, m = shape_of(a)[-2:]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    steps = np.arange(length)
    rows, cols = (steps, steps + offset) if offset >= 0 else (steps - offset, steps)
    return getitem(a, (Ellipsis, rows, cols))


@export
def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    from .reductions import sum as total
    return total(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@export
def select(condlist, choicelist, default=0):
    """choicelist[i] where condlist[i] first holds, else default."""
    from .core import result_type
    from .elementwise import where
    if len(condlist) != len(choicelist):
        raise ValueError("pyxla.numpy.select: list of cases must be same length as list of conditions")
    dt = result_type(*choicelist, default)
    out = convert(operand("select", default), dt)
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = where(cond, convert(operand("select", choice), dt), out)
    return out

