"""pyxla.nn: the building blocks of neural networks, with JAX's and optax's names.

    activations.py   relu, gelu, sigmoid, softmax, log_softmax, logsumexp, layer_norm, one_hot, ...
    initializers.py  `pyxla.nn.initializers`: JAX's jax.nn.initializers (glorot_uniform, he_normal, ...)
    losses.py        optax's losses: softmax_cross_entropy, sigmoid_binary_cross_entropy, l2_loss, ...

Everything is written with pyxla.numpy (and pyxla.random), so it works eagerly on arrays,
traced inside `pyxla.jit`, and under `pyxla.grad`.
"""
from . import initializers
from .activations import (
    elu,
    erf,
    gelu,
    layer_norm,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsumexp,
    one_hot,
    relu,
    relu6,
    sigmoid,
    silu,
    softmax,
    softplus,
    standardize,
    swish,
)
from .losses import (
    l2_loss,
    mse,
    sigmoid_binary_cross_entropy,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
    squared_error,
)

__all__ = ["initializers",
           "relu", "relu6", "leaky_relu", "elu", "erf", "gelu", "sigmoid", "log_sigmoid", "silu", "swish",
           "softplus", "softmax", "log_softmax", "logsumexp", "layer_norm", "one_hot", "standardize",
           "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "sigmoid_binary_cross_entropy",
           "squared_error", "l2_loss", "mse"]
