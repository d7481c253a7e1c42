"""Indexing operators: Gather, GatherElements, GatherND, the Scatter family, OneHot,
NonZero, Compress, ReverseSequence, TopK, CumSum, CumProd and TensorScatter.

ONNX indices may be negative (counting from the end); they are made non-negative before
they index. Operators whose output shape depends on input values (NonZero, Compress) need
those values known when the model is loaded.
"""
from __future__ import annotations

import numpy as np

from .... import lax
from ....numpy.indexing import scatter_update
from ..registry import converter, known
from .common import as_dtype, axis_of, ints, shape_of, xp_of


def _wrapped(ctx, indices, n):
    """Negative indices counted from the end of an axis of length n, as int64."""
    xp = xp_of(ctx, indices)
    indices = as_dtype(xp, indices, np.int64)
    return xp.where(xp.less(indices, 0), xp.add(indices, n), indices)


@converter("Gather", since=1)
def gather(ctx, x, indices):
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return ctx.xp.take(x, _wrapped(ctx, indices, shape_of(x)[axis]), axis=axis)


def _along_axis(indices, axis):
    """The full index tuple that pairs `indices` on `axis` with every position elsewhere."""
    dims = shape_of(indices)
    return tuple(indices if d == axis else np.arange(n).reshape([n if k == d else 1 for k in range(len(dims))])
                 for d, n in enumerate(dims))


@converter("GatherElements", since=11)
def gather_elements(ctx, x, indices):
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return x[_along_axis(_wrapped(ctx, indices, shape_of(x)[axis]), axis)]


def _nd_index(ctx, x, indices, batch_dims):
    """GatherND/ScatterND's index tuple: batch positions, then indices[..., i] per indexed axis."""
    dims = shape_of(x)
    lead = shape_of(indices)[:-1]
    k = shape_of(indices)[-1]
    if batch_dims + k > len(dims):
        raise ctx.error(f"indices of depth {k} with {batch_dims} batch dims index beyond rank {len(dims)}")
    batch = [np.arange(dims[b]).reshape([dims[b] if j == b else 1 for j in range(len(lead))])
             for b in range(batch_dims)]
    axes = [_wrapped(ctx, indices[..., i], dims[batch_dims + i]) for i in range(k)]
    if batch and not axes:
        batch = [np.broadcast_to(b, lead) for b in batch]
    return tuple(batch + axes)


@converter("GatherND", since=11)
def gather_nd(ctx, x, indices):
    batch_dims = ctx.attr("batch_dims", 0)
    index = _nd_index(ctx, x, indices, batch_dims)
    if not index:
        return ctx.xp.broadcast_to(x, shape_of(indices)[:-1] + shape_of(x))
    return x[index]


_SCATTER_REDUCTIONS = {"none": "set", "add": "add", "mul": "multiply", "max": "max", "min": "min"}


def _scatter_how(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in _SCATTER_REDUCTIONS:
        raise ctx.unsupported(f"attribute 'reduction'={reduction!r}")
    return _SCATTER_REDUCTIONS[reduction]


@converter("ScatterElements", "Scatter", since=9)
def scatter_elements(ctx, x, indices, updates):
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    how = _scatter_how(ctx) if ctx.op_type == "ScatterElements" else "set"
    index = _along_axis(_wrapped(ctx, indices, shape_of(x)[axis]), axis)
    return scatter_update(x, index, updates, how)


@converter("ScatterND", since=11)
def scatter_nd(ctx, x, indices, updates):
    how = _scatter_how(ctx)
    return scatter_update(x, _nd_index(ctx, x, indices, 0), updates, how)


@converter("OneHot", since=9)
def one_hot(ctx, indices, depth, values):
    depth = int(known(ctx, depth, "depth").reshape(-1)[0])
    rank = len(shape_of(indices)) + 1
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    xp = ctx.xp
    idx = _wrapped(ctx, indices, depth)
    positions = np.arange(depth).reshape([depth if d == axis else 1 for d in range(rank)])
    hot = xp.equal(xp.expand_dims(idx, axis), positions)
    off, on = values[0], values[1]
    return xp.where(hot, on, off)


@converter("NonZero", since=9)
def nonzero(ctx, x):
    x = known(ctx, x, "the input (the output's length depends on its values)")
    return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@converter("Unique", since=11)
def unique(ctx, x):
    """Unique values (sorted, or in order of first occurrence), first indices, inverse
    indices and counts; the output's length depends on the input's values."""
    x = known(ctx, x, "the input (the output's length depends on its values)")
    axis = ctx.attr("axis")
    sort = ctx.attr("sorted", 1)
    axis = None if axis is None else axis_of(ctx, axis, x.ndim)
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    if not sort:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    return values, first.astype(np.int64), inverse.reshape(-1).astype(np.int64), counts.astype(np.int64)


@converter("Compress", since=9)
def compress(ctx, x, condition):
    keep = np.flatnonzero(known(ctx, condition, "condition")).astype(np.int64)
    axis = ctx.attr("axis")
    if axis is None:
        return ctx.xp.take(ctx.xp.reshape(x, (-1,)), keep)
    return ctx.xp.take(x, keep, axis=axis_of(ctx, axis, len(shape_of(x))))


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx, x, lengths):
    dims = shape_of(x)
    batch_axis = axis_of(ctx, ctx.attr("batch_axis", 1), len(dims))
    time_axis = axis_of(ctx, ctx.attr("time_axis", 0), len(dims))
    xp = ctx.xp
    t = np.arange(dims[time_axis]).reshape([-1 if d == time_axis else 1 for d in range(len(dims))])
    n = xp.reshape(as_dtype(xp, lengths, np.int64), [-1 if d == batch_axis else 1 for d in range(len(dims))])
    source = xp.broadcast_to(xp.where(xp.less(t, n), xp.subtract(xp.subtract(n, 1), t), t), dims)
    return x[_along_axis(source, time_axis)]


