"""Numerical checks of derivatives: central finite differences against pyxla.jvp and pyxla.vjp.

`check_grads(f, args, rng)` draws a random direction `t` for the float leaves of `args`
and a random cotangent `c` for the outputs, and checks, in float64:

  forward   jvp(f, args, t)  ==  (f(args + eps t) - f(args - eps t)) / (2 eps)
  reverse   <vjp(f, args)(c), t>  ==  <c, that same difference quotient>

The inputs must lie away from kinks (|x| near 0 for abs, ties for max, ...) by more than
eps times the direction. f is evaluated eagerly (pyxla.numpy and lax run at once on the
evaluator); `jit=True` also runs the derivatives compiled.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import pyxla
from pyxla import tree_flatten, tree_unflatten


def _is_float(x: Any) -> bool:
    return np.asarray(x).dtype.kind == "f"


def _random_like(rng: np.random.Generator, tree: Any) -> Any:
    """Standard normal values shaped like the float leaves of `tree` (others kept)."""
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype)
                                    if _is_float(x) else x for x in leaves])


def _axpy(a: float, x: Any, y: Any) -> Any:
    """y + a * x over the float leaves of two trees of one structure."""
    xs, treedef = tree_flatten(x)
    ys, _ = tree_flatten(y)
    return tree_unflatten(treedef, [np.asarray(yy) + a * np.asarray(xx) if _is_float(yy) else yy
                                    for xx, yy in zip(xs, ys)])


def _float_leaves(tree: Any) -> list[np.ndarray]:
    """The float leaves of a tree (integer leaves, and float0 arrays, which pytrees treat as
    structure, left out)."""
    return [np.asarray(x, np.float64) for x in tree_flatten(tree)[0] if _is_float(x)]


def _inner(x: Any, y: Any) -> float:
    """The sum of elementwise products over the float leaves of two trees."""
    xs, ys = _float_leaves(x), _float_leaves(y)
    assert len(xs) == len(ys), f"{len(xs)} float leaves against {len(ys)}"
    return float(sum(np.sum(a * b) for a, b in zip(xs, ys)))


def _abs(tree: Any) -> Any:
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [np.abs(np.asarray(x)) if _is_float(x) else x for x in leaves])


def numerical_jvp(f: Callable, args: tuple, tangents: tuple, eps: float = 1e-6) -> Any:
    """The central difference quotient of f at `args` along `tangents`."""
    plus = f(*_axpy(eps, tangents, args))
    minus = f(*_axpy(-eps, tangents, args))
    pl, treedef = tree_flatten(plus)
    ml, _ = tree_flatten(minus)
    return tree_unflatten(treedef, [(np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * eps)
                                    for p, m in zip(pl, ml)])


def numerical_grad(f: Callable, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The gradient of scalar f at array x, one central difference per element."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
    return g


def assert_trees_close(got: Any, want: Any, rtol: float, atol: float, what: str) -> None:
    gl, gt = tree_flatten(got)
    wl, wt = tree_flatten(want)
    assert gt == wt, f"{what}: structure {gt}, expected {wt}"
    for i, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}, leaf {i}: shape {g.shape}, expected {w.shape}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"{what}, leaf {i}")


def check_grads(f: Callable, args: tuple, rng: np.random.Generator, *, eps: float = 1e-6,
                rtol: float = 1e-6, atol: float = 1e-7, modes: tuple[str, ...] = ("fwd", "rev"),
                jit: bool = False) -> None:
    """Check pyxla.jvp (fwd) and pyxla.vjp (rev) of f at `args` against finite differences
    along a random direction (see the module docstring)."""
    tangents = _random_like(rng, args)
    numeric = numerical_jvp(f, args, tangents, eps)
    primal = f(*args)
    runs = [("eager", lambda fn: fn)]
    if jit:
        runs.append(("jit", lambda fn: pyxla.jit(fn, backend="interpreter")))
    for how, wrap in runs:
        if "fwd" in modes:
            def forward(*a):
                return pyxla.jvp(f, a, tangents)
            out, t_out = wrap(forward)(*args)
            assert_trees_close(out, primal, 1e-12, 1e-12, f"{how} jvp primal output")
            assert_trees_close(t_out, numeric, rtol, atol, f"{how} jvp against finite differences")
        if "rev" in modes:
            cotangent = _random_like(rng, primal)

            def backward(*a):
                out, vjp_fn = pyxla.vjp(f, *a)
                return vjp_fn(cotangent)
            cts = wrap(backward)(*args)
            got, want = _inner(cts, tangents), _inner(cotangent, numeric)
            scale = 1.0 + _inner(_abs(cotangent), _abs(numeric))
            assert abs(got - want) <= 10 * (rtol * scale + atol), (
                f"{how} vjp against finite differences: <vjp(c), t> = {got!r}, <c, jvp(t)> = {want!r}")
