"""pyxla.nn against float64 NumPy/SciPy formulas, eagerly and under jit; stability on
large inputs (no overflow in softmax, logsumexp, softplus)."""
import math

import numpy as np
import pytest
import scipy.special

import pyxla.nn as nn

from .pnp_testing import ELEMENTWISE_TOL, REDUCTION_TOL, check_against_numpy, jit


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))


def softplus(x):
    return np.logaddexp(x, 0)


def keeps_dtype(reference):
    """The reference, rounded to its input's dtype (SciPy returns float64 for float16 input)."""
    return lambda x: np.asarray(reference(x)).astype(x.dtype)


ACTIVATIONS = [
    ("relu", nn.relu, lambda x: np.maximum(x, 0)),
    ("relu6", nn.relu6, lambda x: np.clip(x, 0, 6)),
    ("leaky_relu", nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    ("elu", nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    ("sigmoid", nn.sigmoid, scipy.special.expit),
    ("log_sigmoid", nn.log_sigmoid, lambda x: -softplus(-x)),
    ("silu", nn.silu, lambda x: x * scipy.special.expit(x)),
    ("softplus", nn.softplus, softplus),
    ("gelu tanh", lambda x: nn.gelu(x, approximate=True), gelu_tanh),
    ("gelu erf", lambda x: nn.gelu(x, approximate=False), gelu_erf),
]


@pytest.mark.parametrize("name, fn, reference", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_activations(name, fn, reference, dtype, rng):
    x = (rng.standard_normal((4, 7)) * 4).astype(dtype)
    check_against_numpy(fn, keeps_dtype(reference), x, tol=ELEMENTWISE_TOL, what=name)


def test_activations_on_large_inputs_do_not_overflow():
    x = np.array([-1000.0, -80.0, -1e-9, 0.0, 1e-9, 80.0, 1000.0], np.float32)
    for name, fn, reference in ACTIVATIONS:
        check_against_numpy(fn, keeps_dtype(reference), x, tol=ELEMENTWISE_TOL, what=name)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis, rng):
    x = (rng.standard_normal((3, 5, 4)) * 3).astype(np.float32)
    check_against_numpy(lambda v: nn.softmax(v, axis), lambda v: scipy.special.softmax(v, axis), x, tol=REDUCTION_TOL)
    check_against_numpy(lambda v: nn.log_softmax(v, axis), lambda v: scipy.special.log_softmax(v, axis), x,
                        tol=REDUCTION_TOL)
    big = x + np.float32(1000)   # exp would overflow without the max shift
    check_against_numpy(lambda v: nn.softmax(v, axis), lambda v: scipy.special.softmax(v, axis), big, tol=REDUCTION_TOL)
    out = jit(lambda v: nn.softmax(v, axis))(x)
    np.testing.assert_allclose(out.sum(axis=axis), 1, rtol=1e-5)


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (-1, True), ((0, 2), False)])
def test_logsumexp(axis, keepdims, rng):
    x = (rng.standard_normal((3, 4, 5)) * 10).astype(np.float32)
    x[0, 0, :] = -np.inf   # an all -inf slice gives -inf, not NaN
    ref = lambda v: scipy.special.logsumexp(v, axis=axis, keepdims=keepdims)   # noqa: E731
    check_against_numpy(lambda v: nn.logsumexp(v, axis=axis, keepdims=keepdims), ref, x, tol=REDUCTION_TOL)
    big = np.array([[1e4, 1e4 - 1], [-1e4, -1e4 + 2]], np.float64)
    check_against_numpy(lambda v: nn.logsumexp(v, axis=1), lambda v: scipy.special.logsumexp(v, axis=1), big,
                        tol=REDUCTION_TOL)
    b = rng.uniform(0.5, 2, (3, 4, 5))
    check_against_numpy(lambda v, w: nn.logsumexp(v, axis=1, b=w), lambda v, w: scipy.special.logsumexp(v, axis=1, b=w),
                        x[1:], b[1:], tol=REDUCTION_TOL)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_layer_norm(axis, rng):
    x = (rng.standard_normal((2, 3, 8)) * 3 + 1).astype(np.float32)
    norm_shape = x.shape[-1:] if axis == -1 else x.shape[1:]
    scale = rng.uniform(0.5, 2, norm_shape).astype(np.float32)
    bias = rng.standard_normal(norm_shape).astype(np.float32)

    def reference(v, s, b):
        mean = v.mean(axis=axis, keepdims=True)
        var = v.var(axis=axis, keepdims=True)
        return (v - mean) / np.sqrt(var + 1e-5) * s + b

    check_against_numpy(lambda v, s, b: nn.layer_norm(v, s, b, axis=axis), reference, x, scale, bias,
                        tol=REDUCTION_TOL)
    check_against_numpy(lambda v: nn.layer_norm(v, axis=axis, eps=1e-3),
                        lambda v: (v - v.mean(axis=axis, keepdims=True)) / np.sqrt(v.var(axis=axis, keepdims=True) + 1e-3),
                        x, tol=REDUCTION_TOL)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_one_hot(dtype, rng):
    idx = rng.integers(-1, 6, (3, 4))   # -1 and 5 are out of range: rows of zeros
    check_against_numpy(lambda i: nn.one_hot(i, 5, dtype=dtype),
                        lambda i: (i[..., None] == np.arange(5)).astype(dtype), idx)
    default = nn.one_hot(np.array([0, 2]), 3)
    assert default.dtype == np.float32
    np.testing.assert_array_equal(default, [[1, 0, 0], [0, 0, 1]])
