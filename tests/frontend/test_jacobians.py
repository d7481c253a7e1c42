"""jacfwd, jacrev and hessian: JAX's output layout over pytrees, against finite differences,
against each other, under jit, and against JAX where it is installed."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp

from .gradient_testing import numerical_grad

HAVE_JAX = importlib.util.find_spec("jax") is not None


def f_vec(x):
    return pnp.sin(x) * pnp.sum(x ** 2) + pnp.tanh(x[::-1])


def numerical_jacobian(f, x):
    """Row by row: the numerical gradient of each output element."""
    out = np.asarray(f(x))
    rows = [numerical_grad(lambda v, i=i: np.asarray(f(v)).reshape(-1)[i], x) for i in range(out.size)]
    return np.stack(rows).reshape(out.shape + x.shape)


@pytest.mark.parametrize("jac", [pyxla.jacfwd, pyxla.jacrev])
def test_jacobian_against_finite_differences(jac):
    x = np.random.default_rng(0).standard_normal(4)
    got = jac(f_vec)(x)
    np.testing.assert_allclose(got, numerical_jacobian(f_vec, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pyxla.jit(jac(f_vec))(x), got, rtol=1e-12, atol=1e-14)


def test_layout_for_matrix_input_and_output():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 3))

    def f(x):               # x: (3, 4) -> (2, 4)
        return pnp.tanh(w @ x)

    x = rng.standard_normal((3, 4))
    fwd, rev = pyxla.jacfwd(f)(x), pyxla.jacrev(f)(x)
    assert fwd.shape == rev.shape == (2, 4, 3, 4)
    np.testing.assert_allclose(fwd, rev, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fwd, numerical_jacobian(f, x), rtol=1e-6, atol=1e-7)


def test_pytrees_argnums_and_has_aux():
    rng = np.random.default_rng(2)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x = rng.standard_normal(3)

    def f(p, x):
        y = pnp.tanh(x @ p["w"] + p["b"])
        return {"y": y, "s": pnp.sum(y)}, pnp.max(y)

    for jac in (pyxla.jacfwd, pyxla.jacrev):
        got, aux = jac(f, argnums=(0, 1), has_aux=True)(params, x)
        np.testing.assert_allclose(aux, f(params, x)[1])
        assert got["y"][0]["w"].shape == (2, 3, 2) and got["y"][0]["b"].shape == (2, 2)
        assert got["y"][1].shape == (2, 3) and got["s"][0]["w"].shape == (3, 2) and got["s"][1].shape == (3,)
        want_s_x = numerical_grad(lambda v: float(f(params, v)[0]["s"]), x)
        np.testing.assert_allclose(got["s"][1], want_s_x, rtol=1e-6, atol=1e-8)
        want_s_b = numerical_grad(lambda v: float(f({**params, "b": v}, x)[0]["s"]), params["b"])
        np.testing.assert_allclose(got["s"][0]["b"], want_s_b, rtol=1e-6, atol=1e-8)
    fwd = pyxla.jacfwd(f, argnums=(0, 1), has_aux=True)(params, x)[0]
    rev = pyxla.jacrev(f, argnums=(0, 1), has_aux=True)(params, x)[0]
    for a, b in zip(pyxla.tree_flatten(fwd)[0], pyxla.tree_flatten(rev)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_hessian_against_finite_differences_and_jit():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3))

    def f(x):
        return pnp.sum(pnp.sin(x) * (a @ x)) + pnp.sum(x ** 4)

    x = rng.standard_normal(3)
    h = pyxla.hessian(f)(x)
    grad = pyxla.grad(f)
    want = np.stack([numerical_grad(lambda v, i=i: float(grad(v)[i]), x) for i in range(3)])
    np.testing.assert_allclose(h, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pyxla.jit(pyxla.hessian(f))(x), h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pyxla.jacrev(pyxla.jacfwd(f))(x), h, rtol=1e-12, atol=1e-12)


def test_hessian_of_matrix_argument_layout():
    def f(m):
        return pnp.sum(pnp.tanh(m) ** 2)

    m = np.random.default_rng(4).standard_normal((2, 3))
    assert pyxla.hessian(f)(m).shape == (2, 3, 2, 3)


def test_integer_inputs_are_refused():
    with pytest.raises(TypeError, match="jacfwd requires real-valued inputs"):
        pyxla.jacfwd(lambda x: x * 2)(np.arange(3))
    with pytest.raises(TypeError, match="jacrev requires real-valued inputs"):
        pyxla.jacrev(lambda x: x * 2)(np.arange(3))


@pytest.mark.skipif(not HAVE_JAX, reason="JAX is not installed")
def test_against_jax():
    import jax
    import jax.numpy as jnp
    x = np.random.default_rng(5).standard_normal(4)
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)   # float64, as pyxla computes here
    try:
        _compare_with_jax(jax, jnp, x)
    finally:
        jax.config.update("jax_enable_x64", previous)


def _compare_with_jax(jax, jnp, x):

    def jax_f(v):
        return jnp.sin(v) * jnp.sum(v ** 2) + jnp.tanh(v[::-1])

    np.testing.assert_allclose(pyxla.jacfwd(f_vec)(x), np.asarray(jax.jacfwd(jax_f)(x)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pyxla.jacrev(f_vec)(x), np.asarray(jax.jacrev(jax_f)(x)), rtol=1e-10, atol=1e-12)
    want = np.asarray(jax.hessian(lambda v: jnp.sum(jax_f(v)))(x))
    np.testing.assert_allclose(pyxla.hessian(lambda v: pnp.sum(f_vec(v)))(x), want, rtol=1e-10, atol=1e-12)
