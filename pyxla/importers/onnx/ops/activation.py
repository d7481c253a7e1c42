"""Activation functions, and Softmax, LogSoftmax and Hardmax.

Before opset 13 the softmax family coerces its input to 2-D at `axis` (default 1): the
normalisation runs over all the dimensions from `axis` on. From 13 it runs over `axis`
alone (default -1).
"""
from __future__ import annotations

import math

import numpy as np

from .... import lax
from ..registry import converter
from .common import as_dtype, axis_of, shape_of


@converter("Relu", since=6)
def relu(ctx, x):
    return ctx.xp.maximum(x, np.zeros((), x.dtype))


@converter("LeakyRelu", since=6)
def leaky_relu(ctx, x):
    alpha = ctx.attr("alpha", 0.01)
    return ctx.xp.where(ctx.xp.less(x, 0), ctx.xp.multiply(x, alpha), x)


@converter("PRelu", since=7)
def prelu(ctx, x, slope):
    return ctx.xp.where(ctx.xp.less(x, 0), ctx.xp.multiply(x, slope), x).astype(x.dtype)


def _expm1(ctx, x):
    return ctx.xp.expm1(x)


@converter("Elu", since=6)
def elu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return ctx.xp.where(ctx.xp.less(x, 0), ctx.xp.multiply(_expm1(ctx, x), alpha), x)


@converter("Selu", since=6)
def selu(ctx, x):
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    xp = ctx.xp
    return xp.multiply(xp.where(xp.greater(x, 0), x, xp.multiply(_expm1(ctx, x), alpha)), gamma)


@converter("Celu", since=12)
def celu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    xp = ctx.xp
    negative = xp.multiply(_expm1(ctx, xp.divide(x, alpha)), alpha)
    return xp.add(xp.maximum(x, 0), xp.minimum(negative, 0))


@converter("Sigmoid", since=6)
def sigmoid(ctx, x):
    return lax.logistic(x)


@converter("HardSigmoid", since=6)
def hard_sigmoid(ctx, x):
    alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    xp = ctx.xp
    return xp.clip(xp.add(xp.multiply(x, alpha), beta), 0, 1)


@converter("HardSwish", since=14)
def hard_swish(ctx, x):
    xp = ctx.xp
    return xp.multiply(x, xp.clip(xp.add(xp.multiply(x, 1 / 6), 0.5), 0, 1))


@converter("Tanh", since=6)
def tanh(ctx, x):
    return ctx.xp.tanh(x)


def _softplus(ctx, x):
    # log(1 + exp(x)) without overflow for large x.
    return ctx.xp.logaddexp(x, np.zeros((), x.dtype))


@converter("Softplus", since=1)
def softplus(ctx, x):
    return _softplus(ctx, x)


@converter("Softsign", since=1)
def softsign(ctx, x):
    return ctx.xp.divide(x, ctx.xp.add(ctx.xp.abs(x), 1))


@converter("Gelu", since=20)
def gelu(ctx, x):
    approximate = ctx.attr("approximate", "none")
    xp = ctx.xp
    if approximate == "none":
        inner = lax.erf(xp.multiply(x, 1 / math.sqrt(2)))
    elif approximate == "tanh":
        cubic = xp.add(x, xp.multiply(xp.multiply(xp.multiply(x, x), x), 0.044715))
        inner = xp.tanh(xp.multiply(cubic, math.sqrt(2 / math.pi)))
    else:
        raise ctx.unsupported(f"attribute 'approximate'={approximate!r}")
    return xp.multiply(xp.multiply(x, 0.5), xp.add(inner, 1))


@converter("Mish", since=18)
def mish(ctx, x):
    return ctx.xp.multiply(x, ctx.xp.tanh(_softplus(ctx, x)))


@converter("Swish", since=24)
def swish(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return ctx.xp.multiply(x, lax.logistic(ctx.xp.multiply(x, alpha)))


@converter("ThresholdedRelu", since=10)
def thresholded_relu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return ctx.xp.where(ctx.xp.greater(x, alpha), x, np.zeros((), x.dtype))


@converter("Shrink", since=9)
def shrink(ctx, x):
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    xp = ctx.xp
    zero = np.zeros((), x.dtype)
    out = xp.where(xp.less(x, -lambd), xp.add(x, bias), xp.where(xp.greater(x, lambd), xp.subtract(x, bias), zero))
    return as_dtype(xp, out, x.dtype)


# --- softmax family -----------------------------------------------------------------------

def _normalised_axes(ctx, x):
    """The shape to compute in, and the axis softmax normalises over in it."""
    shape = shape_of(x)
    if ctx.opset >= 13:
        return shape, axis_of(ctx, ctx.attr("axis", -1), len(shape))
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ctx.error(f"axis {ctx.attr('axis', 1)} is out of range for rank {len(shape)}")
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))), 1


def _softmax_like(ctx, x, body):
    work_shape, axis = _normalised_axes(ctx, x)
    y = body(ctx.xp, ctx.xp.reshape(x, work_shape), axis)
    return ctx.xp.reshape(y, shape_of(x))


def _softmax(xp, x, axis):
    e = xp.exp(xp.subtract(x, xp.max(x, axis=axis, keepdims=True)))
    return xp.divide(e, xp.sum(e, axis=axis, keepdims=True))


def _log_softmax(xp, x, axis):
    shifted = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
    return xp.subtract(shifted, xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True)))


def _hardmax(xp, x, axis):
    first = xp.expand_dims(xp.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    return xp.equal(first, positions).astype(x.dtype)


@converter("Softmax", since=1)
def softmax(ctx, x):
    return _softmax_like(ctx, x, _softmax)


@converter("LogSoftmax", since=1)
def log_softmax(ctx, x):
    return _softmax_like(ctx, x, _log_softmax)


@converter("Hardmax", since=1)
def hardmax(ctx, x):
    return _softmax_like(ctx, x, _hardmax)
