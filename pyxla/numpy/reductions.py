"""Reductions: sum, prod, mean, var, std, max, min, argmax, argmin, all, any, cumsum, ...

Each is an HLO `reduce` (a `reduce-window` for the cumulative ones) with a scalar reducer.
Result dtypes are NumPy's: sums and products of bool and small integers are int64 (uint64
for unsigned), means and variances of integers float64. float16/bfloat16 accumulate in
float32 and are rounded once, so long half-precision sums do not drift.

Here `sum`, `max`, `min`, `all` and `any` are NumPy's names; Python's are `builtins.*`.
"""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..frontend.tracing import bind
from ..hlo.attributes import WindowDim
from .core import (
    BFLOAT16,
    BOOL,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    INT64,
    UINT64,
    broadcast_to,
    compare,
    convert,
    dtype_of,
    export,
    is_float,
    normalize_axes,
    normalize_axis,
    operand,
    reshape_to,
    result_type,
    scalar_reducer,
    select,
    shape_of,
    supported_dtype,
)


def _array(name: str, a: Any) -> Any:
    a = operand(name, a, 0)
    return np.asarray(a) if isinstance(a, (bool, int, float)) else a


def _accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype a sum of `dtype` values is accumulated in (half precision in float32)."""
    return FLOAT32 if dtype in (FLOAT16, BFLOAT16) else dtype


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    """NumPy's default dtype of a sum or product of `dtype` values."""
    if dtype == BOOL or (dtype.kind == "i" and dtype.itemsize < 8):
        return INT64
    if dtype.kind == "u" and dtype.itemsize < 8:
        return UINT64
    return dtype


def _mean_dtype(dtype: np.dtype) -> np.dtype:
    return dtype if is_float(dtype) else FLOAT64


