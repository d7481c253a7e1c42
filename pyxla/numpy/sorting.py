"""Sorting and order statistics: sort, argsort, searchsorted, median, quantile, percentile.

Sorting is HLO `sort` with a comparator that orders as NumPy does: NaN after every number
(so it sorts last), -0 equal to +0; sorts are stable, so argsort's ties keep index order.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..frontend.tracing import Tracer, bind, trace_computation
from ..hlo.shape import ArrayShape
from ..hlo.types import from_numpy_dtype
from .core import (
    FLOAT64,
    INT64,
    compare,
    computation_name,
    convert,
    dtype_of,
    export,
    is_float,
    normalize_axis,
    operand,
    reshape_to,
    shape_of,
)


def _array(name: str, a: Any) -> Any:
    a = operand(name, a)
    return np.asarray(a) if not isinstance(a, (Tracer, np.ndarray)) else a


def _nan_last_less(a: Any, b: Any) -> Any:
    """a < b in NumPy's sort order (same dtype and shape): NaN above everything."""
    lt = compare(a, b, "LT")
    if not is_float(dtype_of(a)):
        return lt
    a_number, b_nan = compare(a, a, "EQ"), compare(b, b, "NE")
    return bind("or", lt, bind("and", b_nan, a_number))


def _comparator(dtypes: list[np.dtype]):
    """A sort comparator on the first operand's values (the others are carried along)."""
    shapes = [ArrayShape(from_numpy_dtype(d), ()) for d in dtypes for _ in range(2)]
    comp, *_ = trace_computation(lambda *p: _nan_last_less(p[0], p[1]), shapes, computation_name("sort_less"),
                                 allow_captures=False)
    return comp


def _sort_along(name: str, operands: list[Any], axis: int) -> Any:
    return bind("sort", *operands, dimensions=(axis,), is_stable=True,
                to_apply=_comparator([dtype_of(x) for x in operands]))


def _prepare(name: str, a: Any, axis: Any) -> tuple[Any, int]:
    a = _array(name, a)
    if axis is None:
        return reshape_to(a, (math.prod(shape_of(a)),)), 0
    if not shape_of(a):
        raise np.exceptions.AxisError(f"pyxla.numpy.{name}: axis {axis} is out of bounds for a 0-d array")
    return a, normalize_axis(name, axis, len(shape_of(a)))


@export
def sort(a, axis=-1, kind=None, order=None, *, stable=None, descending=False):
    """Sorted along `axis` (None: flattened); NaN last, stable."""
    from .manipulation import flip
    if order is not None:
        raise NotImplementedError("pyxla.numpy.sort: order= (structured arrays)")
    a, ax = _prepare("sort", a, axis)
    out = _sort_along("sort", [a], ax)
    return flip(out, ax) if descending else out


@export
def argsort(a, axis=-1, kind=None, order=None, *, stable=None, descending=False):
    """Indices that sort `a` along `axis` (stable: equal elements keep their order)."""
    from .creation import iota
    from .manipulation import flip
    if order is not None:
        raise NotImplementedError("pyxla.numpy.argsort: order= (structured arrays)")
    a, ax = _prepare("argsort", a, axis)
    if descending:   # stable descending: sort the reversed array, then map positions back
        n = shape_of(a)[ax]
        from .elementwise import subtract
        return flip(subtract(n - 1, argsort(flip(a, ax), ax)), ax)
    if not shape_of(a)[ax]:
        return convert(a, INT64)
    _, indices = _sort_along("argsort", [a, iota(INT64, shape_of(a), ax)], ax)
    return indices


def _sorts_before(element: Any, value: Any, side: str) -> Any:
    """Whether `value` goes after `element` (NumPy's sort order): left, element < value;
    right, element <= value (not value < element)."""
    return _nan_last_less(element, value) if side == "left" else bind("not", _nan_last_less(value, element))


