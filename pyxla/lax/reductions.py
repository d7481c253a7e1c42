"""Reductions: reduce with a Python reducer, the usual monoids, argmax/argmin,
reduce_window, select_and_scatter_add and cumulative reductions.

A reducer is a Python function of scalars (pytrees of them for variadic reductions),
traced into the HLO computation `to_apply`; it may use only its arguments.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import TraceError
from ..frontend.pytree import tree_flatten, tree_unflatten
from ..frontend.tracing import bind, where
from ..hlo.types import S32, ElementType
from ._values import as_type, aval, canonical_axis, element_type, is_weak, scalar_computation
from ._windows import window_attribute, window_padding
from .elementwise import add, bitwise_and, bitwise_or, bitwise_xor, eq, mul, ne, select
from .elementwise import max as lax_max
from .elementwise import min as lax_min
from .shapes import broadcast_in_dim, broadcasted_iota

# --- reduce -----------------------------------------------------------------------------

def _reducer(name: str, computation: Callable, tree, acc_types: list[ElementType], x_types: list[ElementType]):
    """computation(acc, x) on pytrees of scalars shaped like the operands, as a computation
    of 2N scalar parameters (accumulators first)."""
    n = len(acc_types)

    def flat(*params):
        return computation(tree_unflatten(tree, params[:n]), tree_unflatten(tree, params[n:]))

    return scalar_computation(flat, acc_types + x_types, name, result_types=acc_types)


def _flat_operands(opname: str, operands: Any, init_values: Any):
    """Operand leaves, their tree, and init leaves typed like the operands."""
    flat_ops, tree = tree_flatten(operands)
    flat_inits, init_tree = tree_flatten(init_values)
    if init_tree != tree:
        raise TraceError(f"{opname}: init_values {init_tree} must have the structure of the operands {tree}{where()}")
    if not flat_ops:
        raise TraceError(f"{opname} needs at least one operand{where()}")
    types = [aval(x).dtype for x in flat_ops]
    flat_inits = [as_type(opname, v, t) if is_weak(v) else v for v, t in zip(flat_inits, types)]
    return flat_ops, tree, flat_inits, types


def _results(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def reduce(operands: Any, init_values: Any, computation: Callable, dimensions: Sequence[int]) -> Any:
    """Reduces `dimensions` of `operands` (an array or a pytree of same-shape arrays) with
    `computation(acc, x)`, starting from `init_values`."""
    flat_ops, tree, flat_inits, types = _flat_operands("reduce", operands, init_values)
    rank = aval(flat_ops[0]).rank
    dims = tuple(sorted(canonical_axis("reduce", d, rank) for d in dimensions))
    comp = _reducer("reducer", computation, tree, [aval(v).dtype for v in flat_inits], types)
    out = bind("reduce", *flat_ops, *flat_inits, dimensions=dims, to_apply=comp)
    return tree_unflatten(tree, _results(out))


# --- monoids ----------------------------------------------------------------------------

def _lowest(t: ElementType):
    if t.is_float:
        return -np.inf
    return False if t.is_pred else np.iinfo(t.np_dtype).min


def _highest(t: ElementType):
    if t.is_float:
        return np.inf
    return True if t.is_pred else np.iinfo(t.np_dtype).max


def _all_ones(t: ElementType):
    if t.is_pred:
        return True
    if t.is_float:
        raise TraceError(f"bitwise reductions need integer or pred operands, got {t}{where()}")
    return -1 if t.is_signed else np.iinfo(t.np_dtype).max


# name -> (combiner, identity for an element type)
MONOIDS: dict[str, tuple[Callable, Callable[[ElementType], Any]]] = {
    "sum": (add, lambda t: 0),
    "prod": (mul, lambda t: 1),
    "max": (lax_max, _lowest),
    "min": (lax_min, _highest),
    "and": (bitwise_and, _all_ones),
    "or": (bitwise_or, lambda t: 0),
    "xor": (bitwise_xor, lambda t: 0),
}


def identity(monoid: str, t: ElementType) -> np.ndarray:
    """The identity of a monoid as a scalar of type `t` (-inf for max of floats, ...)."""
    return np.array(MONOIDS[monoid][1](t)).astype(t.np_dtype)


def _monoid_reduce(monoid: str):
    def op(operand: Any, axes: Sequence[int]) -> Any:
        t = aval(operand).dtype
        return reduce(operand, identity(monoid, t), MONOIDS[monoid][0], axes)
    op.__name__ = op.__qualname__ = f"reduce_{monoid}"
    op.__doc__ = f"The {monoid} over `axes`."
    return op


reduce_sum = _monoid_reduce("sum")
reduce_prod = _monoid_reduce("prod")
reduce_max = _monoid_reduce("max")
reduce_min = _monoid_reduce("min")
reduce_and = _monoid_reduce("and")
reduce_or = _monoid_reduce("or")
reduce_xor = _monoid_reduce("xor")


# --- argmax / argmin --------------------------------------------------------------------

def _arg_reduce(monoid: str, operand: Any, axis: int, index_dtype: Any) -> Any:
    """The least index along `axis` holding the extremum (NaN matching NaN, so the first NaN
    when there is one), as two plain reductions that vectorise; the same indices as a
    reduction over (value, index) pairs, which runs one element at a time."""
    a = aval(operand)
    axis = canonical_axis("argmax", axis, a.rank)
    index_type = element_type(index_dtype)
    best = reduce(operand, identity(monoid, a.dtype), MONOIDS[monoid][0], (axis,))
    kept = [d for d in range(a.rank) if d != axis]
    spread = broadcast_in_dim(best, a.dims, kept)
    hit = eq(operand, spread)
    if a.dtype.is_float:
        hit = bitwise_or(hit, bitwise_and(ne(operand, operand), ne(spread, spread)))
    last = np.array(np.iinfo(index_type.np_dtype).max, index_type.np_dtype)
    indices = select(hit, broadcasted_iota(index_type, a.dims, axis), broadcast_in_dim(last, a.dims, ()))
    return reduce(indices, last, lax_min, (axis,))


def argmax(operand: Any, axis: int, index_dtype: Any = S32) -> Any:
    """The index of the largest element along `axis`: the first NaN, else the first maximum."""
    return _arg_reduce("max", operand, axis, index_dtype)


def argmin(operand: Any, axis: int, index_dtype: Any = S32) -> Any:
    """The index of the smallest element along `axis`: the first NaN, else the first minimum."""
    return _arg_reduce("min", operand, axis, index_dtype)


# --- windows ----------------------------------------------------------------------------

def reduce_window(operand: Any, init_value: Any, computation: Callable, window_dimensions: Sequence[int],
                  window_strides: Sequence[int], padding: Any, base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Any:
    """Reduces each window of `operand` (an array or a pytree) with `computation(acc, x)`;
    padding ('SAME', 'VALID' or pairs) holds the init value."""
    flat_ops, tree, flat_inits, types = _flat_operands("reduce_window", operand, init_value)
    dims = aval(flat_ops[0]).dims
    pads = window_padding(dims, window_dimensions, window_strides, padding, base_dilation, window_dilation)
    window = window_attribute(window_dimensions, window_strides, pads, base_dilation, window_dilation)
    comp = _reducer("window_reducer", computation, tree, [aval(v).dtype for v in flat_inits], types)
    out = bind("reduce-window", *flat_ops, *flat_inits, window=window, to_apply=comp)
    return tree_unflatten(tree, _results(out))


def _monoid_window(monoid: str):
    def op(operand: Any, window_dimensions: Sequence[int], window_strides: Sequence[int], padding: Any,
           base_dilation: Sequence[int] | None = None, window_dilation: Sequence[int] | None = None) -> Any:
        t = aval(operand).dtype
        return reduce_window(operand, identity(monoid, t), MONOIDS[monoid][0], window_dimensions,
                             window_strides, padding, base_dilation, window_dilation)
    op.__name__ = op.__qualname__ = f"reduce_window_{monoid}"
    op.__doc__ = f"The {monoid} over each window."
    return op


reduce_window_sum = _monoid_window("sum")
reduce_window_max = _monoid_window("max")
reduce_window_min = _monoid_window("min")


def select_and_scatter_add(source: Any, operand: Any, select_prim: Callable, window_dimensions: Sequence[int],
                           window_strides: Sequence[int], padding: Any) -> Any:
    """Adds each `source` value onto the element of its window of `operand` that
    `select_prim` (e.g. lax.ge: the first maximum) chooses: the gradient of max pooling."""
    o = aval(operand)
    source = as_type("select_and_scatter_add", source, o.dtype) if is_weak(source) else source
    pads = window_padding(o.dims, window_dimensions, window_strides, padding)
    window = window_attribute(window_dimensions, window_strides, pads)
    chooser = scalar_computation(select_prim, [o.dtype, o.dtype], "select")
    adder = scalar_computation(add, [o.dtype, o.dtype], "scatter_add")
    return bind("select-and-scatter", operand, source, np.zeros((), o.dtype.np_dtype),
                window=window, select=chooser, scatter=adder)


# --- cumulative reductions --------------------------------------------------------------

def _cumulative(monoid: str):
    def op(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
        a = aval(operand)
        axis = canonical_axis(f"cum{monoid}", axis, a.rank)
        n = a.dims[axis]
        window = [1] * a.rank
        window[axis] = n
        pads = [(0, 0)] * a.rank
        # Element i reduces positions 0..i: a window of n ending at i (padding holds the identity).
        pads[axis] = (0, max(n - 1, 0)) if reverse else (max(n - 1, 0), 0)
        return reduce_window(operand, identity(monoid, a.dtype), MONOIDS[monoid][0], window,
                             [1] * a.rank, pads)
    op.__name__ = op.__qualname__ = f"cum{monoid}"
    op.__doc__ = f"The running {monoid} along `axis` (from the end when `reverse`)."
    return op


cumsum = _cumulative("sum")
cumprod = _cumulative("prod")
cummax = _cumulative("max")
cummin = _cumulative("min")
