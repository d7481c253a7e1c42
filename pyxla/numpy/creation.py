"""Array creation: zeros, ones, full, empty, arange, linspace, eye, tri, asarray, ...

Shapes are static. Filled arrays are a broadcast scalar and ranges an `iota`, so a traced
`pnp.zeros((1000, 1000))` is one small instruction, not a million-element literal.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..frontend.tracing import Tracer, bind
from ..frontend.tracing import where as source_line
from ..hlo.dims import DimExpr, InconclusiveDimensionOperation
from .core import (
    BOOL,
    FLOAT64,
    INT64,
    convert,
    dtype_of,
    element_shape,
    export,
    holds_array,
    is_python_scalar,
    list_leaves,
    operand,
    result_type,
    shape_of,
    static_dim,
    static_int,
    supported_dtype,
)
from .core import full as _full


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    dims = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    dims = tuple(static_dim(name, d, "a shape") for d in dims)
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise ValueError(f"pyxla.numpy.{name}: negative dimensions are not allowed: {dims}")
    return dims


def _dtype(name: str, dtype: Any, default: np.dtype) -> np.dtype:
    return default if dtype is None else supported_dtype(name, dtype)


def _filled(name: str, shape: Any, value: Any, dtype: Any) -> Any:
    return _full(value, _dtype(name, dtype, FLOAT64), _shape(name, shape))


@export
def zeros(shape, dtype=None):
    return _filled("zeros", shape, 0, dtype)


@export
def ones(shape, dtype=None):
    return _filled("ones", shape, 1, dtype)


@export
def empty(shape, dtype=None):
    """An array of `shape`: zeros (pyxla has no uninitialised memory to hand out)."""
    return _filled("empty", shape, 0, dtype)


@export
def full(shape, fill_value, dtype=None):
    fill = operand("full", fill_value)
    if dtype is None:
        dtype = result_type(fill)   # a Python float fills float64, as in NumPy
    if shape_of(fill) != ():
        from .manipulation import broadcast_to
        return broadcast_to(convert(fill, dtype), _shape("full", shape))
    return _full(fill, supported_dtype("full", dtype), _shape("full", shape))


def _like(name: str, a: Any, dtype: Any, shape: Any) -> tuple[np.dtype, tuple[int, ...]]:
    a = operand(name, a)
    return (dtype_of(a) if dtype is None else supported_dtype(name, dtype),
            shape_of(a) if shape is None else _shape(name, shape))


@export
def zeros_like(a, dtype=None, shape=None):
    dt, dims = _like("zeros_like", a, dtype, shape)
    return _full(0, dt, dims)


@export
def ones_like(a, dtype=None, shape=None):
    dt, dims = _like("ones_like", a, dtype, shape)
    return _full(1, dt, dims)


@export
def empty_like(a, dtype=None, shape=None):
    dt, dims = _like("empty_like", a, dtype, shape)
    return _full(0, dt, dims)


@export
def full_like(a, fill_value, dtype=None, shape=None):
    dt, dims = _like("full_like", a, dtype, shape)
    return full(dims, fill_value, dt)


# --- from data --------------------------------------------------------------------------------

def _stacked(a: Any, dtype: np.dtype) -> Any:
    """A (nested) list holding Tracers as one array of `dtype`, stacked level by level."""
    if isinstance(a, (list, tuple)):
        from .manipulation import stack
        return stack([_stacked(x, dtype) for x in a])
    if isinstance(a, Tracer):
        return convert(a, dtype)
    operand("asarray", a)     # rejects complex, strings and objects with a clear message
    return convert(a if is_python_scalar(a) else np.asarray(a), dtype)


@export
def asarray(a, dtype=None, order=None, copy=None):
    """`a` as an array. A Tracer stays traced (converted to `dtype`); concrete data gives a
    concrete pyxla.Array, even inside a trace; a (nested) list holding Tracers is stacked.

    A list mixing arrays and Python scalars takes the arrays' dtype, the scalars weak (as
    in JAX: [x[0], 2.0] with x float32 is float32), traced or not, so jit and eager agree."""
    from ..frontend.array import Array
    if isinstance(a, DimExpr):   # a symbolic size as a value: a traced integer
        a = operand("asarray", a)
    if isinstance(a, Tracer):
        return a if dtype is None else convert(a, supported_dtype("asarray", dtype))
    if isinstance(a, (list, tuple)) and holds_array(a):
        leaves = list_leaves(a)
        if dtype is None:
            for leaf in leaves:
                operand("asarray", leaf)
            dtype = result_type(*leaves)
        dtype = supported_dtype("asarray", dtype)
        if any(isinstance(leaf, Tracer) for leaf in leaves):
            return _stacked(a, dtype)
    arr = np.asarray(a, dtype=dtype)
    operand("asarray", arr)   # rejects complex, strings and objects with a clear message
    return arr.view(Array)


@export
def array(object, dtype=None, copy=True, ndmin=0):
    """Like asarray, but concrete data is copied; `ndmin` prepends size-1 dimensions."""
    out = asarray(object, dtype)
    if copy and isinstance(out, np.ndarray):
        out = out.copy()
    if ndmin > np.ndim(out):
        from .core import reshape_to
        out = reshape_to(out, (1,) * (ndmin - np.ndim(out)) + shape_of(out))
    return out


@export
def copy(a):
    """A copy of `a` (a Tracer is immutable, so itself)."""
    a = operand("copy", a)
    return a if isinstance(a, Tracer) else np.array(a)


# --- ranges -----------------------------------------------------------------------------------

def iota(dtype: Any, shape: Sequence[int], dimension: int = 0) -> Any:
    """Index along `dimension`, broadcast over `shape` (rank >= 1), as `dtype` (HLO iota)."""
    return bind("iota", shape=element_shape(np.dtype(dtype), tuple(shape)), iota_dimension=dimension)


@export
def arange(start, stop=None, step=None, dtype=None):
    """start, start + step, ... below stop (static bounds), as NumPy computes them."""
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    for v in (start, stop, step):
        if isinstance(v, Tracer):
            raise TypeError("pyxla.numpy.arange: start, stop and step must be static "
                            "(the length of the result must be known when tracing)")
    if any(isinstance(v, DimExpr) for v in (start, stop, step)):
        # A symbolic size (shape-polymorphic trace): 0, 1, ..., n-1 for arange(n) only.
        if not (isinstance(stop, DimExpr) and isinstance(start, int) and start == 0 and step == 1):
            raise InconclusiveDimensionOperation(
                f"pyxla.numpy.arange({start}, {stop}, {step}): with a symbolic size only arange(n) is "
                f"supported{source_line()}")
        dt = supported_dtype("arange", np.int64 if dtype is None else dtype)
        return iota(dt if dt != BOOL else INT64, (stop,), 0)
    if step == 0:
        raise ZeroDivisionError("pyxla.numpy.arange: step is zero")
    length = max(0, math.ceil((stop - start) / step))
    dt = np.dtype(dtype) if dtype is not None else np.result_type(start, stop, step)
    dt = supported_dtype("arange", dt)
    if length == 0:
        return _full(0, dt, (0,))
    # NumPy fills from the first two values in the result dtype: first + i * (second - first).
    first = np.asarray(start).astype(dt)
    delta = np.asarray(start + step).astype(dt) - first if length > 1 else np.asarray(step).astype(dt)
    from .elementwise import add, multiply
    ramp = iota(dt if dt != BOOL else INT64, (length,), 0)
    return convert(add(multiply(ramp, delta), first), dt)


@export
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """`num` evenly spaced values from start to stop (NumPy's formula: start + i * step,
    with the last value exactly `stop` when endpoint is true). start/stop may be arrays."""
    from .core import reshape_to
    from .elementwise import add, divide, equal, floor, multiply, subtract, where
    from .manipulation import moveaxis
    num = static_int("linspace", num, "num")
    if num < 0:
        raise ValueError(f"pyxla.numpy.linspace: number of samples, {num}, must be non-negative")
    start, stop = operand("linspace", start), operand("linspace", stop)
    dt = result_type(start, stop, 1.0)
    out_dtype = dt if dtype is None else supported_dtype("linspace", dtype)
    start, stop = convert(start, dt), convert(stop, dt)
    div = (num - 1) if endpoint else num
    delta = subtract(stop, start)
    step = divide(delta, div) if div > 0 else multiply(delta, math.nan)
    value_rank = len(np.broadcast_shapes(shape_of(start), shape_of(stop)))
    ramp = reshape_to(arange(num, dtype=dt), (num,) + (1,) * value_rank)
    y = add(multiply(ramp, step if div > 0 else delta), start)
    if endpoint and num > 1:
        y = where(equal(ramp, num - 1), stop, y)
    if out_dtype.kind in "iu":   # NumPy 2 rounds toward -inf for integer dtypes
        y = floor(y)
    y = convert(y, out_dtype)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    return (y, step) if retstep else y


@export
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    from .elementwise import power
    y = linspace(start, stop, num, endpoint, dtype=None, axis=axis)
    out = power(base, y)
    return out if dtype is None else convert(out, supported_dtype("logspace", dtype))


# --- matrices ---------------------------------------------------------------------------------

def _diagonal_mask(n: int, m: int, k: int, direction: str) -> Any:
    """(col - row) compared with k over an n x m grid: EQ gives eye, LE gives tri."""
    from .core import compare
    rows = iota(INT64, (n, m), 0)
    cols = iota(INT64, (n, m), 1)
    return compare(bind("subtract", cols, rows), _full(k, INT64, (n, m)), direction)


@export
def eye(N, M=None, k=0, dtype=None):
    n = static_int("eye", N, "N")
    m = n if M is None else static_int("eye", M, "M")
    if n == 0 or m == 0:
        return _full(0, _dtype("eye", dtype, FLOAT64), (n, m))
    return convert(_diagonal_mask(n, m, int(k), "EQ"), _dtype("eye", dtype, FLOAT64))


@export
def identity(n, dtype=None):
    return eye(n, dtype=dtype)


@export
def tri(N, M=None, k=0, dtype=None):
    """Ones at and below the k-th diagonal."""
    n = static_int("tri", N, "N")
    m = n if M is None else static_int("tri", M, "M")
    if n == 0 or m == 0:
        return _full(0, _dtype("tri", dtype, FLOAT64), (n, m))
    return convert(_diagonal_mask(n, m, int(k), "LE"), _dtype("tri", dtype, FLOAT64))


def _triangle(name: str, m: Any, k: int, lower: bool) -> Any:
    from .elementwise import where
    m = operand(name, m)
    shape = shape_of(m)
    if len(shape) < 2:
        raise ValueError(f"pyxla.numpy.{name}: the input must have at least 2 dimensions, got {shape}")
    n_rows, n_cols = shape[-2:]
    if n_rows == 0 or n_cols == 0:
        return m
    mask = _diagonal_mask(n_rows, n_cols, k if lower else k - 1, "LE")
    if not lower:
        mask = bind("not", mask)
    return where(mask, m, _full(0, dtype_of(m), ()))


@export
def tril(m, k=0):
    """`m` with the elements above the k-th diagonal zeroed (over the last two axes)."""
    return _triangle("tril", m, int(k), lower=True)


@export
def triu(m, k=0):
    """`m` with the elements below the k-th diagonal zeroed (over the last two axes)."""
    return _triangle("triu", m, int(k), lower=False)


@export
def diag(v, k=0):
    """The k-th diagonal of a 2-D array, or a 2-D array with 1-D `v` on its k-th diagonal."""
    from .elementwise import where
    from .indexing import diagonal
    from .manipulation import pad
    v = operand("diag", v)
    shape = shape_of(v)
    k = int(k)
    if len(shape) == 2:
        return diagonal(v, k)
    if len(shape) != 1:
        raise ValueError(f"pyxla.numpy.diag: the input must be 1-D or 2-D, got shape {shape}")
    n = shape[0] + abs(k)
    if n == 0:
        return _full(0, dtype_of(v), (0, 0))
    # Row i holds v[i] (k >= 0) or column j holds v[j] (k < 0); the mask keeps one diagonal.
    padded = pad(v, (0, abs(k)))
    from .core import broadcast_to, reshape_to
    values = broadcast_to(reshape_to(padded, (n, 1) if k >= 0 else (1, n)), (n, n))
    return where(_diagonal_mask(n, n, k, "EQ"), values, _full(0, dtype_of(v), ()))


@export
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors ('xy': the first two axes swapped)."""
    from .core import broadcast_to, reshape_to
    if indexing not in ("xy", "ij"):
        raise ValueError("pyxla.numpy.meshgrid: indexing must be 'xy' or 'ij'")
    xs = [operand("meshgrid", x) for x in xi]
    n = len(xs)
    sizes = [int(np.prod(shape_of(x))) for x in xs]
    out_sizes = list(sizes)
    if indexing == "xy" and n > 1:
        out_sizes[0], out_sizes[1] = sizes[1], sizes[0]
    grids = []
    for i, x in enumerate(xs):
        axis = i
        if indexing == "xy" and n > 1 and i < 2:
            axis = 1 - i
        along = [1] * n
        along[axis] = sizes[i]
        g = reshape_to(x, along)
        grids.append(g if sparse else broadcast_to(g, out_sizes))
    return grids