@export
def searchsorted(a, v, side="left", sorter=None):
    """Positions in sorted 1-D `a` where each `v` would be inserted to keep it sorted."""
    from .core import broadcast_to, result_type
    from .indexing import take
    from .reductions import sum as total
    a, v = _array("searchsorted", a), _array("searchsorted", v)
    if len(shape_of(a)) != 1:
        raise ValueError("pyxla.numpy.searchsorted: a must be 1-D")
    if sorter is not None:
        a = take(a, sorter)
    if side not in ("left", "right"):
        raise ValueError(f"pyxla.numpy.searchsorted: side must be 'left' or 'right', got {side!r}")
    dt = result_type(a, v)
    a, v = convert(a, dt), convert(v, dt)
    n = shape_of(a)[0]
    if n <= 8:   # a few elements: count those before each value, one pass
        grid = shape_of(v) + shape_of(a)
        av = broadcast_to(a, grid)
        vv = broadcast_to(reshape_to(v, shape_of(v) + (1,)), grid)
        return total(_sorts_before(av, vv, side), axis=-1, dtype=INT64)
    # a binary search per value, ceil(log2(n + 1)) halvings of [lo, hi] unrolled: n log n
    # work where counting compares every value with every element (65536 values in 2**20
    # elements: 6.5 s counting)
    from .elementwise import add, floor_divide, less, logical_and, logical_not, minimum, where
    lo = broadcast_to(np.int64(0), shape_of(v))
    hi = broadcast_to(np.int64(n), shape_of(v))
    for _ in range(math.ceil(math.log2(n + 1))):
        active = less(lo, hi)
        mid = floor_divide(add(lo, hi), np.int64(2))
        pivot = take(a, minimum(mid, np.int64(n - 1)))
        past = _sorts_before(pivot, v, side)   # the answer is past mid
        lo = where(logical_and(active, past), add(mid, np.int64(1)), lo)
        hi = where(logical_and(active, logical_not(past)), mid, hi)
    return lo


# --- order statistics ------------------------------------------------------------------------

def _take_static(x: Any, axis: int, position: int) -> Any:
    from .manipulation import slice_axis, squeeze
    return squeeze(slice_axis(x, axis, position, position + 1), axis)


def _nan_where_any_nan(name: str, sorted_x: Any, axis: int, result: Any) -> Any:
    """NaN sorts last: a slice whose last element is NaN makes the statistic NaN (NumPy's rule)."""
    from .elementwise import isnan, where
    if not is_float(dtype_of(sorted_x)):
        return result
    last = _take_static(sorted_x, axis, shape_of(sorted_x)[axis] - 1)
    return where(isnan(last), np.nan, result)


def _keep(x: Any, full_shape: tuple[int, ...], axis: Any, keepdims: bool, lead: tuple[int, ...] = ()) -> Any:
    if not keepdims:
        return x
    axes = range(len(full_shape)) if axis is None else [normalize_axis("quantile", axis, len(full_shape))]
    return reshape_to(x, lead + tuple(1 if d in axes else n for d, n in enumerate(full_shape)))


@export
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The q-th quantiles along `axis` with linear interpolation between order statistics
    (q may be an array, also traced; its dims come first in the result, as in NumPy)."""
    from .elementwise import add, ceil, floor, multiply, subtract
    from .indexing import take
    if method != "linear":
        raise NotImplementedError(f"pyxla.numpy.quantile: method={method!r} (only 'linear')")
    full_shape = shape_of(_array("quantile", a))
    x, ax = _prepare("quantile", a, axis)
    n = shape_of(x)[ax]
    dt = dtype_of(x) if is_float(dtype_of(x)) else FLOAT64
    s = convert(_sort_along("quantile", [x], ax), dt)
    q = convert(_array("quantile", q), dt)
    position = multiply(q, n - 1)
    lo, hi = floor(position), ceil(position)
    frac = subtract(position, lo)
    below = take(s, convert(lo, INT64), axis=ax)
    above = take(s, convert(hi, INT64), axis=ax)
    # take puts q's dims where `axis` was; NumPy puts them first.
    from .manipulation import moveaxis
    q_rank = len(shape_of(q))
    if q_rank:
        below = moveaxis(below, list(range(ax, ax + q_rank)), list(range(q_rank)))
        above = moveaxis(above, list(range(ax, ax + q_rank)), list(range(q_rank)))
        frac = reshape_to(frac, shape_of(frac) + (1,) * (len(shape_of(below)) - q_rank))
    result = add(below, multiply(subtract(above, below), frac))
    last = _take_static(s, ax, n - 1)
    from .elementwise import isnan, where
    result = where(isnan(last), np.nan, result) if is_float(dt) else result
    return _keep(result, full_shape, axis, keepdims, shape_of(q))


@export
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    from .elementwise import divide
    return quantile(a, divide(q, 100), axis, method=method, keepdims=keepdims)


@export
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The middle value along `axis` (the mean of the two middle ones for an even count)."""
    from .elementwise import add, multiply
    full_shape = shape_of(_array("median", a))
    x, ax = _prepare("median", a, axis)
    n = shape_of(x)[ax]
    if n == 0:
        raise ValueError("pyxla.numpy.median: empty slice")
    dt = dtype_of(x) if is_float(dtype_of(x)) else FLOAT64
    s = convert(_sort_along("median", [x], ax), dt)
    mid = _take_static(s, ax, n // 2)
    if n % 2 == 0:
        mid = multiply(add(_take_static(s, ax, n // 2 - 1), mid), 0.5)
    return _keep(_nan_where_any_nan("median", s, ax, mid), full_shape, axis, keepdims)

