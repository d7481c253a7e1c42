"""Normalisations: LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization, MeanVarianceNormalization, LpNormalization.

Statistics of 16-bit float inputs are computed in float32 (ONNX's stash_type=1, the
default and the only stash type the reference defines); the result has the input's type.
"""
from __future__ import annotations

import numpy as np

from ..registry import converter
from .common import as_dtype, axes_of, axis_of, onnx_dtype, shape_of


def _stash_dtype(ctx, x):
    stash = ctx.attr("stash_type", 1)
    if stash != 1:
        raise ctx.unsupported(f"attribute 'stash_type'={stash}")
    dtype = np.dtype(x.dtype)
    return dtype if dtype.itemsize >= 4 else onnx_dtype(ctx, stash)


def _normalised(xp, x, axes, epsilon):
    """(x - mean) / sqrt(var + epsilon) over `axes`, and the mean and 1/std (kept dims)."""
    mean = xp.mean(x, axis=axes, keepdims=True)
    centred = xp.subtract(x, mean)
    var = xp.mean(xp.multiply(centred, centred), axis=axes, keepdims=True)
    inv_std = xp.divide(1, xp.sqrt(xp.add(var, epsilon)))
    return xp.multiply(centred, inv_std), mean, inv_std


@converter("LayerNormalization", since=17)
def layer_normalization(ctx, x, scale, bias=None):
    xp = ctx.xp
    rank = len(shape_of(x))
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    epsilon = ctx.attr("epsilon", 1e-5)
    work = _stash_dtype(ctx, x)
    y, mean, inv_std = _normalised(xp, as_dtype(xp, x, work), tuple(range(axis, rank)), epsilon)
    y = xp.multiply(as_dtype(xp, y, x.dtype), scale)
    if bias is not None:
        y = xp.add(y, bias)
    outs = (y, as_dtype(xp, mean, work), as_dtype(xp, inv_std, work))
    return outs[:len(ctx.output_names)] if len(ctx.output_names) > 1 else y


@converter("RMSNormalization", since=23)
def rms_normalization(ctx, x, scale):
    xp = ctx.xp
    rank = len(shape_of(x))
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    epsilon = ctx.attr("epsilon", 1e-5)
    work = as_dtype(xp, x, _stash_dtype(ctx, x))
    mean_square = xp.mean(xp.multiply(work, work), axis=tuple(range(axis, rank)), keepdims=True)
    y = xp.divide(work, xp.sqrt(xp.add(mean_square, epsilon)))
    return xp.multiply(as_dtype(xp, y, x.dtype), scale)


def _channel_shaped(xp, v, rank):
    """A per-channel vector shaped to broadcast against (N, C, d1, ...)."""
    return xp.reshape(v, (1, -1) + (1,) * (rank - 2))


@converter("InstanceNormalization", since=6)
def instance_normalization(ctx, x, scale, bias):
    xp = ctx.xp
    rank = len(shape_of(x))
    epsilon = ctx.attr("epsilon", 1e-5)
    y, _, _ = _normalised(xp, x, tuple(range(2, rank)), epsilon)
    return xp.add(xp.multiply(y, _channel_shaped(xp, scale, rank)), _channel_shaped(xp, bias, rank))


@converter("GroupNormalization", since=18)
def group_normalization(ctx, x, scale, bias):
    xp = ctx.xp
    dims = shape_of(x)
    groups = int(ctx.attr("num_groups"))
    epsilon = ctx.attr("epsilon", 1e-5)
    n, c = dims[0], dims[1]
    if c % groups:
        raise ctx.error(f"{c} channels do not divide into {groups} groups")
    work = as_dtype(xp, x, _stash_dtype(ctx, x) if ctx.opset >= 21 else np.dtype(x.dtype))
    grouped = xp.reshape(work, (n, groups, -1))
    y, _, _ = _normalised(xp, grouped, (2,), epsilon)
    y = as_dtype(xp, xp.reshape(y, dims), x.dtype)
    if ctx.opset < 21:   # scale and bias per group, shared by the group's channels
        scale, bias = (xp.repeat(v, c // groups) for v in (scale, bias))
    return xp.add(xp.multiply(y, _channel_shaped(xp, scale, len(dims))), _channel_shaped(xp, bias, len(dims)))


@converter("MeanVarianceNormalization", since=9)
def mean_variance_normalization(ctx, x):
    xp = ctx.xp
    axes = axes_of(ctx, ctx.attr("axes", [0, 2, 3]), len(shape_of(x)))
    # As ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
    mean = xp.mean(x, axis=axes, keepdims=True)
    var = xp.subtract(xp.mean(xp.multiply(x, x), axis=axes, keepdims=True), xp.multiply(mean, mean))
    return xp.divide(xp.subtract(x, mean), xp.add(xp.sqrt(var), 1e-9))


@converter("LpNormalization", since=1)
def lp_normalization(ctx, x):
    xp = ctx.xp
    axis = axis_of(ctx, ctx.attr("axis", -1), len(shape_of(x)))
    p = ctx.attr("p", 2)
    if p == 1:
        norm = xp.sum(xp.abs(x), axis=axis, keepdims=True)
    elif p == 2:
        norm = xp.sqrt(xp.sum(xp.multiply(x, x), axis=axis, keepdims=True))
    else:
        raise ctx.unsupported(f"attribute 'p'={p}")
    zero = np.zeros((), x.dtype)
    is_zero = xp.equal(norm, zero)
    # A zero norm gives zeros (not 0/0).
    return xp.where(is_zero, zero, xp.divide(x, xp.where(is_zero, np.ones((), x.dtype), norm)))
