"""Sampling images at computed positions: GridSample, RoiAlign and DeformConv.

Each reads an image (N, C, spatial...) at fractional positions that depend on the model's
inputs. `sample` turns the positions into, per spatial dimension, the integer taps an
interpolation reads (1 for nearest, 2 for linear, 4 for cubic) and their weights; the
image is then read by one gather over every combination of taps, and the weighted taps
summed. Reads outside the image follow the padding mode: zeros, the border value, or the
image reflected at its edges.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .... import numpy as pnp
from ..registry import NodeContext, converter, known
from .common import shape_of

CUBIC_ALPHA = -0.75      # Keys' cubic convolution, as PyTorch's grid_sample uses


def _reflect(x, lo: float, hi: float):
    """x reflected at lo and hi (repeatedly) until it lies between them."""
    span = np.asarray(hi - lo, x.dtype)
    below, above = x < lo, x > hi
    dx = pnp.where(below, lo - x, pnp.where(above, x - hi, np.zeros((), x.dtype)))
    flips = pnp.floor(dx / span)
    r = dx - flips * span
    even = pnp.equal(pnp.remainder(flips, np.asarray(2, x.dtype)), 0)
    from_lo, from_hi = lo + r, hi - r
    return pnp.where(below, pnp.where(even, from_lo, from_hi), pnp.where(above, pnp.where(even, from_hi, from_lo), x))


def _cubic_weights(t) -> list:
    """Keys' weights of the taps at floor - 1, floor, floor + 1, floor + 2 for a fraction t."""
    a = np.asarray(CUBIC_ALPHA, t.dtype)
    one, two = np.ones((), t.dtype), np.asarray(2, t.dtype)

    def near(x):        # |x| <= 1
        return ((a + two) * x - (a + 3)) * x * x + one

    def far(x):         # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + one), near(t), near(one - t), far(two - t)]


def sample(image, coords: Sequence[Any], mode: str, padding: str, borders: Sequence[tuple[float, float]]):
    """image (N, C, S...) read at positions coords[d] (N, P...) in pixel units along each
    spatial dimension d: (N, C, P...). `borders` are the (low, high) limits positions are
    clamped or reflected to, per dimension."""
    dims = shape_of(image)
    n, c, sizes = dims[0], dims[1], dims[2:]
    out = shape_of(coords[0])
    points = math.prod(out[1:])
    per_dim = []            # per spatial dimension: [(index, weight or None, in range or None)]
    for size, x, (lo, hi) in zip(sizes, coords, borders):
        if mode == "nearest":
            x = pnp.rint(x)
        outside = pnp.logical_or(x < lo, x > hi)
        if padding == "border":
            x = pnp.where(outside, pnp.clip(x, np.zeros((), x.dtype), np.asarray(size - 1, x.dtype)), x)
        elif padding == "reflection":
            x = pnp.where(outside, _reflect(x, lo, hi), x)
        if mode == "nearest":
            taps = [(x.astype(np.int64), None)]
        else:
            base = pnp.floor(x)
            t = x - base
            first = base.astype(np.int64)
            if mode == "linear":
                taps = [(first, np.ones((), x.dtype) - t), (first + 1, t)]
            else:
                taps = [(first + k, w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(t))]
        per_dim.append([_read_position(i, w, size, padding, lo, hi, x.dtype) for i, w in taps])
    strides = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
    flat_indices, weights = [], []
    for combo in itertools.product(*per_dim):
        flat = sum(i * np.int64(s) for (i, _, _), s in zip(combo, strides))
        w = None
        for _, wd, ok in combo:
            for factor in (wd, ok):
                if factor is not None:
                    w = factor if w is None else w * factor
        flat_indices.append(pnp.reshape(flat, (n, 1, points)))
        weights.append(None if w is None else pnp.reshape(w, (n, 1, points)))
    taps = len(flat_indices)
    index = pnp.concatenate(flat_indices, axis=2)                       # (N, 1, K * P)
    read = pnp.take_along_axis(pnp.reshape(image, (n, c, -1)), pnp.broadcast_to(index, (n, c, taps * points)), 2)
    read = pnp.reshape(read, (n, c, taps, points))
    if weights[0] is not None:
        read = read * pnp.reshape(pnp.concatenate(weights, axis=2), (n, 1, taps, points))
    return pnp.reshape(pnp.sum(read, axis=2), (n, c) + out[1:])


