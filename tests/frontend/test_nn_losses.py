"""pyxla.nn's losses against float64 NumPy formulas (eagerly and under jit), their stability on
huge logits, and their gradients against finite differences."""
import numpy as np
import pytest
import scipy.special

import pyxla
import pyxla.numpy as pnp
from pyxla import nn

from .gradient_testing import check_grads, numerical_grad


def _probabilities(rng, shape):
    p = rng.uniform(0.0, 1.0, shape)
    return p / p.sum(-1, keepdims=True)


def softmax_xent64(logits, labels, axis=-1):
    return -np.sum(labels * scipy.special.log_softmax(logits, axis=axis), axis=axis)


def sigmoid_bce64(logits, labels):
    # log(sigmoid(x)) = -logaddexp(0, -x), exactly in float64
    return labels * np.logaddexp(0, -logits) + (1 - labels) * np.logaddexp(0, logits)


def _check(fn, reference, *args, rtol=2e-6, atol=1e-6):
    want = reference(*(np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in args))
    for how, f in (("eager", fn), ("jit", pyxla.jit(fn))):
        got = np.asarray(f(*args))
        assert got.shape == np.shape(want) and got.dtype == np.float32, (how, got.shape, got.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=how)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_cross_entropy(axis, rng):
    logits = (rng.standard_normal((6, 5)) * 3).astype(np.float32)
    one_hot = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 6)]
    soft = _probabilities(rng, (6, 5)).astype(np.float32)
    for labels in (one_hot, soft):
        labels = labels if axis == -1 else labels.T.copy()
        lg = logits if axis == -1 else logits.T.copy()
        _check(lambda x, y: nn.softmax_cross_entropy(x, y, axis=axis), lambda x, y: softmax_xent64(x, y, axis), lg,
               labels)


def test_integer_labels_equal_one_hot(rng):
    logits = (rng.standard_normal((4, 3, 7)) * 3).astype(np.float32)
    labels = rng.integers(0, 7, (4, 3))
    one_hot = np.eye(7)[labels]
    _check(nn.softmax_cross_entropy_with_integer_labels, lambda x, y: softmax_xent64(x, one_hot), logits, labels)
    _check(lambda x, y: nn.softmax_cross_entropy_with_integer_labels(x, y, axis=1),
           lambda x, y: softmax_xent64(x, np.moveaxis(np.eye(3)[y], -1, 1), axis=1),
           logits, rng.integers(0, 3, (4, 7)))


def test_sigmoid_binary_cross_entropy(rng):
    logits = (rng.standard_normal((5, 8)) * 4).astype(np.float32)
    labels = rng.uniform(0, 1, (5, 8)).astype(np.float32)
    labels[0] = (labels[0] > 0.5)
    _check(nn.sigmoid_binary_cross_entropy, sigmoid_bce64, logits, labels)


def test_regression_losses(rng):
    p = rng.standard_normal((4, 6)).astype(np.float32)
    t = rng.standard_normal((4, 6)).astype(np.float32)
    _check(nn.squared_error, lambda a, b: (a - b) ** 2, p, t)
    _check(nn.l2_loss, lambda a, b: 0.5 * (a - b) ** 2, p, t)
    _check(nn.mse, lambda a, b: np.mean((a - b) ** 2), p, t)
    _check(nn.l2_loss, lambda a: 0.5 * a ** 2, p)
    assert nn.mse(p, t).shape == ()


def test_huge_logits_give_finite_losses_and_gradients():
    logits = np.array([[1e4, -1e4, 0.0], [-3e4, 3e4, 2e4]], np.float32)
    labels = np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], np.float32)
    loss = np.asarray(nn.softmax_cross_entropy(logits, labels), np.float64)
    np.testing.assert_allclose(loss, softmax_xent64(logits.astype(np.float64), labels), rtol=1e-6)
    ints = np.asarray(nn.softmax_cross_entropy_with_integer_labels(logits, np.array([1, 0])))
    np.testing.assert_allclose(ints, [2e4, 6e4], rtol=1e-6)
    bce = np.asarray(nn.sigmoid_binary_cross_entropy(logits, (labels > 0).astype(np.float32)))
    assert np.all(np.isfinite(bce))
    for loss_fn, lab in ((nn.softmax_cross_entropy, labels), (nn.softmax_cross_entropy_with_integer_labels,
                                                              np.array([1, 0])), (nn.sigmoid_binary_cross_entropy,
                                                                                  labels)):
        g = pyxla.jit(pyxla.grad(lambda x, y, f=loss_fn: pnp.sum(f(x, y))))(logits, lab)
        assert np.all(np.isfinite(g)), loss_fn.__name__


def test_gradients_match_closed_forms(rng):
    """d/dlogits of softmax cross-entropy is softmax * sum(labels) - labels; of the binary
    cross-entropy sigmoid - labels."""
    logits = rng.standard_normal((5, 4)) * 2
    labels = _probabilities(rng, (5, 4))
    g = pyxla.grad(lambda x: pnp.sum(nn.softmax_cross_entropy(x, labels)))(logits)
    np.testing.assert_allclose(g, scipy.special.softmax(logits, -1) - labels, rtol=1e-10, atol=1e-12)
    targets = rng.uniform(0, 1, (5, 4))
    g = pyxla.grad(lambda x: pnp.sum(nn.sigmoid_binary_cross_entropy(x, targets)))(logits)
    np.testing.assert_allclose(g, scipy.special.expit(logits) - targets, rtol=1e-10, atol=1e-12)


LOSSES = [
    ("softmax_cross_entropy", lambda x, y: nn.softmax_cross_entropy(x, y), "probs"),
    ("integer_labels", lambda x, y: nn.softmax_cross_entropy_with_integer_labels(x, y), "ints"),
    ("sigmoid_bce", lambda x, y: nn.sigmoid_binary_cross_entropy(x, y), "uniform"),
    ("l2_loss", lambda x, y: nn.l2_loss(x, y), "normal"),
    ("mse", lambda x, y: nn.mse(x, y), "normal"),
]


@pytest.mark.parametrize("name, loss, labels", LOSSES, ids=[entry[0] for entry in LOSSES])
def test_gradients_against_finite_differences(name, loss, labels, rng):
    x = rng.standard_normal((3, 5)) * 2
    y = {"probs": lambda: _probabilities(rng, (3, 5)), "ints": lambda: rng.integers(0, 5, 3),
         "uniform": lambda: rng.uniform(0, 1, (3, 5)), "normal": lambda: rng.standard_normal((3, 5))}[labels]()
    check_grads(lambda a: loss(a, y), (x,), rng, jit=True)
    if labels != "ints":   # the gradient with respect to the labels or targets too
        check_grads(lambda b: loss(x, b), (y,), rng)
    mean_loss = lambda a: pnp.mean(loss(a, y))   # noqa: E731
    np.testing.assert_allclose(pyxla.grad(mean_loss)(x), numerical_grad(lambda a: np.asarray(mean_loss(a)), x),
                               rtol=1e-6, atol=1e-8)
