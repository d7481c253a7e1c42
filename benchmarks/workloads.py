"""The workloads, each defined once: inputs, a float64 NumPy reference, and what it must move.

Sizes are those of the performance issue; `scale` shrinks every dimension for a quick run
(the smoke test uses it), keeping shapes valid.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

GELU_C = np.sqrt(2 / np.pi)


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    make_inputs: Callable[[np.random.Generator, float], list[np.ndarray]]
    reference: Callable[..., np.ndarray | tuple[np.ndarray, ...]]   # float64 NumPy; a tuple: every part is checked
    min_bytes: Callable[[list[np.ndarray]], int] | None = None   # memory-bound: bytes it must move
    flops: Callable[[list[np.ndarray]], float] | None = None
    rtol: float = 1e-4


def _dim(n: int, scale: float, multiple: int = 1) -> int:
    return max(multiple, int(n * scale) // multiple * multiple)


def _f32(rng, *shape, scale: float = 1.0):
    """Standard normal values times `scale`, as float32 (every framework gets float32)."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def gelu64(x):
    return 0.5 * x * (1 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def softmax64(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _fma_sum_inputs(rng, s):
    n = _dim(16 * 2 ** 20, s * s, 16)
    return [_f32(rng, n) for _ in range(3)]


def _layer_norm64(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def _mlp_inputs(rng, s):
    b, d, h = _dim(256, s, 8), _dim(1024, s, 8), _dim(4096, s, 8)
    return [_f32(rng, b, d), _f32(rng, d, h, scale=d ** -0.5), _f32(rng, h, scale=0.1),
            _f32(rng, h, d, scale=h ** -0.5), _f32(rng, d, scale=0.1)]


def mlp64(x, w1, b1, w2, b2):
    return gelu64(x @ w1 + b1) @ w2 + b2


def _mlp_train_inputs(rng, s):
    b, d, h, classes = _dim(256, s, 8), _dim(512, s, 8), _dim(1024, s, 8), 10
    labels = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, b)]   # one-hot rows
    return [_f32(rng, b, d), _f32(rng, d, h, scale=d ** -0.5), _f32(rng, h, scale=0.1),
            _f32(rng, h, classes, scale=h ** -0.5), _f32(rng, classes, scale=0.1), labels]


def mlp_train(x, w1, b1, w2, b2, labels):
    """Loss and gradients of a 2-layer MLP, forward and backward written out by hand:
    tanh hidden layer, mean softmax cross-entropy over the batch against one-hot `labels`.
    Returns (loss, dw1, db1, dw2, db2) in the inputs' dtype (float64: the reference;
    float32: the NumPy framework)."""
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    shifted = logits - logits.max(-1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(-1, keepdims=True)
    n = x.shape[0]
    loss = -np.sum(labels * (shifted - np.log(total))) / n
    dlogits = (e / total * labels.sum(-1, keepdims=True) - labels) / n
    dpre = (dlogits @ w2.T) * (1 - h * h)
    return loss, x.T @ dpre, dpre.sum(0), h.T @ dlogits, dlogits.sum(0)


def _mlp_train_flops(ins):
    """Matrix products: forward 2*b*(d*h + h*c), backward twice that."""
    x, w1, _, w2 = ins[:4]
    return 3 * 2 * x.shape[0] * (w1.shape[0] * w1.shape[1] + w2.shape[0] * w2.shape[1])


def _attention_inputs(rng, s):
    batch, seq, heads, hd = _dim(8, s), _dim(256, s, 8), 8, _dim(64, s, 8)
    d = heads * hd
    ws = [_f32(rng, d, d, scale=d ** -0.5) for _ in range(4)]
    return [_f32(rng, batch, seq, d)] + ws


def attention64(x, wq, wk, wv, wo, heads=8):
    b, s, d = x.shape
    hd = d // heads

    def split(t):
        return t.reshape(b, s, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    p = softmax64(q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd))
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo


def _cnn_inputs(rng, s):
    n, c, hw = _dim(16, s), _dim(64, s, 4), _dim(56, s, 2)
    return [_f32(rng, n, hw, hw, c), _f32(rng, 3, 3, c, c, scale=(9 * c) ** -0.5), _f32(rng, c, scale=0.1)]


def cnn_block64(x, w, b):
    """NHWC 3x3 SAME convolution + bias + ReLU + 2x2/2 max pool."""
    n, h, wd, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, wd, w.shape[3]))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,co->nhwo", xp[:, i:i + h, j:j + wd, :], w[i, j], optimize=True)
    out = np.maximum(out + b, 0)
    return out.reshape(n, h // 2, 2, wd // 2, 2, -1).max(axis=(2, 4))


def _cnn_train_inputs(rng, s):
    n, hw, cin, cout, classes = _dim(64, s), _dim(32, s, 4), _dim(16, s, 4), _dim(32, s, 4), 10
    labels = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)]   # one-hot rows
    flat = (hw // 2) * (hw // 2) * cout
    return [_f32(rng, n, hw, hw, cin), _f32(rng, 3, 3, cin, cout, scale=(9 * cin) ** -0.5), _f32(rng, cout, scale=0.1),
            _f32(rng, flat, classes, scale=flat ** -0.5), _f32(rng, classes, scale=0.1), labels]


def cnn_train(x, w, b, wd, bd, labels):
    """Loss and gradients of a small CNN, forward and backward written out by hand: NHWC 3x3
    SAME convolution + bias + ReLU + 2x2/2 max pool, flattened (NHWC order) into a dense
    layer, mean softmax cross-entropy against one-hot `labels`. Returns (loss, dw, db, dwd,
    dbd) in the inputs' dtype."""
    n, h, wdt, _ = x.shape
    cols = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), (3, 3),
                                                    axis=(1, 2))   # n, h, w, c, 3, 3
    y = np.einsum("nhwcij,ijco->nhwo", cols, w, optimize=True) + b
    r = np.maximum(y, 0)
    windows = r.reshape(n, h // 2, 2, wdt // 2, 2, -1).transpose(0, 1, 3, 5, 2, 4).reshape(n, h // 2, wdt // 2, -1, 4)
    pooled = windows.max(-1)
    flat = pooled.reshape(n, -1)
    logits = flat @ wd + bd
    shifted = logits - logits.max(-1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(-1, keepdims=True)
    loss = -np.sum(labels * (shifted - np.log(total))) / n
    dlogits = (e / total * labels.sum(-1, keepdims=True) - labels) / n
    dpooled = (dlogits @ wd.T).reshape(pooled.shape)
    first_max = np.argmax(windows, -1)[..., None]   # the gradient goes to the first maximum of a window
    dwindows = np.zeros_like(windows)
    np.put_along_axis(dwindows, first_max, dpooled[..., None], -1)
    dr = dwindows.reshape(n, h // 2, wdt // 2, -1, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(r.shape)
    dy = dr * (y > 0)
    dw = np.einsum("nhwcij,nhwo->ijco", cols, dy, optimize=True)
    return loss, dw, dy.sum((0, 1, 2)), flat.T @ dlogits, dlogits.sum(0)


def _cnn_train_flops(ins):
    """The convolution forward and its weight gradient (2 * 9 * cin * cout per output pixel
    each), the dense layer forward and backward."""
    x, w, _, wd = ins[:4]
    conv = 2 * x.shape[0] * x.shape[1] * x.shape[2] * w.shape[0] * w.shape[1] * w.shape[2] * w.shape[3]
    return 2 * conv + 3 * 2 * x.shape[0] * wd.shape[0] * wd.shape[1]


WORKLOADS = [
    Workload("sum_fma", "sum(x + y*z) over three vectors of 16M elements", _fma_sum_inputs,
             lambda x, y, z: np.sum(x + y * z), min_bytes=lambda ins: sum(a.nbytes for a in ins), rtol=1e-3),
    Workload("gelu", "tanh-GELU on 4096x4096", lambda rng, s: [_f32(rng, _dim(4096, s, 8), _dim(4096, s, 8))],
             gelu64, min_bytes=lambda ins: 2 * ins[0].nbytes, rtol=1e-5),
    Workload("softmax", "softmax over the last axis of 4096x4096",
             lambda rng, s: [_f32(rng, _dim(4096, s, 8), _dim(4096, s, 8))], softmax64,
             min_bytes=lambda ins: 2 * ins[0].nbytes, rtol=1e-4),
    Workload("layer_norm", "layer norm of 4096x1024 with scale and bias",
             lambda rng, s: [_f32(rng, _dim(4096, s, 8), _dim(1024, s, 8)), _f32(rng, _dim(1024, s, 8)),
                             _f32(rng, _dim(1024, s, 8))],
             _layer_norm64, min_bytes=lambda ins: 2 * ins[0].nbytes, rtol=1e-4),
    Workload("mlp", "MLP: batch 256, 1024 -> 4096 -> 1024, bias and GELU", _mlp_inputs, mlp64,
             flops=lambda ins: 2 * ins[0].shape[0] * ins[1].shape[0] * ins[1].shape[1] * 2, rtol=2e-3),
    Workload("mlp_train", "training step: loss and gradients (w1, b1, w2, b2) of a tanh MLP, batch 256, "
             "512 -> 1024 -> 10, mean softmax cross-entropy", _mlp_train_inputs, mlp_train,
             flops=_mlp_train_flops, rtol=2e-3),
    Workload("attention", "attention: batch 8, sequence 256, 8 heads of 64, QKV and output projections",
             _attention_inputs, attention64, rtol=2e-3),
    Workload("cnn_block", "CNN block: batch 16, 64 -> 64 channels, 56x56, 3x3 conv + bias + ReLU + 2x2 max-pool",
             _cnn_inputs, cnn_block64, rtol=2e-3),
    Workload("cnn_train", "training step: loss and gradients (w, b, wd, bd) of a CNN, batch 64, 32x32x16, "
             "3x3 conv to 32 channels + bias + ReLU + 2x2 max-pool, dense to 10, mean softmax cross-entropy",
             _cnn_train_inputs, cnn_train, flops=_cnn_train_flops, rtol=2e-3),
    Workload("dispatch", "adding two arrays of 4 elements (per-call overhead)",
             lambda rng, s: [_f32(rng, 4), _f32(rng, 4)], lambda x, y: x + y, rtol=1e-6),
]
BY_NAME = {w.name: w for w in WORKLOADS}
