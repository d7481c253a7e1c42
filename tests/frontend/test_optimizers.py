"""pyxla.optimizers: each update rule over several steps against a float64 NumPy version of
it, and against jax.example_libraries.optimizers on the same gradients where JAX is
installed; schedules; the state through jit; a whole training step as one program."""
import math

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import nn, optimizers

STEPS = 4


# --- float64 NumPy versions of the rules: (init(x) -> state, update(i, g, state) -> state) ---

def np_sgd(lr):
    return (lambda x: (x,)), (lambda i, g, s: (s[0] - lr(i) * g,))


def np_momentum(lr, mass, nesterov=False):
    def update(i, g, s):
        x, v = s
        v = mass * v + g
        return x - lr(i) * ((mass * v + g) if nesterov else v), v
    return (lambda x: (x, np.zeros_like(x))), update


def np_adagrad(lr, mom=0.9):
    def update(i, g, s):
        x, g_sq, m = s
        g_sq = g_sq + g * g
        inv = np.where(g_sq > 0, 1 / np.sqrt(np.where(g_sq > 0, g_sq, 1)), 0)
        m = (1 - mom) * g * inv + mom * m
        return x - lr(i) * m, g_sq, m
    return (lambda x: (x, np.zeros_like(x), np.zeros_like(x))), update


def np_rmsprop(lr, gamma=0.9, eps=1e-8):
    def update(i, g, s):
        x, a = s
        a = gamma * a + (1 - gamma) * g * g
        return x - lr(i) * g / np.sqrt(a + eps), a
    return (lambda x: (x, np.zeros_like(x))), update


def np_rmsprop_momentum(lr, gamma=0.9, eps=1e-8, mom=0.9):
    def update(i, g, s):
        x, a, m = s
        a = gamma * a + (1 - gamma) * g * g
        m = mom * m + lr(i) * g / np.sqrt(a + eps)
        return x - m, a, m
    return (lambda x: (x, np.zeros_like(x), np.zeros_like(x))), update


def np_adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def update(i, g, s):
        x, m, v = s
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g * g + b2 * v
        mhat, vhat = m / (1 - b1 ** (i + 1)), v / (1 - b2 ** (i + 1))
        return x - lr(i) * mhat / (np.sqrt(vhat) + eps), m, v
    return (lambda x: (x, np.zeros_like(x), np.zeros_like(x))), update


def np_adamax(lr, b1=0.9, b2=0.999, eps=1e-8):
    def update(i, g, s):
        x, m, u = s
        m = (1 - b1) * g + b1 * m
        u = np.maximum(b2 * u, np.abs(g))
        return x - lr(i) / (1 - b1 ** (i + 1)) * m / (u + eps), m, u
    return (lambda x: (x, np.zeros_like(x), np.zeros_like(x))), update


CASES = [  # name, pyxla optimizer's arguments, the NumPy version
    ("sgd", (0.1,), lambda lr: np_sgd(lr)),
    ("momentum", (0.05, 0.9), lambda lr: np_momentum(lr, 0.9)),
    ("nesterov", (0.05, 0.8), lambda lr: np_momentum(lr, 0.8, nesterov=True)),
    ("adagrad", (0.1,), lambda lr: np_adagrad(lr)),
    ("rmsprop", (0.01,), lambda lr: np_rmsprop(lr)),
    ("rmsprop_momentum", (0.01,), lambda lr: np_rmsprop_momentum(lr)),
    ("adam", (1e-2,), lambda lr: np_adam(lr)),
    ("adam", (1e-2, 0.5, 0.7, 1e-3), lambda lr: np_adam(lr, 0.5, 0.7, 1e-3)),
    ("adamax", (2e-2,), lambda lr: np_adamax(lr)),
]
IDS = [f"{c[0]}{c[1]}" for c in CASES]


def _params(rng, dtype):
    return {"w": rng.standard_normal((3, 4)).astype(dtype), "b": rng.standard_normal(4).astype(dtype),
            "layers": [rng.standard_normal((2,)).astype(dtype)]}


