"""Linear algebra beyond MatMul and Gemm: Einsum, MatMulInteger and Det."""
from __future__ import annotations

import numpy as np

from .... import lax
from .... import numpy as pnp
from ..registry import converter
from .common import as_dtype, is_float_dtype, shape_of


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
    """The int32 product of the 8-bit operands less their zero points, computed in f64, where
    it is exact (each term is at most 255 * 255 in magnitude, so sums stay integers below
    2**53) and takes the backends' float GEMM rather than an integer loop; wrapped to int32
    through int64, as an int32 accumulator would wrap."""
    xp = ctx.xp
    wide = [as_dtype(xp, _centred(ctx, x, zp, axis), np.float64)
            for x, zp, axis in ((a, a_zero_point, -2), (b, b_zero_point, -1))]
    return as_dtype(xp, as_dtype(xp, xp.matmul(*wide), np.int64), np.int32)


@converter("Det", since=11)
def det(ctx, x):
    """Determinants of the (..., n, n) matrices by Gaussian elimination with partial
    pivoting: one HLO loop over the columns, each step choosing the largest pivot at or
    below the diagonal, swapping it up (a swap negates the determinant) and clearing the
    column below it; the determinant is the product of the pivots. Rows are picked with
    masks, so the column index can be the loop's."""
    dims = shape_of(x)
    if len(dims) < 2 or dims[-1] != dims[-2]:
        raise ctx.error(f"input of shape {list(dims)} is not a (batch of) square matrices")
    if not is_float_dtype(x.dtype):
        raise ctx.unsupported(f"input of dtype {x.dtype}")
    n, dtype = dims[-1], np.dtype(x.dtype)
    rows = np.arange(n)
    zero, one = np.zeros((), dtype), np.ones((), dtype)

    def step(k, state):
        a, d = state
        column = pnp.sum(pnp.where(rows == k, a, zero), axis=-1)                     # a[..., :, k]
        candidates = pnp.where(rows >= k, pnp.abs(column), -one)
        p = pnp.argmax(candidates, axis=-1)[..., None]                                # pivot row
        is_k, is_p = (rows == k)[:, None], (rows[:, None] == p[..., None])
        row_k = pnp.sum(pnp.where(is_k, a, zero), axis=-2, keepdims=True)
        row_p = pnp.sum(pnp.where(is_p, a, zero), axis=-2, keepdims=True)
        a = pnp.where(is_k, row_p, pnp.where(is_p, row_k, a))
        pivot = pnp.sum(pnp.where(rows == k, row_p[..., 0, :], zero), axis=-1)
        d = d * pivot * pnp.where(p[..., 0] == k, one, -one)
        safe = pnp.where(pivot == 0, one, pivot)
        column = pnp.sum(pnp.where(rows == k, a, zero), axis=-1)
        factors = pnp.where(rows > k, column / safe[..., None], zero)
        return a - factors[..., :, None] * row_p, d

    _, d = lax.fori_loop(0, n, step, (pnp.asarray(x), pnp.ones(dims[:-2], dtype)))
    return d
