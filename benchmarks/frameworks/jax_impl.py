"""JAX with jax.jit on the CPU."""
import numpy as np

NAME = "jax"


def version() -> str:
    import jax
    return jax.__version__


def _functions():
    import jax
    import jax.numpy as jnp

    def gelu(x):
        return jax.nn.gelu(x, approximate=True)

    def attention(x, wq, wk, wv, wo):
        b, s, d = x.shape
        heads, hd = 8, d // 8

        def split(t):
            return t.reshape(b, s, heads, hd).transpose(0, 2, 1, 3)

        q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
        p = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(hd)), axis=-1)
        return (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo

    def cnn(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y + b)
        return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def layer_norm(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    return {
        "sum_fma": lambda x, y, z: jnp.sum(x + y * z),
        "gelu": gelu,
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "layer_norm": layer_norm,
        "mlp": lambda x, w1, b1, w2, b2: gelu(x @ w1 + b1) @ w2 + b2,
        "attention": attention,
        "cnn_block": cnn,
        "dispatch": lambda x, y: x + y,
    }


def _build(name):
    def build(ins):
        import jax
        f = jax.jit(_functions()[name])
        args = [jax.device_put(a) for a in ins]
        return lambda: np.asarray(f(*args).block_until_ready())
    return build


PARAMS = ("w1", "b1", "w2", "b2")
CNN_PARAMS = ("w", "b", "wd", "bd")


def _mlp_loss(params, x, labels):
    import jax
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def _cnn_loss(params, x, labels):
    import jax
    import jax.numpy as jnp

    pooled = _functions()["cnn_block"](x, params["w"], params["b"])
    logits = pooled.reshape(pooled.shape[0], -1) @ params["wd"] + params["bd"]
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def _train_step(loss, names):
    """A training workload's builder: inputs (x, *parameters, labels) -> (loss, *gradients)."""
    def build(ins):
        import jax

        step = jax.jit(jax.value_and_grad(loss))
        x, *weights, labels = (jax.device_put(a) for a in ins)
        params = dict(zip(names, weights))

        def run():
            value, grads = jax.block_until_ready(step(params, x, labels))
            return (np.asarray(value), *(np.asarray(grads[k]) for k in names))
        return run
    return build


BUILDERS = {name: _build(name) for name in
            ("sum_fma", "gelu", "softmax", "layer_norm", "mlp", "attention", "cnn_block", "dispatch")}
BUILDERS["mlp_train"] = _train_step(_mlp_loss, PARAMS)
BUILDERS["cnn_train"] = _train_step(_cnn_loss, CNN_PARAMS)
