"""PyTorch's fused inference fast path, decomposed: _transformer_encoder_layer_fwd
(nn.TransformerEncoderLayer in eval without grad, batch first, no mask)."""
from __future__ import annotations

import math

from ... import lax
from ... import numpy as pnp
from .registry import LoweringError, lowering


def _layer_norm(x, w, b, eps):
    m = pnp.mean(x, axis=-1, keepdims=True)
    c = x - m
    return c * lax.rsqrt(pnp.mean(c * c, axis=-1, keepdims=True) + eps) * w + b


def _linear(x, w, b):
    return pnp.matmul(x, pnp.transpose(w)) + b


def _self_attention(x, batch, heads, qkv_w, qkv_b, proj_w, proj_b):
    """x: [batch * sequence, d], rows as the sequences' tokens one after another."""
    rows, d = x.shape
    s, hd = rows // batch, d // heads
    qkv = _linear(x, qkv_w, qkv_b)
    q, k, v = (pnp.transpose(pnp.reshape(lax.slice_in_dim(qkv, i * d, (i + 1) * d, axis=1), (batch, s, heads, hd)),
                             (0, 2, 1, 3)) for i in range(3))
    scores = pnp.matmul(q, pnp.swapaxes(k, -1, -2)) * (1 / math.sqrt(hd))
    e = pnp.exp(scores - pnp.max(scores, axis=-1, keepdims=True))
    p = e / pnp.sum(e, axis=-1, keepdims=True)
    out = pnp.reshape(pnp.transpose(pnp.matmul(p, v), (0, 2, 1, 3)), (rows, d))
    return _linear(out, proj_w, proj_b)


@lowering("_transformer_encoder_layer_fwd.default")
def transformer_encoder_layer(ctx, src, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, use_gelu, norm_first,
                              eps, n1_w, n1_b, n2_w, n2_b, f1_w, f1_b, f2_w, f2_b, mask=None, mask_type=None):
    if mask is not None or src.ndim != 3:
        raise LoweringError("_transformer_encoder_layer_fwd with a mask has no lowering")

    def feed_forward(x):
        h = _linear(x, f1_w, f1_b)
        h = 0.5 * h * (1 + lax.erf(h * (1 / math.sqrt(2)))) if use_gelu else pnp.maximum(h, 0)
        return _linear(h, f2_w, f2_b)
    # tokens as the rows of matrices: every product is a 2-D dot whose bias, activation and
    # residual are elementwise on its own shape (the epilogue of its output fusion); in 3-D
    # each product had been a reshaped 2-D dot with its bias added behind the reshape. The
    # last layer norm reads its input reshaped to the result's shape instead, so its
    # statistics and its output stay one row kernel (a reshape at the end of the output
    # would split them into three).
    batch, seq, d = src.shape
    x = pnp.reshape(src, (batch * seq, d))
    if norm_first:
        x = x + _self_attention(_layer_norm(x, n1_w, n1_b, eps), batch, num_heads, qkv_w, qkv_b, proj_w, proj_b)
        return pnp.reshape(x + feed_forward(_layer_norm(x, n2_w, n2_b, eps)), (batch, seq, d))
    x = _layer_norm(x + _self_attention(x, batch, num_heads, qkv_w, qkv_b, proj_w, proj_b), n1_w, n1_b, eps)
    return _layer_norm(pnp.reshape(x + feed_forward(x), (batch, seq, d)), n2_w, n2_b, eps)
