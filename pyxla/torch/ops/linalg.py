"""Matrix products: mm, addmm, bmm, baddbmm, matmul, linear, dot, t."""
from __future__ import annotations

from ... import numpy as pnp
from .common import cast
from .registry import lowering


@lowering("mm.default", "bmm.default", "matmul.default", "dot.default")
def mm(ctx, a, b):
    return pnp.matmul(a, b)


@lowering("addmm.default", "baddbmm.default")
def addmm(ctx, bias, a, b, beta=1, alpha=1):
    product = pnp.matmul(a, b)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (bias if beta == 1 else bias * beta)


@lowering("linear.default")
def linear(ctx, x, w, b=None):
    y = pnp.matmul(x, pnp.transpose(w))
    return y if b is None else y + cast(b, y.dtype)


@lowering("t.default")
def t(ctx, x):
    return pnp.transpose(x) if x.ndim == 2 else x
