"""Neural-network operators: Conv, ConvTranspose, the pools, BatchNormalization, LRN, Gemm,
MatMul and Dropout.

Weights are usually known when the model is imported, so what depends only on them is done
then, in NumPy: BatchNormalization becomes one multiply and one add per channel (which
fusion merges into the preceding convolution's epilogue), Gemm's transposed or scaled
matrices are transposed and scaled once.

Spatial attributes follow ONNX: `pads` lists every dimension's begin, then every end;
`auto_pad` SAME_UPPER / SAME_LOWER pad so the output has ceil(in / stride) positions (the
odd one at the end or at the start), VALID pads nothing; `ceil_mode` rounds the pooled
size up, dropping a last window that would start in the end padding (as PyTorch and
onnxruntime do).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .... import lax
from ..registry import NodeContext, converter, is_known, known
from .common import as_dtype, is_float_dtype, shape_of, xp_of

# --- spatial attributes ---------------------------------------------------------------------

def _spatial_ints(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    values = ctx.attr(name)
    if values is None:
        return [default] * n
    if len(values) != n:
        raise ctx.error(f"attribute {name!r}={list(values)} needs {n} values (one per spatial dimension)")
    return [int(v) for v in values]


def _explicit_pads(ctx: NodeContext, n: int) -> list[tuple[int, int]]:
    pads = ctx.attr("pads")
    if pads is None:
        return [(0, 0)] * n
    if len(pads) != 2 * n:
        raise ctx.error(f"attribute 'pads'={list(pads)} needs {2 * n} values (begin and end per spatial dimension)")
    return [(int(pads[i]), int(pads[i + n])) for i in range(n)]


def window_pads(ctx: NodeContext, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial dimension from `auto_pad` and `pads`."""
    n = len(in_sizes)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    explicit = _explicit_pads(ctx, n)
    if auto_pad in ("NOTSET", ""):
        return explicit
    if auto_pad == "VALID":
        return [(0, 0)] * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad={auto_pad!r}")
    pads = []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        pads.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
    return pads


def _kernel_shape(ctx: NodeContext, from_weights: Sequence[int] | None) -> list[int]:
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        if from_weights is None:
            raise ctx.error("attribute 'kernel_shape' is required")
        return list(from_weights)
    kernel = [int(k) for k in kernel]
    if from_weights is not None and list(from_weights) != kernel:
        raise ctx.error(f"kernel_shape {kernel} does not match the weights' spatial shape {list(from_weights)}")
    return kernel


def _need_rank(ctx: NodeContext, x: Any, what: str = "input X", at_least: int = 3) -> int:
    rank = len(shape_of(x))
    if rank < at_least:
        raise ctx.error(f"{what} has rank {rank}; it needs a batch, a channel and spatial dimensions")
    return rank


def _channel_vector(xp, v: Any, rank: int) -> Any:
    """A per-channel vector shaped to broadcast against (N, C, spatial...)."""
    return xp.reshape(v, (-1,) + (1,) * (rank - 2))


# --- convolution --------------------------------------------------------------------------------

@converter("Conv", since=1)
def conv(ctx: NodeContext, x, w, b=None):
    rank = _need_rank(ctx, x)
    n = rank - 2
    w_shape = shape_of(w)
    if len(w_shape) != rank:
        raise ctx.error(f"weights of shape {list(w_shape)} do not match input rank {rank}")
    kernel = _kernel_shape(ctx, w_shape[2:])
    strides = _spatial_ints(ctx, "strides", n, 1)
    dilations = _spatial_ints(ctx, "dilations", n, 1)
    group = int(ctx.attr("group", 1))
    channels = shape_of(x)[1]
    if group < 1 or channels % group or w_shape[1] * group != channels or w_shape[0] % group:
        raise ctx.error(f"group={group} does not fit {channels} input channels and weights {list(w_shape)}")
    pads = window_pads(ctx, shape_of(x)[2:], kernel, strides, dilations)
    w, dimension_numbers = _kernel_layout(x, w)
    y = lax.conv_general_dilated(x, w, strides, pads, rhs_dilation=dilations, feature_group_count=group,
                                 dimension_numbers=dimension_numbers)
    if b is not None:
        y = y + _channel_vector(xp_of(ctx, b), b, rank)
    return y


def _kernel_layout(x, w):
    """The kernel and convolution dimension numbers to use. A known kernel is stored
    spatial dimensions first, then input and output features (HWIO for 2-D): the CPU
    backend packs kernels for its matrix multiplies in that order, so it reads them
    contiguously (about 3x faster than from ONNX's OIHW on ResNet-50's 3x3 convolutions)."""
    rank = len(shape_of(w))
    if not is_known(w):
        return w, None
    n = rank - 2
    w = np.ascontiguousarray(np.asarray(w, dtype=x.dtype).transpose(tuple(range(2, rank)) + (1, 0)))
    identity = tuple(range(rank))
    return w, lax.ConvDimensionNumbers(identity, (n + 1, n) + tuple(range(n)), identity)


