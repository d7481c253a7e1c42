"""gather and the scatter family, with JAX's dimension-number records.

As in JAX, the index vectors lie along the last dimension of the indices. Out-of-bounds
indices follow `mode`:
  None        XLA's own rule: gather clamps each slice into bounds, scatter skips any
              update window that does not fit.
  'clip'      indices are clamped so that the slice / window fits (both ops).
  'fill'      gather returns `fill_value` for out-of-bounds slices (NaN for floats, the
              minimum of signed, the maximum of unsigned integers, true for pred);
              scatter skips them (XLA's rule). 'drop' is a synonym.
  'promise_in_bounds'  the caller promises in-bounds indices; XLA's rule applies.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import TraceError
from ..frontend.shape_poly import as_dim
from ..frontend.tracing import Tracer, bind, where
from ._values import aval, describe, scalar_computation, unify_types
from .elementwise import add, bitwise_and, clamp, ge, le, mul, select
from .elementwise import max as lax_max
from .elementwise import min as lax_min
from .reductions import reduce_and
from .shapes import broadcast_in_dim, full


class GatherDimensionNumbers(NamedTuple):
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


class ScatterDimensionNumbers(NamedTuple):
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


class GatherScatterMode(enum.Enum):
    CLIP = "clip"
    FILL_OR_DROP = "fill"
    PROMISE_IN_BOUNDS = "promise_in_bounds"

    @staticmethod
    def from_any(mode: Any) -> GatherScatterMode | None:
        """None (XLA's own rule) or the mode named by a GatherScatterMode or a string."""
        if mode is None or isinstance(mode, GatherScatterMode):
            return mode
        names = {"clip": GatherScatterMode.CLIP, "fill": GatherScatterMode.FILL_OR_DROP,
                 "drop": GatherScatterMode.FILL_OR_DROP,
                 "promise_in_bounds": GatherScatterMode.PROMISE_IN_BOUNDS}
        try:
            return names[str(mode).lower()]
        except KeyError:
            raise TraceError(f"unknown gather/scatter mode {mode!r}: use one of {', '.join(names)}{where()}") from None


def _ints(values) -> tuple[int, ...]:
    """Sizes or positions as ints; symbolic sizes (shape-polymorphic traces) stay DimExprs."""
    return tuple(as_dim(v) for v in values)


def _indices(indices: Any) -> Any:
    return indices if isinstance(indices, Tracer) else np.asarray(indices)


def _clamp_indices(indices: Any, upper_bounds: Sequence[int]) -> Any:
    """Each index vector's entries clamped to [0, upper_bounds[k]] (the last dimension is k)."""
    a = aval(indices)
    upper = np.asarray(upper_bounds, dtype=a.dtype.np_dtype)
    return clamp(np.zeros((), a.dtype.np_dtype), indices, broadcast_in_dim(upper, a.dims, (a.rank - 1,)))


def _in_bounds(indices: Any, upper_bounds: Sequence[int]) -> Any:
    """pred of the batch shape: whether every entry of an index vector lies in [0, upper]."""
    a = aval(indices)
    upper = broadcast_in_dim(np.asarray(upper_bounds, dtype=a.dtype.np_dtype), a.dims, (a.rank - 1,))
    ok = bitwise_and(ge(indices, 0), le(indices, upper))
    return reduce_and(ok, (a.rank - 1,))


def _default_fill(dtype) -> np.ndarray:
    if dtype.is_float:
        return np.array(np.nan, dtype.np_dtype)
    if dtype.is_pred:
        return np.array(True)
    info = np.iinfo(dtype.np_dtype)
    return np.array(info.min if dtype.is_signed else info.max, dtype.np_dtype)


def gather(operand: Any, start_indices: Any, dimension_numbers: GatherDimensionNumbers,
           slice_sizes: Sequence[int], *, indices_are_sorted: bool = False, unique_indices: bool = False,
           mode: Any = None, fill_value: Any = None) -> Any:
    """Slices of `slice_sizes` of `operand` starting at each index vector of `start_indices`."""
    dn = dimension_numbers
    indices = _indices(start_indices)
    ia = aval(indices)
    if ia.rank == 0:
        raise TraceError(f"gather: start_indices must have the index vectors on a last dimension, got "
                         f"{describe(indices)}{where()}")
    sizes = _ints(slice_sizes)
    o = aval(operand)
    upper = [o.dims[d] - sizes[d] for d in dn.start_index_map] if len(sizes) == o.rank else None
    mode = GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.CLIP and upper is not None:
        indices = _clamp_indices(indices, upper)
    attrs = {"offset_dims": _ints(dn.offset_dims), "collapsed_slice_dims": _ints(dn.collapsed_slice_dims),
             "start_index_map": _ints(dn.start_index_map), "index_vector_dim": ia.rank - 1,
             "slice_sizes": sizes}
    if dn.operand_batching_dims or dn.start_indices_batching_dims:
        attrs["operand_batching_dims"] = _ints(dn.operand_batching_dims)
        attrs["start_indices_batching_dims"] = _ints(dn.start_indices_batching_dims)
    if indices_are_sorted:
        attrs["indices_are_sorted"] = True
    out = bind("gather", operand, indices, **attrs)
    if mode is not GatherScatterMode.FILL_OR_DROP or upper is None:
        return out
    # Out-of-bounds slices read fill_value: a mask over the batch positions, which are the
    # result dimensions that are not offset dimensions.
    result = aval(out)
    batch_dims = [d for d in range(result.rank) if d not in attrs["offset_dims"]]
    mask = broadcast_in_dim(_in_bounds(indices, upper), result.dims, batch_dims)
    fill = _default_fill(o.dtype) if fill_value is None else fill_value
    return select(mask, out, full(result.dims, fill, o.dtype))


# --- scatter ----------------------------------------------------------------------------

def _window_bounds(operand_dims, updates_dims, dn: ScatterDimensionNumbers) -> list[int]:
    """The largest in-bounds start per index-vector entry: operand size minus window size."""
    dropped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    window_operand_dims = [d for d in range(len(operand_dims)) if d not in dropped]
    window = [1] * len(operand_dims)
    for wd, od in zip(dn.update_window_dims, window_operand_dims):
        window[od] = updates_dims[wd]
    return [operand_dims[d] - window[d] for d in dn.scatter_dims_to_operand_dims]


def _scatter(name: str, combine: Callable[[Any, Any], Any], operand: Any, scatter_indices: Any, updates: Any,
             dimension_numbers: ScatterDimensionNumbers, indices_are_sorted: bool, unique_indices: bool,
             mode: Any) -> Any:
    operand, updates = unify_types("scatter", [operand, updates])
    dn = dimension_numbers
    indices = _indices(scatter_indices)
    ia = aval(indices)
    if ia.rank == 0:
        raise TraceError(f"{name}: scatter_indices must have the index vectors on a last dimension, got "
                         f"{describe(indices)}{where()}")
    o, u = aval(operand), aval(updates)
    if GatherScatterMode.from_any(mode) is GatherScatterMode.CLIP:
        indices = _clamp_indices(indices, _window_bounds(o.dims, u.dims, dn))
    combiner = scalar_computation(combine, [o.dtype, o.dtype], name)
    attrs = {"update_window_dims": _ints(dn.update_window_dims),
             "inserted_window_dims": _ints(dn.inserted_window_dims),
             "scatter_dims_to_operand_dims": _ints(dn.scatter_dims_to_operand_dims),
             "index_vector_dim": ia.rank - 1}
    if dn.operand_batching_dims or dn.scatter_indices_batching_dims:
        attrs["input_batching_dims"] = _ints(dn.operand_batching_dims)
        attrs["scatter_indices_batching_dims"] = _ints(dn.scatter_indices_batching_dims)
    if indices_are_sorted:
        attrs["indices_are_sorted"] = True
    if unique_indices:
        attrs["unique_indices"] = True
    return bind("scatter", operand, indices, updates, to_apply=combiner, **attrs)


def _scatter_function(name: str, combine: Callable[[Any, Any], Any], doc: str):
    def op(operand: Any, scatter_indices: Any, updates: Any, dimension_numbers: ScatterDimensionNumbers, *,
           indices_are_sorted: bool = False, unique_indices: bool = False, mode: Any = None) -> Any:
        return _scatter(name, combine, operand, scatter_indices, updates, dimension_numbers,
                        indices_are_sorted, unique_indices, mode)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


scatter = _scatter_function("scatter", lambda old, new: new,
                            "`operand` with update windows written at the indexed positions "
                            "(duplicates: the last one wins, in XLA's order).")
scatter_add = _scatter_function("scatter_add", add, "`operand` with update windows added at the indexed positions.")
scatter_mul = _scatter_function("scatter_mul", mul, "`operand` with update windows multiplied in.")
scatter_min = _scatter_function("scatter_min", lax_min, "`operand` with the minimum of it and the updates.")
scatter_max = _scatter_function("scatter_max", lax_max, "`operand` with the maximum of it and the updates.")

__all__ = ["GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers", "gather", "scatter",
           "scatter_add", "scatter_max", "scatter_min", "scatter_mul"]
