"""NumPy in float32: the baseline every user starts from."""
import numpy as np

from ..workloads import GELU_C, cnn_train, mlp_train

NAME = "numpy"


def version() -> str:
    return np.__version__


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.float32(GELU_C) * (x + np.float32(0.044715) * x * x * x)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + np.float32(1e-5)) * g + b


def _attention(x, wq, wk, wv, wo, heads=8):
    b, s, d = x.shape
    hd = d // heads

    def split(t):
        return t.reshape(b, s, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    p = _softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(hd)))
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo


def _cnn(x, w, b):
    n, h, wd, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))   # n,h,w,c,3,3
    out = np.einsum("nhwcij,ijco->nhwo", cols, w, optimize=True)
    out = np.maximum(out + b, 0)
    return out.reshape(n, h // 2, 2, wd // 2, 2, -1).max(axis=(2, 4))


def _fn(f):
    return lambda ins: (lambda: f(*ins))


BUILDERS = {
    "sum_fma": _fn(lambda x, y, z: np.sum(x + y * z)),
    "gelu": _fn(_gelu),
    "softmax": _fn(_softmax),
    "layer_norm": _fn(_layer_norm),
    "mlp": _fn(lambda x, w1, b1, w2, b2: _gelu(x @ w1 + b1) @ w2 + b2),
    "mlp_train": _fn(mlp_train),   # the hand-written forward and backward pass, in float32
    "attention": _fn(_attention),
    "cnn_block": _fn(_cnn),
    "cnn_train": _fn(cnn_train),   # the hand-written forward and backward pass, in float32
    "dispatch": _fn(lambda x, y: x + y),
}
