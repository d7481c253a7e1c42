"""Upsampling (nearest, bilinear; forward and backward) as products with interpolation
matrices built in NumPy, and scaled dot-product attention, decomposed."""
from __future__ import annotations

import math

import numpy as np

from ... import numpy as pnp
from .registry import LoweringError, lowering


def _nearest_matrix(n_in, n_out, scale):
    s = 1 / scale if scale else n_in / n_out
    src = np.minimum(np.floor(np.arange(n_out) * s).astype(np.int64), n_in - 1)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), src] = 1
    return m


def _linear_matrix(n_in, n_out, align_corners, scale):
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = np.arange(n_out) * s
    else:
        s = 1 / scale if scale else n_in / n_out
        src = np.maximum((np.arange(n_out) + 0.5) * s - 0.5, 0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), lo), 1 - frac)
    np.add.at(m, (np.arange(n_out), hi), frac)
    return m


def _apply(x, matrices):
    """x (N, C, spatial...) with each spatial axis multiplied by its (out, in) matrix."""
    n = len(matrices)
    for i, m in enumerate(matrices):
        ax = x.ndim - n + i
        moved = pnp.moveaxis(x, ax, -1)
        x = pnp.moveaxis(pnp.matmul(moved, np.ascontiguousarray(m.T).astype(x.dtype)), -1, ax)
    return x


def _scales(scales, n):
    if scales is None:
        return [None] * n
    return list(scales) if isinstance(scales, (list, tuple)) else [scales] * n


def _upsample(ctx, x, kind, align_corners, scales):
    out = ctx.out_shape()
    n = x.ndim - 2
    ins = x.shape[2:]
    scales = _scales(scales, n)
    if kind == "nearest":
        ms = [_nearest_matrix(i, o, s) for i, o, s in zip(ins, out[2:], scales)]
    else:
        ms = [_linear_matrix(i, o, align_corners, s) for i, o, s in zip(ins, out[2:], scales)]
    return _apply(x, ms)


@lowering("upsample_nearest2d.default", "upsample_nearest1d.default", "upsample_nearest3d.default")
def upsample_nearest(ctx, x, output_size, *scales):
    return _upsample(ctx, x, "nearest", False, [s for s in scales] if scales and scales[0] is not None else None)


@lowering("upsample_nearest2d.vec", "upsample_nearest1d.vec", "upsample_nearest3d.vec")
def upsample_nearest_vec(ctx, x, output_size, scale_factors):
    return _upsample(ctx, x, "nearest", False, scale_factors if output_size is None else None)


@lowering("upsample_bilinear2d.default", "upsample_linear1d.default")
def upsample_bilinear(ctx, x, output_size, align_corners, *scales):
    return _upsample(ctx, x, "linear", align_corners, list(scales) if scales and scales[0] is not None else None)


@lowering("upsample_bilinear2d.vec", "upsample_linear1d.vec")
def upsample_bilinear_vec(ctx, x, output_size, align_corners, scale_factors):
    return _upsample(ctx, x, "linear", align_corners, scale_factors if output_size is None else None)


@lowering("upsample_nearest2d_backward.default")
def upsample_nearest_backward(ctx, grad, output_size, input_size, *scales):
    n = len(input_size) - 2
    sc = _scales(scales[0] if len(scales) == 1 else (list(scales) if scales and scales[0] is not None else None), n)
    ms = [_nearest_matrix(i, o, s).T for i, o, s in zip(input_size[2:], output_size, sc)]
    return _apply(grad, ms)


@lowering("upsample_bilinear2d_backward.default")
def upsample_bilinear_backward(ctx, grad, output_size, input_size, align_corners, *scales):
    n = len(input_size) - 2
    sc = _scales(list(scales) if scales and scales[0] is not None else None, n)
    ms = [_linear_matrix(i, o, align_corners, s).T for i, o, s in zip(input_size[2:], output_size, sc)]
    return _apply(grad, ms)


def _attention(q, k, v, mask, dropout_p, is_causal, scale):
    if dropout_p:
        raise LoweringError("scaled_dot_product_attention with dropout has no lowering")
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    if k.shape[-3] != q.shape[-3]:   # grouped-query attention: repeat the key/value heads
        rep = q.shape[-3] // k.shape[-3]
        k, v = pnp.repeat(k, rep, axis=-3), pnp.repeat(v, rep, axis=-3)
    s = pnp.matmul(q, pnp.swapaxes(k, -1, -2)) * scale
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        s = pnp.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    if mask is not None:
        s = pnp.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    m = pnp.max(s, axis=-1, keepdims=True)
    e = pnp.exp(s - m)
    total = pnp.sum(e, axis=-1, keepdims=True)
    return pnp.matmul(e / total, v), pnp.squeeze(pnp.log(total) + m, -1)


@lowering("scaled_dot_product_attention.default")
def sdpa(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)[0]


@lowering("_scaled_dot_product_flash_attention_for_cpu.default")
def sdpa_flash_cpu(ctx, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    out, lse = _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)
    return out, lse
