"""pyxla.optimizers: the API of `jax.example_libraries.optimizers`, written in pyxla.numpy.

    from pyxla import optimizers

    opt_init, opt_update, get_params = optimizers.adam(1e-3)
    opt_state = opt_init(params)                       # params: any pytree of arrays

    @pyxla.jit
    def step(i, opt_state, x, y):                      # forward, backward and update: one program
        loss, grads = pyxla.value_and_grad(loss_fn)(get_params(opt_state), x, y)
        return loss, opt_update(i, grads, opt_state)

Each optimizer is `(init_fun, update_fun, get_params)`: `init_fun(params)` makes the state,
`update_fun(i, grads, state)` takes step `i` (a number or a traced int; pass it as an array
or a Python int so that the step is not compiled again for each value), `get_params(state)`
reads the parameters. `step_size` is a number or a schedule: a function of the step
(`constant`, `exponential_decay`, `inverse_time_decay`, `polynomial_decay`,
`piecewise_constant`).

The state is an `OptimizerState` pytree (registered, as JAX registers it): its leaves are the
per-parameter arrays, its structure is aux data, so it passes in and out of `pyxla.jit`.
The update rules are JAX's, term for term; every array of a parameter's state keeps that
parameter's dtype, and the step's scalar factors are rounded to it first (a float64 step
counter cannot promote float32 parameters).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import numpy as pnp
from .frontend import register_pytree_node, tree_flatten, tree_map, tree_unflatten

__all__ = ["Optimizer", "OptimizerState", "optimizer", "sgd", "momentum", "nesterov", "adagrad", "rmsprop",
           "rmsprop_momentum", "adam", "adamax", "constant", "exponential_decay", "inverse_time_decay",
           "polynomial_decay", "piecewise_constant", "make_schedule", "l2_norm", "clip_grads"]

Schedule = Callable[[Any], Any]


class Optimizer(NamedTuple):
    init_fn: Callable
    update_fn: Callable
    params_fn: Callable


class OptimizerState(NamedTuple):
    """The flattened per-parameter states (`packed_state`: one list of arrays per parameter),
    the parameters' tree structure and each state's structure."""
    packed_state: list
    tree_def: Any
    subtree_defs: tuple


# Only packed_state holds arrays; the structures are aux data (hashable, part of jit's key).
register_pytree_node(OptimizerState, lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
                     lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]) -> Callable[..., Optimizer]:
    """Lift an optimizer over single arrays, `(init(x0), update(i, g, state), get_params(state))`,
    to one over pytrees of parameters (JAX's decorator)."""
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args: Any, **kwargs: Any) -> Optimizer:
        init, update, get_params = opt_maker(*args, **kwargs)

        def tree_init(x0_tree: Any) -> OptimizerState:
            x0_flat, tree = tree_flatten(x0_tree)
            flats = [tree_flatten(init(pnp.asarray(x0))) for x0 in x0_flat]
            return OptimizerState([f[0] for f in flats], tree, tuple(f[1] for f in flats))

        def tree_update(i: Any, grad_tree: Any, opt_state: OptimizerState) -> OptimizerState:
            states_flat, tree, subtrees = opt_state
            grad_flat, tree2 = tree_flatten(grad_tree)
            if tree2 != tree:
                raise TypeError("optimizer update function was passed a gradient tree that did not match the "
                                f"parameter tree structure with which it was initialized: parameter tree {tree} "
                                f"and grad tree {tree2}.")
            states = [tree_unflatten(s, f) for s, f in zip(subtrees, states_flat)]
            new_flat = []
            for g, state, subtree in zip(grad_flat, states, subtrees):
                leaves, subtree2 = tree_flatten(update(i, g, state))
                if subtree2 != subtree:
                    raise TypeError("optimizer update function produced an output structure that did not match "
                                    f"its input structure: input {subtree} and output {subtree2}.")
                new_flat.append(leaves)
            return OptimizerState(new_flat, tree, subtrees)

        def tree_get_params(opt_state: OptimizerState) -> Any:
            states_flat, tree, subtrees = opt_state
            return tree_unflatten(tree, [get_params(tree_unflatten(s, f)) for s, f in zip(subtrees, states_flat)])

        return Optimizer(tree_init, tree_update, tree_get_params)
    return tree_opt_maker


