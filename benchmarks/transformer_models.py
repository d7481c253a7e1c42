"""Transformer models for the ONNX benchmarks, generated here from PyTorch modules with random
weights (nothing is downloaded): the shapes CPUs serve today.

    gpt2_small  a GPT-2-small-shaped decoder: 12 pre-LN blocks, d 768, 12 heads, causal
                attention, GELU (tanh form), vocabulary 50257 with the embedding tied to the
                output projection; batch 1 x 128 tokens -> logits [1, 128, 50257]
    bert_base   a BERT-base-shaped encoder: word/position/type embeddings, 12 post-LN blocks,
                d 768, 12 heads, FFN 3072, exact GELU; batch 4 x 128 -> hidden states [4, 128, 768]

Each is exported with `torch.onnx.export(..., dynamo=False, opset_version=17)` into
benchmarks/results/models/ (remade when this file changes) beside torch eager's outputs for
the benchmark's inputs, which every framework's result is checked against.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

TRANSFORMER_MODELS = ("gpt2_small", "bert_base")
D_MODEL, HEADS, LAYERS = 768, 12, 12
# float32 through 12 layers: both frameworks reorder sums; errors are compared to the output's scale
RELATIVE_TOLERANCE = 2e-3


def _modules():
    """The torch module classes (defined on first use: torch is a benchmark-only dependency)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, causal: bool, fused_qkv: bool):
            super().__init__()
            self.causal, self.fused = causal, fused_qkv
            if fused_qkv:
                self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            else:
                self.q, self.k, self.v = (nn.Linear(D_MODEL, D_MODEL) for _ in range(3))
            self.out = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split(D_MODEL, dim=-1) if self.fused else (self.q(x), self.k(x), self.v(x))
            heads = [y.view(b, t, HEADS, D_MODEL // HEADS).transpose(1, 2) for y in (q, k, v)]
            scores = heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(D_MODEL // HEADS)
            if self.causal:
                mask = torch.ones(t, t, dtype=torch.bool).tril()
                scores = scores.masked_fill(~mask, float("-inf"))
            y = torch.softmax(scores, dim=-1) @ heads[2]
            return self.out(y.transpose(1, 2).reshape(b, t, D_MODEL))

    class Block(nn.Module):
        def __init__(self, pre_norm: bool, approximate: str):
            super().__init__()
            self.pre_norm = pre_norm
            self.attn = Attention(causal=pre_norm, fused_qkv=pre_norm)
            self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.ffn = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(approximate=approximate),
                                     nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x):
            if self.pre_norm:          # GPT-2
                x = x + self.attn(self.ln1(x))
                return x + self.ffn(self.ln2(x))
            x = self.ln1(x + self.attn(x))   # BERT
            return self.ln2(x + self.ffn(x))

    class Gpt2(nn.Module):
        def __init__(self, vocab: int = 50257, positions: int = 1024):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, D_MODEL), nn.Embedding(positions, D_MODEL)
            self.blocks = nn.ModuleList(Block(True, "tanh") for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(D_MODEL)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.ln_f(x) @ self.wte.weight.T

    class Bert(nn.Module):
        def __init__(self, vocab: int = 30522, positions: int = 512):
            super().__init__()
            self.word, self.pos, self.segment = (nn.Embedding(vocab, D_MODEL), nn.Embedding(positions, D_MODEL),
                                              nn.Embedding(2, D_MODEL))
            self.ln = nn.LayerNorm(D_MODEL)
            self.blocks = nn.ModuleList(Block(False, "none") for _ in range(LAYERS))

        def forward(self, ids, types):
            x = self.ln(self.word(ids) + self.pos(torch.arange(ids.shape[1])) + self.segment(types))
            for block in self.blocks:
                x = block(x)
            return x

    return {"gpt2_small": Gpt2, "bert_base": Bert}


def _inputs(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "gpt2_small":
        return {"ids": rng.integers(0, 50257, (1, 128), dtype=np.int64)}
    return {"ids": rng.integers(0, 30522, (4, 128), dtype=np.int64),
            "types": rng.integers(0, 2, (4, 128), dtype=np.int64)}


def models_dir() -> Path:
    return Path(__file__).parent / "results" / "models"


def _export(name: str, path: Path, reference: Path) -> None:
    import torch
    torch.manual_seed(0)
    model = _modules()[name]().eval()
    with torch.no_grad():
        for p in model.parameters():        # GPT-2's initialisation scale: activations stay O(1)
            p.copy_(torch.randn_like(p) * 0.02 if p.dim() > 1 else p)
    feeds = _inputs(name)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with torch.no_grad():
        out = model(*args).numpy()
        torch.onnx.export(model, args, str(path), input_names=list(feeds), output_names=["out"],
                          dynamo=False, opset_version=17)
    np.save(reference, out)


def model_case(name: str) -> tuple[bytes, dict[str, np.ndarray], list[np.ndarray]]:
    """(ONNX model bytes, inputs, [torch eager's output]) for transformer `name`, exporting it
    first if this file changed since the last export."""
    stamp = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    directory = models_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path, reference = directory / f"{name}-{stamp}.onnx", directory / f"{name}-{stamp}.npy"
    if not (path.exists() and reference.exists()):
        for stale in directory.glob(f"{name}-*"):   # exports of an earlier version of this file
            stale.unlink()
        _export(name, path, reference)
    return path.read_bytes(), _inputs(name), [np.load(reference)]


def close_enough(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and float(np.max(np.abs(got - want))) <= RELATIVE_TOLERANCE * float(
        np.max(np.abs(want)))
