"""Shape and layout operators: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand,
Tile, Concat, Split, Slice, Transpose, Pad, ConstantOfShape, Range, DepthToSpace,
SpaceToDepth, EyeLike, Trilu, CenterCropPad.

Shapes are known while tracing: Shape and Size give known values even of traced inputs,
so the `Shape -> Gather -> Concat -> Reshape` chains models use to compute targets are
known when the model is loaded (with dynamic=True, as size arrays holding symbolic
sizes: symbolic_sizes.py). Operands that set an output's shape (Reshape's shape, Slice's
starts, Pad's pads, ...) must be known.
"""
from __future__ import annotations

import math

import numpy as np

from .... import numpy as pnp
from ....frontend.shape_poly import broadcast_dims
from ....hlo.dims import DimExpr
from ..registry import converter, is_known, known
from ..symbolic_sizes import sizes_array
from .common import axes_input_or_attr, axes_of, axis_of, check_dtype, ints, onnx_dtype, shape_of


@converter("Shape", since=1)
def shape(ctx, x):
    dims = shape_of(x)
    start, end = ctx.attr("start", 0), ctx.attr("end")
    picked = dims[slice(start, end)]
    if any(isinstance(d, DimExpr) for d in picked):
        # Symbolic sizes (pyxla.onnx.load(dynamic=True)): a size array (symbolic_sizes.py)
        return sizes_array(picked)
    return np.asarray(picked, dtype=np.int64)


@converter("Size", since=1)
def size(ctx, x):
    total = math.prod(shape_of(x))
    if isinstance(total, DimExpr):
        return sizes_array([total]).reshape(())
    return np.asarray(total, dtype=np.int64)


def reshape_target(ctx, dims, target, allowzero=False):
    """ONNX's Reshape target made explicit: 0 copies the input's dim (unless allowzero),
    -1 takes what is left."""
    out = [dims[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
    if out.count(-1) > 1:
        raise ctx.error(f"shape {target} has more than one -1")
    if -1 in out:
        rest = math.prod(d for d in out if not (isinstance(d, int) and d == -1))
        total = math.prod(dims)
        if isinstance(rest, DimExpr) or isinstance(total, DimExpr):
            missing = total // rest   # symbolic: must divide exactly for every size
        elif rest == 0 or total % rest:
            raise ctx.error(f"cannot reshape {tuple(dims)} to {target}")
        else:
            missing = total // rest
        out[out.index(-1)] = missing
    if not (math.prod(out) == math.prod(dims)):
        raise ctx.error(f"cannot reshape {tuple(dims)} to {target}")
    return tuple(out)


@converter("Reshape", since=5)
def reshape(ctx, x, target):
    allowzero = ctx.attr("allowzero", 0)
    if len(shape_of(target)) != 1:      # ONNX: a 1-D shape tensor (onnxruntime refuses others)
        raise ctx.error(f"the shape input must be 1-D, got shape {tuple(shape_of(target))}")
    return ctx.xp.reshape(x, reshape_target(ctx, shape_of(x), ints(ctx, target, "shape"), bool(allowzero)))


@converter("Flatten", since=1)
def flatten(ctx, x):
    dims = shape_of(x)
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(dims) if axis < 0 else axis
    if not 0 <= axis <= len(dims):
        raise ctx.error(f"axis {ctx.attr('axis')} is out of range for rank {len(dims)}")
    return ctx.xp.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])))


