"""Creation ops: full, zeros, ones, empty (zeros), arange, *_like, new_*, scalar tensors,
iota, eye; dropout in eval (identity) and native_dropout with p=0."""
from __future__ import annotations

import numpy as np

from ... import lax
from ... import numpy as pnp
from .registry import LoweringError, lowering


def _filled(ctx, value):
    return pnp.full(ctx.out_shape(), value, dtype=ctx.out_dtype())


@lowering("full.default", "new_full.default")
def full(ctx, *args, **kwargs):
    value = args[-1]
    return _filled(ctx, value)


@lowering("full_like.default")
def full_like(ctx, x, value, **kwargs):
    return _filled(ctx, value)


@lowering("zeros.default", "new_zeros.default", "zeros_like.default", "empty.memory_format", "empty_like.default",
          "new_empty.default", "empty_strided.default", "new_empty_strided.default", "empty.default")
def zeros(ctx, *args, **kwargs):
    return _filled(ctx, 0)


@lowering("ones.default", "new_ones.default", "ones_like.default")
def ones(ctx, *args, **kwargs):
    return _filled(ctx, 1)


@lowering("arange.default", "arange.start", "arange.start_step")
def arange(ctx, *args, **kwargs):
    shape, dtype = ctx.out_shape(), ctx.out_dtype()
    start, step = 0, 1
    if len(args) >= 2:
        start = args[0]
    if len(args) >= 3:
        step = args[2]
    if float(start).is_integer() and float(step).is_integer():
        return lax.iota(dtype, shape[0]) * np.array(step, dtype) + np.array(start, dtype)
    return (lax.iota(np.float64, shape[0]) * step + start).astype(dtype)


@lowering("iota.default", "prims.iota.default")
def iota(ctx, length, *, start=0, step=1, **kwargs):
    dtype = ctx.out_dtype()
    return lax.iota(dtype, length) * np.array(step, dtype) + np.array(start, dtype)


@lowering("dropout.default", "feature_dropout.default")
def dropout(ctx, x, p, train):
    if train and p > 0:
        raise LoweringError("dropout in training mode (random) has no lowering")
    return x


@lowering("native_dropout.default")
def native_dropout(ctx, x, p, train):
    if train and p > 0:
        raise LoweringError("native_dropout in training mode (random) has no lowering")
    return x, pnp.ones(x.shape, np.bool_)


@lowering("eye.default", "eye.m")
def eye(ctx, *args, **kwargs):
    n, m = ctx.out_shape()
    return pnp.eye(n, m, dtype=ctx.out_dtype())