def _read_position(index, weight, size: int, padding: str, lo: float, hi: float, dtype):
    """A tap's index made readable (inside the image) and, for zeros padding, the 0/1
    factor that drops a tap outside it."""
    if padding == "zeros":
        ok = pnp.logical_and(index >= 0, index < size).astype(dtype)
    else:
        ok = None
        if padding == "reflection":
            index = _reflect(index.astype(dtype), lo, hi).astype(np.int64)
    return pnp.clip(index, 0, size - 1), weight, ok


# --- GridSample -------------------------------------------------------------------------------

_GRID_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic", "bicubic": "cubic"}


@converter("GridSample", since=16)
def grid_sample(ctx: NodeContext, x, grid):
    """grid (N, out..., r) holds positions normalised to [-1, 1], the last spatial
    dimension first; align_corners puts -1 and 1 on the corner pixels' centres, else on
    their outer edges."""
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(int(ctx.attr("align_corners", 0)))
    if mode not in _GRID_MODES or (ctx.opset >= 20) != (mode in ("linear", "nearest", "cubic")):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    if padding not in ("zeros", "border", "reflection"):
        raise ctx.unsupported(f"attribute 'padding_mode'={padding!r}")
    dims, grid_dims = shape_of(x), shape_of(grid)
    r = len(dims) - 2
    if r < 1 or len(grid_dims) != r + 2 or grid_dims[0] != dims[0] or grid_dims[-1] != r:
        raise ctx.error(f"grid of shape {list(grid_dims)} does not fit X of shape {list(dims)}")
    if ctx.opset < 20 and r != 2:
        raise ctx.error(f"X has {r} spatial dimensions; before opset 20 GridSample takes images (2)")
    coords, borders = [], []
    for d, size in enumerate(dims[2:]):
        g = grid[..., r - 1 - d].astype(x.dtype)
        one = np.ones((), x.dtype)
        if align:
            coords.append((g + one) / np.asarray(2, x.dtype) * np.asarray(size - 1, x.dtype))
            borders.append((0.0, size - 1.0))
        else:
            coords.append(((g + one) * np.asarray(size, x.dtype) - one) / np.asarray(2, x.dtype))
            borders.append((-0.5, size - 0.5))
    return sample(x, coords, _GRID_MODES[mode], padding, borders)


# --- RoiAlign ---------------------------------------------------------------------------------

def _roi_axis(start, size, bins: int, grid, grid_max: int, limit: int, dtype):
    """Along one image axis, for every roi (R,), bin and sample of the bin (R, bins,
    grid_max): the two pixels read (low, high) and their weights, a factor that is 0 for
    samples off the image by more than a pixel, and whether the sample is one of the
    roi's `grid` samples (rois may sample fewer than grid_max)."""
    bin_size = size / np.asarray(bins, dtype)
    b = np.arange(bins, dtype=dtype)[None, :, None]
    i = np.arange(grid_max, dtype=dtype)[None, None, :]
    g = pnp.reshape(grid, (-1, 1, 1)).astype(dtype)
    pos = (pnp.reshape(start, (-1, 1, 1)) + b * pnp.reshape(bin_size, (-1, 1, 1))
           + (i + np.asarray(0.5, dtype)) * pnp.reshape(bin_size, (-1, 1, 1)) / g)
    on_image = pnp.logical_and(pos >= -1.0, pos <= float(limit)).astype(dtype)
    pos = pnp.maximum(pos, np.zeros((), dtype))
    low = pnp.floor(pos).astype(np.int64)
    at_end = low >= limit - 1
    low = pnp.where(at_end, np.int64(limit - 1), low)
    high = pnp.where(at_end, low, low + 1)
    frac = pnp.where(at_end, np.zeros((), dtype), pos - low.astype(dtype))
    sampled = i < g
    return low, high, np.ones((), dtype) - frac, frac, on_image, sampled


