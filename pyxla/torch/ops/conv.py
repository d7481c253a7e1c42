"""Convolution (any rank, groups, dilation, transposed) and convolution_backward."""
from __future__ import annotations

from ... import lax
from ... import numpy as pnp
from .common import channel, ints
from .registry import LoweringError, lowering


def _dn(rank: int):
    spatial = "".join("DHW"[3 - (rank - 2):])
    return (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")


def _conv(x, w, stride, padding, dilation, groups, lhs_dilation=None):
    n = x.ndim - 2
    pads = [(p, p) for p in ints(padding, n)] if not isinstance(padding[0], tuple) else padding
    return lax.conv_general_dilated(x, w, ints(stride, n), pads, lhs_dilation=lhs_dilation,
                                    rhs_dilation=ints(dilation, n), dimension_numbers=_dn(x.ndim),
                                    feature_group_count=groups)


def _transposed_kernel(w, groups):
    """(I, O/g, k...) of a transposed convolution as (O, I/g, k...) flipped: the kernel of the
    equivalent direct convolution over the dilated input."""
    i, og = w.shape[0], w.shape[1]
    k = w.shape[2:]
    w = pnp.reshape(w, (groups, i // groups, og) + k)
    w = pnp.swapaxes(w, 1, 2)
    w = pnp.reshape(w, (groups * og, i // groups) + k)
    return lax.rev(w, tuple(range(2, w.ndim)))


@lowering("convolution.default")
def convolution(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    n = x.ndim - 2
    if transposed:
        k = w.shape[2:]
        dil, pad, outp = ints(dilation, n), ints(padding, n), ints(output_padding, n)
        pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op) for kk, d, p, op in zip(k, dil, pad, outp)]
        y = _conv(x, _transposed_kernel(w, groups), [1] * n, pads, dil, groups, lhs_dilation=ints(stride, n))
    else:
        y = _conv(x, w, stride, padding, dilation, groups)
    return y if b is None else y + channel(b, x.ndim)


def _input_grad(grad, x_shape, w, stride, padding, dilation, groups):
    """d conv / d input: a transposed convolution of the gradient."""
    n = grad.ndim - 2
    k = w.shape[2:]
    stride, pad, dil = ints(stride, n), ints(padding, n), ints(dilation, n)
    # the gradient dilated by the stride, padded so the result has the input's size
    pads = [(d * (kk - 1) - p, size + p - 1 - (out - 1) * s)
            for size, out, kk, s, p, d in zip(x_shape[2:], grad.shape[2:], k, stride, pad, dil)]
    o, ig = w.shape[0], w.shape[1]
    wt = pnp.reshape(w, (groups, o // groups, ig) + k)
    wt = pnp.reshape(pnp.swapaxes(wt, 1, 2), (groups * ig, o // groups) + k)
    wt = lax.rev(wt, tuple(range(2, wt.ndim)))
    return _conv(grad, wt, [1] * n, pads, dil, groups, lhs_dilation=stride)


def _weight_grad(grad, x, w_shape, stride, padding, dilation, groups):
    """d conv / d weight: a convolution of the input with the gradient as the kernel,
    batch as the contracted feature dimension."""
    n = x.ndim - 2
    stride, pad, dil = ints(stride, n), ints(padding, n), ints(dilation, n)
    k = w_shape[2:]
    pads = []
    for size, out, kk, s, p, d in zip(x.shape[2:], grad.shape[2:], k, stride, pad, dil):
        hi = (kk - 1) * d + (out - 1) * s + 1 - size - p   # what makes the result exactly kk wide
        pads.append((p, hi))
    c = x.shape[1]
    spatial = "".join("DHW"[3 - n:])
    # x as (C, N, ...) lhs, grad as (O, N, ...) kernel: out (C, O, k...), grouped by batch_group
    lhs = pnp.swapaxes(x, 0, 1)
    rhs = pnp.swapaxes(grad, 0, 1)
    if groups == 1:
        y = lax.conv_general_dilated(lhs, rhs, dil, pads, rhs_dilation=stride,
                                     dimension_numbers=(f"NC{spatial}", f"OI{spatial}", f"NC{spatial}"))
        return pnp.swapaxes(y, 0, 1)
    cg, og = c // groups, w_shape[0] // groups
    outs = []
    for g in range(groups):
        lg = lax.slice_in_dim(lhs, g * cg, (g + 1) * cg, axis=0)
        rg = lax.slice_in_dim(rhs, g * og, (g + 1) * og, axis=0)
        y = lax.conv_general_dilated(lg, rg, dil, pads, rhs_dilation=stride,
                                     dimension_numbers=(f"NC{spatial}", f"OI{spatial}", f"NC{spatial}"))
        outs.append(pnp.swapaxes(y, 0, 1))
    return pnp.concatenate(outs, axis=0)


@lowering("convolution_backward.default")
def convolution_backward(ctx, grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    if transposed:
        raise LoweringError("convolution_backward of a transposed convolution has no lowering")
    n = x.ndim - 2
    gx = _input_grad(grad, x.shape, w, stride, padding, dilation, groups) if output_mask[0] else None
    gw = _weight_grad(grad, x, w.shape, stride, padding, dilation, groups) if output_mask[1] else None
    gb = pnp.sum(grad, axis=(0,) + tuple(range(2, 2 + n))) if output_mask[2] else None
    return gx, gw, gb