def _run_numpy(np_opt, params, grads_seq):
    init, update = np_opt
    leaves, treedef = pyxla.tree_flatten(params)
    states = [init(np.asarray(x, np.float64)) for x in leaves]
    for i, grads in enumerate(grads_seq):
        gs = pyxla.tree_flatten(grads)[0]
        states = [update(i, np.asarray(g, np.float64), s) for g, s in zip(gs, states)]
    return pyxla.tree_unflatten(treedef, [s[0] for s in states])


def _assert_trees_close(got, want, rtol, atol):
    gl, gt = pyxla.tree_flatten(got)
    wl, wt = pyxla.tree_flatten(want)
    assert gt == wt
    for g, w in zip(gl, wl):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name, args, reference", CASES, ids=IDS)
def test_rule_against_numpy_float64_eagerly(name, args, reference, rng):
    params = _params(rng, np.float64)
    grads_seq = [pyxla.tree_map(lambda p: rng.standard_normal(p.shape), params) for _ in range(STEPS)]
    init, update, get_params = getattr(optimizers, name)(*args)
    state = init(params)
    for i, grads in enumerate(grads_seq):
        state = update(i, grads, state)
    got = get_params(state)
    assert all(np.asarray(x).dtype == np.float64 for x in pyxla.tree_flatten(got)[0])
    _assert_trees_close(got, _run_numpy(reference(lambda i: args[0]), params, grads_seq), 1e-12, 1e-14)


@pytest.mark.parametrize("name, args, reference", CASES, ids=IDS)
def test_rule_under_jit_in_float32(name, args, reference, rng):
    """The update jitted, the step counter traced: float32 parameters stay float32."""
    params = _params(rng, np.float32)
    grads_seq = [pyxla.tree_map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
                 for _ in range(STEPS)]
    init, update, get_params = getattr(optimizers, name)(*args)
    step = pyxla.jit(update)
    state = init(params)
    for i, grads in enumerate(grads_seq):
        state = step(np.int32(i), grads, state)
    got = get_params(state)
    assert all(np.asarray(x).dtype == np.float32 for x in pyxla.tree_flatten(got)[0])
    _assert_trees_close(got, _run_numpy(reference(lambda i: args[0]), params, grads_seq), 2e-5, 2e-6)


SCHEDULES = [
    ("constant", (0.3,), lambda i: 0.3 + 0 * i),
    ("exponential_decay", (0.5, 10, 0.3), lambda i: 0.5 * 0.3 ** (i / 10)),
    ("inverse_time_decay", (0.5, 4, 2.0), lambda i: 0.5 / (1 + 2.0 * i / 4)),
    ("inverse_time_decay", (0.5, 4, 2.0, True), lambda i: 0.5 / (1 + 2.0 * np.floor(i / 4))),
    ("polynomial_decay", (0.5, 8, 0.1, 2.0), lambda i: (1 - np.minimum(i, 8) / 8) ** 2 * 0.4 + 0.1),
    ("piecewise_constant", ([3, 7], [1.0, 0.5, 0.25]), lambda i: np.where(i <= 3, 1.0, np.where(i <= 7, 0.5, 0.25))),
]


@pytest.mark.parametrize("name, args, formula", SCHEDULES, ids=[f"{s[0]}{len(s[1])}" for s in SCHEDULES])
def test_schedules(name, args, formula):
    schedule = getattr(optimizers, name)(*args)
    steps = np.arange(12)
    want = formula(steps.astype(np.float64))
    eager = [float(np.asarray(schedule(int(i)))) for i in steps]
    np.testing.assert_allclose(eager, want, rtol=1e-6)
    jitted = pyxla.jit(lambda i: pnp.asarray(schedule(i), dtype=np.float32))
    np.testing.assert_allclose([float(jitted(np.int32(i))) for i in steps], want, rtol=1e-6)