def _keep_dims(x: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    return reshape_to(x, [1 if d in axes else n for d, n in enumerate(shape)])


def reduce_axes(x: Any, axes: tuple[int, ...], opcode: str, init: Any) -> Any:
    """HLO reduce of `axes` of `x` with the scalar reducer `opcode`, starting at `init`."""
    dt = dtype_of(x)
    if not axes:
        return x
    return bind("reduce", x, np.asarray(init, dtype=dt), dimensions=tuple(axes),
                to_apply=scalar_reducer(opcode, dt))


def _masked(name: str, x: Any, where: Any, identity: Any) -> Any:
    """x with the elements outside the `where` mask replaced by the reduction's identity."""
    if where is None or where is True:
        return x
    from .elementwise import where as select_where
    mask = broadcast_to(convert(operand(name, where), BOOL), shape_of(x), name)
    return select_where(mask, x, np.asarray(identity, dtype=dtype_of(x)))


def _monoid(name: str, opcode: str, identity: Callable[[np.dtype], Any], default_dtype: Callable,
            combine: str) -> Callable:
    """sum / prod: reduce in the accumulator dtype, add `initial`, round to the result dtype."""
    def reduction(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        if out is not None:
            raise NotImplementedError(f"pyxla.numpy.{name}(out=...): arrays are immutable")
        a = _array(name, a)
        shape = shape_of(a)
        axes = normalize_axes(name, axis, len(shape))
        out_dtype = default_dtype(dtype_of(a)) if dtype is None else supported_dtype(name, dtype)
        acc = _accumulator(out_dtype)
        x = _masked(name, convert(a, acc), where, identity(acc))
        r = reduce_axes(x, axes, opcode, identity(acc))
        if initial is not None:
            from . import elementwise
            r = getattr(elementwise, combine)(r, convert(operand(name, initial), acc))
        r = convert(r, out_dtype)
        return _keep_dims(r, shape, axes) if keepdims else r
    reduction.__name__ = name
    reduction.__doc__ = f"NumPy's {name} over `axis` (None: all axes), in NumPy's result dtype."
    return reduction


sum = export(_monoid("sum", "add", lambda dt: 0, _sum_dtype, "add"))
prod = export(_monoid("prod", "multiply", lambda dt: 1, _sum_dtype, "multiply"))


def _lowest(dt: np.dtype) -> Any:
    if dt == BOOL:
        return False
    return -np.inf if is_float(dt) else np.iinfo(dt).min


def _highest(dt: np.dtype) -> Any:
    if dt == BOOL:
        return True
    return np.inf if is_float(dt) else np.iinfo(dt).max


def _extremum(name: str, opcode: str, identity: Callable, combine: str) -> Callable:
    def reduction(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        if out is not None:
            raise NotImplementedError(f"pyxla.numpy.{name}(out=...): arrays are immutable")
        a = _array(name, a)
        shape = shape_of(a)
        axes = normalize_axes(name, axis, len(shape))
        if initial is None:
            if builtins.any(shape[d] == 0 for d in axes):
                raise ValueError(f"pyxla.numpy.{name}: zero-size array to reduction operation "
                                 f"{opcode} which has no identity")
            if where is not None and where is not True:
                raise ValueError(f"pyxla.numpy.{name}: reduction operation '{opcode}' does not have "
                                 "an identity, so to use a where mask one has to specify 'initial'")
        dt = dtype_of(a)
        x = _masked(name, a, where, identity(dt))
        r = reduce_axes(x, axes, opcode, identity(dt))
        if initial is not None:
            from . import elementwise
            r = getattr(elementwise, combine)(r, convert(operand(name, initial), dt))
        return _keep_dims(r, shape, axes) if keepdims else r
    reduction.__name__ = name
    reduction.__doc__ = f"NumPy's {name} over `axis` (NaN propagates)."
    return reduction


max = export(_extremum("max", "maximum", _lowest, "maximum"), aliases=("amax",))
min = export(_extremum("min", "minimum", _highest, "minimum"), aliases=("amin",))


def _truth(x: Any) -> Any:
    if dtype_of(x) == BOOL:
        return x
    return compare(x, broadcast_to(np.zeros((), dtype_of(x)), shape_of(x)), "NE")


def _logical(name: str, opcode: str, identity: bool) -> Callable:
    def reduction(a, axis=None, out=None, keepdims=False, *, where=None):
        a = _array(name, a)
        shape = shape_of(a)
        axes = normalize_axes(name, axis, len(shape))
        x = _masked(name, _truth(a), where, identity)
        r = reduce_axes(x, axes, opcode, identity)
        return _keep_dims(r, shape, axes) if keepdims else r
    reduction.__name__ = name
    return reduction


all = export(_logical("all", "and", True))
any = export(_logical("any", "or", False))


def _count(name: str, shape: tuple[int, ...], axes: tuple[int, ...], where: Any, dtype: np.dtype,
           keepdims: bool) -> Any:
    """How many elements each reduction sums: a number, or a count of the `where` mask."""
    if where is None or where is True:
        return math.prod(shape[d] for d in axes)
    mask = broadcast_to(convert(operand(name, where), BOOL), shape, name)
    return sum(mask, tuple(axes), dtype=dtype, keepdims=keepdims)


@export
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean (float64 for integer input, as NumPy)."""
    from .elementwise import divide
    a = _array("mean", a)
    shape = shape_of(a)
    axes = normalize_axes("mean", axis, len(shape))
    out_dtype = _mean_dtype(dtype_of(a)) if dtype is None else supported_dtype("mean", dtype)
    acc = _accumulator(out_dtype)
    total = sum(a, tuple(axes), dtype=acc, keepdims=keepdims, where=where)
    count = _count("mean", shape, axes, where, acc, keepdims)
    return convert(divide(total, count), out_dtype)


@export
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    """Variance: mean of squared deviations, divided by (n - ddof) instead of n."""
    from .elementwise import divide, maximum, multiply, subtract
    if correction is not None:
        ddof = correction
    a = _array("var", a)
    shape = shape_of(a)
    axes = normalize_axes("var", axis, len(shape))
    out_dtype = _mean_dtype(dtype_of(a)) if dtype is None else supported_dtype("var", dtype)
    acc = _accumulator(out_dtype)
    x = convert(a, acc)
    centre = _mean_fn(x, tuple(axes), dtype=acc, keepdims=True, where=where) if mean is None \
        else convert(operand("var", mean), acc)
    deviation = subtract(x, centre)
    total = sum(multiply(deviation, deviation), tuple(axes), dtype=acc, keepdims=keepdims, where=where)
    count = _count("var", shape, axes, where, acc, keepdims)
    return convert(divide(total, maximum(subtract(count, ddof), 0)), out_dtype)


_mean_fn = mean


@export
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    from .elementwise import sqrt
    v = var(a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction)
    return sqrt(v)


@export
def ptp(a, axis=None, keepdims=False):
    from .elementwise import subtract
    return subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


@export
def count_nonzero(a, axis=None, *, keepdims=False):
    a = _array("count_nonzero", a)
    return sum(_truth(a), axis, dtype=INT64, keepdims=keepdims)


@export
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """Weighted mean: sum(a * w) / sum(w) (w broadcast along `axis` when 1-D)."""
    from .elementwise import divide, multiply
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        count = _count("average", shape_of(operand("average", a)),
                       normalize_axes("average", axis, len(shape_of(operand("average", a)))), None,
                       dtype_of(avg), keepdims)
        return (avg, broadcast_to(np.asarray(count, dtype_of(avg)), shape_of(avg))) if returned else avg
    a, w = _array("average", a), _array("average", weights)
    dt = result_type(a, w, 1.0)
    a, w = convert(a, dt), convert(w, dt)
    if shape_of(w) != shape_of(a):
        if axis is None or len(shape_of(w)) != 1:
            raise TypeError("pyxla.numpy.average: axis must be specified when shapes of a and weights differ")
        ax = normalize_axis("average", axis, len(shape_of(a)))
        w = reshape_to(w, [shape_of(w)[0] if d == ax else 1 for d in range(len(shape_of(a)))])
        w = broadcast_to(w, shape_of(a), "average")
    total_w = sum(w, axis, keepdims=keepdims)
    avg = divide(sum(multiply(a, w), axis, keepdims=keepdims), total_w)
    return (avg, total_w) if returned else avg


# --- NaN-ignoring reductions -------------------------------------------------------------------

def _not_nan(a: Any) -> Any:
    from .elementwise import isnan
    return bind("not", isnan(a))


@export
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    a = _array("nansum", a)
    if not is_float(dtype_of(a)):
        return sum(a, axis, dtype, keepdims=keepdims, initial=initial, where=where)
    from .elementwise import isnan
    from .elementwise import where as select_where
    return sum(select_where(isnan(a), 0, a), axis, dtype, keepdims=keepdims, initial=initial, where=where)


@export
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    a = _array("nanmean", a)
    if not is_float(dtype_of(a)):
        return mean(a, axis, dtype, keepdims=keepdims, where=where)
    return mean(a, axis, dtype, keepdims=keepdims, where=_not_nan(a))


@export
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    a = _array("nanvar", a)
    if not is_float(dtype_of(a)):
        return var(a, axis, dtype, ddof=ddof, keepdims=keepdims)
    return var(a, axis, dtype, ddof=ddof, keepdims=keepdims, where=_not_nan(a))


@export
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    from .elementwise import sqrt
    return sqrt(nanvar(a, axis, dtype, ddof=ddof, keepdims=keepdims))


def _nan_extremum(name: str, reduction: Callable, fill: Callable) -> Callable:
    def nan_reduction(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        from .elementwise import isnan
        from .elementwise import where as select_where
        a = _array(name, a)
        if not is_float(dtype_of(a)):
            return reduction(a, axis, keepdims=keepdims, initial=initial, where=where)
        nan = isnan(a)
        r = reduction(select_where(nan, fill(dtype_of(a)), a), axis, keepdims=keepdims, initial=initial,
                      where=where)
        return select_where(all(nan, axis, keepdims=keepdims), np.nan, r)   # all-NaN slices stay NaN
    nan_reduction.__name__ = name
    return nan_reduction


nanmax = export(_nan_extremum("nanmax", max, _lowest))
nanmin = export(_nan_extremum("nanmin", min, _highest))


# --- argmax / argmin -----------------------------------------------------------------------------

def _arg_extremum(name: str, opcode: str, start: Callable) -> Callable:
    """The index of the extremum as two plain reductions: the extremum (NaN when there is
    one), then the least index holding it (NaN matching NaN; -0 equals +0, as in NumPy).
    Both vectorise, where the reduction over (value, index) pairs with a comparator ran one
    element at a time (1024 x 1024 along rows: 1.25 ms, NumPy 0.1 ms)."""
    def reduction(a, axis=None, out=None, *, keepdims=False):
        from .creation import iota
        a = _array(name, a)
        full_shape = shape_of(a)
        if axis is None:
            a, ax = reshape_to(a, (math.prod(full_shape),)), 0
        else:
            ax = normalize_axis(name, axis, len(full_shape))
        shape = shape_of(a)
        if shape[ax] == 0:
            raise ValueError(f"pyxla.numpy.{name}: attempt to get {name} of an empty sequence")
        dt = dtype_of(a)
        best = reduce_axes(a, (ax,), opcode, start(dt))
        spread = broadcast_to(_keep_dims(best, shape, (ax,)), shape)
        hit = compare(a, spread, "EQ")
        if is_float(dt):
            hit = bind("or", hit, bind("and", compare(a, a, "NE"), compare(spread, spread, "NE")))
        last = np.iinfo(np.int64).max
        index = reduce_axes(select(hit, iota(INT64, shape, ax), broadcast_to(np.int64(last), shape)), (ax,),
                            "minimum", last)
        if keepdims:
            axes = tuple(range(len(full_shape))) if axis is None else (ax,)
            return reshape_to(index, [1 if d in axes else n for d, n in enumerate(full_shape)])
        return index
    reduction.__name__ = name
    reduction.__doc__ = f"Index of the {name[3:]} along `axis` (the first one on ties and for NaN)."
    return reduction


argmax = export(_arg_extremum("argmax", "maximum", _lowest))
argmin = export(_arg_extremum("argmin", "minimum", _highest))


# --- cumulative ----------------------------------------------------------------------------------

def _cumulative(name: str, opcode: str, identity: Callable) -> Callable:
    def scan(a, axis=None, dtype=None, out=None):
        a = _array(name, a)
        if axis is None:
            a, axis = reshape_to(a, (math.prod(shape_of(a)),)), 0
        shape = shape_of(a)
        ax = normalize_axis(name, axis, len(shape))
        out_dtype = _sum_dtype(dtype_of(a)) if dtype is None else supported_dtype(name, dtype)
        acc = _accumulator(out_dtype)
        x = convert(a, acc)
        n = shape[ax]
        if n == 0:
            return convert(x, out_dtype)
        # Output i reduces the window x[i - n + 1 .. i]: a window as long as the axis, padded in front.
        window = tuple(WindowDim(n, 1, n - 1, 0) if d == ax else WindowDim(1) for d in range(len(shape)))
        r = bind("reduce-window", x, np.asarray(identity(acc), acc), window=window,
                 to_apply=scalar_reducer(opcode, acc))
        return convert(r, out_dtype)
    scan.__name__ = name
    scan.__doc__ = f"NumPy's {name} along `axis` (None: of the flattened array)."
    return scan


cumsum = export(_cumulative("cumsum", "add", lambda dt: 0), aliases=("cumulative_sum",))
cumprod = export(_cumulative("cumprod", "multiply", lambda dt: 1), aliases=("cumulative_prod",))


# --- whole-array comparisons --------------------------------------------------------------------

@export
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    from .elementwise import isclose
    return all(isclose(a, b, rtol, atol, equal_nan))


@export
def array_equal(a1, a2, equal_nan=False):
    """Same shape and equal elements (NaNs equal to each other when equal_nan)."""
    from .elementwise import equal, isnan, logical_and, logical_or
    a1, a2 = _array("array_equal", a1), _array("array_equal", a2)
    if shape_of(a1) != shape_of(a2):
        return False
    same = equal(a1, a2)
    if equal_nan and is_float(result_type(a1, a2)):
        same = logical_or(same, logical_and(isnan(a1), isnan(a2)))
    return all(same)
