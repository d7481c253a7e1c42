"""Normalisation: batch norm (native_batch_norm and the _native_batch_norm_legit forms,
training and eval, running-statistics updates) and its backward, layer norm and its
backward, group norm and its backward."""
from __future__ import annotations

import numpy as np

from ... import lax
from ... import numpy as pnp
from .common import channel
from .registry import lowering


def _stats_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _affine(y, w, b, rank):
    if w is not None:
        y = y * channel(w, rank)
    if b is not None:
        y = y + channel(b, rank)
    return y


def _batch_norm(ctx, x, w, b, rm, rv, training, momentum, eps):
    """(out, mean, rstd, new running mean, new running var)."""
    a = _stats_axes(x)
    if training:
        mean = pnp.mean(x, axis=a)
        centred = x - channel(mean, x.ndim)
        var = pnp.mean(centred * centred, axis=a)
        rstd = lax.rsqrt(var + eps)
        y = centred * channel(rstd, x.ndim)
        count = x.size // x.shape[1]
        new_rm = None if rm is None else rm * (1 - momentum) + mean * momentum
        new_rv = None if rv is None else rv * (1 - momentum) + var * (momentum * count / max(count - 1, 1))
        return _affine(y, w, b, x.ndim), mean, rstd, new_rm, new_rv
    # eval: one multiply-add per element, x * scale + shift, the per-channel factors computed
    # once (the epilogue a convolution's output fusion takes; (x - mean) * rstd * w + b was four)
    rstd = lax.rsqrt(rv + eps)
    scale = rstd if w is None else rstd * w
    shift = -rm * scale if b is None else b - rm * scale
    return x * channel(scale, x.ndim) + channel(shift, x.ndim), rm, rstd, rm, rv


def _saved(ctx, index, value):
    """A saved statistic, or the empty tensor PyTorch returns in its place in eval mode."""
    shape = ctx.out_shape(index)
    if shape == (0,):
        return pnp.zeros((0,), ctx.out_dtype(index))
    return pnp.reshape(value, shape)


@lowering("native_batch_norm.default", "_native_batch_norm_legit.default")
def native_batch_norm(ctx, x, w, b, rm, rv, training, momentum, eps):
    y, mean, rstd, _, _ = _batch_norm(ctx, x, w, b, rm, rv, training, momentum, eps)
    return y, _saved(ctx, 1, mean), _saved(ctx, 2, rstd)


@lowering("_native_batch_norm_legit.no_stats")
def batch_norm_no_stats(ctx, x, w, b, training, momentum, eps):
    y, mean, rstd, _, _ = _batch_norm(ctx, x, w, b, None, None, True, momentum, eps)
    return y, mean, rstd


@lowering("_native_batch_norm_legit_no_training.default")
def batch_norm_no_training(ctx, x, w, b, rm, rv, momentum, eps):
    y, _, _, _, _ = _batch_norm(ctx, x, w, b, rm, rv, False, momentum, eps)
    return y, _saved(ctx, 1, rm), _saved(ctx, 2, rv)


@lowering("_native_batch_norm_legit_functional.default")
def batch_norm_functional(ctx, x, w, b, rm, rv, training, momentum, eps):
    y, mean, rstd, new_rm, new_rv = _batch_norm(ctx, x, w, b, rm, rv, training, momentum, eps)
    return y, _saved(ctx, 1, mean), _saved(ctx, 2, rstd), new_rm, new_rv


@lowering("native_batch_norm_backward.default")
def batch_norm_backward(ctx, grad, x, w, rm, rv, save_mean, save_rstd, train, eps, output_mask):
    a = _stats_axes(x)
    if train:
        mean, rstd = save_mean, save_rstd
    else:
        mean, rstd = rm, lax.rsqrt(rv + eps)
    xhat = (x - channel(mean, x.ndim)) * channel(rstd, x.ndim)
    gsum = pnp.sum(grad, axis=a)
    gdot = pnp.sum(grad * xhat, axis=a)
    scale = rstd if w is None else rstd * w
    if train:
        count = x.size // x.shape[1]
        gx = (grad - channel(gsum / count, x.ndim) - xhat * channel(gdot / count, x.ndim)) * channel(scale, x.ndim)
    else:
        gx = grad * channel(scale, x.ndim)
    return (gx if output_mask[0] else None, gdot if output_mask[1] else None, gsum if output_mask[2] else None)


@lowering("native_layer_norm.default")
def layer_norm(ctx, x, normalized_shape, w, b, eps):
    a = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = pnp.mean(x, axis=a, keepdims=True)
    centred = x - mean
    rstd = lax.rsqrt(pnp.mean(centred * centred, axis=a, keepdims=True) + eps)
    y = centred * rstd
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, mean, rstd


@lowering("native_layer_norm_backward.default")
def layer_norm_backward(ctx, grad, x, normalized_shape, mean, rstd, w, b, output_mask):
    k = len(normalized_shape)
    a = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    n = int(np.prod(normalized_shape))
    xhat = (x - mean) * rstd
    gw = grad if w is None else grad * w
    gx = rstd * (gw - pnp.mean(gw, axis=a, keepdims=True) - xhat * pnp.mean(gw * xhat, axis=a, keepdims=True))
    del n
    dw = pnp.sum(grad * xhat, axis=lead) if output_mask[1] and w is not None else None
    db = pnp.sum(grad, axis=lead) if output_mask[2] and b is not None else None
    return gx if output_mask[0] else None, dw, db


@lowering("native_group_norm.default")
def group_norm(ctx, x, w, b, n, c, hw, group, eps):
    g = pnp.reshape(x, (n, group, -1))
    mean = pnp.mean(g, axis=2)
    centred = g - mean[:, :, None]
    rstd = lax.rsqrt(pnp.mean(centred * centred, axis=2) + eps)
    y = pnp.reshape(centred * rstd[:, :, None], x.shape)
    return _affine(y, w, b, x.ndim), mean, rstd


@lowering("native_group_norm_backward.default")
def group_norm_backward(ctx, grad, x, mean, rstd, w, n, c, hw, group, output_mask):
    xg = pnp.reshape(x, (n, group, -1))
    xhat = pnp.reshape((xg - mean[:, :, None]) * rstd[:, :, None], x.shape)
    gw = grad if w is None else grad * channel(w, x.ndim)
    gwg, xhg = pnp.reshape(gw, (n, group, -1)), pnp.reshape(xhat, (n, group, -1))
    gx = rstd[:, :, None] * (gwg - pnp.mean(gwg, axis=2, keepdims=True)
                             - xhg * pnp.mean(gwg * xhg, axis=2, keepdims=True))
    spatial = (0,) + tuple(range(2, x.ndim))
    dw = pnp.sum(grad * xhat, axis=spatial) if output_mask[1] else None
    db = pnp.sum(grad, axis=spatial) if output_mask[2] else None
    return pnp.reshape(gx, x.shape) if output_mask[0] else None, dw, db
