"""Derivative programs are XLA programs: `jit(grad(f)).lower(...).as_text()` is parsed,
compiled and run by real XLA (from jaxlib), and XLA's numbers equal pyxla's.

This checks the printed backward pass end to end, beyond pyxla's own parser: every
attribute a rule emits (dimension numbers, windows, scatter computations, comparison
directions) must mean to XLA what it means to pyxla. Skipped where JAX is not installed.
"""
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn

from ..xla_reference import run_on_xla


def _mlp(p, x, labels):
    h = pnp.tanh(x @ p["w1"] + p["b1"])
    return -pnp.mean(pnp.sum(labels * nn.log_softmax(h @ p["w2"]), axis=-1))


def _cnn(p, images, labels):
    h = lax.conv_general_dilated(images, p["k1"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = nn.relu(h + p["b1"])
    h = lax.reduce_window_max(h, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, p["k2"], (2, 2), ((1, 1), (1, 1)), rhs_dilation=(1, 1),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = lax.reduce_window_sum(pnp.tanh(h), (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
    logits = h.reshape(h.shape[0], -1) @ p["w"]
    picked = pnp.take_along_axis(nn.log_softmax(logits), labels[:, None], axis=1)
    return -pnp.mean(picked)


def _norm_and_sort(p, x):
    y = nn.layer_norm(x @ p["w"], p["scale"], p["bias"])
    top, _ = lax.top_k(nn.gelu(y), 3)
    return pnp.sum(pnp.sort(y, axis=0)[::2] * 0.5) + pnp.sum(top ** 2) + pnp.sum(pnp.cumsum(y, axis=1)[:, -1])


def _gather_scatter(p, x, idx):
    rows = p["table"][idx]                     # gather
    acc = pnp.zeros_like(p["table"]).at[idx].add(rows * x[:, None])   # scatter-add
    return pnp.sum(pnp.sin(acc) * p["table"]) + pnp.max(rows)


def _mlp_case(rng):
    p = {"w1": rng.standard_normal((12, 16)), "b1": rng.standard_normal(16), "w2": rng.standard_normal((16, 5))}
    return _mlp, (p, rng.standard_normal((7, 12)), np.eye(5)[rng.integers(0, 5, 7)])


def _cnn_case(rng):
    p = {"k1": rng.standard_normal((3, 3, 2, 4)) * 0.5, "b1": rng.standard_normal(4) * 0.1,
         "k2": rng.standard_normal((3, 3, 4, 3)) * 0.5, "w": rng.standard_normal((3, 4))}
    return _cnn, (p, rng.standard_normal((2, 8, 8, 2)), rng.integers(0, 4, 2).astype(np.int32))


def _norm_case(rng):
    p = {"w": rng.standard_normal((6, 8)), "scale": rng.standard_normal(8), "bias": rng.standard_normal(8)}
    return _norm_and_sort, (p, rng.standard_normal((5, 6)))


def _gather_case(rng):
    p = {"table": rng.standard_normal((9, 4))}
    return _gather_scatter, (p, rng.standard_normal(6), rng.integers(0, 9, 6).astype(np.int32))


CASES = {"mlp": _mlp_case, "cnn": _cnn_case, "layer_norm_sort_topk_cumsum": _norm_case,
         "gather_scatter": _gather_case}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_value_and_grad_runs_on_xla(case, dtype):
    rng = np.random.default_rng(20)
    fn, args = CASES[case](rng)
    args = pyxla.tree_map(lambda a: a.astype(dtype) if a.dtype.kind == "f" else a, args)
    step = pyxla.jit(pyxla.value_and_grad(fn))
    text = step.lower(*args).as_text()
    leaves = pyxla.tree_flatten(args)[0]
    theirs = run_on_xla(text, leaves)
    ours = pyxla.tree_flatten(step(*args))[0]
    assert len(theirs) == len(ours)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


def test_hessian_vector_product_runs_on_xla():
    """Forward over reverse: the jvp of a gradient (a second derivative program)."""
    rng = np.random.default_rng(21)
    fn, (p, x, labels) = _mlp_case(rng)
    v = pyxla.tree_map(lambda a: rng.standard_normal(a.shape), p)

    def hvp(p, v, x, labels):
        return pyxla.jvp(lambda q: pyxla.grad(fn)(q, x, labels), (p,), (v,))[1]

    jitted = pyxla.jit(hvp)
    theirs = run_on_xla(jitted.lower(p, v, x, labels).as_text(), pyxla.tree_flatten((p, v, x, labels))[0])
    ours = pyxla.tree_flatten(jitted(p, v, x, labels))[0]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-10)