def test_schedule_as_step_size(rng):
    """sgd with a decaying step: x_n = x_0 - sum_i lr(i) g_i."""
    params = rng.standard_normal(5)
    grads = [rng.standard_normal(5) for _ in range(6)]
    init, update, get_params = optimizers.sgd(optimizers.exponential_decay(0.5, 2, 0.1))
    state = init(params)
    step = pyxla.jit(update)
    for i, g in enumerate(grads):
        state = step(np.int32(i), g, state)
    want = params - sum(0.5 * 0.1 ** (i / 2) * g for i, g in enumerate(grads))
    np.testing.assert_allclose(get_params(state), want, rtol=1e-12)


def test_state_structure_is_checked():
    init, update, _ = optimizers.adam(0.1)
    state = init({"a": np.zeros(2), "b": np.zeros(3)})
    with pytest.raises(TypeError, match="did not match"):
        update(0, {"a": np.zeros(2)}, state)
    with pytest.raises(TypeError):
        optimizers.make_schedule(np.ones(3))
    with pytest.raises(ValueError, match="one shorter"):
        optimizers.piecewise_constant([1, 2], [1.0, 2.0])


def test_clip_grads_and_l2_norm(rng):
    tree = {"a": rng.standard_normal((3, 2)), "b": rng.standard_normal(4)}
    norm = math.sqrt(sum(np.sum(v ** 2) for v in tree.values()))
    np.testing.assert_allclose(optimizers.l2_norm(tree), norm, rtol=1e-12)
    clipped = optimizers.clip_grads(tree, norm / 2)
    np.testing.assert_allclose(optimizers.l2_norm(clipped), norm / 2, rtol=1e-12)
    np.testing.assert_allclose(clipped["a"], tree["a"] / 2, rtol=1e-12)
    _assert_trees_close(optimizers.clip_grads(tree, 2 * norm), tree, 0, 0)


def test_training_step_is_one_program_compiled_once(rng):
    """value_and_grad and adam's update in one jit: traced once for every step, and the loss falls."""
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = (x @ rng.standard_normal((6, 3)) > 0).argmax(-1)
    params = {"w": np.zeros((6, 3), np.float32), "b": np.zeros(3, np.float32)}
    opt_init, opt_update, get_params = optimizers.adam(0.05)
    traces = []

    def loss(p, x, y):
        return pnp.mean(nn.softmax_cross_entropy_with_integer_labels(x @ p["w"] + p["b"], y))

    @pyxla.jit
    def step(i, state, x, y):
        traces.append(i)
        value, grads = pyxla.value_and_grad(loss)(get_params(state), x, y)
        return value, opt_update(i, grads, state)

    state = opt_init(params)
    losses = []
    for i in range(30):
        value, state = step(np.int32(i), state, x, y)
        losses.append(float(value))
    assert len(traces) == 1
    assert isinstance(state, optimizers.OptimizerState)
    assert losses[-1] < 0.5 * losses[0], losses
    text = step.lower(np.int32(0), state, x, y).as_text()
    assert text.count("ENTRY") == 1 and "sqrt" in text and "dot(" in text


# --- against jax.example_libraries.optimizers ------------------------------------------------

@pytest.mark.parametrize("name, args, reference", CASES, ids=IDS)
def test_rule_against_jax(name, args, reference, rng):
    pytest.importorskip("jax")
    from jax.example_libraries import optimizers as jax_optimizers
    params = _params(rng, np.float32)
    grads_seq = [pyxla.tree_map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
                 for _ in range(STEPS)]
    schedule = (0.5, 3, 0.5)   # a decaying step size in both, to check schedules as well
    ours = getattr(optimizers, name)(optimizers.exponential_decay(*schedule), *args[1:])
    theirs = getattr(jax_optimizers, name)(jax_optimizers.exponential_decay(*schedule), *args[1:])
    state, jstate = ours[0](params), theirs[0](params)
    for i, grads in enumerate(grads_seq):
        state, jstate = ours[1](i, grads, state), theirs[1](i, grads, jstate)
    got, want = ours[2](state), theirs[2](jstate)
    # float32 in both, with differently ordered operations: after the steps an entry's error is
    # a few ulp of the parameters' scale (about 1), also where the entry itself is near 0
    _assert_trees_close(got, pyxla.tree_map(lambda w: np.asarray(w, np.float64), dict(want)), 2e-5, 2e-5)