def _dtype(x: Any) -> np.dtype:
    return np.dtype(x.dtype)


def _as(value: Any, like: Any) -> Any:
    """A scalar factor (a Python number, or a traced or concrete array such as a schedule's
    step size) in the dtype of the array it multiplies."""
    if isinstance(value, (int, float, np.number)):
        return np.asarray(value, _dtype(like))
    return pnp.asarray(value, dtype=_dtype(like))


def _step_count(i: Any, like: Any) -> Any:
    """i + 1 (the number of steps taken, for Adam's bias correction) in `like`'s dtype."""
    return pnp.add(_as(i, like), np.asarray(1, _dtype(like)))


@optimizer
def sgd(step_size: float | Schedule):
    """x <- x - step_size(i) * g."""
    step_size = make_schedule(step_size)

    def update(i, g, x):
        return pnp.subtract(x, pnp.multiply(_as(step_size(i), x), g))
    return (lambda x0: x0), update, (lambda x: x)


@optimizer
def momentum(step_size: float | Schedule, mass: float):
    """v <- mass * v + g; x <- x - step_size(i) * v."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, velocity = state
        velocity = pnp.add(pnp.multiply(_as(mass, x), velocity), g)
        return pnp.subtract(x, pnp.multiply(_as(step_size(i), x), velocity)), velocity
    return (lambda x0: (x0, pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def nesterov(step_size: float | Schedule, mass: float):
    """v <- mass * v + g; x <- x - step_size(i) * (mass * v + g)."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, velocity = state
        velocity = pnp.add(pnp.multiply(_as(mass, x), velocity), g)
        look_ahead = pnp.add(pnp.multiply(_as(mass, x), velocity), g)
        return pnp.subtract(x, pnp.multiply(_as(step_size(i), x), look_ahead)), velocity
    return (lambda x0: (x0, pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9):
    """Adagrad with momentum: s <- s + g²; m <- (1 - momentum) g / sqrt(s) + momentum m
    (0 where s is 0); x <- x - step_size(i) * m."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = pnp.add(g_sq, pnp.square(g))
        positive = pnp.greater(g_sq, 0)
        # the where's other branch guards the reciprocal square root of 0 (JAX's rule)
        inv_sqrt = pnp.where(positive, pnp.reciprocal(pnp.sqrt(pnp.where(positive, g_sq, 1))), 0)
        m = pnp.add(pnp.multiply(_as(1. - momentum, x), pnp.multiply(g, inv_sqrt)), pnp.multiply(_as(momentum, x), m))
        return pnp.subtract(x, pnp.multiply(_as(step_size(i), x), m)), g_sq, m
    return (lambda x0: (x0, pnp.zeros_like(x0), pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8):
    """a <- gamma a + (1 - gamma) g²; x <- x - step_size(i) * g / sqrt(a + eps)."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = pnp.add(pnp.multiply(avg_sq_grad, _as(gamma, x)), pnp.multiply(pnp.square(g), _as(1. - gamma, x)))
        scaled = pnp.divide(pnp.multiply(_as(step_size(i), x), g), pnp.sqrt(pnp.add(avg_sq_grad, _as(eps, x))))
        return pnp.subtract(x, scaled), avg_sq_grad
    return (lambda x0: (x0, pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def rmsprop_momentum(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8, momentum: float = 0.9):
    """RMSProp whose scaled steps accumulate in a momentum term m <- momentum m + step; x <- x - m."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = pnp.add(pnp.multiply(avg_sq_grad, _as(gamma, x)), pnp.multiply(pnp.square(g), _as(1. - gamma, x)))
        scaled = pnp.divide(pnp.multiply(_as(step_size(i), x), g), pnp.sqrt(pnp.add(avg_sq_grad, _as(eps, x))))
        mom = pnp.add(pnp.multiply(_as(momentum, x), mom), scaled)
        return pnp.subtract(x, mom), avg_sq_grad, mom
    return (lambda x0: (x0, pnp.zeros_like(x0), pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def adam(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """m <- (1 - b1) g + b1 m; v <- (1 - b2) g² + b2 v;
    x <- x - step_size(i) * m̂ / (sqrt(v̂) + eps), with m̂ = m / (1 - b1^(i+1)), v̂ = v / (1 - b2^(i+1))."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, v = state
        m = pnp.add(pnp.multiply(_as(1 - b1, x), g), pnp.multiply(_as(b1, x), m))
        v = pnp.add(pnp.multiply(_as(1 - b2, x), pnp.square(g)), pnp.multiply(_as(b2, x), v))
        t = _step_count(i, x)
        mhat = pnp.divide(m, pnp.subtract(_as(1, x), pnp.power(_as(b1, x), t)))
        vhat = pnp.divide(v, pnp.subtract(_as(1, x), pnp.power(_as(b2, x), t)))
        x = pnp.subtract(x, pnp.divide(pnp.multiply(_as(step_size(i), x), mhat), pnp.add(pnp.sqrt(vhat), _as(eps, x))))
        return x, m, v
    return (lambda x0: (x0, pnp.zeros_like(x0), pnp.zeros_like(x0))), update, (lambda state: state[0])


@optimizer
def adamax(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam with the infinity norm: u <- max(b2 u, |g|); x <- x - step_size(i) / (1 - b1^(i+1)) * m / (u + eps)."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, u = state
        m = pnp.add(pnp.multiply(_as(1 - b1, x), g), pnp.multiply(_as(b1, x), m))
        u = pnp.maximum(pnp.multiply(_as(b2, x), u), pnp.absolute(g))
        t = _step_count(i, x)
        scale = pnp.divide(_as(step_size(i), x), pnp.subtract(_as(1, x), pnp.power(_as(b1, x), t)))
        return pnp.subtract(x, pnp.multiply(scale, pnp.divide(m, pnp.add(u, _as(eps, x))))), m, u
    return (lambda x0: (x0, pnp.zeros_like(x0), pnp.zeros_like(x0))), update, (lambda state: state[0])


# --- schedules -------------------------------------------------------------------------------

def constant(step_size: float) -> Schedule:
    return lambda i: step_size


def exponential_decay(step_size: float, decay_steps: float, decay_rate: float) -> Schedule:
    """step_size * decay_rate ** (i / decay_steps)."""
    return lambda i: pnp.multiply(step_size, pnp.power(decay_rate, pnp.divide(i, decay_steps)))


def inverse_time_decay(step_size: float, decay_steps: float, decay_rate: float, staircase: bool = False) -> Schedule:
    """step_size / (1 + decay_rate * i / decay_steps), the quotient floored with `staircase`."""
    def schedule(i):
        ratio = pnp.divide(i, decay_steps)
        if staircase:
            ratio = pnp.floor(ratio)
        return pnp.divide(step_size, pnp.add(1, pnp.multiply(decay_rate, ratio)))
    return schedule


def polynomial_decay(step_size: float, decay_steps: float, final_step_size: float, power: float = 1.0) -> Schedule:
    """From step_size to final_step_size over decay_steps steps along (1 - i / decay_steps) ** power."""
    def schedule(i):
        i = pnp.minimum(i, decay_steps)
        mult = pnp.power(pnp.subtract(1, pnp.divide(i, decay_steps)), power)
        return pnp.add(pnp.multiply(mult, step_size - final_step_size), final_step_size)
    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """values[k] for steps i with boundaries[k-1] < i <= boundaries[k] (len(values) = len(boundaries) + 1)."""
    boundaries = np.asarray(boundaries)
    values = np.asarray(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError("boundaries and values must be sequences")
    if not boundaries.shape[0] == values.shape[0] - 1:
        raise ValueError("boundaries length must be one shorter than values length")
    return lambda i: pnp.take(values, pnp.sum(pnp.greater(i, boundaries)))


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if np.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


# --- utilities -------------------------------------------------------------------------------

def l2_norm(tree: Any) -> Any:
    """The l2 norm of all the leaves of a pytree together."""
    leaves, _ = tree_flatten(tree)
    return pnp.sqrt(sum(pnp.sum(pnp.square(x)) for x in leaves))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """The gradients scaled down so that their joint l2 norm is at most max_norm."""
    norm = l2_norm(grad_tree)
    return tree_map(lambda g: pnp.where(pnp.less(norm, max_norm), g, pnp.multiply(g, pnp.divide(max_norm, norm))),
                    grad_tree)
