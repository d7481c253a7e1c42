"""Sliding blocks: Col2Im, the inverse of the im2col layout that a convolution reads.

Where each column element lands depends only on the shapes and attributes, so the target
positions are computed in NumPy when the model is loaded and the image is one scatter-add
of the columns (blocks that overlap add up).
"""
from __future__ import annotations

import math

import numpy as np

from .... import numpy as pnp
from ..registry import NodeContext, converter
from .common import ints, shape_of


def _per_dim(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    values = ctx.attr(name)
    if values is None:
        return [default] * n
    if len(values) != n:
        raise ctx.error(f"attribute {name!r}={list(values)} needs {n} values")
    return [int(v) for v in values]


@converter("Col2Im", since=18)
def col2im(ctx: NodeContext, x, image_shape, block_shape):
    """x (N, C * prod(block), L): column l of channel c holds the block at the l-th position
    (row-major over the block positions), element k of the block at offset k (row-major
    over block_shape) times the dilations; positions step by the strides over the image
    padded by `pads`."""
    image = ints(ctx, image_shape, "image_shape")
    block = ints(ctx, block_shape, "block_shape")
    n = len(image)
    if len(block) != n:
        raise ctx.error(f"block_shape {block} and image_shape {image} differ in length")
    dilations = _per_dim(ctx, "dilations", n, 1)
    strides = _per_dim(ctx, "strides", n, 1)
    pads = _per_dim(ctx, "pads", 2 * n, 0)
    dims = shape_of(x)
    k = math.prod(block)
    if len(dims) != 3 or dims[1] % k:
        raise ctx.error(f"input of shape {list(dims)} needs (N, C * {k}, L)")
    batch, channels = dims[0], dims[1] // k
    padded = [size + pads[d] + pads[d + n] for d, size in enumerate(image)]
    blocks = [(p - d * (b - 1) - 1) // s + 1 for p, d, b, s in zip(padded, dilations, block, strides)]
    if min(blocks) < 1 or math.prod(blocks) != dims[2]:
        raise ctx.error(f"input of shape {list(dims)} has {dims[2]} blocks; image {image} with these attributes "
                        f"has {blocks}")
    offsets = np.indices(block).reshape(n, k, 1) * np.reshape(dilations, (n, 1, 1))
    starts = np.indices(blocks).reshape(n, 1, -1) * np.reshape(strides, (n, 1, 1))
    targets = np.ravel_multi_index(tuple(offsets + starts), padded).reshape(-1)      # (K * L,)
    columns = pnp.reshape(x, (batch * channels, k * dims[2]))
    out = pnp.zeros((batch * channels, math.prod(padded)), x.dtype).at[:, targets].add(columns)
    out = pnp.reshape(out, (batch, channels, *padded))
    return out[(slice(None), slice(None)) + tuple(slice(pads[d], pads[d] + image[d]) for d in range(n))]
