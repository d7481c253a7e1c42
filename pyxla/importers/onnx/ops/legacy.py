"""The opset 1-6 forms of the binary and variadic elementwise operators, as old exporters
(PyTorch's opset-6 models among them) write them.

Before opset 7 a binary operator broadcast only when asked to: with `broadcast=1` the
second operand B is stretched to the first operand A's shape, B's dimensions lining up
with A's from `axis` on (by default with A's last dimensions, "suffix matching"), or B
being a single element; with `broadcast=0` the shapes must be equal. The variadic Sum,
Max, Min and Mean took operands of one shape. PRelu's slope was per channel (axis 1).
Opset 1's `consumed_inputs` marked in-place updates and does not change the result.

Each form is rewritten to the current operator: B is reshaped so NumPy broadcasting does
what the attribute says, then the opset 7 converter runs.
"""
from __future__ import annotations

import numpy as np

from ..registry import NodeContext, converter
from . import activation, elementwise
from .common import axis_of, shape_of, xp_of

# op type -> the converter of its opset 7 (and later) form
_BINARY = {
    "Add": elementwise.add, "Sub": elementwise.sub, "Mul": elementwise.mul, "Div": elementwise.div,
    "Pow": elementwise.pow_,
}
_COMPARISONS = ("Equal", "Less", "Greater", "And", "Or", "Xor")
_VARIADIC = {"Sum": elementwise.sum_, "Max": elementwise.max_, "Min": elementwise.min_,
             "Mean": elementwise.mean}


def legacy_broadcast(ctx: NodeContext, a, b):
    """B shaped so NumPy broadcasting stretches it to A's shape as `broadcast` and `axis`
    say; an error naming the node when the shapes do not fit."""
    ctx.attr("consumed_inputs")
    a_dims, b_dims = shape_of(a), shape_of(b)
    if not int(ctx.attr("broadcast", 0)):
        if ctx.attr("axis") is not None:
            raise ctx.error("attribute 'axis' is set without broadcast=1")
        if a_dims != b_dims:
            raise ctx.error(f"operands of shapes {list(a_dims)} and {list(b_dims)} differ and broadcast=0")
        return b
    axis = ctx.attr("axis")
    xp = xp_of(ctx, b)
    if int(np.prod(b_dims)) == 1:
        return xp.reshape(b, ())
    if len(b_dims) > len(a_dims):
        raise ctx.error(f"operand B of shape {list(b_dims)} has a higher rank than A {list(a_dims)}")
    start = len(a_dims) - len(b_dims) if axis is None else axis_of(ctx, axis, len(a_dims))
    if start + len(b_dims) > len(a_dims):
        raise ctx.error(f"operand B of shape {list(b_dims)} does not fit A {list(a_dims)} from axis {start}")
    target = (1,) * start + b_dims + (1,) * (len(a_dims) - start - len(b_dims))
    if any(bd not in (1, ad) for bd, ad in zip(target, a_dims)):
        raise ctx.error(f"operand B of shape {list(b_dims)} does not broadcast to A {list(a_dims)} "
                        f"from axis {start}")
    return xp.reshape(b, target)


def _legacy_binary(op_type: str, current):
    @converter(op_type, since=1)
    def convert(ctx, a, b):
        return current(ctx, a, legacy_broadcast(ctx, a, b))
    convert.__name__ = f"{op_type.lower()}_legacy"
    return convert


for _op, _current in _BINARY.items():
    _legacy_binary(_op, _current)


def _legacy_comparison(op_type: str):
    name = {"Equal": "equal", "Less": "less", "Greater": "greater", "And": "logical_and",
            "Or": "logical_or", "Xor": "logical_xor"}[op_type]

    @converter(op_type, since=1)
    def convert(ctx, a, b):
        return getattr(ctx.xp, name)(a, legacy_broadcast(ctx, a, b))
    convert.__name__ = f"{op_type.lower()}_legacy"
    return convert


for _op in _COMPARISONS:
    _legacy_comparison(_op)


def _legacy_variadic(op_type: str, current):
    @converter(op_type, since=1)
    def convert(ctx, *xs):
        ctx.attr("consumed_inputs")
        shapes = {shape_of(x) for x in xs}
        if len(shapes) > 1:
            raise ctx.error(f"operands of shapes {sorted(list(s) for s in shapes)} differ (before opset 8 "
                            f"{op_type} does not broadcast)")
        return current(ctx, *xs)
    convert.__name__ = f"{op_type.lower()}_legacy"
    return convert


for _op, _current in _VARIADIC.items():
    _legacy_variadic(_op, _current)


@converter("PRelu", since=1)
def prelu_legacy(ctx: NodeContext, x, slope):
    """A one-dimensional slope of one value per channel applies along axis 1; a slope of one
    value, or one that already has X's layout, broadcasts."""
    ctx.attr("consumed_inputs")
    x_dims, s_dims = shape_of(x), shape_of(slope)
    if len(s_dims) == 1 and s_dims[0] > 1 and len(x_dims) >= 2 and s_dims[0] == x_dims[1]:
        slope = xp_of(ctx, slope).reshape(slope, (s_dims[0],) + (1,) * (len(x_dims) - 2))
    return activation.prelu(ctx, x, slope)
