"""pyxla.nn.activations: the activation and normalisation functions of neural networks.

Written with pyxla.numpy, so each works eagerly on arrays and traced inside `pyxla.jit`;
results keep the input's float dtype (Python scalars inside are weak). The numerically
delicate ones are written the stable way: softmax, log_softmax and logsumexp subtract the
maximum first, softplus is logaddexp(x, 0), sigmoid is HLO's `logistic`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import numpy as pnp
from ..frontend.tracing import bind
from ..numpy.core import FLOAT32, convert, dtype_of, eager_result, is_float, operand

__all__ = ["relu", "relu6", "leaky_relu", "elu", "gelu", "sigmoid", "log_sigmoid", "silu", "swish",
           "softplus", "softmax", "log_softmax", "logsumexp", "layer_norm", "one_hot", "standardize"]


def _float_operand(name: str, x: Any) -> Any:
    """`x` as an operand of a float dtype (integers become float64, as NumPy's math does)."""
    x = operand(f"nn.{name}", x)
    if isinstance(x, (bool, int, float)):
        x = np.asarray(x, dtype=np.float64)
    return x if is_float(dtype_of(x)) else convert(x, np.float64)


def _float_op(opcode: str, x: Any) -> Any:
    """HLO elementwise `opcode` on a float operand (half precision computed in float32)."""
    dt = dtype_of(x)
    compute = FLOAT32 if dt.itemsize == 2 else dt
    return eager_result(convert(bind(opcode, convert(x, compute)), dt))


def relu(x):
    """max(x, 0)."""
    return pnp.maximum(x, 0)


def relu6(x):
    """min(max(x, 0), 6)."""
    return pnp.minimum(pnp.maximum(x, 0), 6)


def leaky_relu(x, negative_slope=0.01):
    return pnp.where(pnp.greater_equal(x, 0), x, pnp.multiply(negative_slope, x))


def elu(x, alpha=1.0):
    x = _float_operand("elu", x)
    return pnp.where(pnp.greater(x, 0), x, pnp.multiply(alpha, pnp.expm1(pnp.minimum(x, 0))))


def sigmoid(x):
    """1 / (1 + exp(-x)), computed stably (HLO logistic)."""
    return _float_op("logistic", _float_operand("sigmoid", x))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    return pnp.negative(softplus(pnp.negative(_float_operand("log_sigmoid", x))))


def silu(x):
    """x * sigmoid(x)."""
    x = _float_operand("silu", x)
    return pnp.multiply(x, sigmoid(x))


swish = silu


def softplus(x):
    """log(1 + exp(x)) without overflow: logaddexp(x, 0)."""
    return pnp.logaddexp(_float_operand("softplus", x), 0)


def erf(x):
    """The error function (HLO erf)."""
    return _float_op("erf", _float_operand("erf", x))


def gelu(x, approximate=True):
    """x * Φ(x). approximate=True: the tanh form 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)));
    approximate=False: the exact form 0.5 x (1 + erf(x / √2))."""
    x = _float_operand("gelu", x)
    if approximate:
        inner = pnp.multiply(math.sqrt(2 / math.pi), pnp.add(x, pnp.multiply(0.044715, pnp.multiply(x, pnp.square(x)))))
        return pnp.multiply(pnp.multiply(0.5, x), pnp.add(1, pnp.tanh(inner)))
    return pnp.multiply(pnp.multiply(0.5, x), pnp.add(1, erf(pnp.multiply(x, 1 / math.sqrt(2)))))


def logsumexp(a, axis=None, keepdims=False, b=None, return_sign=False):
    """log(sum(b * exp(a))) over `axis`, shifted by the maximum so that nothing overflows
    (a slice of all -inf gives -inf; with b, a negative total needs return_sign)."""
    a = _float_operand("logsumexp", a)
    if b is not None:   # computed in the common dtype of a and b
        a = pnp.asarray(a, dtype=pnp.result_type(a, operand("nn.logsumexp", b)))
    m = pnp.max(a, axis=axis, keepdims=True)
    m = pnp.where(pnp.isfinite(m), m, 0)   # all -inf (or an inf) slices: no shift
    e = pnp.exp(pnp.subtract(a, m))
    if b is not None:
        e = pnp.multiply(b, e)
    total = pnp.sum(e, axis=axis, keepdims=True)
    sign = pnp.sign(total)
    out = pnp.add(pnp.log(pnp.absolute(total) if return_sign else total), m)
    if not keepdims:
        out = pnp.squeeze(out, axis=axis) if axis is not None else pnp.reshape(out, ())
        sign = pnp.squeeze(sign, axis=axis) if axis is not None else pnp.reshape(sign, ())
    return (out, sign) if return_sign else out


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""
    x = _float_operand("softmax", x)
    e = pnp.exp(pnp.subtract(x, pnp.max(x, axis=axis, keepdims=True)))
    return pnp.divide(e, pnp.sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`, from the max-shifted values."""
    x = _float_operand("log_softmax", x)
    shifted = pnp.subtract(x, pnp.max(x, axis=axis, keepdims=True))
    return pnp.subtract(shifted, pnp.log(pnp.sum(pnp.exp(shifted), axis=axis, keepdims=True)))


def standardize(x, axis=-1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) along `axis`."""
    x = _float_operand("standardize", x)
    mean = pnp.mean(x, axis=axis, keepdims=True)
    centred = pnp.subtract(x, mean)
    variance = pnp.mean(pnp.square(centred), axis=axis, keepdims=True)
    return pnp.multiply(centred, pnp.reciprocal(pnp.sqrt(pnp.add(variance, eps))))


def layer_norm(x, scale=None, bias=None, axis=-1, eps=1e-5):
    """standardize(x) over `axis` (an int or a tuple), times scale, plus bias."""
    out = standardize(x, axis, eps)
    if scale is not None:
        out = pnp.multiply(out, scale)
    if bias is not None:
        out = pnp.add(out, bias)
    return out


def one_hot(indices, num_classes, dtype=FLOAT32, axis=-1):
    """indices[..., None] == arange(num_classes), as `dtype` (float32 by default); an index
    outside [0, num_classes) gives a row of zeros."""
    indices = operand("nn.one_hot", indices)
    if isinstance(indices, (bool, int, float)):
        indices = np.asarray(indices)
    classes = pnp.arange(int(num_classes))
    hot = pnp.equal(pnp.expand_dims(indices, -1), classes)
    if axis != -1:
        hot = pnp.moveaxis(hot, -1, axis)
    return pnp.asarray(hot, dtype=dtype)