@converter("RoiAlign", since=10)
def roi_align(ctx: NodeContext, x, rois, batch_indices):
    """Each roi (x1, y1, x2, y2, scaled by spatial_scale) cut into output_height x
    output_width bins, each bin sampled on a grid of sampling_ratio^2 points (by default
    ceil(roi size / bins) per axis, which needs the rois known) by bilinear interpolation;
    `avg` averages a bin's samples, `max` takes the largest of their weighted corner
    values. half_pixel shifts the rois by half a pixel; output_half_pixel (and opset 10)
    does not, and makes rois at least one pixel wide."""
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel") if ctx.opset >= 16 else "output_half_pixel"
    if transform not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(f"attribute 'coordinate_transformation_mode'={transform!r}")
    out_h, out_w = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    dims, r_dims = shape_of(x), shape_of(rois)
    if len(dims) != 4 or len(r_dims) != 2 or r_dims[1] != 4 or shape_of(batch_indices) != (r_dims[0],):
        raise ctx.error(f"X {list(dims)}, rois {list(r_dims)} and batch_indices {list(shape_of(batch_indices))} "
                        "do not fit (N, C, H, W), (R, 4) and (R,)")
    n, c, height, width = dims
    dtype = np.dtype(x.dtype)
    half = transform == "half_pixel"
    if ratio <= 0:      # the grid adapts to each roi's size
        rois = known(ctx, rois, "rois (with sampling_ratio=0 the samples per bin depend on them)")
    corners = pnp.asarray(rois).astype(dtype) * np.asarray(scale, dtype) - np.asarray(0.5 if half else 0.0, dtype)
    start_w, start_h, end_w, end_h = (corners[:, k] for k in range(4))
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not half:
        roi_w, roi_h = pnp.maximum(roi_w, np.ones((), dtype)), pnp.maximum(roi_h, np.ones((), dtype))
    if ratio > 0:
        grid_h = grid_w = np.full((r_dims[0],), ratio, np.int64)
    else:
        # an empty roi (half_pixel allows one) samples nothing and gives 0
        grid_h = np.maximum(np.ceil(np.asarray(roi_h) / out_h), 0).astype(np.int64)
        grid_w = np.maximum(np.ceil(np.asarray(roi_w) / out_w), 0).astype(np.int64)
    gh, gw = int(grid_h.max(initial=1)), int(grid_w.max(initial=1))
    y_low, y_high, y_wl, y_wh, y_on, y_sampled = _roi_axis(start_h, roi_h, out_h, grid_h, gh, height, dtype)
    x_low, x_high, x_wl, x_wh, x_on, x_sampled = _roi_axis(start_w, roi_w, out_w, grid_w, gw, width, dtype)
    # every (roi, bin row, bin column, sample row, sample column, corner): (R, oh, ow, gh, gw, 4)
    ys = pnp.stack([y_low, y_low, y_high, y_high], -1)[:, :, None, :, None, :]
    xs = pnp.stack([x_low, x_high, x_low, x_high], -1)[:, None, :, None, :, :]
    wy = pnp.stack([y_wl, y_wl, y_wh, y_wh], -1) * y_on[..., None]
    wx = pnp.stack([x_wl, x_wh, x_wl, x_wh], -1) * x_on[..., None]
    weights = wy[:, :, None, :, None, :] * wx[:, None, :, None, :, :]
    image = pnp.transpose(pnp.reshape(x, (n, c, height * width)), (0, 2, 1))          # (N, H * W, C)
    batch = pnp.reshape(pnp.asarray(batch_indices).astype(np.int64), (-1, 1, 1, 1, 1, 1))
    values = image[batch, ys * width + xs] * weights[..., None]                       # (..., 4, C)
    sampled = pnp.logical_and(y_sampled[:, :, None, :, None], x_sampled[:, None, :, None, :])[..., None]
    if mode == "avg":
        total = pnp.sum(pnp.where(sampled, pnp.sum(values, axis=5), np.zeros((), dtype)), axis=(3, 4))
        count = np.maximum(grid_h * grid_w, 1).astype(dtype).reshape(-1, 1, 1, 1)
        out = total / count
    else:
        lowest = np.asarray(-np.inf, dtype)
        out = pnp.max(pnp.where(sampled, pnp.max(values, axis=5), lowest), axis=(3, 4))
        if np.any(grid_h * grid_w == 0):
            out = pnp.where((grid_h * grid_w > 0).reshape(-1, 1, 1, 1), out, np.zeros((), dtype))
    return pnp.transpose(out, (0, 3, 1, 2))                                            # (R, C, oh, ow)
