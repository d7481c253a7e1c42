"""The CPU attention kernel (backends/cpu/ops/attention.py) on fresh random inputs at odd
sizes, against NumPy in float64 and against the same program compiled without the attention
fusion (PYXLA_ATTENTION_FUSION=0)."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import nn

TOL = dict(rtol=2e-5, atol=2e-5)


def _reference(q, k, v, scale, keep=None, bias=None):
    s = np.einsum("...qd,...kd->...qk", q.astype(np.float64), k.astype(np.float64)) * scale
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _program(scale, keep=None, with_bias=False):
    def f(q, k, v, *bias):
        s = q @ pnp.swapaxes(k, -1, -2) * scale
        if with_bias:
            s = s + bias[0]
        if keep is not None:
            s = pnp.where(keep, s, -np.inf)
        return nn.softmax(s, axis=-1) @ v
    return f


def _run(f, args, fused: bool, monkeypatch):
    monkeypatch.setenv("PYXLA_ATTENTION_FUSION", "1" if fused else "0")
    compiled = pyxla.jit(f).lower(*args).compile()
    assert ("__pyxla$attention" in compiled.as_text()) == (fused and args[0].shape[-2] > 1)
    return np.asarray(compiled(*args))


@pytest.mark.parametrize("seq", [1, 7, 33, 130])
@pytest.mark.parametrize("head_dim", [8, 64])
@pytest.mark.parametrize("mask", ["none", "causal", "additive"])
def test_attention_matches_numpy_and_unfused(seq, head_dim, mask, monkeypatch):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((2, 3, seq, head_dim), np.float32) for _ in range(3))
    scale = np.float32(head_dim ** -0.5)
    keep = np.tril(np.ones((seq, seq), bool)) if mask == "causal" else None
    bias = (rng.standard_normal((2, 1, seq, seq)) * 2).astype(np.float32) if mask == "additive" else None
    f = _program(scale, keep, bias is not None)
    args = [q, k, v] + ([bias] if bias is not None else [])
    fused = _run(f, args, True, monkeypatch)
    unfused = _run(f, args, False, monkeypatch)
    want = _reference(q, k, v, scale, keep, bias)
    np.testing.assert_allclose(fused, want, **TOL)
    np.testing.assert_allclose(fused, unfused, **TOL)


def test_large_batch_on_the_pool_with_transposed_operands(monkeypatch):
    """The benchmark's shape class: heads split from projections (transposed views), many
    blocks across threads."""
    rng = np.random.default_rng()
    b, s, h, d = 2, 200, 4, 32
    x = rng.standard_normal((b, s, h * d), np.float32)

    def f(x):
        t = pnp.transpose(pnp.reshape(x, (b, s, h, d)), (0, 2, 1, 3))
        return nn.softmax(t @ pnp.swapaxes(t * np.float32(0.5), -1, -2) * np.float32(d ** -0.5), axis=-1) @ t

    got = _run(f, [x], True, monkeypatch)
    t = x.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, _reference(t, t * 0.5, t, d ** -0.5), **TOL)


def test_fully_masked_rows_are_nan_as_unfused(monkeypatch):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 2, 20, 16), np.float32) for _ in range(3))
    keep = np.tril(np.ones((20, 20), bool), -1)     # row 0 keeps nothing
    f = _program(np.float32(0.25), keep)
    fused = _run(f, [q, k, v], True, monkeypatch)
    unfused = _run(f, [q, k, v], False, monkeypatch)
    assert np.isnan(fused[:, :, 0]).all() and np.isnan(unfused[:, :, 0]).all()
    np.testing.assert_allclose(fused[:, :, 1:], _reference(q, k, v, 0.25, keep)[:, :, 1:], **TOL)
    np.testing.assert_allclose(fused[:, :, 1:], unfused[:, :, 1:], **TOL)


def test_nan_and_infinite_scores_propagate_as_unfused(monkeypatch):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 1, 40, 8), np.float32) for _ in range(3))
    q[0, 0, 3, 0] = np.nan
    q[0, 0, 5] = np.inf
    f = _program(np.float32(1.0))
    fused = _run(f, [q, k, v], True, monkeypatch)
    unfused = _run(f, [q, k, v], False, monkeypatch)
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(unfused))
    assert np.isnan(fused[0, 0, 3]).all()
    ok = ~np.isnan(unfused)
    np.testing.assert_allclose(fused[ok], unfused[ok], **TOL)


@pytest.mark.parametrize("seq", [16, 70])
def test_projections_read_and_written_where_they_lie(seq, monkeypatch):
    """The benchmark's attention: heads split from the projections and merged for the output
    projection are views the kernel reads and writes through strides (no copies)."""
    from benchmarks.frameworks.pyxla_impl import FUNCTIONS
    from benchmarks.workloads import attention64
    rng = np.random.default_rng()
    d = 64
    args = [rng.standard_normal((2, seq, d), np.float32)] + [
        (rng.standard_normal((d, d)) * d ** -0.5).astype(np.float32) for _ in range(4)]
    fused = _run(FUNCTIONS["attention"], args, True, monkeypatch)
    text = pyxla.jit(FUNCTIONS["attention"]).lower(*args).compile().as_text()
    assert "transpose" not in text.split("ENTRY")[1]     # no head split or merge copies left
    unfused = _run(FUNCTIONS["attention"], args, False, monkeypatch)
    want = attention64(*[a.astype(np.float64) for a in args])
    np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fused, unfused, rtol=1e-4, atol=1e-4)


def test_two_layers_sharing_a_scale(monkeypatch):
    """Two attentions whose scale broadcasts CSE merges into one instruction (as in a model's
    layers): each fusion takes its own copy of the broadcast."""
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((2, 2, 24, 16), np.float32) for _ in range(3))
    scale = np.float32(0.25)

    def f(q, k, v):
        first = nn.softmax(q @ pnp.swapaxes(k, -1, -2) * scale, axis=-1) @ v
        return nn.softmax(first @ pnp.swapaxes(k, -1, -2) * scale, axis=-1) @ v

    got = _run(f, [q, k, v], True, monkeypatch)
    assert pyxla.jit(f).lower(q, k, v).compile().as_text().count("kind=kCustom") == 2
    first = _reference(q, k, v, 0.25)
    np.testing.assert_allclose(got, _reference(first.astype(np.float32), k, v, 0.25), **TOL)
