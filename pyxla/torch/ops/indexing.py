"""Indexing: embedding (+ dense backward), index (advanced indexing), index_put,
index_select, gather, scatter (src, value, add, reduce), slice_scatter, select_scatter."""
from __future__ import annotations

import numpy as np

from ... import lax
from ... import numpy as pnp
from .common import axis, cast
from .registry import LoweringError, lowering


@lowering("embedding.default")
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return pnp.take(weight, indices, axis=0)


@lowering("embedding_dense_backward.default")
def embedding_dense_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise LoweringError("embedding_dense_backward with scale_grad_by_freq has no lowering")
    d = grad.shape[-1]
    flat = pnp.reshape(indices, (-1,))
    g = pnp.reshape(grad, (-1, d))
    if padding_idx is not None and padding_idx >= 0:
        g = pnp.where(pnp.reshape(flat == padding_idx, (-1, 1)), pnp.zeros((), g.dtype), g)
    return pnp.zeros((num_weights, d), grad.dtype).at[flat].add(g)


def _index_tuple(indices):
    if any(i is not None and i.dtype == np.bool_ for i in indices):
        raise LoweringError("indexing with a boolean mask (a data-dependent shape) has no lowering")
    return tuple(slice(None) if i is None else i for i in indices)


@lowering("index.Tensor", "_unsafe_index.Tensor")
def index(ctx, x, indices):
    return x[_index_tuple(indices)]


@lowering("index_put.default", "_unsafe_index_put.default", "index_put_.default")
def index_put(ctx, x, indices, values, accumulate=False):
    values = cast(values, x.dtype)
    masks = [i for i in indices if i is not None and i.dtype == np.bool_]
    if masks:
        mask = indices[0]
        if len(indices) != 1 or mask.shape != x.shape[:mask.ndim]:
            raise LoweringError("index_put with a boolean mask of another form has no lowering")
        mask = pnp.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
        if values.ndim > 0 and values.size > 1:
            raise LoweringError("index_put of a vector through a boolean mask has no lowering")
        values = pnp.reshape(values, ())
        return pnp.where(mask, x + values if accumulate else values, x)
    at = x.at[_index_tuple(indices)]
    return at.add(values) if accumulate else at.set(values)


@lowering("index_select.default")
def index_select(ctx, x, dim, idx):
    return pnp.take(x, idx, axis=axis(dim, x.ndim))


def _full_index(x, dim, idx):
    """Index arrays addressing x for every element of `idx` (gather/scatter's index)."""
    d = axis(dim, x.ndim)
    out = []
    for i in range(x.ndim):
        out.append(idx if i == d else lax.broadcasted_iota(np.int64, idx.shape, i))
    return tuple(out)


@lowering("gather.default")
def gather(ctx, x, dim, idx, sparse_grad=False):
    if x.ndim == 0:
        return x
    idx = pnp.where(idx < 0, idx + x.shape[axis(dim, x.ndim)], idx)
    return x[_full_index(x, dim, idx)]


def _scatter(x, dim, idx, src, mode):
    if not isinstance(src, (int, float, bool)) and src.shape != idx.shape:
        src = src[tuple(slice(0, n) for n in idx.shape)]
    src = cast(src, x.dtype)
    at = x.at[_full_index(x, dim, idx)]
    return {"set": at.set, "add": at.add, "multiply": at.multiply, "max": at.max, "min": at.min}[mode](src)


@lowering("scatter.src", "scatter.value")
def scatter(ctx, x, dim, idx, src):
    return _scatter(x, dim, idx, src, "set")


@lowering("scatter_add.default")
def scatter_add(ctx, x, dim, idx, src):
    return _scatter(x, dim, idx, src, "add")


@lowering("scatter.reduce", "scatter.value_reduce")
def scatter_reduce_legacy(ctx, x, dim, idx, src, reduce):
    return _scatter(x, dim, idx, src, {"add": "add", "multiply": "multiply"}[reduce])


@lowering("scatter_reduce.two")
def scatter_reduce(ctx, x, dim, idx, src, reduce, include_self=True):
    modes = {"sum": "add", "prod": "multiply", "amax": "max", "amin": "min"}
    if reduce not in modes or not include_self:
        raise LoweringError(f"scatter_reduce with reduce={reduce!r}, include_self={include_self} has no lowering")
    return _scatter(x, dim, idx, src, modes[reduce])


@lowering("slice_scatter.default")
def slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    d = axis(dim, x.ndim)
    start, end, step = slice(start, end, step).indices(x.shape[d])
    index = [slice(None)] * x.ndim
    index[d] = slice(start, end, step)
    return x.at[tuple(index)].set(cast(src, x.dtype))


@lowering("select_scatter.default")
def select_scatter(ctx, x, src, dim, index):
    d = axis(dim, x.ndim)
    where = [slice(None)] * x.ndim
    where[d] = index % x.shape[d]
    return x.at[tuple(where)].set(cast(src, x.dtype))
