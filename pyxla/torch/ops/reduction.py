"""Reductions and scans: sum, mean, prod, amax/amin, max/min (with indices), var/std,
argmax/argmin, any/all, logsumexp, cumsum/cumprod, topk, sort/argsort."""
from __future__ import annotations

import numpy as np

from ... import lax
from ... import numpy as pnp
from .common import axes, axis, cast
from .registry import lowering


@lowering("sum.default", "sum.dim_IntList")
def sum_(ctx, x, dims=None, keepdim=False, dtype=None):
    out = ctx.out_dtype()
    return pnp.sum(cast(x, out), axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("mean.default", "mean.dim")
def mean(ctx, x, dims=None, keepdim=False, dtype=None):
    out = ctx.out_dtype()
    return pnp.mean(cast(x, out), axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("prod.default", "prod.dim_int")
def prod(ctx, x, dim=None, keepdim=False, dtype=None):
    out = ctx.out_dtype()
    return pnp.prod(cast(x, out), axis=axes(dim, x.ndim), keepdims=keepdim)


@lowering("amax.default", "max.default")
def amax(ctx, x, dims=None, keepdim=False):
    return pnp.max(x, axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("amin.default", "min.default")
def amin(ctx, x, dims=None, keepdim=False):
    return pnp.min(x, axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("max.dim")
def max_dim(ctx, x, dim, keepdim=False):
    d = axis(dim, x.ndim)
    return (pnp.max(x, axis=d, keepdims=keepdim), _keep(lax.argmax(x, d, np.int64), d, keepdim))


@lowering("min.dim")
def min_dim(ctx, x, dim, keepdim=False):
    d = axis(dim, x.ndim)
    return (pnp.min(x, axis=d, keepdims=keepdim), _keep(lax.argmin(x, d, np.int64), d, keepdim))


def _keep(x, d, keepdim):
    return pnp.expand_dims(x, d) if keepdim else x


def _arg(ctx, x, dim, keepdim, reducer):
    if dim is None:
        flat = pnp.reshape(x, (-1,))
        index = reducer(flat, 0, np.int64)
        return pnp.reshape(index, (1,) * x.ndim) if keepdim else index
    d = axis(dim, x.ndim)
    return _keep(reducer(x, d, np.int64), d, keepdim)


@lowering("argmax.default")
def argmax(ctx, x, dim=None, keepdim=False):
    return _arg(ctx, x, dim, keepdim, lax.argmax)


@lowering("argmin.default")
def argmin(ctx, x, dim=None, keepdim=False):
    return _arg(ctx, x, dim, keepdim, lax.argmin)


@lowering("var.correction", "var.dim", "std.correction", "std.dim")
def var(ctx, x, dims=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased is True else 0
    a = axes(dims, x.ndim)
    n = int(np.prod([x.shape[i] for i in a]))
    centred = x - pnp.mean(x, axis=a, keepdims=True)
    v = pnp.sum(centred * centred, axis=a, keepdims=keepdim) / max(n - correction, 0)
    return pnp.sqrt(v) if ctx.node.target.__name__.startswith("std") else v


@lowering("var_mean.correction")
def var_mean(ctx, x, dims=None, *, correction=1, keepdim=False):
    a = axes(dims, x.ndim)
    n = int(np.prod([x.shape[i] for i in a]))
    m = pnp.mean(x, axis=a, keepdims=True)
    v = pnp.sum((x - m) * (x - m), axis=a, keepdims=keepdim) / max(n - correction, 0)
    return v, (m if keepdim else pnp.squeeze(m, a))


@lowering("any.default", "any.dim", "any.dims")
def any_(ctx, x, dims=None, keepdim=False):
    return pnp.any(pnp.not_equal(x, 0), axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("all.default", "all.dim", "all.dims")
def all_(ctx, x, dims=None, keepdim=False):
    return pnp.all(pnp.not_equal(x, 0), axis=axes(dims, x.ndim), keepdims=keepdim)


@lowering("logsumexp.default")
def logsumexp(ctx, x, dims, keepdim=False):
    a = axes(dims, x.ndim)
    m = lax.stop_gradient(pnp.max(x, axis=a, keepdims=True))
    m = pnp.where(pnp.isfinite(m), m, 0)
    s = pnp.log(pnp.sum(pnp.exp(x - m), axis=a, keepdims=True)) + m
    return s if keepdim else pnp.squeeze(s, a)


@lowering("cumsum.default")
def cumsum(ctx, x, dim, dtype=None):
    if x.ndim == 0:
        return cast(x, ctx.out_dtype())
    return lax.cumsum(cast(x, ctx.out_dtype()), axis(dim, x.ndim))


@lowering("cumprod.default")
def cumprod(ctx, x, dim, dtype=None):
    if x.ndim == 0:
        return cast(x, ctx.out_dtype())
    return lax.cumprod(cast(x, ctx.out_dtype()), axis(dim, x.ndim))


@lowering("topk.default")
def topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    d = axis(dim, x.ndim)
    moved = pnp.moveaxis(x, d, -1)
    values, indices = lax.top_k(moved if largest else -moved, k)
    if not largest:
        values = -values
    return pnp.moveaxis(values, -1, d), pnp.moveaxis(indices.astype(np.int64), -1, d)


@lowering("sort.default", "sort.stable")
def sort(ctx, x, *args, stable=False, dim=-1, descending=False):
    if args and isinstance(args[0], bool | None):   # sort.stable(self, *, stable, dim, descending)
        pass
    elif args:
        dim = args[0]
        descending = args[1] if len(args) > 1 else descending
    d = axis(dim, x.ndim)
    index = lax.broadcasted_iota(np.int64, x.shape, d)
    keys = -x if descending else x
    keys, index = lax.sort((keys, index), d, True, num_keys=1)
    return (-keys if descending else keys), index


@lowering("argsort.default", "argsort.stable")
def argsort(ctx, x, *args, **kwargs):
    return sort(ctx, x, *args, **kwargs)[1]
