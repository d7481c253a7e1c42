"""Reductions (ReduceSum ... ReduceLogSumExp) and ArgMax/ArgMin.

The reduced axes are an attribute up to opset 12 (ReduceSum) or 17 (the others) and an
optional input from then on, where `noop_with_empty_axes=1` turns an empty axes list into
no reduction at all (the elementwise part, such as ReduceSumSquare's square, still applies).
Without axes every axis is reduced.
"""
from __future__ import annotations

import numpy as np

from ..registry import converter
from .common import as_dtype, axes_input_or_attr, axes_of, axis_of, is_float_dtype, shape_of


def _reduced_axes(ctx, x, axes_input, since_input):
    axes = axes_input_or_attr(ctx, axes_input, since_input)
    noop = ctx.attr("noop_with_empty_axes", 0) if ctx.opset >= since_input else 0
    if not axes:
        return () if noop else tuple(range(len(shape_of(x))))
    return axes_of(ctx, axes, len(shape_of(x)))


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return False
    return -np.inf if is_float_dtype(dtype) else np.iinfo(dtype).min


def _highest(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return True
    return np.inf if is_float_dtype(dtype) else np.iinfo(dtype).max


def _sum(xp, x, axes, keep):
    return xp.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _log_sum_exp(xp, x, axes, keep):
    if not axes or any(shape_of(x)[a] == 0 for a in axes):
        return xp.log(_sum(xp, xp.exp(x), axes, keep))
    # Shift by the maximum so that exp cannot overflow; an infinite maximum shifts by 0.
    top = xp.max(x, axis=axes, keepdims=True)
    top = xp.where(xp.isfinite(top), top, np.zeros((), x.dtype))
    total = _sum(xp, xp.exp(xp.subtract(x, top)), axes, True)
    out = xp.add(xp.log(total), top)
    return out if keep else xp.squeeze(out, axis=axes)


_REDUCTIONS = {
    "ReduceSum": (13, _sum),
    "ReduceMean": (18, lambda xp, x, axes, keep: xp.mean(x, axis=axes, keepdims=keep)),
    "ReduceMax": (18, lambda xp, x, axes, keep: xp.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))),
    "ReduceMin": (18, lambda xp, x, axes, keep: xp.min(x, axis=axes, keepdims=keep, initial=_highest(x.dtype))),
    "ReduceProd": (18, lambda xp, x, axes, keep: xp.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)),
    "ReduceL1": (18, lambda xp, x, axes, keep: _sum(xp, xp.abs(x), axes, keep)),
    "ReduceL2": (18, lambda xp, x, axes, keep: xp.sqrt(_sum(xp, xp.multiply(x, x), axes, keep))),
    "ReduceSumSquare": (18, lambda xp, x, axes, keep: _sum(xp, xp.multiply(x, x), axes, keep)),
    "ReduceLogSum": (18, lambda xp, x, axes, keep: xp.log(_sum(xp, x, axes, keep))),
    "ReduceLogSumExp": (18, _log_sum_exp),
}


def _reduction(op_type: str, since_input: int, body):
    def convert(ctx, x, axes=None):
        if axes is not None and ctx.opset < since_input:
            raise ctx.error("takes its axes as an attribute at this opset, not as an input")
        reduced = _reduced_axes(ctx, x, axes, since_input)
        keep = bool(ctx.attr("keepdims", 1))
        if np.dtype(x.dtype) == np.bool_ and op_type not in ("ReduceMax", "ReduceMin"):
            raise ctx.unsupported("a bool input")
        return as_dtype(ctx.xp, body(ctx.xp, x, reduced, keep), x.dtype)
    convert.__name__ = op_type
    converter(op_type, since=1)(convert)


for _op, (_since, _body) in _REDUCTIONS.items():
    _reduction(_op, _since, _body)


def _arg_extremum(name: str):
    def convert(ctx, x):
        xp = ctx.xp
        rank = len(shape_of(x))
        axis = axis_of(ctx, ctx.attr("axis", 0), rank)
        keep = bool(ctx.attr("keepdims", 1))
        last = ctx.attr("select_last_index", 0)
        if last:
            # The last extremum is the first one of the reversed axis.
            n = shape_of(x)[axis]
            index = xp.subtract(n - 1, getattr(xp, name)(xp.flip(x, axis=axis), axis=axis, keepdims=keep))
        else:
            index = getattr(xp, name)(x, axis=axis, keepdims=keep)
        return as_dtype(xp, index, np.int64)
    return convert


converter("ArgMax", since=1)(_arg_extremum("argmax"))
converter("ArgMin", since=1)(_arg_extremum("argmin"))
