"""Loss functions, with optax's names and semantics: each returns the loss per example (per
element for the regression losses), not its mean; `mse` is the one scalar.

Written with pyxla.numpy, so each works eagerly and inside `pyxla.jit`, and has derivatives.
The cross-entropies go through log_softmax / logsumexp / log_sigmoid, which subtract the
maximum first: logits of any size give finite losses and gradients.
"""
from __future__ import annotations

from typing import Any

from .. import numpy as pnp
from .activations import log_sigmoid, log_softmax, logsumexp

__all__ = ["softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "sigmoid_binary_cross_entropy",
           "squared_error", "l2_loss", "mse"]


def softmax_cross_entropy(logits: Any, labels: Any, axis: int = -1) -> Any:
    """-sum(labels * log_softmax(logits)) over `axis`: the cross-entropy against one-hot rows
    or any probability distributions in `labels` (logits' shape); one value per example."""
    return pnp.negative(pnp.sum(pnp.multiply(labels, log_softmax(logits, axis=axis)), axis=axis))


def softmax_cross_entropy_with_integer_labels(logits: Any, labels: Any, axis: int = -1) -> Any:
    """logsumexp(logits) - logits[label] over `axis`, for integer class `labels` (logits'
    shape without that axis): the cross-entropy against one-hot labels, without making them."""
    labels = pnp.asarray(labels)
    label_logits = pnp.take_along_axis(logits, pnp.expand_dims(labels, axis), axis=axis)
    return pnp.subtract(logsumexp(logits, axis=axis), pnp.squeeze(label_logits, axis=axis))


def sigmoid_binary_cross_entropy(logits: Any, labels: Any) -> Any:
    """-labels log(sigmoid(logits)) - (1 - labels) log(1 - sigmoid(logits)), elementwise;
    `labels` are probabilities in [0, 1]. log(1 - sigmoid(x)) is log_sigmoid(-x)."""
    log_p = log_sigmoid(logits)
    log_not_p = log_sigmoid(pnp.negative(logits))
    return pnp.subtract(pnp.negative(pnp.multiply(labels, log_p)), pnp.multiply(pnp.subtract(1, labels), log_not_p))


def squared_error(predictions: Any, targets: Any = None) -> Any:
    """(predictions - targets)**2 elementwise (targets None: zero)."""
    errors = predictions if targets is None else pnp.subtract(predictions, targets)
    return pnp.square(errors)


def l2_loss(predictions: Any, targets: Any = None) -> Any:
    """0.5 * (predictions - targets)**2 elementwise, optax's l2_loss."""
    return pnp.multiply(0.5, squared_error(predictions, targets))


def mse(predictions: Any, targets: Any = None) -> Any:
    """The mean squared error: mean((predictions - targets)**2) over every element, a scalar."""
    return pnp.mean(squared_error(predictions, targets))
