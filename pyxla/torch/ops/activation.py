"""Activations and their backward ops: relu, gelu (erf and tanh), silu, sigmoid, tanh,
softplus, hardtanh, leaky_relu, elu, hardsigmoid, hardswish, mish; threshold_backward,
gelu_backward, silu_backward, sigmoid_backward, tanh_backward, softplus_backward,
hardtanh_backward, leaky_relu_backward, elu_backward; _softmax/_log_softmax and backward."""
from __future__ import annotations

import math

from ... import lax
from ... import numpy as pnp
from .common import axis
from .registry import lowering

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@lowering("relu.default")
def relu(ctx, x):
    return pnp.maximum(x, pnp.zeros((), x.dtype))


@lowering("threshold.default")
def threshold(ctx, x, threshold, value):
    return pnp.where(x <= threshold, value, x)


@lowering("threshold_backward.default")
def threshold_backward(ctx, grad, x, threshold):
    return pnp.where(x <= threshold, pnp.zeros((), grad.dtype), grad)


def _gelu_tanh_inner(x):
    return _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)


@lowering("gelu.default")
def gelu(ctx, x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + pnp.tanh(_gelu_tanh_inner(x)))
    return 0.5 * x * (1 + lax.erf(x * (1 / math.sqrt(2))))


@lowering("gelu_backward.default")
def gelu_backward(ctx, grad, x, approximate="none"):
    if approximate == "tanh":
        t = pnp.tanh(_gelu_tanh_inner(x))
        dinner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
        return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner)
    cdf = 0.5 * (1 + lax.erf(x * (1 / math.sqrt(2))))
    pdf = pnp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
    return grad * (cdf + x * pdf)


@lowering("silu.default")
def silu(ctx, x):
    return x * lax.logistic(x)


@lowering("silu_backward.default")
def silu_backward(ctx, grad, x):
    s = lax.logistic(x)
    return grad * s * (1 + x * (1 - s))


@lowering("mish.default")
def mish(ctx, x):
    return x * pnp.tanh(_softplus(x, 1.0, 20.0))


@lowering("sigmoid_backward.default")
def sigmoid_backward(ctx, grad, y):
    return grad * y * (1 - y)


@lowering("tanh_backward.default")
def tanh_backward(ctx, grad, y):
    return grad * (1 - y * y)


def _softplus(x, beta, threshold):
    bx = x * beta
    return pnp.where(bx > threshold, x, pnp.log1p(pnp.exp(pnp.minimum(bx, threshold))) / beta)


@lowering("softplus.default")
def softplus(ctx, x, beta=1, threshold=20):
    return _softplus(x, beta, threshold)


@lowering("softplus_backward.default")
def softplus_backward(ctx, grad, x, beta=1, threshold=20):
    bx = x * beta
    return pnp.where(bx > threshold, grad, grad * lax.logistic(bx))


@lowering("hardtanh.default")
def hardtanh(ctx, x, lo=-1, hi=1):
    return pnp.clip(x, lo, hi)


@lowering("hardtanh_backward.default")
def hardtanh_backward(ctx, grad, x, lo, hi):
    return pnp.where(pnp.logical_or(x <= lo, x >= hi), pnp.zeros((), grad.dtype), grad)


@lowering("leaky_relu.default")
def leaky_relu(ctx, x, slope=0.01):
    return pnp.where(x > 0, x, x * slope)


@lowering("leaky_relu_backward.default")
def leaky_relu_backward(ctx, grad, x, slope, self_is_result=False):
    return pnp.where(x > 0, grad, grad * slope)


@lowering("elu.default")
def elu(ctx, x, alpha=1, scale=1, input_scale=1):
    return pnp.where(x > 0, x * scale, pnp.expm1(x * input_scale) * (alpha * scale))


@lowering("elu_backward.default")
def elu_backward(ctx, grad, alpha, scale, input_scale, is_result, x):
    if is_result:
        neg = grad * input_scale * (x + alpha * scale)
    else:
        neg = grad * input_scale * alpha * scale * pnp.exp(x * input_scale)
    return pnp.where(x > 0, grad * scale, neg)


@lowering("hardsigmoid.default")
def hardsigmoid(ctx, x):
    return pnp.clip(x / 6 + 0.5, 0, 1)


@lowering("hardswish.default")
def hardswish(ctx, x):
    return x * pnp.clip(x / 6 + 0.5, 0, 1)


@lowering("_softmax.default")
def softmax(ctx, x, dim, half_to_float=False):
    d = axis(dim, x.ndim)
    e = pnp.exp(x - pnp.max(x, axis=d, keepdims=True))
    return e / pnp.sum(e, axis=d, keepdims=True)


@lowering("_log_softmax.default")
def log_softmax(ctx, x, dim, half_to_float=False):
    d = axis(dim, x.ndim)
    shifted = x - pnp.max(x, axis=d, keepdims=True)
    return shifted - pnp.log(pnp.sum(pnp.exp(shifted), axis=d, keepdims=True))


@lowering("_softmax_backward_data.default")
def softmax_backward(ctx, grad, y, dim, input_dtype):
    d = axis(dim, y.ndim)
    gy = grad * y
    return gy - y * pnp.sum(gy, axis=d, keepdims=True)


@lowering("_log_softmax_backward_data.default")
def log_softmax_backward(ctx, grad, y, dim, input_dtype):
    d = axis(dim, y.ndim)
    return grad - pnp.exp(y) * pnp.sum(grad, axis=d, keepdims=True)
