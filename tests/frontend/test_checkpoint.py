"""pyxla.checkpoint (remat): the same derivatives, with the intermediates recomputed in the
backward pass (visible in the compiled HLO) rather than kept."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp

from .gradient_testing import check_grads

P = pyxla.checkpoint_policies


def layer(w, x):
    return pnp.tanh(pnp.tanh(x @ w) @ w)


def _loss(fn):
    return lambda w, x: pnp.sum(fn(w, x) ** 2)


def _compiled_step(fn, w, x):
    step = pyxla.jit(pyxla.value_and_grad(_loss(fn), argnums=(0, 1)))
    return step, step.lower(w, x).compile().as_text()


@pytest.fixture
def wx(rng):
    return rng.standard_normal((5, 5)) * 0.5, rng.standard_normal((3, 5))


def test_gradients_equal_the_plain_ones(wx):
    w, x = wx
    want = pyxla.value_and_grad(_loss(layer), argnums=(0, 1))(w, x)
    for policy in (None, P.nothing_saveable, P.dots_saveable, P.everything_saveable):
        fn = pyxla.checkpoint(layer, policy=policy)
        for how in (pyxla.value_and_grad(_loss(fn), argnums=(0, 1)),
                    pyxla.jit(pyxla.value_and_grad(_loss(fn), argnums=(0, 1)))):
            got = how(w, x)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
            for g, h in zip(got[1], want[1]):
                np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)


def test_against_finite_differences(wx, rng):
    w, x = wx
    check_grads(_loss(pyxla.checkpoint(layer)), (w, x), rng, jit=True)
    check_grads(lambda w, x: pyxla.checkpoint(layer, policy=P.dots_saveable)(w, x), (w, x), rng)


def test_the_backward_pass_recomputes(wx):
    w, x = wx
    _, plain = _compiled_step(layer, w, x)
    _, remat = _compiled_step(pyxla.checkpoint(layer), w, x)
    _, dots = _compiled_step(pyxla.checkpoint(layer, policy=P.dots_saveable), w, x)
    _, everything = _compiled_step(pyxla.checkpoint(layer, policy=P.everything_saveable), w, x)
    assert plain.count(" tanh(") == 2 and everything.count(" tanh(") == 2
    assert remat.count(" tanh(") == 4                      # both recomputed in the backward pass
    assert remat.count(" dot(") == plain.count(" dot(") + 2
    assert dots.count(" tanh(") == 4 and dots.count(" dot(") == plain.count(" dot(")   # dots kept
    assert "opt-barrier(" in remat
    no_barrier = pyxla.checkpoint(layer, prevent_cse=False)
    assert "opt-barrier(" not in _compiled_step(no_barrier, w, x)[1]


def test_primal_without_differentiation(wx):
    w, x = wx
    fn = pyxla.checkpoint(layer)
    np.testing.assert_allclose(fn(w, x), np.tanh(np.tanh(x @ w) @ w), rtol=1e-14)
    text = pyxla.jit(fn).lower(w, x).compile().as_text()
    assert text.count(" tanh(") == 2 and "call(" not in text


def test_nested_checkpoint_and_checkpoint_inside_jit(wx, rng):
    w, x = wx
    inner = pyxla.checkpoint(lambda w, h: pnp.sin(h @ w))

    @pyxla.checkpoint
    def outer(w, x):
        return inner(w, pnp.tanh(x @ w)) * 2

    want = pyxla.grad(_loss(lambda w, x: pnp.sin(pnp.tanh(x @ w) @ w) * 2))(w, x)

    @pyxla.jit
    def step(w, x):
        return pyxla.grad(_loss(outer))(w, x)

    np.testing.assert_allclose(step(w, x), want, rtol=1e-12)
    np.testing.assert_allclose(pyxla.grad(_loss(outer))(w, x), want, rtol=1e-12)
    check_grads(_loss(outer), (w, x), rng)


def test_static_argnums_pytrees_and_higher_order(rng):
    @pyxla.checkpoint
    def f(p, x):
        return {"y": pnp.sin(p["a"] * x) * p["b"]}

    p = {"a": 0.7, "b": np.array([1.0, -2.0])}
    g = pyxla.grad(lambda p: pnp.sum(f(p, 1.5)["y"]))(p)
    np.testing.assert_allclose(g["a"], np.sum(1.5 * np.cos(1.05) * p["b"]))
    np.testing.assert_allclose(g["b"], np.sin(1.05) * np.ones(2))
    power = pyxla.checkpoint(lambda x, n: pnp.sin(x) ** n, static_argnums=(1,))
    np.testing.assert_allclose(pyxla.grad(power)(0.3, 3), 3 * np.sin(0.3) ** 2 * np.cos(0.3))
    np.testing.assert_allclose(pyxla.grad(pyxla.grad(pyxla.remat(pnp.sin)))(0.3), -np.sin(0.3))
    _, t = pyxla.jvp(pyxla.checkpoint(pnp.sin), (0.3,), (2.0,))
    np.testing.assert_allclose(t, 2 * np.cos(0.3))


def test_against_jax(wx, request):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    request.addfinalizer(lambda: jax.config.update("jax_enable_x64", x64))
    w, x = wx
    jlayer = lambda w, x: jnp.tanh(jnp.tanh(x @ w) @ w)  # noqa: E731
    want = jax.grad(lambda w: jnp.sum(jax.checkpoint(jlayer, policy=jax.checkpoint_policies.dots_saveable)(w, x) ** 2))(w)
    got = pyxla.grad(lambda w: pnp.sum(pyxla.checkpoint(layer, policy=P.dots_saveable)(w, x) ** 2))(w)
    np.testing.assert_allclose(got, want, rtol=1e-12)
