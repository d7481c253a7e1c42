"""Resize and Upsample.

Resizing is separable: each resized axis in turn becomes a weighted sum of a few gathers
of the input along that axis. Which input positions and which weights every output
position uses depends only on shapes and attributes, so it is worked out in NumPy when the
model is loaded (following ONNX's reference implementation), and the traced graph holds
gathers with constant indices, multiplies by constant weights and adds.
"""
from __future__ import annotations

import math

import numpy as np

from ..registry import converter, known
from .common import as_dtype, axes_of, is_float_dtype, shape_of

_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                     "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coordinates(mode, out_len, in_len, scale, roi):
    """The input coordinate of every output position along one axis (and, for
    tf_crop_and_resize, which positions fall outside the input)."""
    y = np.arange(out_len, dtype=np.float64)
    out_width = scale * in_len
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_width == 1 else y * (in_len - 1) / (out_width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(out_len, (hi - lo) * (in_len - 1) / 2) if out_width == 1 else \
            y * (hi - lo) * (in_len - 1) / (out_width - 1)
        x = x + lo * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:   # half_pixel_symmetric
        offset = in_len / 2 * (1 - out_len / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, outside


def _nearest(ratio, mode):
    if mode == "round_prefer_floor":
        return np.stack([ratio <= 0.5, ratio > 0.5], -1).astype(np.float64)
    if mode == "round_prefer_ceil":
        return np.stack([ratio < 0.5, ratio >= 0.5], -1).astype(np.float64)
    return np.tile([1.0, 0.0] if mode == "floor" else [0.0, 1.0], (len(ratio), 1))


def _cubic_kernel(t, a):
    t = np.abs(t)
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def _coefficients(kind, ratio, scale, antialias, cubic_a, nearest_mode):
    """Weights (out_len, n) of the n input positions around each source coordinate;
    `ratio` in (0, 1] is the coordinate's distance past the position on its left."""
    if kind == "nearest":
        exact = ratio == 1.0
        w = _nearest(ratio, nearest_mode)
        w[exact] = [0.0, 1.0]
        return w
    if antialias and scale < 1:
        # The kernel stretched by 1/scale: more taps, each weighted by the kernel at its
        # scaled distance, normalised to sum to 1.
        support = 1 if kind == "linear" else 2
        start = math.floor(-support / scale) + 1
        taps = np.arange(start, 2 - start)
        t = (taps[None, :] - ratio[:, None]) * scale
        w = np.clip(1 - np.abs(t), 0, 1) if kind == "linear" else _cubic_kernel(t, cubic_a)
        return w / w.sum(axis=1, keepdims=True)
    if kind == "linear":
        return np.stack([1 - ratio, ratio], -1)
    taps = np.array([-1, 0, 1, 2], dtype=np.float64)
    return _cubic_kernel(taps[None, :] - ratio[:, None], cubic_a)


def axis_plan(kind, coord_mode, in_len, out_len, scale, roi, antialias=False, cubic_a=-0.75,
              exclude_outside=False, nearest_mode="round_prefer_floor"):
    """For one axis: input positions (out_len, n), their weights, and the mask of output
    positions that take the extrapolation value (or None)."""
    x, outside = _source_coordinates(coord_mode, out_len, in_len, scale, roi)
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)
    w = _coefficients(kind, ratio, scale, antialias, cubic_a, nearest_mode)
    n = w.shape[1]
    # The n positions nearest x, ties to the smaller: for an even n they start n/2 - 1
    # left of floor(x) (n/2 when x is a whole number, whose ratio counts as 1).
    pad = math.ceil(n / 2)
    xp_ = x + pad
    p = np.floor(xp_).astype(np.int64)
    frac = xp_ - p
    if n % 2 == 0:
        start = p + np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        start = p + np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    positions = start[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        w = np.where((positions < 0) | (positions >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(positions, 0, in_len - 1), w, outside


def resize_axis(xp, x, axis, positions, weights, outside, extrapolation_value):
    """x resized along `axis` by a plan from axis_plan."""
    dims = shape_of(x)
    bshape = [-1 if d == axis else 1 for d in range(len(dims))]
    if np.all((weights == 0) | (weights == 1)) and np.all(weights.sum(axis=1) == 1):
        y = xp.take(x, positions[np.arange(len(positions)), weights.argmax(axis=1)], axis=axis)
    else:
        y = None
        for j in range(weights.shape[1]):
            if not weights[:, j].any():
                continue
            term = xp.multiply(xp.take(x, positions[:, j], axis=axis),
                               weights[:, j].astype(x.dtype).reshape(bshape))
            y = term if y is None else xp.add(y, term)
    if outside is not None and outside.any():
        y = xp.where(outside.reshape(bshape), np.asarray(extrapolation_value, x.dtype), y)
    return y


def resize(ctx, x, scales, sizes, axes, roi, kind, coord_mode, nearest_mode="round_prefer_floor",
           antialias=False, cubic_a=-0.75, exclude_outside=False, extrapolation_value=0.0,
           aspect_policy="stretch"):
    xp = ctx.xp
    dims = shape_of(x)
    rank = len(dims)
    axes = list(range(rank)) if axes is None else list(axes_of(ctx, axes, rank))
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ctx.error(f"sizes {sizes} do not match axes {axes}")
        factors = [s / dims[a] for s, a in zip(sizes, axes)]
        if aspect_policy != "stretch":
            scale = min(factors) if aspect_policy == "not_larger" else max(factors)
            factors = [scale] * len(axes)
            sizes = [int(scale * dims[a] + 0.5) for a in axes]
    else:
        if len(scales) != len(axes):
            raise ctx.error(f"scales {scales} do not match axes {axes}")
        factors = list(scales)
        sizes = [int(f * dims[a]) for f, a in zip(factors, axes)]
    if roi is not None and len(roi) == 0:
        roi = None
    if coord_mode == "tf_crop_and_resize" and roi is None:
        raise ctx.error("tf_crop_and_resize needs roi")
    work = np.dtype(x.dtype)
    compute = work if is_float_dtype(work) and work.itemsize >= 4 else np.dtype(np.float32)
    if kind == "nearest":
        compute = work
    # Integers interpolate in float32 and round back, saturating, as the reference does.
    y = as_dtype(xp, x, compute)
    for i, (axis, out_len, factor) in enumerate(zip(axes, sizes, factors)):
        axis_roi = None if roi is None else (float(roi[i]), float(roi[i + len(axes)]))
        if out_len == dims[axis] and math.isclose(factor, 1.0) and \
                (axis_roi is None or (math.isclose(axis_roi[0], 0) and math.isclose(axis_roi[1], 1))):
            continue
        positions, weights, outside = axis_plan(kind, coord_mode, dims[axis], out_len, float(factor), axis_roi,
                                                antialias, cubic_a, exclude_outside, nearest_mode)
        y = resize_axis(xp, y, axis, positions, weights, outside, extrapolation_value)
    if compute != work:
        if not is_float_dtype(work):
            info = np.iinfo(work)
            y = xp.clip(xp.rint(y), info.min, info.max)
        y = as_dtype(xp, y, work)
    return y


@converter("Resize", since=10)
def resize_op(ctx, x, roi=None, scales=None, sizes=None):
    if ctx.opset < 11:   # Resize-10: (X, scales), asymmetric coordinates, nearest rounds down
        scales = roi
        roi = None
        coord_mode, nearest_mode = "asymmetric", "floor"
    else:
        coord_mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic") or (ctx.opset < 11 and mode == "cubic"):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    if coord_mode not in _COORDINATE_MODES:
        raise ctx.unsupported(f"attribute 'coordinate_transformation_mode'={coord_mode!r}")
    if nearest_mode not in _NEAREST_MODES:
        raise ctx.unsupported(f"attribute 'nearest_mode'={nearest_mode!r}")
    antialias = bool(ctx.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise ctx.unsupported("attribute 'antialias'=1 with mode 'nearest'")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.unsupported(f"attribute 'keep_aspect_ratio_policy'={policy!r}")
    axes = ctx.attr("axes")
    scales = None if scales is None else [float(s) for s in known(ctx, scales, "scales").reshape(-1)]
    sizes = None if sizes is None else [int(s) for s in known(ctx, sizes, "sizes").reshape(-1)]
    if scales is not None and not scales:
        scales = None
    if sizes is not None and not sizes:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ctx.error("needs exactly one of scales and sizes")
    roi = None if roi is None else [float(r) for r in known(ctx, roi, "roi").reshape(-1)]
    return resize(ctx, x, scales, sizes, axes, roi, mode, coord_mode, nearest_mode, antialias,
                  ctx.attr("cubic_coeff_a", -0.75), bool(ctx.attr("exclude_outside", 0)),
                  ctx.attr("extrapolation_value", 0.0), policy)


@converter("Upsample", since=7)
def upsample(ctx, x, scales=None):
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    if ctx.opset < 9:
        scales = [float(s) for s in ctx.attr("scales")]
    else:
        scales = [float(s) for s in known(ctx, scales, "scales").reshape(-1)]
    kind = "nearest" if mode == "nearest" else "linear"
    return resize(ctx, x, scales, None, None, None, kind, "asymmetric", "floor")