@converter("Squeeze", since=1)
def squeeze(ctx, x, axes=None):
    dims = shape_of(x)
    axes = axes_input_or_attr(ctx, axes, 13)
    if axes is None:
        axes = [i for i, d in enumerate(dims) if d == 1]
    axes = axes_of(ctx, axes, len(dims))
    for a in axes:
        if dims[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of size {dims[a]}")
    return ctx.xp.reshape(x, tuple(d for i, d in enumerate(dims) if i not in axes))


@converter("Unsqueeze", since=1)
def unsqueeze(ctx, x, axes=None):
    dims = shape_of(x)
    axes = axes_input_or_attr(ctx, axes, 13)
    if axes is None:
        raise ctx.error("needs axes")
    rank = len(dims) + len(axes)
    inserted = set(axes_of(ctx, axes, rank))
    rest = iter(dims)
    return ctx.xp.reshape(x, tuple(1 if i in inserted else next(rest) for i in range(rank)))


@converter("Expand", since=8)
def expand(ctx, x, target):
    target = ints(ctx, target, "shape")
    out = broadcast_dims(shape_of(x), tuple(target))
    if out is None:
        raise ctx.error(f"cannot expand {shape_of(x)} to {tuple(target)}")
    return ctx.xp.broadcast_to(x, out)


@converter("Tile", since=6)
def tile(ctx, x, repeats):
    reps = ints(ctx, repeats, "repeats")
    if len(reps) != len(shape_of(x)):
        raise ctx.error(f"repeats {reps} do not match rank {len(shape_of(x))}")
    return ctx.xp.tile(x, reps)


@converter("Concat", since=4)
def concat(ctx, *xs):
    axis = ctx.attr("axis")
    if axis is None:
        raise ctx.error("needs attribute 'axis'")
    return ctx.xp.concatenate(list(xs), axis=axis_of(ctx, axis, len(shape_of(xs[0]))))


@converter("Split", since=2)
def split(ctx, x, sizes=None):
    dims = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(dims))
    n_out = len(ctx.output_names)
    if ctx.opset < 13:
        sizes = ctx.attr("split")
    else:
        sizes = None if sizes is None else ints(ctx, sizes, "split")
    num_outputs = ctx.attr("num_outputs") if ctx.opset >= 18 else None
    length = dims[axis]
    if sizes is None or len(sizes) == 0:
        parts = num_outputs or n_out
        # num_outputs: equal pieces of ceil(n / parts), the last one smaller.
        piece = -(-length // parts) if num_outputs else length // parts
        if not num_outputs and length % parts:
            raise ctx.error(f"axis of size {length} does not split evenly into {parts} outputs")
        sizes = [min(piece, max(length - i * piece, 0)) for i in range(parts)]
    sizes = [int(s) for s in sizes]
    if sum(sizes) != length or len(sizes) != n_out:
        raise ctx.error(f"split sizes {sizes} do not cover an axis of size {length} in {n_out} outputs")
    starts = np.cumsum([0] + sizes)
    index = [slice(None)] * len(dims)
    outs = []
    for lo, hi in zip(starts[:-1], starts[1:]):
        index[axis] = slice(int(lo), int(hi))
        outs.append(x[tuple(index)])
    return tuple(outs)


def _slice_bounds(start, end, step, n):
    """ONNX's clamping of one axis's slice, as a Python slice."""
    if step == 0:
        raise ValueError("step 0")
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        return slice(start, end, step)
    start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return slice(start, None if end < 0 else end, step)


@converter("Slice", since=1)
def slice_(ctx, x, starts=None, ends=None, axes=None, steps=None):
    dims = shape_of(x)
    if ctx.opset < 10:
        starts, ends, axes = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes")
        steps = None
    else:
        starts, ends = ints(ctx, starts, "starts"), ints(ctx, ends, "ends")
        axes = None if axes is None else ints(ctx, axes, "axes")
        steps = None if steps is None else ints(ctx, steps, "steps")
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * len(dims)
    for a, s, e, st in zip(axes_of(ctx, axes, len(dims)), starts, ends, steps):
        if st == 0:
            raise ctx.error("a step of 0")
        index[a] = _slice_bounds(int(s), int(e), int(st), dims[a])
    return x[tuple(index)]


@converter("Transpose", since=1)
def transpose(ctx, x):
    perm = ctx.attr("perm")
    rank = len(shape_of(x))
    perm = list(range(rank))[::-1] if perm is None else axes_of(ctx, perm, rank, "perm")
    return ctx.xp.transpose(x, perm)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@converter("Pad", since=2)
def pad(ctx, x, pads=None, value=None, axes=None):
    xp = ctx.xp
    dims = shape_of(x)
    mode = ctx.attr("mode", "constant")
    if mode not in _PAD_MODES or (mode == "wrap" and ctx.opset < 19):
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), ctx.attr("value", 0.0)
    else:
        pads = ints(ctx, pads, "pads")
    axes = list(range(len(dims))) if axes is None else list(axes_of(ctx, ints(ctx, axes, "axes"), len(dims)))
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} do not match {len(axes)} axes")
    widths = [[0, 0] for _ in dims]
    for i, a in enumerate(axes):
        widths[a] = [pads[i], pads[i + len(axes)]]
    # Negative pads crop: take them off first, then pad by the positive amounts.
    crop = tuple(slice(max(-lo, 0), d - max(-hi, 0)) for (lo, hi), d in zip(widths, dims))
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        x = x[crop]
    positive = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if not any(lo or hi for lo, hi in positive):
        return x
    if mode != "constant":
        return xp.pad(x, positive, mode=_PAD_MODES[mode])
    if value is None:
        fill = np.zeros((), x.dtype)
    elif is_known(value):
        fill = np.asarray(value).astype(x.dtype).reshape(())
    else:
        fill = xp.reshape(value, ())
    return xp.pad(x, positive, mode="constant", constant_values=fill)


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx, target):
    value = ctx.attr("value")
    value = np.zeros((1,), np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise ctx.error(f"attribute 'value' has {value.size} elements, not 1")
    check_dtype(ctx, value, "attribute 'value'")
    dims = tuple(ints(ctx, target, "shape"))
    xp = pnp if any(isinstance(d, DimExpr) for d in dims) else np   # symbolic sizes: traced
    return xp.full(dims, value.reshape(()), dtype=value.dtype)


@converter("Range", since=11)
def range_(ctx, start, limit, delta):
    start, limit, delta = (known(ctx, v, name).reshape(())
                           for v, name in ((start, "start"), (limit, "limit"), (delta, "delta")))
    dtype = start.dtype
    # stash_type (opset 27): the precision float16 and bfloat16 ranges are computed in.
    stash = ctx.attr("stash_type", 1) if ctx.opset >= 27 else None
    if stash is not None and dtype.itemsize == 2 and dtype.kind != "i":
        wide = onnx_dtype(ctx, stash, "'stash_type'")
        return np.arange(start.astype(wide).item(), float(limit), float(delta), dtype=wide).astype(dtype)
    # start + i * delta for i below ceil((limit - start) / delta), in Python numbers as np.arange does.
    return np.arange(start.item(), limit.item(), delta.item()).astype(dtype)


@converter("DepthToSpace", since=1)
def depth_to_space(ctx, x):
    b = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", "DCR")
    n, c, h, w = shape_of(x)
    xp = ctx.xp
    if mode == "DCR":
        y = xp.transpose(xp.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = xp.transpose(xp.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    return xp.reshape(y, (n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx, x):
    b = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", "DCR")
    n, c, h, w = shape_of(x)
    xp = ctx.xp
    y = xp.reshape(x, (n, c, h // b, b, w // b, b))
    if mode == "DCR":
        y = xp.transpose(y, (0, 3, 5, 1, 2, 4))
    elif mode == "CRD":
        y = xp.transpose(y, (0, 1, 3, 5, 2, 4))
    else:
        raise ctx.unsupported(f"attribute 'mode'={mode!r}")
    return xp.reshape(y, (n, c * b * b, h // b, w // b))


@converter("EyeLike", since=9)
def eye_like(ctx, x):
    dtype = ctx.attr("dtype")
    dtype = np.dtype(x.dtype) if dtype is None else onnx_dtype(ctx, dtype, "'dtype'")
    rows, cols = shape_of(x)
    return np.eye(rows, cols, k=int(ctx.attr("k", 0)), dtype=dtype)


@converter("Trilu", since=14)
def trilu(ctx, x, k=None):
    k = 0 if k is None else ints(ctx, k, "k")[0]
    upper = ctx.attr("upper", 1)
    return ctx.xp.triu(x, k) if upper else ctx.xp.tril(x, k)


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx, x, target):
    dims = shape_of(x)
    target = ints(ctx, target, "shape")
    axes = ctx.attr("axes")
    axes = list(range(len(dims))) if axes is None else list(axes_of(ctx, axes, len(dims)))
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} does not match axes {axes}")
    index = [slice(None)] * len(dims)
    widths = [(0, 0)] * len(dims)
    for a, t in zip(axes, target):
        d = dims[a]
        if t < d:    # crop: the extra element goes to the end
            lo = (d - t) // 2
            index[a] = slice(lo, lo + t)
        elif t > d:  # pad: the extra element goes to the end
            lo = (t - d) // 2
            widths[a] = (lo, t - d - lo)
    y = x[tuple(index)]
    if any(lo or hi for lo, hi in widths):
        y = ctx.xp.pad(y, widths, mode="constant", constant_values=np.zeros((), x.dtype))
    return y
