"""vmap of custom_jvp, custom_vjp and checkpoint: the batched call keeps the user's rule, so
every derivative of the vmapped function is the rule's (whose values differ from the true
derivative here, so the primal's derivative would fail), and a checkpoint still recomputes."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax

B = 5


@pytest.fixture
def jax_x64(request):
    jax = pytest.importorskip("jax")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    request.addfinalizer(lambda: jax.config.update("jax_enable_x64", old))
    return jax


def _sum_of(fn, **vmap_args):
    return lambda *args: pnp.sum(pyxla.vmap(fn, **vmap_args)(*args))


# --- custom_jvp: d/dx = 2x, d/dy = 5 (the true ones: cos(x) y, sin(x)) -----------------------


@pyxla.custom_jvp
def fake_jvp(x, y):
    return pnp.sin(x) * y


@fake_jvp.defjvp
def _fake_jvp_rule(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return fake_jvp(x, y), 2.0 * x * tx + 5.0 * ty


def test_custom_jvp_grad_of_vmap_and_vmap_of_grad(rng):
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    grads = pyxla.grad(_sum_of(fake_jvp), argnums=(0, 1))
    per_example = pyxla.vmap(pyxla.grad(fake_jvp, argnums=(0, 1)))
    for how in (grads, pyxla.jit(grads), per_example, pyxla.jit(per_example)):
        gx, gy = how(x, y)
        np.testing.assert_allclose(gx, 2 * x, rtol=1e-14)
        np.testing.assert_allclose(gy, np.full(B, 5.0), rtol=1e-14)
    np.testing.assert_allclose(pyxla.vmap(fake_jvp)(x, y), np.sin(x) * y, rtol=1e-14)


def test_custom_jvp_shared_argument_sums_over_examples(rng):
    x, y = rng.standard_normal(B), rng.standard_normal()
    grads = pyxla.grad(_sum_of(fake_jvp, in_axes=(0, None)), argnums=(0, 1))
    for how in (grads, pyxla.jit(grads)):
        gx, gy = how(x, y)
        np.testing.assert_allclose(gx, 2 * x, rtol=1e-14)
        np.testing.assert_allclose(gy, 5.0 * B, rtol=1e-14)


def test_custom_jvp_forward_mode_of_vmap(rng):
    x, y, tx, ty = (rng.standard_normal(B) for _ in range(4))
    for how in (pyxla.jvp, lambda f, p, t: pyxla.jit(lambda *a: pyxla.jvp(f, a[:2], a[2:]))(*p, *t)):
        out, tangent = how(pyxla.vmap(fake_jvp), (x, y), (tx, ty))
        np.testing.assert_allclose(out, np.sin(x) * y, rtol=1e-14)
        np.testing.assert_allclose(tangent, 2 * x * tx + 5 * ty, rtol=1e-14)


def test_custom_jvp_rule_called_from_its_rule_is_batched_when_differentiated(rng):
    # The primal output of jvp comes from the call of fake_jvp inside its own rule, whose rule
    # is traced only now; the tangent output's derivative is the rule's (2 t).
    x, y = rng.standard_normal(B), rng.standard_normal()
    ones = np.ones(B)
    primal = lambda x: pnp.sum(pyxla.jvp(pyxla.vmap(fake_jvp, in_axes=(0, None)), (x, y), (ones, 0.0))[0])  # noqa: E731
    tangent = lambda x: pnp.sum(pyxla.jvp(pyxla.vmap(fake_jvp, in_axes=(0, None)), (x, y), (ones, 0.0))[1])  # noqa: E731
    for how in (pyxla.grad, lambda f: pyxla.jit(pyxla.grad(f))):
        np.testing.assert_allclose(how(primal)(x), 2 * x, rtol=1e-14)
        np.testing.assert_allclose(how(tangent)(x), np.full(B, 2.0), rtol=1e-14)


def test_custom_jvp_nested_vmap_and_closure(rng):
    xs, y = rng.standard_normal((3, B)), rng.standard_normal()
    twice = pyxla.vmap(pyxla.vmap(fake_jvp, in_axes=(0, None)), in_axes=(0, None))
    gx, gy = pyxla.grad(lambda x, y: pnp.sum(twice(x, y)), argnums=(0, 1))(xs, y)
    np.testing.assert_allclose(gx, 2 * xs, rtol=1e-14)
    np.testing.assert_allclose(gy, 5.0 * xs.size, rtol=1e-14)

    def scaled(x, c):   # the rule closes over a value that differs per example
        @pyxla.custom_jvp
        def f(x):
            return pnp.sin(x) * c

        f.defjvp(lambda p, t: (f(p[0]), t[0] * c * 3.0))
        return f(x)

    c = rng.standard_normal(B)
    x = rng.standard_normal(B)
    np.testing.assert_allclose(pyxla.grad(_sum_of(scaled))(x, c), 3 * c, rtol=1e-14)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(_sum_of(scaled)))(x, c), 3 * c, rtol=1e-14)


def test_custom_jvp_against_jax(rng, jax_x64):
    jax, jnp = jax_x64, jax_x64.numpy

    @jax.custom_jvp
    def j_fake(x, y):
        return jnp.sin(x) * y

    j_fake.defjvp(lambda p, t: (j_fake(*p), 2.0 * p[0] * t[0] + 5.0 * t[1]))
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    for axes in ((0, 0), (0, None)):
        yy = y if axes[1] == 0 else y[0]
        want = jax.grad(lambda x, y: jnp.sum(jax.vmap(j_fake, in_axes=axes)(x, y)), argnums=(0, 1))(x, yy)
        got = pyxla.grad(_sum_of(fake_jvp, in_axes=axes), argnums=(0, 1))(x, yy)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-14)
    np.testing.assert_allclose(pyxla.jvp(pyxla.vmap(fake_jvp), (x, y), (y, x))[1],
                               jax.jvp(jax.vmap(j_fake), (x, y), (y, x))[1], rtol=1e-14)
    np.testing.assert_allclose(pyxla.vmap(pyxla.grad(fake_jvp))(x, y), jax.vmap(jax.grad(j_fake))(x, y),
                               rtol=1e-14)


# --- custom_vjp: d/dx = 3 k cos(x), d/dy = 7 x (the true ones: k cos(x) y, k sin(x)) -------


@functools.partial(pyxla.custom_vjp, nondiff_argnums=(0,))
def fake_vjp(k, x, y):
    return pnp.sin(x) * y * k


def _fake_vjp_fwd(k, x, y):
    return fake_vjp(k, x, y), (pnp.cos(x), x)


def _fake_vjp_bwd(k, residuals, ct):
    cos_x, x = residuals
    return 3.0 * k * cos_x * ct, 7.0 * x * ct


fake_vjp.defvjp(_fake_vjp_fwd, _fake_vjp_bwd)
K = 0.5


def test_custom_vjp_grad_of_vmap_and_vmap_of_grad(rng):
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    f = functools.partial(fake_vjp, K)
    grads = pyxla.grad(_sum_of(f), argnums=(0, 1))
    per_example = pyxla.vmap(pyxla.grad(f, argnums=(0, 1)))
    for how in (grads, pyxla.jit(grads), per_example, pyxla.jit(per_example)):
        gx, gy = how(x, y)
        np.testing.assert_allclose(gx, 3 * K * np.cos(x), rtol=1e-14)
        np.testing.assert_allclose(gy, 7 * x, rtol=1e-14)
    np.testing.assert_allclose(pyxla.vmap(f)(x, y), np.sin(x) * y * K, rtol=1e-14)


def test_custom_vjp_shared_argument_and_weighted_cotangent(rng):
    x, y, w = rng.standard_normal(B), rng.standard_normal(), rng.standard_normal(B)
    loss = lambda x, y: pnp.sum(pyxla.vmap(fake_vjp, in_axes=(None, 0, None))(K, x, y) * w)  # noqa: E731
    for how in (pyxla.grad(loss, argnums=(0, 1)), pyxla.jit(pyxla.grad(loss, argnums=(0, 1)))):
        gx, gy = how(x, y)
        np.testing.assert_allclose(gx, 3 * K * np.cos(x) * w, rtol=1e-14)
        np.testing.assert_allclose(gy, np.sum(7 * x * w), rtol=1e-13)   # every example's, summed


def test_custom_vjp_refuses_forward_mode_under_vmap(rng):
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    with pytest.raises(TypeError) as plain:
        pyxla.jvp(functools.partial(fake_vjp, K), (x[0], y[0]), (1.0, 1.0))
    with pytest.raises(TypeError) as batched:
        pyxla.jvp(pyxla.vmap(functools.partial(fake_vjp, K)), (x, y), (x, y))
    assert str(batched.value) == str(plain.value)


def test_custom_vjp_fwd_called_from_fwd_and_nested_vmap(rng):
    # value_and_grad's value is the call of fake_vjp inside fwd, whose fwd is traced only
    # when grad differentiates it: the derivative is still bwd's.
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    value = lambda x, y: pyxla.value_and_grad(functools.partial(fake_vjp, K))(x, y)[0]  # noqa: E731
    for how in (pyxla.grad(_sum_of(value)), pyxla.jit(pyxla.grad(_sum_of(value)))):
        np.testing.assert_allclose(how(x, y), 3 * K * np.cos(x), rtol=1e-14)
    # k traced (vmap makes every argument a value of its trace), the same for every example
    traced_k = lambda k, x, y: pyxla.value_and_grad(functools.partial(fake_vjp, k))(x, y)[0]  # noqa: E731
    loss = lambda x, y: pnp.sum(pyxla.vmap(traced_k, in_axes=(None, 0, 0))(K, x, y))  # noqa: E731
    np.testing.assert_allclose(pyxla.grad(loss)(x, y), 3 * K * np.cos(x), rtol=1e-14)
    xs, ys = rng.standard_normal((3, B)), rng.standard_normal((3, B))
    twice = pyxla.vmap(pyxla.vmap(functools.partial(fake_vjp, K)))
    gx, gy = pyxla.grad(lambda x, y: pnp.sum(twice(x, y)), argnums=(0, 1))(xs, ys)
    np.testing.assert_allclose(gx, 3 * K * np.cos(xs), rtol=1e-14)
    np.testing.assert_allclose(gy, 7 * xs, rtol=1e-14)


def test_custom_vjp_fwd_closing_over_a_batched_value(rng):
    def scaled(x, c):
        @pyxla.custom_vjp
        def f(x):
            return x * c

        f.defvjp(lambda x: (f(x), c * 3.0), lambda r, ct: (ct * r,))
        return f(x)

    x, c = rng.standard_normal(B), rng.standard_normal(B)
    np.testing.assert_allclose(pyxla.grad(_sum_of(scaled))(x, c), 3 * c, rtol=1e-14)
    np.testing.assert_allclose(pyxla.vmap(pyxla.grad(scaled))(x, c), 3 * c, rtol=1e-14)


def test_custom_vjp_refusals(rng):
    x, c = rng.standard_normal(B), rng.standard_normal(B)

    def traced_nondiff(x, c):
        @functools.partial(pyxla.custom_vjp, nondiff_argnums=(0,))
        def f(k, x):
            return x * k

        f.defvjp(lambda k, x: (f(k, x), None), lambda k, r, ct: (ct * k,))
        return f(c, x)

    with pytest.raises(NotImplementedError, match="vmap of custom_vjp function f with a nondiff argument that differs per example"):
        pyxla.grad(_sum_of(traced_nondiff))(x, c)

    def bwd_closure(x, c):
        @pyxla.custom_vjp
        def f(x):
            return x * c

        f.defvjp(lambda x: (f(x), None), lambda r, ct: (ct * c * 3,))
        return f(x)

    with pytest.raises(NotImplementedError, match="vmap of custom_vjp function f: its bwd"):
        pyxla.grad(_sum_of(bwd_closure))(x, c)


def test_custom_vjp_against_jax(rng, jax_x64):
    jax, jnp = jax_x64, jax_x64.numpy

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def j_fake(k, x, y):
        return jnp.sin(x) * y * k

    j_fake.defvjp(lambda k, x, y: (j_fake(k, x, y), (jnp.cos(x), x)),
                  lambda k, r, ct: (3.0 * k * r[0] * ct, 7.0 * r[1] * ct))
    x, y = rng.standard_normal(B), rng.standard_normal(B)
    for axes in ((None, 0, 0), (None, 0, None)):
        yy = y if axes[2] == 0 else y[0]
        want = jax.grad(lambda x, y: jnp.sum(jax.vmap(j_fake, in_axes=axes)(K, x, y) ** 2), argnums=(0, 1))(x, yy)
        loss = lambda x, y: pnp.sum(pyxla.vmap(fake_vjp, in_axes=axes)(K, x, y) ** 2)  # noqa: E731
        for how in (pyxla.grad(loss, argnums=(0, 1)), pyxla.jit(pyxla.grad(loss, argnums=(0, 1)))):
            for g, w in zip(how(x, yy), want):
                np.testing.assert_allclose(g, w, rtol=1e-13)
    for g, w in zip(pyxla.vmap(pyxla.grad(fake_vjp, argnums=(1, 2)), in_axes=(None, 0, 0))(K, x, y),
                    jax.vmap(jax.grad(j_fake, argnums=(1, 2)), in_axes=(None, 0, 0))(K, x, y)):
        np.testing.assert_allclose(g, w, rtol=1e-14)


# --- checkpoint -------------------------------------------------------------------------------


def layer(w, x):
    return pnp.tanh(pnp.tanh(x @ w) @ w)


def _batched_loss(fn):
    return lambda w, xs: pnp.sum(pyxla.vmap(fn, in_axes=(None, 0))(w, xs) ** 2)


@pytest.fixture
def wxs(rng):
    return rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((B, 3, 4))


def test_checkpoint_gradients_under_vmap(wxs):
    w, xs = wxs
    want = pyxla.grad(_batched_loss(layer), argnums=(0, 1))(w, xs)
    per_example_want = pyxla.vmap(pyxla.grad(lambda w, x: pnp.sum(layer(w, x) ** 2)), in_axes=(None, 0))(w, xs)
    for policy in (None, pyxla.checkpoint_policies.dots_saveable):
        fn = pyxla.checkpoint(layer, policy=policy)
        grads = pyxla.grad(_batched_loss(fn), argnums=(0, 1))
        for how in (grads, pyxla.jit(grads)):
            for g, h in zip(how(w, xs), want):
                np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)
        per_example = pyxla.vmap(pyxla.grad(lambda w, x: pnp.sum(fn(w, x) ** 2)), in_axes=(None, 0))
        for how in (per_example, pyxla.jit(per_example)):
            np.testing.assert_allclose(how(w, xs), per_example_want, rtol=1e-12, atol=1e-14)
    t = np.ones_like(xs)
    np.testing.assert_allclose(pyxla.jvp(pyxla.vmap(pyxla.checkpoint(layer), in_axes=(None, 0)), (w, xs), (w, t))[1],
                               pyxla.jvp(pyxla.vmap(layer, in_axes=(None, 0)), (w, xs), (w, t))[1], rtol=1e-12)


def test_checkpoint_under_vmap_still_recomputes(wxs):
    w, xs = wxs

    def texts(fn):
        lowered = pyxla.jit(pyxla.grad(_batched_loss(fn), argnums=(0, 1))).lower(w, xs)
        return lowered.as_text(), lowered.compile().as_text()

    plain, plain_compiled = texts(layer)
    remat, remat_compiled = texts(pyxla.checkpoint(layer))
    dots, dots_compiled = texts(pyxla.checkpoint(layer, policy=pyxla.checkpoint_policies.dots_saveable))
    assert plain.count(" tanh(") == plain_compiled.count(" tanh(") == 2
    assert remat.count(" tanh(") == remat_compiled.count(" tanh(") == 4     # both recomputed backward
    assert "opt-barrier" in remat and "opt-barrier" not in plain
    assert remat_compiled.count(" dot(") == plain_compiled.count(" dot(") + 2
    assert dots_compiled.count(" tanh(") == 4 and dots_compiled.count(" dot(") == plain_compiled.count(" dot(")


def test_gradient_stops_inside_batched_calls(rng):
    x = rng.standard_normal(B)
    body = lambda c: c * 2.0 + lax.stop_gradient(c * c)  # noqa: E731
    for fn in (pyxla.checkpoint(body), lambda c: lax.cond(c > 100.0, lambda c: c, body, c)):
        np.testing.assert_allclose(pyxla.grad(_sum_of(fn))(x), np.full(B, 2.0))
        np.testing.assert_allclose(pyxla.jit(pyxla.grad(_sum_of(fn)))(x), np.full(B, 2.0))


def test_checkpoint_against_jax(wxs, jax_x64):
    jax, jnp = jax_x64, jax_x64.numpy
    w, xs = wxs
    j_layer = jax.checkpoint(lambda w, x: jnp.tanh(jnp.tanh(x @ w) @ w))
    want = jax.grad(lambda w, xs: jnp.sum(jax.vmap(j_layer, in_axes=(None, 0))(w, xs) ** 2), argnums=(0, 1))(w, xs)
    got = pyxla.jit(pyxla.grad(_batched_loss(pyxla.checkpoint(layer)), argnums=(0, 1)))(w, xs)
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)