@converter("ConvTranspose", since=1)
def conv_transpose(ctx: NodeContext, x, w, b=None):
    """The gradient of Conv: the input dilated by the strides, convolved with the kernel
    flipped and its input and output features swapped."""
    rank = _need_rank(ctx, x)
    n = rank - 2
    w_shape = shape_of(w)
    group = int(ctx.attr("group", 1))
    channels = shape_of(x)[1]
    if len(w_shape) != rank or w_shape[0] != channels or channels % group:
        raise ctx.error(f"weights {list(w_shape)} do not fit input {list(shape_of(x))} with group={group}")
    kernel = _kernel_shape(ctx, w_shape[2:])
    strides = _spatial_ints(ctx, "strides", n, 1)
    dilations = _spatial_ints(ctx, "dilations", n, 1)
    output_padding = _spatial_ints(ctx, "output_padding", n, 0)
    in_sizes = shape_of(x)[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for i, s, op, k, d in zip(in_sizes, strides, output_padding, kernel, dilations)]
    output_shape = ctx.attr("output_shape")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if output_shape is not None:
        output_shape = [int(v) for v in output_shape][-n:]
        totals = [f - o for f, o in zip(full, output_shape)]
        pads = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in totals]
        ctx.attr("pads")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - i * s for f, i, s in zip(full, in_sizes, strides)]
        pads = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in totals]
        ctx.attr("pads")
    elif auto_pad in ("NOTSET", "", "VALID"):
        pads = _explicit_pads(ctx, n) if auto_pad != "VALID" else [(0, 0)] * n
    else:
        raise ctx.unsupported(f"auto_pad={auto_pad!r}")
    # kernel (C, M/g, k...) -> (M, C/g, k...) reversed in space: a Conv kernel
    xp = xp_of(ctx, w)
    m_per_group = w_shape[1]
    k = xp.reshape(w, (group, channels // group, m_per_group) + tuple(kernel))
    k = xp.transpose(k, (0, 2, 1) + tuple(range(3, 3 + n)))
    k = xp.reshape(k, (group * m_per_group, channels // group) + tuple(kernel))
    k = xp.flip(k, axis=tuple(range(2, 2 + n)))
    k, dimension_numbers = _kernel_layout(x, k)
    conv_pads = [((kk - 1) * d - lo, (kk - 1) * d - hi + op)
                 for kk, d, (lo, hi), op in zip(kernel, dilations, pads, output_padding)]
    y = lax.conv_general_dilated(x, k, [1] * n, conv_pads, lhs_dilation=strides, rhs_dilation=dilations,
                                 feature_group_count=group, dimension_numbers=dimension_numbers)
    if b is not None:
        y = y + _channel_vector(xp_of(ctx, b), b, rank)
    return y


# --- pooling ------------------------------------------------------------------------------------

def _pool_geometry(ctx: NodeContext, x, dilated: bool):
    """Kernel, strides, dilations, (begin, end) pads and the extra end padding that
    ceil_mode's last windows reach into, per spatial dimension."""
    rank = _need_rank(ctx, x)
    n = rank - 2
    kernel = _kernel_shape(ctx, None)
    if len(kernel) != n:
        raise ctx.error(f"kernel_shape {kernel} needs {n} values for input rank {rank}")
    strides = _spatial_ints(ctx, "strides", n, 1)
    dilations = _spatial_ints(ctx, "dilations", n, 1) if dilated else [1] * n
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    in_sizes = shape_of(x)[2:]
    pads = window_pads(ctx, in_sizes, kernel, strides, dilations)
    extra = []
    for size, k, s, d, (lo, hi) in zip(in_sizes, kernel, strides, dilations, pads):
        span = (k - 1) * d + 1
        if ceil_mode:
            out = -(-(size + lo + hi - span) // s) + 1
            if (out - 1) * s >= size + lo:      # the last window must start inside the input
                out -= 1
        else:
            out = (size + lo + hi - span) // s + 1
        extra.append(max(0, (out - 1) * s + span - (size + lo + hi)))
    return kernel, strides, dilations, pads, extra


def _window_args(kernel, strides, dilations, pads, extra):
    return dict(window_dimensions=(1, 1, *kernel), window_strides=(1, 1, *strides),
                padding=((0, 0), (0, 0), *[(lo, hi + e) for (lo, hi), e in zip(pads, extra)]),
                window_dilation=(1, 1, *dilations))


@converter("MaxPool", since=1)
def max_pool(ctx: NodeContext, x):
    geometry = _pool_geometry(ctx, x, dilated=ctx.opset >= 10)
    if len(ctx.output_names) > 1 and ctx.output_names[1]:
        from .pool_indices import max_pool_with_indices
        return max_pool_with_indices(ctx, x, *geometry)
    ctx.attr("storage_order")           # only affects Indices
    return lax.reduce_window_max(x, **_window_args(*geometry))


@converter("AveragePool", since=1)
def average_pool(ctx: NodeContext, x):
    kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x, dilated=ctx.opset >= 19)
    include_pad = int(ctx.attr("count_include_pad", 0)) if ctx.opset >= 7 else 0
    if not is_float_dtype(x.dtype):
        raise ctx.unsupported(f"input of dtype {x.dtype}")
    sums = lax.reduce_window_sum(x, **_window_args(kernel, strides, dilations, pads, extra))
    counts = _window_counts(shape_of(x)[2:], kernel, strides, dilations, pads, extra, include_pad)
    if np.all(counts == counts.flat[0]):
        return sums / np.asarray(counts.flat[0], x.dtype)
    return sums / counts.astype(x.dtype)


def _window_counts(in_sizes, kernel, strides, dilations, pads, extra, include_pad: bool) -> np.ndarray:
    """How many elements each window averages: those inside the input, or with
    count_include_pad those inside the padded input (never the ceil_mode extra). The count
    is a product of one count per spatial dimension."""
    per_dim = []
    for size, k, s, d, (lo, hi), e in zip(in_sizes, kernel, strides, dilations, pads, extra):
        span = (k - 1) * d + 1
        out = (size + lo + hi + e - span) // s + 1
        first, last = (-lo, size + hi) if include_pad else (0, size)
        counts = [sum(1 for j in range(k) if first <= o * s - lo + j * d < last) for o in range(out)]
        per_dim.append(np.asarray(counts, np.float64))
    total = per_dim[0]
    for c in per_dim[1:]:
        total = np.multiply.outer(total, c)
    return total


@converter("GlobalAveragePool", since=1)
def global_average_pool(ctx: NodeContext, x):
    rank = _need_rank(ctx, x)
    return ctx.xp.mean(x, axis=tuple(range(2, rank)), keepdims=True)


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx: NodeContext, x):
    rank = _need_rank(ctx, x)
    return ctx.xp.max(x, axis=tuple(range(2, rank)), keepdims=True)


@converter("LpPool", since=1)
def lp_pool(ctx: NodeContext, x):
    p = float(ctx.attr("p", 2))
    kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x, dilated=ctx.opset >= 18)
    powered = ctx.xp.abs(x) ** np.asarray(p, x.dtype)
    sums = lax.reduce_window_sum(powered, **_window_args(kernel, strides, dilations, pads, extra))
    return sums ** np.asarray(1.0 / p, x.dtype)


@converter("GlobalLpPool", since=1)
def global_lp_pool(ctx: NodeContext, x):
    rank = _need_rank(ctx, x)
    p = float(ctx.attr("p", 2))
    xp = ctx.xp
    sums = xp.sum(xp.abs(x) ** np.asarray(p, x.dtype), axis=tuple(range(2, rank)), keepdims=True)
    return sums ** np.asarray(1.0 / p, x.dtype)


# --- normalisation ------------------------------------------------------------------------------

@converter("BatchNormalization", since=1)
def batch_normalization(ctx: NodeContext, x, scale, bias, mean, var, *rest):
    """Inference: y = x * s + t per channel, s = scale / sqrt(var + epsilon) and
    t = bias - mean * s computed once (in NumPy when the statistics are known)."""
    epsilon = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    if ctx.opset < 7 and not int(ctx.attr("is_test", 0)) and any(ctx.output_names[1:]):
        raise ctx.unsupported("training (is_test=0 with statistics outputs)")
    if ctx.opset < 9 and int(ctx.attr("spatial", 1)) != 1:
        raise ctx.unsupported("spatial=0 (per-element statistics)")
    ctx.attr("consumed_inputs")        # opset 1's legacy in-place marker
    rank = len(shape_of(x))
    if rank < 2:
        raise ctx.error(f"input X has rank {rank}; it needs a channel dimension")
    if int(ctx.attr("training_mode", 0)):
        return _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon, momentum)
    if any(ctx.output_names[1:]):
        raise ctx.unsupported("the running-statistics outputs outside training mode")
    xp = xp_of(ctx, scale, bias, mean, var)
    dtype = x.dtype
    wide = np.float64 if xp is np else dtype
    s = as_dtype(xp, scale, wide) / xp.sqrt(as_dtype(xp, var, wide) + np.asarray(epsilon, wide))
    t = as_dtype(xp, bias, wide) - as_dtype(xp, mean, wide) * s
    s, t = as_dtype(xp, s, dtype), as_dtype(xp, t, dtype)
    return x * _channel_vector(xp, s, rank) + _channel_vector(xp, t, rank)


def _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon, momentum):
    """training_mode=1: normalise with the batch's statistics; the running statistics
    outputs blend the given ones with them (population variance, as ONNX specifies)."""
    xp = ctx.xp
    rank = len(shape_of(x))
    axes = (0,) + tuple(range(2, rank))
    batch_mean = xp.mean(x, axis=axes)
    batch_var = xp.mean(xp.square(x - _channel_vector(xp, batch_mean, rank)), axis=axes)
    inv = scale / xp.sqrt(batch_var + np.asarray(epsilon, x.dtype))
    y = (x - _channel_vector(xp, batch_mean, rank)) * _channel_vector(xp, inv, rank) + _channel_vector(xp, bias, rank)
    m = np.asarray(momentum, x.dtype)
    one_minus = np.asarray(1 - momentum, x.dtype)
    return y, mean * m + batch_mean * one_minus, var * m + batch_var * one_minus


