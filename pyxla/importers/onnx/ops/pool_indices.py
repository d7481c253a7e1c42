"""Where a max pool's maxima come from, and back: MaxPool's Indices output and MaxUnpool.

An index is a position in the input flattened whole, (N, C, spatial...): the batch and
channel offset plus the position within the spatial dimensions, row-major, or with
`storage_order=1` column-major (the first spatial dimension varying fastest). Padding is
never an index. A window's maximum is its first largest element in row-major scan order.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .... import lax
from .... import numpy as pnp
from ..registry import NodeContext, converter
from .common import ints, shape_of

# scatter single elements of a flat operand, one index per element
_ELEMENTS = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))


def _lowest(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.asarray(-np.inf if dtype.kind == "f" else np.iinfo(dtype).min, dtype)


def max_pool_with_indices(ctx: NodeContext, x, kernel: Sequence[int], strides: Sequence[int],
                          dilations: Sequence[int], pads: Sequence[tuple[int, int]], extra: Sequence[int]):
    """(Y, Indices) of a max pool: one reduce_window over (value, row-major spatial index)
    pairs that keeps the larger value, and on a tie the smaller index (the first in scan
    order)."""
    storage_order = int(ctx.attr("storage_order", 0))
    if storage_order not in (0, 1):
        raise ctx.unsupported(f"attribute 'storage_order'={storage_order}")
    dims = shape_of(x)
    spatial = dims[2:]
    positions = np.arange(math.prod(spatial), dtype=np.int64).reshape((1, 1) + spatial)
    positions = pnp.broadcast_to(positions, dims)
    none = np.iinfo(np.int64).max      # padding's index: loses every tie

    def keep_larger(a, b):
        (av, ai), (bv, bi) = a, b
        take_b = pnp.logical_or(bv > av, pnp.logical_and(bv == av, bi < ai))
        return pnp.where(take_b, bv, av), pnp.where(take_b, bi, ai)

    n = len(spatial)
    y, first = lax.reduce_window((x, positions), (_lowest(x.dtype), np.int64(none)), keep_larger,
                                 (1, 1, *kernel), (1, 1, *strides),
                                 ((0, 0), (0, 0), *[(lo, hi + e) for (lo, hi), e in zip(pads, extra)]),
                                 window_dilation=(1, 1, *dilations))
    if storage_order == 1 and n > 1:
        # row-major position -> coordinates -> column-major position
        coords, rest = [], first
        for size in reversed(spatial):
            coords.append(rest % np.int64(size))
            rest = rest // np.int64(size)
        coords.reverse()
        first = coords[0]
        for d in range(1, n):
            first = first + coords[d] * np.int64(math.prod(spatial[:d]))
    offsets = (np.arange(dims[0] * dims[1], dtype=np.int64) * math.prod(spatial)).reshape(dims[:2] + (1,) * n)
    return y, first + offsets


@converter("MaxUnpool", since=9)
def max_unpool(ctx: NodeContext, x, indices, output_shape=None):
    """Each value of X written at its index (as MaxPool's Indices gives) into zeros of the
    unpooled shape, (in - 1) * stride + kernel - pads per spatial dimension; an index out of
    range is dropped. With output_shape, that result is padded with zeros at the end (as
    ONNX's reference does: the indices keep addressing the unpooled shape)."""
    dims = shape_of(x)
    n = len(dims) - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != n:
        raise ctx.error(f"attribute 'kernel_shape'={kernel} needs {n} values")
    strides = list(ctx.attr("strides") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * 2 * n)
    if len(strides) != n or len(pads) != 2 * n:
        raise ctx.error(f"attributes strides={strides} and pads={pads} need {n} and {2 * n} values")
    if shape_of(indices) != dims:
        raise ctx.error(f"indices of shape {list(shape_of(indices))} do not match X {list(dims)}")
    inferred = dims[:2] + tuple((i - 1) * s + k - lo - hi for i, s, k, lo, hi in
                                zip(dims[2:], strides, kernel, pads[:n], pads[n:]))
    count = math.prod(dims)
    flat = lax.scatter(pnp.zeros((math.prod(inferred),), x.dtype),
                       pnp.reshape(pnp.asarray(indices).astype(np.int64), (count, 1)), pnp.reshape(x, (count,)),
                       _ELEMENTS, mode="drop")
    y = pnp.reshape(flat, inferred)
    if output_shape is None:
        return y
    # The indices address the inferred shape; a larger output_shape pads it at the end.
    out_dims = tuple(ints(ctx, output_shape, "output_shape"))
    if len(out_dims) != len(dims) or any(o < i for o, i in zip(out_dims, inferred)):
        raise ctx.error(f"output_shape {list(out_dims)} is smaller than the unpooled shape {list(inferred)}")
    return pnp.pad(y, [(0, o - i) for o, i in zip(out_dims, inferred)])
