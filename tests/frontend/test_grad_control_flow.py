"""Derivatives through control flow: cond and switch (conditional), while_loop, fori_loop
and scan (while), in forward and reverse mode, eagerly and compiled, against finite
differences (gradient_testing.check_grads) and, where it is installed, against JAX."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax
from pyxla.autodiff import transpose as transpose_module
from pyxla.autodiff.while_rules import REVERSE_MODE_ERROR
from pyxla.hlo import parse_module

from .gradient_testing import assert_trees_close, check_grads

try:
    import jax
    import jax.numpy as jnp
except ImportError:   # pragma: no cover - JAX is optional
    jax = None


# --- cond and switch ------------------------------------------------------------------------------

def _cond_pytree(x, w):
    return lax.cond(x["a"][0] > 0,
                    lambda v: {"u": pnp.tanh(v["a"] * w), "s": v["b"] * v["a"][1]},
                    lambda v: {"u": v["a"] / w, "s": pnp.exp(v["b"])},
                    x)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true", "false"])
def test_cond_both_branches(sign, rng):
    x = {"a": rng.standard_normal(3), "b": rng.standard_normal(())}
    x["a"][0] = sign
    w = rng.standard_normal(3) + 3.0
    check_grads(_cond_pytree, (x, w), rng, jit=True)


@pytest.mark.parametrize("index", [0, 1, 2, 7])
def test_switch_every_branch(index, rng):
    w = rng.standard_normal(4)

    def f(x):
        return lax.switch(index, [lambda a: pnp.exp(a) * w, lambda a: a * a, lambda a: pnp.cos(a) + w], x)

    check_grads(f, (rng.standard_normal(4),), rng, jit=True)
    # a traced index
    check_grads(lambda x, i: f(x) * 0 + lax.switch(i, [pnp.sin, pnp.cos, pnp.tanh], x),
                (rng.standard_normal(4), np.int32(index)), rng, jit=True)


def test_cond_branch_without_the_operand_and_integer_outputs(rng):
    def f(x, y):
        # one branch ignores y, the other x; the integer output has no derivative
        return lax.cond(pnp.sum(x) > 0, lambda a, b: (a * 2.0, np.int32(1)), lambda a, b: (b * b, np.int32(2)), x, y)

    for s in (1.0, -1.0):
        x = s * np.abs(rng.standard_normal(3))
        check_grads(lambda x, y: f(x, y)[0], (x, rng.standard_normal(3)), rng, jit=True)
    out, t = pyxla.jvp(f, (x, np.ones(3)), (np.ones(3), np.ones(3)))
    assert t[1].dtype == pyxla.float0


def test_jvp_of_grad_through_cond(rng):
    def loss(x):
        return pnp.sum(lax.cond(x[0] > 0, lambda a: pnp.sin(a) * a, lambda a: pnp.exp(a) * a[1], x))

    for s in (1.0, -1.0):
        x = rng.standard_normal(3)
        x[0] = s
        check_grads(pyxla.grad(loss), (x,), rng, jit=True)


# --- while_loop: forward mode, reverse mode refused -------------------------------------------------

def _while(x, y):
    def body(c):
        a, b, k = c
        return pnp.sin(a) * 1.5 + b, b * 0.5 + a, k + 1   # b's tangent comes from a's
    return lax.while_loop(lambda c: c[2] < 4, body, (x, y, 0))[:2]


def test_while_loop_forward_mode(rng):
    check_grads(_while, (rng.standard_normal(3), rng.standard_normal(3)), rng, modes=("fwd",), jit=True)
    # only x has a tangent: the fixed point gives y one as well
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    _, (tx, ty) = pyxla.jvp(lambda x: _while(x, y), (x,), (np.ones(3),))
    eps = 1e-6
    plus, minus = _while(x + eps, y), _while(x - eps, y)
    np.testing.assert_allclose(ty, (plus[1] - minus[1]) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_while_loop_with_a_traced_stop_forward_mode(rng):
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: pnp.tanh(c) + x, x)

    check_grads(lambda x: f(x, np.int32(3)), (rng.standard_normal(3),), rng, modes=("fwd",))
    x = rng.standard_normal(3)
    _, t = pyxla.jit(lambda x, n: pyxla.jvp(lambda x: f(x, n), (x,), (np.ones(3),)))(x, np.int32(3))
    _, t_eager = pyxla.jvp(lambda x: f(x, np.int32(3)), (x,), (np.ones(3),))
    np.testing.assert_allclose(t, t_eager, rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda x: lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0))[0],
    lambda x: lax.fori_loop(0, pnp.int32(3) + 0 * pnp.sum(x).astype(np.int32), lambda i, c: c * 2.0, x),
], ids=["while_loop", "fori_loop_traced_bounds"])
def test_reverse_mode_through_while_is_refused(make, rng):
    x = rng.standard_normal(3)
    loss = lambda x: pnp.sum(make(x))   # noqa: E731
    with pytest.raises(ValueError, match="^" + REVERSE_MODE_ERROR.replace(".", r"\.") + "$"):
        pyxla.grad(loss)(x)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        pyxla.jit(pyxla.grad(loss)).lower(x)
    # linearize is forward mode: it works (the tangent program recomputes the loop), as in JAX
    out, f_jvp = pyxla.linearize(loss, x)
    np.testing.assert_allclose(f_jvp(np.ones(3)), pyxla.jvp(loss, (x,), (np.ones(3),))[1], rtol=1e-12)


@pytest.mark.skipif(jax is None, reason="JAX is not installed")
def test_reverse_mode_error_is_jaxs():
    with pytest.raises(ValueError) as info:
        jax.grad(lambda x: jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0))[0])(1.0)
    assert str(info.value) == REVERSE_MODE_ERROR


# --- fori_loop with static bounds and scan: reverse mode ---------------------------------------------

def test_fori_loop_static_bounds(rng):
    w = rng.standard_normal((3, 3)) * 0.5

    def f(x, w):
        return lax.fori_loop(1, 5, lambda i, c: pnp.tanh(c @ w) * i + 0.1 * c, x)

    check_grads(f, (rng.standard_normal(3), w), rng, jit=True)
    # no iteration: the identity
    g = pyxla.grad(lambda x: pnp.sum(lax.fori_loop(3, 3, lambda i, c: c * 5.0, x) ** 2))(np.arange(3.0))
    np.testing.assert_allclose(g, 2 * np.arange(3.0))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytree_carry_and_xs(reverse, rng):
    c0 = {"a": rng.standard_normal(2), "b": rng.standard_normal(())}
    xs = {"p": rng.standard_normal((5, 2)), "q": rng.standard_normal((5, 3)) * 0.3}
    w = rng.standard_normal(2)
    f = lambda c0, xs, w: lax.scan(lambda c, x: _scan_pytree_body(c, x, w), c0, xs, reverse=reverse)  # noqa: E731
    check_grads(f, (c0, xs, w), rng, jit=True)


def _scan_pytree_body(c, x, w):
    a = pnp.sin(c["a"] * x["p"]) + w
    b = c["b"] * 0.9 + pnp.sum(x["q"] * a[0])
    return {"a": a, "b": b}, (a * x["q"][0], {"y": pnp.exp(b) + x["p"]})


def test_scan_of_length_only(rng):
    def f(c, w):
        return lax.scan(lambda c, _: (pnp.tanh(c * w) + 0.5 * c, c[0]), c, None, length=4)

    check_grads(f, (rng.standard_normal(3), rng.standard_normal(3)), rng, jit=True)


def test_nested_scans(rng):
    def f(c0, xs, w):
        def outer(c, row):
            def inner(d, x):
                d = pnp.tanh(d * w + x * c)
                return d, d * 2.0
            d, ys = lax.scan(inner, c, row)
            return d + 0.5 * c, pnp.sum(ys, axis=0)
        return lax.scan(outer, c0, xs)

    check_grads(f, (rng.standard_normal(2), rng.standard_normal((3, 4, 2)), rng.standard_normal(2)), rng, jit=True)


def test_cond_inside_scan_and_scan_inside_cond(rng):
    def f(c0, xs):
        step = lambda c, x: (lax.cond(x > 0, lambda a: pnp.sin(a) * x, lambda a: a * a * x, c), c[0])  # noqa: E731
        c, ys = lax.scan(step, c0, xs)
        return lax.cond(pnp.sum(c) > 0, lambda v: lax.scan(lambda a, _: (a * 1.1, a), v, None, length=2)[1],
                        lambda v: pnp.stack([v, v * 2.0]), c), ys

    xs = rng.standard_normal(5)
    xs[np.abs(xs) < 0.1] = 0.5
    check_grads(f, (rng.standard_normal(3), xs), rng, jit=True)


def test_stop_gradient_inside_a_scan_body_and_a_branch(rng):
    x = rng.uniform(0.5, 1.5, 3)
    # c_{k+1} = c_k * stop(c_k): dc_3/dc_0 = c_0 c_1 c_2 = x^(1 + 2 + 4)
    g = pyxla.grad(lambda x: pnp.sum(lax.scan(lambda c, _: (c * lax.stop_gradient(c), None), x, None,
                                              length=3)[0]))(x)
    np.testing.assert_allclose(g, x ** 7, rtol=1e-12)
    g = pyxla.grad(lambda x: pnp.sum(lax.cond(True, lambda a: a * lax.stop_gradient(a), lambda a: a, x)))(x)
    np.testing.assert_allclose(g, x, rtol=1e-12)


def _scan_loss(w, xs):
    return pnp.sum(lax.scan(lambda c, x: (pnp.sin(c * w) + x, c), pnp.zeros(3), xs)[0] ** 2)


def test_jvp_of_grad_through_scan(rng):
    xs = rng.standard_normal((4, 3))
    check_grads(lambda w: pyxla.grad(_scan_loss)(w, xs), (rng.standard_normal(3),), rng, jit=True)


def test_grad_of_scan_compiled_on_cpu_matches_eager(rng):
    w, xs = rng.standard_normal(3), rng.standard_normal((6, 3))
    eager = pyxla.grad(_scan_loss, argnums=(0, 1))(w, xs)
    compiled = pyxla.jit(pyxla.grad(_scan_loss, argnums=(0, 1)), backend="cpu")(w, xs)
    assert_trees_close(compiled, eager, 1e-12, 1e-12, "jit(grad) of a scan on the CPU backend")
    cond_loss = lambda x: pnp.sum(lax.cond(x[0] > 0, pnp.sin, pnp.exp, x) * x)   # noqa: E731
    x = rng.standard_normal(3)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(cond_loss), backend="cpu")(x), pyxla.grad(cond_loss)(x),
                               rtol=1e-12)


def test_loop_invariant_residuals_are_not_stacked(rng):
    w = rng.standard_normal((8, 8)) * 0.3
    loss = lambda w, xs: pnp.sum(lax.scan(lambda c, x: (pnp.tanh(c @ w + x), None), pnp.zeros(8), xs)[0])  # noqa: E731
    text = pyxla.jit(pyxla.grad(loss)).lower(w, rng.standard_normal((5, 8))).as_text()
    assert "f64[5,8,8]" not in text        # w is read from outside the loop, not stacked per iteration
    assert "f64[5,8]" in text              # the per-iteration tanh is


# --- trip counts and HLO text -----------------------------------------------------------------------

def test_static_loops_record_their_trip_count():
    x = np.ones(3)
    config = 'backend_config={"known_trip_count":{"n":"7"}}'
    assert config in pyxla.jit(lambda x: lax.fori_loop(2, 9, lambda i, c: c * 2.0, x)).lower(x).as_text()
    assert config in pyxla.jit(lambda x: lax.scan(lambda c, _: (c, c), x, None, length=7)).lower(x).as_text()
    dynamic = pyxla.jit(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 2.0, x)).lower(x, np.int32(3)).as_text()
    assert "known_trip_count" not in dynamic


def test_backward_program_text_parses_back(rng):
    w, xs = rng.standard_normal(3), rng.standard_normal((4, 3))

    def loss(w, xs):
        ys = lax.scan(lambda c, x: (lax.cond(x[0] > 0, pnp.sin, pnp.cos, c * w) + x, c), pnp.zeros(3), xs)[1]
        return _scan_loss(w, xs) + pnp.sum(ys)

    text = pyxla.jit(pyxla.grad(loss)).lower(w, xs).as_text()
    module = parse_module(text)
    assert "known_trip_count" in text and " conditional(" in text
    assert pyxla.hlo.printer.print_module(module).count("known_trip_count") == text.count("known_trip_count")


def test_every_control_flow_transpose_rule_runs(monkeypatch, rng):
    seen = set()
    for opcode, rule in list(transpose_module.CALLING_TRANSPOSE_RULES.items()):
        def wrapped(*args, _rule=rule, _opcode=opcode):
            seen.add(_opcode)
            return _rule(*args)
        monkeypatch.setitem(transpose_module.CALLING_TRANSPOSE_RULES, opcode, wrapped)
    pyxla.grad(lambda x: pnp.sum(lax.scan(lambda c, _: (lax.cond(c[0] > 0, pnp.sin, pnp.cos, c), None), x, None,
                                          length=2)[0]))(rng.standard_normal(3))
    assert {"call", "conditional", "while"} <= seen


# --- against JAX --------------------------------------------------------------------------------------

@pytest.mark.skipif(jax is None, reason="JAX is not installed")
def test_gradients_match_jax(rng):
    jax.config.update("jax_enable_x64", True)   # float64; conftest restores the flag afterwards
    w, xs, x = rng.standard_normal(3), rng.standard_normal((5, 3)), rng.standard_normal(3)

    def scan_loss(lib, scan, w, xs):
        carry, ys = scan(lambda c, x: (lib.sin(c * w) + x, lib.tanh(c) * x), lib.zeros(3), xs, reverse=True)
        return lib.sum(carry ** 2) + lib.sum(ys)

    def cond_loss(lib, cond, x):
        return lib.sum(cond(x[0] > 0, lambda a: lib.sin(a) * a, lambda a: lib.exp(a), x))

    def fori_loss(lib, fori, x):
        return lib.sum(fori(0, 4, lambda i, c: lib.tanh(c) * (i + 1.0), x))

    ours = pyxla.grad(lambda w, xs: scan_loss(pnp, lax.scan, w, xs), argnums=(0, 1))(w, xs)
    theirs = jax.grad(lambda w, xs: scan_loss(jnp, jax.lax.scan, w, xs), argnums=(0, 1))(w, xs)
    assert_trees_close(ours, tuple(np.asarray(t) for t in theirs), 1e-10, 1e-12, "scan gradient against JAX")
    for s in (1.0, -1.0):
        x[0] = s
        np.testing.assert_allclose(pyxla.grad(lambda x: cond_loss(pnp, lax.cond, x))(x),
                                   jax.grad(lambda x: cond_loss(jnp, jax.lax.cond, x))(x), rtol=1e-10)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(lambda x: fori_loss(pnp, lax.fori_loop, x)))(x),
                               jax.grad(lambda x: fori_loss(jnp, jax.lax.fori_loop, x))(x), rtol=1e-10)