@converter("LRN", since=1)
def lrn(ctx: NodeContext, x):
    """y = x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta."""
    size = ctx.attr("size")
    if size is None:
        raise ctx.error("attribute 'size' is required")
    size = int(size)
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    rank = _need_rank(ctx, x)
    dtype = x.dtype
    squares = x * x
    window = (1, size) + (1,) * (rank - 2)
    padding = ((0, 0), ((size - 1) // 2, size - 1 - (size - 1) // 2)) + ((0, 0),) * (rank - 2)
    sums = lax.reduce_window_sum(squares, window, (1,) * rank, padding)
    base = np.asarray(bias, dtype) + np.asarray(alpha / size, dtype) * sums
    return x * ctx.xp.power(base, np.asarray(-beta, dtype))


# --- matrix products ----------------------------------------------------------------------------

@converter("Gemm", since=1)
def gemm(ctx: NodeContext, a, b, c=None):
    """alpha * A' B' + beta * C, A' = A or A^T, B' = B or B^T. A known B is transposed (and
    scaled by alpha) once, at import time."""
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    ctx.attr("broadcast")             # opsets 1-6: C broadcasts (it always may from 7)
    if len(shape_of(a)) != 2 or len(shape_of(b)) != 2:
        raise ctx.error(f"A {list(shape_of(a))} and B {list(shape_of(b))} must be matrices")
    if int(ctx.attr("transA", 0)):
        a = xp_of(ctx, a).transpose(a)
    if int(ctx.attr("transB", 0)):
        b = np.ascontiguousarray(b.T) if is_known(b) else ctx.xp.transpose(b)
    dtype = a.dtype
    if alpha != 1.0 and is_known(b):
        b, alpha = (b * np.asarray(alpha, b.dtype)).astype(b.dtype), 1.0
    y = ctx.xp.matmul(a, b)
    if alpha != 1.0:
        y = y * np.asarray(alpha, dtype)
    if c is not None and beta != 0.0:
        c = c if beta == 1.0 else c * np.asarray(beta, dtype)
        y = y + c
    return y


@converter("MatMul", since=1)
def matmul(ctx: NodeContext, a, b):
    if not shape_of(a) or not shape_of(b):
        raise ctx.error("MatMul does not take scalars")
    return ctx.xp.matmul(a, b)


# --- dropout ------------------------------------------------------------------------------------

@converter("Dropout", since=1)
def dropout(ctx: NodeContext, x, ratio=None, training_mode=None):
    """Inference: the identity, with an all-true mask. Training with a non-zero ratio draws
    random numbers and is refused."""
    ctx.attr("seed")
    ctx.attr("consumed_inputs")
    if ctx.opset < 12:
        ratio = ctx.attr("ratio", 0.5)
        training = ctx.opset < 7 and not int(ctx.attr("is_test", 0))
    else:
        training = training_mode is not None and bool(_known_scalar(ctx, training_mode, "training_mode"))
        ratio = 0.5 if ratio is None else float(_known_scalar(ctx, ratio, "ratio"))
    if training and float(ratio) != 0.0:
        raise ctx.unsupported(f"training mode with ratio {float(ratio)} (random masks)")
    if len(ctx.output_names) < 2 or not ctx.output_names[1]:
        return x
    mask_dtype = x.dtype if ctx.opset < 10 else np.bool_
    mask = ctx.xp.ones(shape_of(x), dtype=mask_dtype)
    return x, mask


def _known_scalar(ctx: NodeContext, value: Any, what: str):
    value = known(ctx, value, what)
    return value.reshape(-1)[0] if value.size else 0

