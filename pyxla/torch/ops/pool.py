"""Pooling: max_pool2d_with_indices (+ backward), avg_pool2d (+ backward), adaptive
average pooling, for any number of spatial dimensions. ceil_mode's extra end padding is
derived from the result's shape in the node's metadata."""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ... import lax
from ... import numpy as pnp
from .common import ints
from .registry import LoweringError, lowering


def _window(x, kernel, stride, padding, dilation, out_spatial):
    """Window dims, strides, pads and dilation over every dimension of x (N, C, spatial...)."""
    n = len(out_spatial)
    kernel = ints(kernel, n)
    stride = ints(stride, n) if stride else kernel
    padding, dilation = ints(padding, n), ints(dilation, n)
    pads = [(0, 0), (0, 0)]
    for size, out, k, s, p, d in zip(x.shape[-n:], out_spatial, kernel, stride, padding, dilation):
        pads.append((p, (out - 1) * s + d * (k - 1) + 1 - size - p))
    lead = x.ndim - n
    pads = pads[2 - lead:] if lead < 2 else [(0, 0)] * (lead - 2) + pads
    return [1] * lead + kernel, [1] * lead + stride, pads, [1] * lead + dilation


@lowering("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def max_pool_with_indices(ctx, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    out_shape = ctx.out_shape(0)
    n = len(ints(kernel, 1)) if not isinstance(kernel, int) else 2
    dims, strides, pads, dil = _window(x, kernel, stride, padding, dilation, out_shape[-n:])
    if not ctx.result_used(1):
        # inference: a plain max window (one operand: the layout pass moves it features-last
        # with the convolutions around it, and the pool kernels take it), no indices
        values = lax.reduce_window_max(x, dims, strides, pads, window_dilation=dil)
        return values, pnp.zeros(ctx.out_shape(1), np.int64)
    if _tiles(x.shape[-n:], out_shape[-n:], dims[-n:], strides[-n:], pads[-n:], dil[-n:]):
        return _tiled_max_with_indices(x, dims[-n:], out_shape[-n:])
    plane = int(np.prod(x.shape[-n:]))
    index = pnp.broadcast_to(pnp.reshape(lax.iota(np.int64, plane), x.shape[-n:]), x.shape)
    low = np.array(-np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min, x.dtype)

    def pick(a, b):
        (av, ai), (bv, bi) = a, b
        take_b = pnp.logical_or(bv > av, pnp.logical_and(bv == av, bi < ai))
        # NaN wins, the last NaN of the window as eager PyTorch's scan takes it
        take_b = pnp.logical_or(take_b, pnp.logical_and(bv != bv, pnp.logical_or(av == av, bi > ai)))
        return pnp.where(take_b, bv, av), pnp.where(take_b, bi, ai)
    values, indices = lax.reduce_window((x, index), (low, np.array(plane, np.int64)), pick, dims, strides,
                                        pads, window_dilation=dil)
    return values, indices


def _tiles(size, out, kernel, stride, pads, dilation) -> bool:
    """Whether the windows tile the input without overlap or padding (stride = kernel, no
    dilation; trailing elements past the last whole window are left out)."""
    return all(s == k and d == 1 and lo == 0 and hi <= 0 and o * k <= n
               for n, o, k, s, (lo, hi), d in zip(size, out, kernel, stride, pads, dilation))


def _tiled_max_with_indices(x, kernel, out_spatial):
    """Max pooling with indices where the windows tile the input (the common CNN case, 2x2
    stride 2): the window's k1 x k2 ... elements are strided slices of x, the maximum their
    elementwise maximum and the index the first element equal to it, or the last NaN when
    there is one (eager PyTorch's scan: `val > max || isnan(val)`): elementwise work that
    fuses into one loop, instead of a reduce-window over (value, index) pairs fed by an s64
    iota as large as x."""
    n = len(kernel)
    lead = x.ndim - n
    spatial = x.shape[-n:]
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    parts = []
    for off in offsets:
        start = [0] * lead + list(off)
        limit = list(x.shape[:lead]) + [o + (m - 1) * k + 1 for o, m, k in zip(off, out_spatial, kernel)]
        parts.append(lax.slice(x, start, limit, [1] * lead + list(kernel)))
    values = functools.reduce(pnp.maximum, parts)
    out_shape = values.shape
    place = [int(np.prod(spatial[d + 1:])) for d in range(n)]          # a step along dim d in the plane
    corner = functools.reduce(pnp.add, [lax.broadcasted_iota(np.int64, out_shape, lead + d) * (kernel[d] * place[d])
                                        for d in range(n)])
    heres = [corner + np.int64(sum(o * p for o, p in zip(off, place))) for off in offsets]
    index = heres[-1]
    for here, part in reversed(list(zip(heres[:-1], parts[:-1]))):   # (the first match is applied last)
        index = pnp.where(part == values, here, index)
    for here, part in zip(heres, parts):                             # (the last NaN is applied last)
        index = pnp.where(part != part, here, index)
    return values, index


@lowering("max_pool2d_with_indices_backward.default", "max_pool3d_with_indices_backward.default")
def max_pool_backward(ctx, grad, x, kernel, stride, padding, dilation, ceil_mode, indices):
    n = len(kernel)
    lead = x.shape[:-n]
    rows = int(np.prod(lead))
    plane = int(np.prod(x.shape[-n:]))
    g = pnp.reshape(grad, (rows, -1))
    idx = pnp.reshape(indices, (rows, -1))
    row = pnp.broadcast_to(pnp.reshape(lax.iota(np.int64, rows), (rows, 1)), idx.shape)
    out = pnp.zeros((rows, plane), grad.dtype).at[row, idx].add(g)
    return pnp.reshape(out, x.shape)


def _divisor(x, dims, strides, pads, padding, count_include_pad, divisor_override):
    if divisor_override:
        return divisor_override
    n = len(padding)
    if count_include_pad:   # the window's part inside the explicitly padded input
        ones = pnp.ones(x.shape[-n:], x.dtype)
        ones = lax.pad(ones, np.array(1, x.dtype), [(p, p, 0) for p in padding])
        extra = [(0, hi - p) for (_, hi), p in zip(pads[-n:], padding)]
        return lax.reduce_window_sum(ones, dims[-n:], strides[-n:], extra)
    ones = pnp.ones(x.shape[-n:], x.dtype)
    return lax.reduce_window_sum(ones, dims[-n:], strides[-n:], pads[-n:])


@lowering("avg_pool2d.default", "avg_pool3d.default", "avg_pool1d.default")
def avg_pool(ctx, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    n = len(kernel)
    dims, strides, pads, _ = _window(x, kernel, stride, padding, 1, ctx.out_shape()[-n:])
    total = lax.reduce_window_sum(x, dims, strides, pads)
    return total / _divisor(x, dims, strides, pads, ints(padding, n), count_include_pad, divisor_override)


@lowering("avg_pool2d_backward.default", "avg_pool3d_backward.default")
def avg_pool_backward(ctx, grad, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    n = len(kernel)
    dims, strides, pads, _ = _window(x, kernel, stride, padding, 1, grad.shape[-n:])
    g = grad / _divisor(x, dims, strides, pads, ints(padding, n), count_include_pad, divisor_override)
    # the transpose of a strided window sum: a window sum over the stride-dilated gradient
    back = []
    for size, out, k, s, (lo, _) in zip(x.shape, grad.shape, dims, strides, pads):
        length = (out - 1) * s + 1
        back.append((k - 1 - lo, size + k - 1 - length - (k - 1 - lo)))
    return lax.reduce_window_sum(g, dims, [1] * x.ndim, back, base_dilation=strides)


@lowering("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default")
def adaptive_avg_pool(ctx, x, output_size):
    n = len(output_size)
    out = ctx.out_shape()[-n:]
    rows = []
    for size, o in zip(x.shape[-n:], out):
        rows.append([(i * size // o, -(-(i + 1) * size // o)) for i in range(o)])
    if all(size % o == 0 for size, o in zip(x.shape[-n:], out)):
        k = [size // o for size, o in zip(x.shape[-n:], out)]
        dims, strides = [1] * (x.ndim - n) + k, [1] * (x.ndim - n) + k
        return lax.reduce_window_sum(x, dims, strides, "VALID") / float(np.prod(k))
    if n != 2:
        raise LoweringError("adaptive average pooling with uneven windows beyond 2-D has no lowering")
    cols = []
    for h0, h1 in rows[0]:
        line = [pnp.mean(x[..., h0:h1, w0:w1], axis=(-2, -1)) for w0, w1 in rows[1]]
        cols.append(pnp.stack(line, axis=-1))
    return pnp.stack(cols, axis=-2)


@lowering("_adaptive_avg_pool2d_backward.default")
def adaptive_avg_pool_backward(ctx, grad, x):
    n = 2
    out = grad.shape[-n:]
    if any(size % o for size, o in zip(x.shape[-n:], out)):
        raise LoweringError("_adaptive_avg_pool2d_backward with uneven windows has no lowering")
    k = [size // o for size, o in zip(x.shape[-n:], out)]
    g = grad / float(np.prod(k))
    for i, kk in enumerate(k):
        g = pnp.repeat(g, kk, axis=x.ndim - n + i)
    return g
