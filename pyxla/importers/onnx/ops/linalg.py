"""Linear algebra beyond MatMul and Gemm: Einsum and MatMulInteger."""
from __future__ import annotations

import numpy as np

from ..registry import converter
from .common import as_dtype, shape_of


@converter("Einsum", since=12)
def einsum(ctx, *operands):
    equation = ctx.attr("equation")
    if not equation:
        raise ctx.error("needs attribute 'equation'")
    return ctx.xp.einsum(equation, *operands)


def _centred(ctx, x, zero_point, row_axis):
    """x - zero_point in int32; a per-row (A) or per-column (B) zero point broadcasts along it."""
    xp = ctx.xp
    x = as_dtype(xp, x, np.int32)
    if zero_point is None:
        return x
    zp = as_dtype(xp, zero_point, np.int32)
    if len(shape_of(zp)) == 1 and shape_of(zp)[0] > 1 and row_axis == -2:
        zp = xp.reshape(zp, (-1, 1))   # A's zero point per row of A
    return xp.subtract(x, zp)


@converter("MatMulInteger", since=10)
def matmul_integer(ctx, a, b, a_zero_point=None, b_zero_point=None):
    return ctx.xp.matmul(_centred(ctx, a, a_zero_point, -2), _centred(ctx, b, b_zero_point, -1))
