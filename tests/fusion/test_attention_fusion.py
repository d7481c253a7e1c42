"""The attention fusion pass (pyxla/fusion/attention.py): the pattern is found in the forms the
front ends write (pyxla.numpy tracing, the ONNX importer, the torch backend's lowering of
scaled_dot_product_attention) and not in near misses; a fused module computes what the
unfused one does (run here on the interpreter, which evaluates the fused computation)."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import nn
from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.fusion.attention import ATTENTION_CONFIG, enable_attention_fusion, is_attention_fusion


def _attention_fusions(module) -> list:
    return [i for c in module.computations for i in c.instructions if is_attention_fusion(i)]


def _compiled(f, *args):
    module = pyxla.jit(f).lower(*args).module.clone()
    enable_attention_fusion(module)
    return compile_module(module).module


def _interpreted(module, *args):
    """The fused module run by the evaluator (which computes the fusion from its instructions)."""
    return np.asarray(get_backend("interpreter").compile(module).run_flat(list(args))[0])


def _reference(q, k, v, scale, keep=None, bias=None):
    s = np.einsum("...qd,...kd->...qk", q.astype(np.float64), k.astype(np.float64)) * scale
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.fixture
def qkv():
    rng = np.random.default_rng()
    return [rng.standard_normal((2, 3, 9, 8), np.float32) for _ in range(3)]


def test_numpy_form_is_fused_and_computes_the_same(qkv):
    scale = np.float32(8 ** -0.5)

    def f(q, k, v):
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2) * scale, axis=-1) @ v

    module = _compiled(f, *qkv)
    (fusion,) = _attention_fusions(module)
    assert fusion.attrs["kind"] == "kCustom" and fusion.attrs["backend_config"] == ATTENTION_CONFIG
    assert 'backend_config={"fusion_backend_config":{"kind":"__pyxla$attention"}}' in module.to_text()
    np.testing.assert_allclose(_interpreted(module, *qkv), _reference(*qkv, scale), rtol=1e-5, atol=1e-5)


def test_benchmark_attention_with_projections_is_fused():
    from benchmarks.frameworks.pyxla_impl import FUNCTIONS
    rng = np.random.default_rng()
    args = [rng.standard_normal((2, 16, 32), np.float32)] + [rng.standard_normal((32, 32), np.float32)
                                                             for _ in range(4)]
    assert len(_attention_fusions(_compiled(FUNCTIONS["attention"], *args))) == 1


def test_select_mask_and_additive_mask_are_fused(qkv):
    rng = np.random.default_rng()
    keep = np.tril(np.ones((9, 9), bool))
    bias = rng.standard_normal((9, 9)).astype(np.float32)

    def causal(q, k, v):
        return nn.softmax(pnp.where(keep, q @ pnp.swapaxes(k, -1, -2) / np.float32(3), -np.inf), axis=-1) @ v

    def additive(q, k, v, b):
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2) * np.float32(0.5) + b, axis=-1) @ v

    fused = _compiled(causal, *qkv)
    assert len(_attention_fusions(fused)) == 1
    assert len(_attention_fusions(_compiled(additive, *qkv, bias))) == 1
    np.testing.assert_allclose(_interpreted(fused, *qkv), _reference(*qkv, 1 / 3, keep=keep), rtol=1e-5, atol=1e-5)


def _torch_attention(d: int, heads: int, causal: bool):
    torch = pytest.importorskip("torch")

    class Attention(torch.nn.Module):
        """As benchmarks/transformer_models.py's, smaller."""

        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in self.qkv(x).split(d, dim=-1))
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads)
            if causal:
                scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
            return self.out((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d))

    return torch, Attention().eval()


@pytest.mark.parametrize("causal", [False, True])
def test_onnx_import_form_is_fused(causal):
    pytest.importorskip("onnx")
    torch, model = _torch_attention(32, 4, causal)
    x = torch.randn(2, 16, 32)
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, input_names=["x"], output_names=["out"], dynamo=False, opset_version=17)
    import pyxla.onnx
    onnx_model = pyxla.onnx.load(f.getvalue())
    text = onnx_model.hlo_text({"x": x.numpy()}, optimized=True)
    assert text.count(ATTENTION_CONFIG) == 1
    got = list(onnx_model({"x": x.numpy()}).values())[0]
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask", ["causal", "boolean"])
def test_torch_sdpa_lowering_is_fused(mask, monkeypatch, capfd):
    """torch.compile decomposes scaled_dot_product_attention itself: Q and K each scaled,
    products over a flattened batch between reshapes, an additive -inf mask, and a select
    that makes rows whose scores are all -inf zero after the softmax (torch's semantics,
    kept by the kernel)."""
    torch = pytest.importorskip("torch")
    import pyxla.torch  # noqa: F401  (registers the backend)
    monkeypatch.setenv("PYXLA_DEBUG", "fusion")
    q, k, v = (torch.randn(2, 3, 12, 8) for _ in range(3))
    keep = torch.tril(torch.ones(12, 12, dtype=torch.bool), -1)    # row 0 keeps nothing

    def f(q, k, v):
        if mask == "causal":
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    got = torch.compile(f, backend="pyxla")(q, k, v)
    want = f(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if mask == "boolean":
        assert (got[:, :, 0] == 0).all()
    assert capfd.readouterr().err.count("pyxla attention fusion: %fusion") == 1


def test_near_misses_are_not_fused(qkv):
    rng = np.random.default_rng()
    q, k, v = qkv
    mult_mask = rng.standard_normal((9, 9)).astype(np.float32)

    def wrong_axis(q, k, v):    # softmax over the queries: P is not normalised along its contraction
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2), axis=-2) @ v

    def multiplicative_mask(q, k, v, m):
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2) * m, axis=-1) @ v

    def max_over_other_axis(q, k, v):   # a stable softmax whose max is taken over the queries
        s = q @ pnp.swapaxes(k, -1, -2)
        e = pnp.exp(s - pnp.max(s, axis=-2, keepdims=True))
        return e / pnp.sum(e, axis=-1, keepdims=True) @ v

    def scores_also_returned(q, k, v):
        p = nn.softmax(q @ pnp.swapaxes(k, -1, -2), axis=-1)
        return p @ v, p

    def exp_not_softmax(q, k, v):   # no max subtracted
        e = pnp.exp(q @ pnp.swapaxes(k, -1, -2))
        return e / pnp.sum(e, axis=-1, keepdims=True) @ v

    for f, args in [(wrong_axis, qkv), (multiplicative_mask, qkv + [mult_mask]), (max_over_other_axis, qkv),
                    (scores_also_returned, qkv), (exp_not_softmax, qkv)]:
        assert _attention_fusions(_compiled(f, *args)) == [], f.__name__


def test_only_for_backends_with_the_kernel(qkv):
    """A module no backend enabled it for (the interpreter's, the GPU's) is not fused."""
    def f(q, k, v):
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2), axis=-1) @ v

    module = pyxla.jit(f).lower(*qkv).module.clone()
    assert _attention_fusions(compile_module(module).module) == []


def test_pass_can_be_turned_off(qkv, monkeypatch):
    monkeypatch.setenv("PYXLA_ATTENTION_FUSION", "0")

    def f(q, k, v):
        return nn.softmax(q @ pnp.swapaxes(k, -1, -2), axis=-1) @ v

    assert _attention_fusions(_compiled(f, *qkv)) == []
