"""pyxla.lax.linalg: JAX's jax.lax.linalg names for HLO's cholesky and triangular-solve.

Both work on matrices in the two minor dimensions, with any leading batch dimensions; their
meaning is the opcodes' (hlo/ops/linalg.py). No derivative rules yet.
"""
from __future__ import annotations

from typing import Any

from ..frontend.tracing import bind
from .elementwise import add, div
from .shapes import transpose


def _swap_minor(x: Any, rank: int) -> Any:
    return transpose(x, (*range(rank - 2), rank - 1, rank - 2))


def cholesky(x: Any, *, symmetrize_input: bool = True) -> Any:
    """The lower Cholesky factor l of symmetric positive definite matrices, x = l l^T; NaN
    for a matrix that is not positive definite. With symmetrize_input (JAX's default) the
    factor is of (x + x^T) / 2, else only x's lower triangle is read."""
    from ._values import aval
    rank = aval(x).rank
    if symmetrize_input:
        x = div(add(x, _swap_minor(x, rank)), 2.0)
    return bind("cholesky", x, lower=True)


def triangular_solve(a: Any, b: Any, *, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False, unit_diagonal: bool = False) -> Any:
    """x with op(a) x = b (left_side) or x op(a) = b, for triangular a (JAX's signature;
    conjugate_a changes nothing for real matrices)."""
    if transpose_a:
        mode = "ADJOINT" if conjugate_a else "TRANSPOSE"
    else:
        mode = "NO_TRANSPOSE"
    return bind("triangular-solve", a, b, left_side=left_side, lower=lower, unit_diagonal=unit_diagonal,
                transpose_a=mode)
