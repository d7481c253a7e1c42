"""Whole programs written with pyxla (lax plus pyxla.numpy's operators) run under jit.

Each program is checked against a NumPy float64 reference on fresh random inputs. The
programs that also exist in the HLO corpus (written there with JAX) are then run on the
corpus inputs and must reproduce XLA's own outputs within the corpus tolerances.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.conformance import default_corpus, load_case, run_case
from pyxla.hlo.evaluator import flatten_result

# --- the programs -------------------------------------------------------------------------

def keep(reduced, axis):
    """A reduction result with its reduced axis put back as size 1 (keepdims)."""
    return lax.expand_dims(reduced, (axis,))


def softmax(x, axis=-1):
    axis %= x.ndim
    shifted = x - keep(lax.reduce_max(x, (axis,)), axis)
    e = lax.exp(shifted)
    return e / keep(lax.reduce_sum(e, (axis,)), axis)


def log_softmax(x, axis=-1):
    axis %= x.ndim
    shifted = x - keep(lax.reduce_max(x, (axis,)), axis)
    return shifted - keep(lax.log(lax.reduce_sum(lax.exp(shifted), (axis,))), axis)


def layer_norm(x, gamma, beta, eps=1e-5):
    n = x.shape[-1]
    mean = keep(lax.reduce_sum(x, (x.ndim - 1,)), x.ndim - 1) / float(n)
    centered = x - mean
    var = keep(lax.reduce_sum(centered * centered, (x.ndim - 1,)), x.ndim - 1) / float(n)
    return centered * lax.rsqrt(var + eps) * gamma + beta


def mlp(params, x):
    h = x
    for layer in params[:-1]:
        h = lax.max(h @ layer["w"] + layer["b"], 0.0)
    return h @ params[-1]["w"] + params[-1]["b"]


def attention(params, x, heads, causal=False):
    """Multi-head self-attention: QKV projections, scaled dot-product, output projection."""
    b, t, d = x.shape
    dh = d // heads

    def split_heads(w):   # (b, t, d) -> (b, heads, t, dh)
        return lax.transpose(lax.reshape(x @ w, (b, t, heads, dh)), (0, 2, 1, 3))

    q, k, v = split_heads(params["wq"]), split_heads(params["wk"]), split_heads(params["wv"])
    scores = lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1)))) / math.sqrt(dh)
    if causal:
        visible = lax.ge(lax.broadcasted_iota(np.int32, (t, t), 0), lax.broadcasted_iota(np.int32, (t, t), 1))
        scores = lax.select(visible, scores, float(np.finfo(np.float32).min))
    mixed = lax.dot_general(softmax(scores), v, (((3,), (2,)), ((0, 1), (0, 1))))   # (b, heads, t, dh)
    return lax.reshape(lax.transpose(mixed, (0, 2, 1, 3)), (b, t, d)) @ params["wo"]


def cnn(params, x):
    """conv 3x3 (SAME) + bias + relu -> 2x2 max pool -> conv 3x3 stride 2 -> global mean -> dense."""
    nhwc = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, params["k1"], (1, 1), "SAME", dimension_numbers=nhwc) + params["b1"]
    h = lax.max(h, 0.0)
    h = lax.reduce_window(h, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, params["k2"], (2, 2), "SAME", dimension_numbers=nhwc)
    pooled = lax.reduce_sum(h, (1, 2)) / float(h.shape[1] * h.shape[2])
    return pooled @ params["w"] + params["b"]


def rnn(params, h0, xs):
    """Elman RNN over the leading axis of xs with lax.scan; ys are the per-step sums of h."""
    def step(h, x):
        h = lax.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        return h, lax.reduce_sum(h, (1,))
    return lax.scan(step, h0, xs)


# --- NumPy references -------------------------------------------------------------------

def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_layer_norm(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma + beta


def np_mlp(params, x):
    for layer in params[:-1]:
        x = np.maximum(x @ layer["w"] + layer["b"], 0)
    return x @ params[-1]["w"] + params[-1]["b"]


def np_attention(params, x, heads, causal=False):
    b, t, d = x.shape
    split = lambda w: (x @ w).reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(params["wq"]), split(params["wk"]), split(params["wv"])
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads)
    if causal:
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    return (np_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ params["wo"]


def np_conv_same(x, k, stride):
    """NHWC x HWIO convolution with 'SAME' padding (JAX's split: the odd pad goes high)."""
    n, h, w, _ = x.shape
    kh, kw, _, o = k.shape
    out_h, out_w = -(-h // stride), -(-w // stride)
    pad_h = max((out_h - 1) * stride + kh - h, 0)
    pad_w = max((out_w - 1) * stride + kw - w, 0)
    xp = np.pad(x, [(0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)])
    out = np.zeros((n, out_h, out_w, o))
    for a in range(kh):
        for b in range(kw):
            patch = xp[:, a:a + (out_h - 1) * stride + 1:stride, b:b + (out_w - 1) * stride + 1:stride]
            out += patch @ k[a, b]
    return out


def np_cnn(params, x):
    h = np.maximum(np_conv_same(x, params["k1"], 1) + params["b1"], 0)
    n, hh, ww, c = h.shape
    h = h[:, :hh // 2 * 2, :ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c).max((2, 4))
    h = np_conv_same(h, params["k2"], 2)
    return h.mean((1, 2)) @ params["w"] + params["b"]


def np_rnn(params, h0, xs):
    h, ys = h0, []
    for x in xs:
        h = np.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        ys.append(h.sum(1))
    return h, np.stack(ys)


# --- random-input tests -----------------------------------------------------------------

def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def wide(tree):
    return pyxla.tree_map(lambda a: np.asarray(a, np.float64), tree)


def assert_close(out, ref, rtol=2e-5, atol=2e-5):
    out_leaves, out_tree = pyxla.tree_flatten(out)
    ref_leaves, ref_tree = pyxla.tree_flatten(ref)
    assert out_tree == ref_tree
    for got, want in zip(out_leaves, ref_leaves):
        assert np.asarray(got).dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_mlp_forward(rng):
    sizes = [12, 32, 16, 5]
    params = [{"w": normal(rng, m, n, scale=1 / math.sqrt(m)), "b": normal(rng, n, scale=0.1)}
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = normal(rng, 8, 12)
    assert_close(pyxla.jit(mlp)(params, x), np_mlp(wide(params), wide(x)))


def test_softmax_and_log_softmax(rng):
    x = normal(rng, 6, 10, scale=3.0)
    out = pyxla.jit(lambda x: (softmax(x), log_softmax(x), softmax(x, axis=0)))(x)
    ref = np_softmax(wide(x))
    assert_close(out, (ref, np.log(ref), np_softmax(wide(x), axis=0)))
    np.testing.assert_allclose(out[0].sum(-1), 1.0, rtol=1e-6)


def test_layer_norm(rng):
    x, gamma, beta = normal(rng, 4, 7, 16, scale=2.0) + 1.0, normal(rng, 16), normal(rng, 16)
    assert_close(pyxla.jit(layer_norm)(x, gamma, beta), np_layer_norm(wide(x), wide(gamma), wide(beta)),
                 rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention(causal, rng):
    d = 16
    params = {name: normal(rng, d, d, scale=1 / math.sqrt(d)) for name in ("wq", "wk", "wv", "wo")}
    x = normal(rng, 2, 5, d)
    f = pyxla.jit(attention, static_argnames=("heads", "causal"))
    assert_close(f(params, x, heads=4, causal=causal), np_attention(wide(params), wide(x), 4, causal))


def test_small_cnn_with_max_pooling(rng):
    params = {"k1": normal(rng, 3, 3, 3, 8, scale=0.3), "b1": normal(rng, 8, scale=0.1),
              "k2": normal(rng, 3, 3, 8, 6, scale=0.2), "w": normal(rng, 6, 4), "b": normal(rng, 4)}
    x = normal(rng, 2, 9, 8, 3)
    assert_close(pyxla.jit(cnn)(params, x), np_cnn(wide(params), wide(x)), rtol=1e-4, atol=1e-5)


def test_rnn_with_scan(rng):
    params = {"wx": normal(rng, 4, 6, scale=0.5), "wh": normal(rng, 6, 6, scale=0.4), "b": normal(rng, 6, scale=0.1)}
    h0, xs = normal(rng, 3, 6), normal(rng, 7, 3, 4)
    f = pyxla.jit(rnn)
    assert_close(f(params, h0, xs), np_rnn(wide(params), wide(h0), wide(xs)))
    assert " while(" in f.lower(params, h0, xs).as_text()


# --- the same programs against XLA's outputs in the corpus ---------------------------------

def tanh_iterations(x, v):
    """fori_loop over a (vector, running total) carry; the total starts as a Python 0.0."""
    def body(i, carry):
        h, total = carry
        h = lax.tanh(lax.dot(x, h)) + lax.convert_element_type(i, np.float32) * 0.1
        return h, total + lax.reduce_sum(h, (0,))
    return lax.fori_loop(0, 6, body, (v, 0.0))


def running_stats(xs):
    """scan carrying a running sum and maximum; ys mix the two."""
    def step(carry, x):
        total, peak = carry[0] + x, lax.max(carry[1], x)
        return (total, peak), total * 0.5 + peak
    (total, peak), ys = lax.scan(step, (lax.full((3,), 0.0, np.float32), lax.full((3,), -np.inf, np.float32)), xs)
    return total, peak, ys


def two_conds(p, q, x, i):
    """The same cond on two predicates, over (f32, s32) operands."""
    def branches(pred):
        return lax.cond(lax.gt(pred, 0.0), lambda x, i: (lax.sin(x), i + 1),
                        lambda x, i: (lax.cos(x) * 2.0, i * 2), x, i)
    return (*branches(p), *branches(q))


CORPUS_PROGRAMS = {
    # case -> the program, taking the case's inputs in parameter order
    "model_rnn_scan": lambda b, wh, wx, xs, h0: rnn({"b": b, "wh": wh, "wx": wx}, h0, xs),
    "model_softmax": lambda x: (softmax(x), log_softmax(x)),
    "model_layernorm": layer_norm,
    "model_attention": lambda wk, wo, wq, wv, x: attention({"wk": wk, "wo": wo, "wq": wq, "wv": wv}, x, 4, True),
    "cumulative_ops": lambda x, p, i: (lax.cumsum(x, 1), lax.cumprod(p, 1), lax.cummax(x, 0), lax.cummin(x, 1),
                                       lax.cumsum(x, 1, reverse=True), lax.cumsum(i, 0)),
    "reduce_argmax_argmin": lambda x, y: (lax.argmax(x, 1), lax.argmin(x, 0),
                                          lax.argmax(lax.reshape(y, (30,)), 0), lax.argmin(y, 1)),
    "sort_values_nan_zero": lambda x, i: (lax.sort(x), lax.sort(x, dimension=0), lax.sort(i)),
    "conv2d_nhwc_stride_same": lambda x, w: lax.conv_general_dilated(
        x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
    "conv2d_nchw_dilated_padded": lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), [(1, 2), (0, 1)], rhs_dilation=(2, 2)),
    "conv_transpose_and_1d": lambda x, w, s, k: (
        lax.conv_general_dilated(x, w, (1, 1), [(2, 1), (2, 1)], lhs_dilation=(2, 2),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC")),
        lax.conv_general_dilated(s, k, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))),
    "reduce_window_pooling": lambda x: (
        lax.reduce_window_max(x, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
        lax.reduce_window_sum(x, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
        / lax.reduce_window_sum(lax.full_like(x, 1.0), (1, 3, 3, 1), (1, 1, 1, 1), "SAME")),
    "select_and_scatter_maxpool_grad": lambda x, g: (
        lax.select_and_scatter_add(g, x, lax.ge, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
        lax.select_and_scatter_add(g, x, lax.ge, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")),
    "while_fori_loop": tanh_iterations,
    "scan_running_stats": running_stats,
    "cond_pred": two_conds,
    "switch_index": lambda i, j, x: tuple(
        lax.switch(k, [lambda x: x * 2.0, lax.exp, lambda x: lax.sin(x) + 1.0], x) for k in (i, j)),
}


@pytest.mark.parametrize("name", sorted(CORPUS_PROGRAMS))
def test_program_reproduces_xla_outputs_from_the_corpus(name):
    case = load_case(default_corpus() / name)
    program = pyxla.jit(CORPUS_PROGRAMS[name])
    problems = run_case(case, "module", lambda text, inputs: flatten_result(
        tuple(pyxla.tree_flatten(program(*inputs))[0])))
    assert problems == [], problems
