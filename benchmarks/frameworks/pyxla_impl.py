"""pyxla: each workload written with pyxla.numpy / pyxla.nn / pyxla.lax under pyxla.jit on
the native cpu backend."""
import numpy as np

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn

NAME = "pyxla"


def version() -> str:
    return pyxla.__version__


def _gelu(x):
    return nn.gelu(x, approximate=True)


def _attention(x, wq, wk, wv, wo):
    b, s, d = x.shape
    heads = 8
    hd = d // heads

    def split(t):
        return pnp.transpose(pnp.reshape(t, (b, s, heads, hd)), (0, 2, 1, 3))

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    p = nn.softmax(q @ pnp.swapaxes(k, -1, -2) / np.float32(np.sqrt(hd)), axis=-1)
    return pnp.reshape(pnp.transpose(p @ v, (0, 2, 1, 3)), (b, s, d)) @ wo


def _cnn(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = nn.relu(y + b)
    return lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


FUNCTIONS = {
    "sum_fma": lambda x, y, z: pnp.sum(x + y * z),
    "gelu": _gelu,
    "softmax": lambda x: nn.softmax(x, axis=-1),
    "layer_norm": lambda x, g, b: nn.layer_norm(x, g, b, eps=1e-5),
    "mlp": lambda x, w1, b1, w2, b2: _gelu(x @ w1 + b1) @ w2 + b2,
    "attention": _attention,
    "cnn_block": _cnn,
    "dispatch": lambda x, y: x + y,
}


PARAMS = ("w1", "b1", "w2", "b2")


def mlp_loss(params, x, labels):
    h = pnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -pnp.mean(pnp.sum(labels * nn.log_softmax(logits, axis=-1), axis=-1))


CNN_PARAMS = ("w", "b", "wd", "bd")


def cnn_loss(params, x, labels):
    pooled = _cnn(x, params["w"], params["b"])
    logits = pnp.reshape(pooled, (pooled.shape[0], -1)) @ params["wd"] + params["bd"]
    return -pnp.mean(pnp.sum(labels * nn.log_softmax(logits, axis=-1), axis=-1))


def _train_step(loss, names):
    """A training workload's builder: inputs (x, *parameters, labels) -> (loss, *gradients)."""
    def build(ins):
        x, *weights, labels = ins
        params = dict(zip(names, weights))
        step = pyxla.jit(pyxla.value_and_grad(loss), backend="cpu")

        def run():
            value, grads = step(params, x, labels)
            return (value, *(grads[k] for k in names))
        return run
    return build


def _build(name):
    def build(ins):
        f = pyxla.jit(FUNCTIONS[name], backend="cpu")
        return lambda: f(*ins)
    return build


BUILDERS = {name: _build(name) for name in FUNCTIONS}
BUILDERS["mlp_train"] = _train_step(mlp_loss, PARAMS)
BUILDERS["cnn_train"] = _train_step(cnn_loss, CNN_PARAMS)
