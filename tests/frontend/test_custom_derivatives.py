"""custom_jvp and custom_vjp: the user's rule is what grad, vjp, jvp and linearize use, the
primal function what runs otherwise; JAX's semantics and errors."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax

from .gradient_testing import check_grads

# --- the functions under test ---------------------------------------------------------------


@pyxla.custom_jvp
def log1pexp(x):
    return pnp.log1p(pnp.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1 - 1 / (1 + pnp.exp(x)))   # stable where exp(x) overflows


@pyxla.custom_jvp
def sin_with_fake_slope(x):
    return pnp.sin(x)


@sin_with_fake_slope.defjvp
def _fake_slope(primals, tangents):
    (x,), (t,) = primals, tangents
    return pnp.sin(x), 2.0 * t          # not the true derivative: shows the rule is used


@functools.partial(pyxla.custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x


def _clip_fwd(lo, hi, x):
    return x, None


def _clip_bwd(lo, hi, _, g):
    return (pnp.clip(g, lo, hi),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@pyxla.custom_vjp
def scaled_sin(x, y):
    return pnp.sin(x) * y


def _scaled_sin_fwd(x, y):
    return scaled_sin(x, y), (pnp.cos(x), y)


def _scaled_sin_bwd(res, g):
    cos_x, y = res
    return 2 * cos_x * y * g, None       # twice the true x derivative; y gets none


scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)

X = np.array([-1.5, -0.2, 0.3, 2.0])


# --- custom_jvp -------------------------------------------------------------------------------

def test_primal_function_runs_when_not_differentiated():
    want = np.log1p(np.exp(X))
    np.testing.assert_allclose(log1pexp(X), want, rtol=1e-14)
    np.testing.assert_allclose(pyxla.jit(log1pexp)(X), want, rtol=1e-14)
    text = pyxla.jit(log1pexp).lower(X).compile().as_text()
    assert "call(" not in text and "log-plus-one" in text   # the call was inlined


def test_custom_jvp_rule_is_used_by_every_transformation():
    slope = 2.0 * np.ones_like(X)
    loss = lambda x: pnp.sum(sin_with_fake_slope(x))  # noqa: E731
    np.testing.assert_array_equal(pyxla.grad(loss)(X), slope)
    np.testing.assert_array_equal(pyxla.jit(pyxla.grad(loss))(X), slope)
    np.testing.assert_array_equal(pyxla.grad(pyxla.jit(loss))(X), slope)
    out, t = pyxla.jvp(sin_with_fake_slope, (X,), (np.ones_like(X),))
    np.testing.assert_allclose(out, np.sin(X), rtol=1e-14)
    np.testing.assert_array_equal(t, slope)
    out, f_jvp = pyxla.linearize(sin_with_fake_slope, X)
    np.testing.assert_array_equal(f_jvp(np.full_like(X, 3.0)), 3 * slope)
    np.testing.assert_array_equal(pyxla.vjp(sin_with_fake_slope, X)[1](np.ones_like(X))[0], slope)


def test_log1pexp_gradient_is_stable_at_large_inputs():
    for fn in (pyxla.grad(log1pexp), pyxla.jit(pyxla.grad(log1pexp))):
        assert float(fn(1000.0)) == 1.0
        np.testing.assert_allclose(fn(0.5), 1 / (1 + np.exp(-0.5)), rtol=1e-14)
    unguarded = pyxla.grad(lambda x: pnp.log1p(pnp.exp(x)))(1000.0)   # exp overflows
    assert np.isnan(unguarded)


def test_custom_jvp_against_finite_differences(rng):
    check_grads(lambda x: log1pexp(x) * x, (rng.standard_normal(5),), rng, jit=True)


def test_higher_derivatives_differentiate_the_rule():
    sigmoid = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    for x in (-1.0, 0.3, 2.0):
        np.testing.assert_allclose(pyxla.grad(pyxla.grad(log1pexp))(x), sigmoid(x) * (1 - sigmoid(x)), rtol=1e-12)
        np.testing.assert_allclose(pyxla.jit(pyxla.grad(pyxla.grad(log1pexp)))(x),
                                   sigmoid(x) * (1 - sigmoid(x)), rtol=1e-12)
    # forward over reverse, and the fake rule's own derivative (zero) at second order
    _, t = pyxla.jvp(pyxla.grad(log1pexp), (0.3,), (1.0,))
    np.testing.assert_allclose(t, sigmoid(0.3) * (1 - sigmoid(0.3)), rtol=1e-12)
    assert float(pyxla.grad(pyxla.grad(sin_with_fake_slope))(0.4)) == 0.0


def test_nondiff_argnums_and_keyword_arguments():
    @functools.partial(pyxla.custom_jvp, nondiff_argnums=(0,))
    def power(n, x):
        return x ** n

    @power.defjvp
    def power_jvp(n, primals, tangents):
        (x,), (t,) = primals, tangents
        return power(n, x), n * x ** (n - 1) * t * 10   # marked: ten times the derivative

    np.testing.assert_allclose(power(3, X), X ** 3)
    np.testing.assert_allclose(pyxla.grad(lambda x: pnp.sum(power(3, x)))(X), 30 * X ** 2)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(lambda x: pnp.sum(power(n=3, x=x))))(X), 30 * X ** 2)


def test_pytrees_in_and_out():
    @pyxla.custom_jvp
    def stats(p):
        return {"prod": p["a"] * p["b"], "sum": p["a"] + p["b"]}, p["n"] * 2

    @stats.defjvp
    def stats_jvp(primals, tangents):
        (p,), (t,) = primals, tangents
        assert t["n"].dtype == pyxla.float0
        out = stats(p)
        return out, ({"prod": t["a"] * p["b"] + p["a"] * t["b"], "sum": None}, None)

    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, -1.0]), "n": np.array([1, 2], np.int32)}
    (out, n2), (t_out, t_n2) = pyxla.jvp(stats, (p,), ({"a": np.ones(2), "b": np.zeros(2),
                                                          "n": np.zeros(2, pyxla.float0)},))
    np.testing.assert_allclose(out["prod"], [3.0, -2.0])
    np.testing.assert_array_equal(n2, [2, 4])
    np.testing.assert_allclose(t_out["prod"], [3.0, -1.0])
    np.testing.assert_array_equal(t_out["sum"], [0.0, 0.0])      # None: a zero tangent
    assert t_n2.dtype == pyxla.float0
    g = pyxla.grad(lambda p: pnp.sum(stats(p)[0]["prod"]), allow_int=True)(p)
    np.testing.assert_allclose(g["a"], p["b"])
    np.testing.assert_allclose(g["b"], p["a"])


def test_defjvps():
    @pyxla.custom_jvp
    def f(x, y):
        return pnp.sin(x) * y

    f.defjvps(lambda t, ans, x, y: pnp.cos(x) * t * y, lambda t, ans, x, y: pnp.sin(x) * t)
    gx, gy = pyxla.grad(lambda x, y: pnp.sum(f(x, y)), argnums=(0, 1))(X, X + 1)
    np.testing.assert_allclose(gx, np.cos(X) * (X + 1), rtol=1e-14)
    np.testing.assert_allclose(gy, np.sin(X), rtol=1e-14)


def test_closure_over_a_traced_value():
    def loss(x, c):
        @pyxla.custom_jvp
        def scale(y):
            return y * c

        @scale.defjvp
        def scale_jvp(primals, tangents):
            return scale(primals[0]), tangents[0] * c * 3

        return pnp.sum(pyxla.grad(lambda y: pnp.sum(scale(y)))(x))

    np.testing.assert_allclose(pyxla.jit(loss)(X, 2.0), 4 * 6.0)

    def closes_over_the_differentiated_value(c):
        @pyxla.custom_jvp
        def scale(y):
            return y * c

        scale.defjvp(lambda primals, tangents: (scale(primals[0]), tangents[0] * c))
        return pnp.sum(scale(X))

    with pytest.raises(TypeError, match="closes over a value that is being differentiated"):
        pyxla.grad(closes_over_the_differentiated_value)(2.0)


def test_custom_jvp_errors():
    @pyxla.custom_jvp
    def f(x):
        return x

    with pytest.raises(AttributeError, match="No JVP defined"):
        f(1.0)
    f.defjvp(lambda primals, tangents: primals[0])
    with pytest.raises(TypeError, match="must produce a pair"):
        pyxla.grad(f)(1.0)
    f.defjvp(lambda primals, tangents: (primals[0], (tangents[0],)))
    with pytest.raises(TypeError, match="structure"):
        pyxla.grad(f)(1.0)


# --- custom_vjp -------------------------------------------------------------------------------

def test_custom_vjp_gradient_is_bwd():
    y = X + 1
    loss = lambda x, y: pnp.sum(scaled_sin(x, y))  # noqa: E731
    for fn in (pyxla.grad(loss, argnums=(0, 1)), pyxla.jit(pyxla.grad(loss, argnums=(0, 1))),
               pyxla.grad(pyxla.jit(loss), argnums=(0, 1))):
        gx, gy = fn(X, y)
        np.testing.assert_allclose(gx, 2 * np.cos(X) * y, rtol=1e-14)
        np.testing.assert_array_equal(gy, np.zeros_like(y))      # bwd's None: a zero cotangent
    np.testing.assert_allclose(scaled_sin(X, y), np.sin(X) * y, rtol=1e-14)
    np.testing.assert_allclose(pyxla.jit(scaled_sin)(X, y), np.sin(X) * y, rtol=1e-14)


def test_clip_gradient_with_nondiff_argnums():
    loss = lambda x: pnp.sum(clip_gradient(-0.5, 0.5, x) * np.array([3.0, -0.2, -4.0, 0.1]))  # noqa: E731
    want = [0.5, -0.2, -0.5, 0.1]
    np.testing.assert_allclose(pyxla.grad(loss)(X), want)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(loss))(X), want)
    np.testing.assert_allclose(clip_gradient(-0.5, 0.5, X), X)


def test_custom_vjp_higher_order():
    @pyxla.custom_vjp
    def f(x):
        return pnp.sin(x)

    f.defvjp(lambda x: (f(x), x), lambda x, g: (g * pnp.cos(x),))
    np.testing.assert_allclose(pyxla.grad(pyxla.grad(f))(0.7), -np.sin(0.7), rtol=1e-14)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(pyxla.grad(f)))(0.7), -np.sin(0.7), rtol=1e-14)


def test_custom_vjp_pytrees_and_integer_arguments():
    @pyxla.custom_vjp
    def f(p, k):
        return {"out": p["w"] * k, "twice": (p["w"] * 2, k)}

    def fwd(p, k):
        return f(p, k), (k,)

    def bwd(res, g):
        (k,) = res
        assert g["twice"][1].dtype == pyxla.float0
        return {"w": g["out"] * k + 2 * g["twice"][0]}, None

    f.defvjp(fwd, bwd)
    p, k = {"w": np.array([1.0, 2.0])}, np.array([3, 4], np.int32)
    g = pyxla.grad(lambda p: pnp.sum(f(p, k)["out"]) + pnp.sum(f(p, k)["twice"][0]))(p)
    np.testing.assert_allclose(g["w"], k + 2.0)
    out, vjp_fn = pyxla.vjp(f, p, k)
    cts = vjp_fn({"out": np.ones(2), "twice": (np.zeros(2), np.zeros(2, pyxla.float0))})
    np.testing.assert_allclose(cts[0]["w"], k)
    assert cts[1].dtype == pyxla.float0


def test_custom_vjp_refuses_forward_mode():
    message = "can't apply forward-mode autodiff \\(jvp\\) to a custom_vjp function."
    with pytest.raises(TypeError, match=message):
        pyxla.jvp(lambda x: scaled_sin(x, x), (X,), (np.ones_like(X),))
    with pytest.raises(TypeError, match=message):
        pyxla.jit(lambda x: pyxla.jvp(lambda x: scaled_sin(x, x), (x,), (x,)))(X)
    out, f_jvp = pyxla.linearize(lambda x: scaled_sin(x, x), X)    # as in JAX: only the JVP function fails
    np.testing.assert_allclose(out, np.sin(X) * X)
    with pytest.raises(TypeError, match=message):
        f_jvp(np.ones_like(X))


def test_bwd_output_is_checked():
    @pyxla.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1],))
    with pytest.raises(TypeError, match="must produce a tuple of length equal to the number of differentiable "
                                        "arguments of the primal function \\(2\\).*length 1"):
        pyxla.grad(f)(1.0, 2.0)
    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1], [g]))
    with pytest.raises(TypeError, match="structure"):
        pyxla.grad(f)(1.0, 2.0)
    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (np.ones(3), None))
    with pytest.raises(ValueError, match="shape"):
        pyxla.grad(f)(1.0, 2.0)
    with pytest.raises(AttributeError, match="No VJP defined"):
        pyxla.custom_vjp(lambda x: x)(1.0)


# --- against JAX -------------------------------------------------------------------------------

def test_against_jax(request):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    request.addfinalizer(lambda: jax.config.update("jax_enable_x64", x64))

    @jax.custom_jvp
    def j_log1pexp(x):
        return jnp.log1p(jnp.exp(x))

    j_log1pexp.defjvp(lambda p, t: (j_log1pexp(p[0]), t[0] * (1 - 1 / (1 + jnp.exp(p[0])))))
    for x in (-3.0, 0.5, 100.0):
        np.testing.assert_allclose(pyxla.grad(log1pexp)(x), jax.grad(j_log1pexp)(x), rtol=1e-14)
        np.testing.assert_allclose(pyxla.grad(pyxla.grad(log1pexp))(x), jax.grad(jax.grad(j_log1pexp))(x),
                                   rtol=1e-12, atol=1e-300)

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
    def j_clip(lo, hi, x):
        return x

    j_clip.defvjp(lambda lo, hi, x: (x, None), lambda lo, hi, _, g: (jnp.clip(g, lo, hi),))
    w = np.array([3.0, -0.2, -4.0, 0.1])
    np.testing.assert_allclose(pyxla.grad(lambda x: pnp.sum(clip_gradient(-0.5, 0.5, x) * w))(X),
                               jax.grad(lambda x: jnp.sum(j_clip(-0.5, 0.5, x) * w))(X))
    with pytest.raises(TypeError) as jax_error:
        jax.jvp(lambda x: j_clip(-0.5, 0.5, x), (X,), (X,))
    with pytest.raises(TypeError) as our_error:
        pyxla.jvp(lambda x: clip_gradient(-0.5, 0.5, x), (X,), (X,))
    assert str(our_error.value) == str(jax_error.value)


def test_custom_function_inside_lax_ops_and_a_loss():
    w = np.array([[0.5, -1.0], [2.0, 0.3]])

    def loss(w, x):
        h = log1pexp(x @ w)
        return pnp.sum(clip_gradient(-1.0, 1.0, lax.tanh(h)))

    g = pyxla.jit(pyxla.grad(loss))(w, np.ones((3, 2)))
    h = np.log1p(np.exp(np.ones((3, 2)) @ w))
    ct = np.clip(1 - np.tanh(h) ** 2, -1, 1) / (1 + np.exp(-(np.ones((3, 2)) @ w)))
    np.testing.assert_allclose(g, np.ones((3, 2)).T @ ct, rtol=1e-12)