@converter("TopK", since=10)
def top_k(ctx, x, k):
    k = int(known(ctx, k, "k").reshape(-1)[0])
    dims = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", -1), len(dims))
    largest = ctx.attr("largest", 1)
    ctx.attr("sorted")   # the results come sorted either way
    xp = ctx.xp
    last = xp.moveaxis(x, axis, -1)
    if largest:
        keys = last
    elif np.issubdtype(np.dtype(x.dtype), np.integer):
        keys = xp.invert(last)          # reverses the order without overflow
    else:
        keys = xp.negative(last)
    keys_top, indices = lax.top_k(keys, k)
    indices = as_dtype(xp, indices, np.int64)
    values = xp.take_along_axis(last, indices, axis=-1)
    return xp.moveaxis(values, -1, axis), xp.moveaxis(indices, -1, axis)


def _shifted(xp, y, axis, reverse, fill):
    """y moved one place along axis (toward the end, or the start when reversed), `fill` entering."""
    dims = shape_of(y)
    n = dims[axis]
    edge = xp.full(tuple(1 if d == axis else s for d, s in enumerate(dims)), fill, dtype=y.dtype)
    index = [slice(None)] * len(dims)
    if reverse:
        index[axis] = slice(1, n)
        return xp.concatenate([y[tuple(index)], edge], axis=axis)
    index[axis] = slice(0, n - 1)
    return xp.concatenate([edge, y[tuple(index)]], axis=axis)


def _cumulative(scan, identity):
    def convert(ctx, x, axis):
        axis = axis_of(ctx, ints(ctx, axis, "axis")[0], len(shape_of(x)))
        exclusive, reverse = ctx.attr("exclusive", 0), ctx.attr("reverse", 0)
        y = scan(x, axis=axis, reverse=bool(reverse))
        if exclusive and shape_of(x)[axis]:
            y = _shifted(ctx.xp, y, axis, bool(reverse), identity)
        return y
    return convert


converter("CumSum", since=11)(_cumulative(lax.cumsum, 0))
converter("CumProd", since=26)(_cumulative(lax.cumprod, 1))


@converter("TensorScatter", since=24)
def tensor_scatter(ctx, past, update, write_indices=None):
    """A key/value cache update: batch entry b's `update` rows written along `axis` from
    position write_indices[b] (0 by default; modulo the cache length when circular). Each
    cache position reads the update row that lands on it, if any, so the write is one
    gather and a select."""
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    dims, u_dims = shape_of(past), shape_of(update)
    axis = axis_of(ctx, ctx.attr("axis", -2), len(dims))
    if axis == 0:
        raise ctx.error("axis 0 is the batch axis, not a sequence axis")
    if len(u_dims) != len(dims) or any(u != d for i, (u, d) in enumerate(zip(u_dims, dims)) if i != axis) \
            or u_dims[axis] > dims[axis]:
        raise ctx.error(f"update of shape {list(u_dims)} does not fit the cache {list(dims)} along axis {axis}")
    xp = xp_of(ctx, past, update, write_indices)
    batch, length, written = dims[0], dims[axis], u_dims[axis]
    start = np.zeros((batch,), np.int64) if write_indices is None else as_dtype(xp, write_indices, np.int64)
    # row of `update` that cache position p of batch entry b holds: p - start[b]
    row = np.arange(length, dtype=np.int64)[None, :] - xp.reshape(start, (batch, 1))
    if mode == "circular":
        row = xp.remainder(row, np.int64(length))
    valid = xp.logical_and(row >= 0, row < written)
    shape = [1] * len(dims)
    shape[0], shape[axis] = batch, length
    row, valid = xp.reshape(xp.clip(row, 0, max(written - 1, 0)), shape), xp.reshape(valid, shape)
    return xp.where(valid, xp.take_along_axis(update, row, axis=axis), past)
