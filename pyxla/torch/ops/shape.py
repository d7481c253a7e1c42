"""Shape ops: view/reshape, permute, expand, slice, select, squeeze/unsqueeze, cat, stack,
split, flip, roll, repeat, constant_pad_nd, narrow, unbind. Views are copies in HLO (values
have no aliasing there); AOTAutograd has already made the graph functional."""
from __future__ import annotations

from ... import lax
from ... import numpy as pnp
from .common import axes, axis, cast
from .registry import lowering


@lowering("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default", "_reshape_alias.default")
def view(ctx, x, shape, *strides):
    return pnp.reshape(x, ctx.out_shape())


@lowering("permute.default", "permute_copy.default")
def permute(ctx, x, dims):
    return pnp.transpose(x, [axis(d, x.ndim) for d in dims])


@lowering("transpose.int")
def transpose(ctx, x, d0, d1):
    return pnp.swapaxes(x, axis(d0, x.ndim), axis(d1, x.ndim))


@lowering("expand.default", "expand_copy.default")
def expand(ctx, x, shape, implicit=False):
    return pnp.broadcast_to(x, ctx.out_shape())


@lowering("slice.Tensor", "slice_copy.Tensor")
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    d = axis(dim, x.ndim)
    n = x.shape[d]
    start, end, _ = slice(start, end, step).indices(n)
    end = max(start, end)
    return lax.slice_in_dim(x, start, end, step, axis=d)


@lowering("select.int", "select_copy.int")
def select(ctx, x, dim, index):
    d = axis(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[d], d, keepdims=False)


@lowering("narrow.default")
def narrow(ctx, x, dim, start, length):
    d = axis(dim, x.ndim)
    return lax.slice_in_dim(x, start % x.shape[d], start % x.shape[d] + length, axis=d)


@lowering("squeeze.default", "squeeze.dim", "squeeze.dims", "unsqueeze.default", "squeeze_copy.dims",
          "unsqueeze_copy.default", "flatten.using_ints", "unflatten.int")
def reshape_to_meta(ctx, x, *args):
    return pnp.reshape(x, ctx.out_shape())


@lowering("cat.default", "concat.default")
def cat(ctx, tensors, dim=0):
    dtype = ctx.out_dtype()
    tensors = [cast(t, dtype) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if len(tensors) == 1:
        return tensors[0]
    return pnp.concatenate(tensors, axis=axis(dim, tensors[0].ndim))


@lowering("stack.default")
def stack(ctx, tensors, dim=0):
    dtype = ctx.out_dtype()
    return pnp.stack([cast(t, dtype) for t in tensors], axis=axis(dim, tensors[0].ndim + 1))


def _split_at(x, d, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(lax.slice_in_dim(x, start, start + size, axis=d))
        start += size
    return tuple(out)


@lowering("split.Tensor", "split_with_sizes.default", "split_with_sizes_copy.default", "split_copy.Tensor")
def split(ctx, x, sizes, dim=0):
    d = axis(dim, x.ndim)
    if isinstance(sizes, int):
        n = x.shape[d]
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)] or [0]
    return _split_at(x, d, sizes)


@lowering("unbind.int")
def unbind(ctx, x, dim=0):
    d = axis(dim, x.ndim)
    return tuple(lax.index_in_dim(x, i, d, keepdims=False) for i in range(x.shape[d]))


@lowering("chunk.default")
def chunk(ctx, x, chunks, dim=0):
    d = axis(dim, x.ndim)
    size = -(-x.shape[d] // chunks)
    return split(ctx, x, size, d)


@lowering("flip.default")
def flip(ctx, x, dims):
    return lax.rev(x, axes(dims, x.ndim))


@lowering("roll.default")
def roll(ctx, x, shifts, dims=()):
    if not dims:
        return pnp.reshape(pnp.roll(pnp.reshape(x, (-1,)), shifts[0] if isinstance(shifts, list) else shifts),
                           x.shape)
    return pnp.roll(x, list(shifts), axis=list(dims))


@lowering("repeat.default")
def repeat(ctx, x, repeats):
    extra = len(repeats) - x.ndim
    return pnp.tile(pnp.reshape(x, (1,) * extra + tuple(x.shape)), tuple(repeats))


@lowering("constant_pad_nd.default")
def constant_pad_nd(ctx, x, pad, value=0):
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, pnp.asarray(value, dtype=x.dtype), config)
