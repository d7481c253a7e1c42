"""Linear algebra: cholesky and triangular-solve, defined by loops as XLA's expanders do.

Both take matrices in their two minor dimensions, with any leading batch dimensions.

- cholesky(a), lower=true|false: the lower factor l with a = l l^T (lower=true) or the upper
  factor u with a = u^T u, reading only that triangle of a; the other triangle of the
  result is zero. A matrix that is not positive definite (a pivot <= 0 or NaN) gives NaN in
  every element of its result, as XLA's CholeskyExpander does. The expansion is a
  column-by-column (Cholesky-Crout) loop: column j is a[:, j] - l l[j, :]^T, divided by the
  square root of its diagonal element and kept from row j down; the upper factor is the
  lower one of the transposed matrix, transposed.
- triangular-solve(a, b), left_side, lower, unit_diagonal, transpose_a: x with op(a) x = b
  (left_side=true) or x op(a) = b, op(a) being a, a^T (TRANSPOSE) or conj(a)^T (ADJOINT, the
  same for reals). Only the triangle of a that `lower` names is read, and its diagonal is
  taken as ones when unit_diagonal=true. The expansion reduces every form to a lower
  triangular system solved from the left (transposing a for op(a) and for a right-side
  solve, reversing rows and columns for an upper one), then substitutes forward, one row of
  x per iteration, with dynamic-slice and dynamic-update-slice (XLA's
  TriangularSolveExpander loops over blocks of rows the same way).
The evaluator evaluates these expansions (expansion.evaluate_expanded), and the cpu backend
compiles them, so both share one definition.
"""
from __future__ import annotations

from ...errors import ShapeError
from ..expansion import Emitter, evaluate_expanded
from ..instruction import HloInstruction
from ..shape import ArrayShape
from ..types import PRED, S32
from .registry import OpDef, register
from .shape_ops import expect_array

TRANSPOSE_A = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def _square_matrices(opcode: str, shape, what: str) -> ArrayShape:
    a = expect_array(opcode, shape, what)
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise ShapeError(f"{opcode}: {what} must be square matrices in its two minor dimensions, "
                         f"got {a.to_text(False)}")
    if not a.dtype.is_float:
        raise ShapeError(f"{opcode} takes floating-point matrices, got {a.dtype}")
    return a


def _bool_attr(opcode: str, attrs: dict, name: str) -> None:
    if name in attrs and not isinstance(attrs[name], bool):
        raise ShapeError(f"{opcode}: {name}= must be true or false, got {attrs[name]}")


def _cholesky_shape(operands, attrs, declared):
    a = _square_matrices("cholesky", operands[0], "operand")
    _bool_attr("cholesky", attrs, "lower")
    return a.without_layout()


def _triangular_solve_shape(operands, attrs, declared):
    a = _square_matrices("triangular-solve", operands[0], "a")
    b = expect_array("triangular-solve", operands[1], "b")
    for name in ("left_side", "lower", "unit_diagonal"):
        _bool_attr("triangular-solve", attrs, name)
    if attrs.get("transpose_a") not in TRANSPOSE_A:
        raise ShapeError(f"triangular-solve: transpose_a={attrs.get('transpose_a')} is not one of "
                         f"{', '.join(TRANSPOSE_A)}")
    if b.dtype != a.dtype:
        raise ShapeError(f"triangular-solve: a and b must have one element type, got {a.dtype} and {b.dtype}")
    if b.rank != a.rank or b.dims[:-2] != a.dims[:-2]:
        raise ShapeError(f"triangular-solve: a and b must have the same batch dimensions, got "
                         f"{a.to_text(False)} and {b.to_text(False)}")
    m = a.dims[-1]
    left = bool(attrs.get("left_side", False))
    if (b.dims[-2] if left else b.dims[-1]) != m:
        side = "rows" if left else "columns"
        raise ShapeError(f"triangular-solve: b must have {m} {side} (a is {m}x{m}, left_side={str(left).lower()}), "
                         f"got {b.to_text(False)}")
    return b.without_layout()


# --- the expansions ---------------------------------------------------------------------------

class _Matrices:
    """Helpers over arrays of matrices [batch..., rows, cols] for one expansion."""

    def __init__(self, emit: Emitter, batch: tuple[int, ...]):
        self.emit, self.batch, self.nb = emit, batch, len(batch)

    def shape(self, like: HloInstruction, rows: int, cols: int, dtype=None) -> ArrayShape:
        return ArrayShape(dtype or like.array_shape.dtype, (*self.batch, rows, cols))

    def transpose(self, x: HloInstruction) -> HloInstruction:
        rows, cols = x.array_shape.dims[-2:]
        perm = (*range(self.nb), self.nb + 1, self.nb)
        return self.emit.op("transpose", x, shape=self.shape(x, cols, rows), dimensions=perm)

    def iota(self, rows: int, cols: int, dimension: int) -> HloInstruction:
        return self.emit.op("iota", shape=ArrayShape(S32, (*self.batch, rows, cols)),
                            iota_dimension=self.nb + dimension)

    def index(self, i: HloInstruction, like: HloInstruction) -> HloInstruction:
        """The s32 index i broadcast to `like`'s dimensions."""
        return self.emit.op("broadcast", i, shape=like.array_shape.without_layout().with_dtype(S32), dimensions=())

    def starts(self, row: HloInstruction | int, col: HloInstruction | int) -> list[HloInstruction]:
        """Start indices of a window at (row, col): an s32 index, or 0."""
        zero = self.emit.constant(0, ArrayShape(S32, ()))
        return [zero] * self.nb + [row if isinstance(row, HloInstruction) else zero,
                                   col if isinstance(col, HloInstruction) else zero]

    def window(self, x: HloInstruction, row, col, rows: int, cols: int) -> HloInstruction:
        return self.emit.op("dynamic-slice", x, *self.starts(row, col), shape=self.shape(x, rows, cols),
                            dynamic_slice_sizes=(*self.batch, rows, cols))

    def update(self, x: HloInstruction, part: HloInstruction, row, col) -> HloInstruction:
        return self.emit.op("dynamic-update-slice", x, part, *self.starts(row, col), shape=x.array_shape)

    def matmul(self, a: HloInstruction, b: HloInstruction, rhs_contracting: int) -> HloInstruction:
        """a [.., r, k] times b, contracting b's minor dimension `rhs_contracting` (0 or 1)."""
        batch = tuple(range(self.nb))
        cols = b.array_shape.dims[self.nb + 1 - rhs_contracting]
        return self.emit.op("dot", a, b, shape=self.shape(a, a.array_shape.dims[-2], cols),
                            lhs_batch_dims=batch, rhs_batch_dims=batch, lhs_contracting_dims=(self.nb + 1,),
                            rhs_contracting_dims=(self.nb + rhs_contracting,))

    def spread(self, x: HloInstruction, rows: int, cols: int) -> HloInstruction:
        """A [batch..., 1, 1] array over [batch..., rows, cols]."""
        flat = self.emit.op("reshape", x, shape=ArrayShape(x.array_shape.dtype, self.batch))
        return self.emit.op("broadcast", flat, shape=self.shape(x, rows, cols), dimensions=tuple(range(self.nb)))


def _expand_cholesky(instr, emit: Emitter):
    (a,) = instr.operands
    shape = a.array_shape
    *batch, n, _ = shape.dims
    mats = _Matrices(emit, tuple(batch))
    lower = bool(instr.attrs.get("lower", False))
    source = a if lower else mats.transpose(a)
    zeros = emit.constant(0, shape.without_layout())
    no_error = emit.constant(False, mats.shape(a, 1, 1, PRED))

    def column(emit: Emitter, j, values):
        a, factor, bad = values
        m = _Matrices(emit, mats.batch)
        dot = m.matmul(factor, m.window(factor, j, 0, 1, n), rhs_contracting=1)   # l l[j, :]^T, [.., n, 1]
        col = emit.binary("subtract", m.window(a, 0, j, n, 1), dot)
        pivot = emit.unary("sqrt", m.window(col, j, 0, 1, 1))
        scaled = emit.binary("divide", col, m.spread(pivot, n, 1))
        below = emit.compare("GE", m.iota(n, 1, 0), m.index(j, scaled))
        factor = m.update(factor, emit.select(below, scaled, emit.constant(0, scaled.array_shape)), 0, j)
        failed = emit.binary("or", emit.compare("LE", pivot, emit.constant(0, pivot.array_shape)),
                             emit.compare("NE", pivot, pivot))
        return [a, factor, emit.binary("or", bad, failed)]

    _, factor, bad = emit.for_loop(n, [source, zeros, no_error], column)
    factor = emit.select(mats.spread(bad, n, n), emit.constant(float("nan"), factor.array_shape), factor)
    return factor if lower else mats.transpose(factor)


def _expand_triangular_solve(instr, emit: Emitter):
    a, b = instr.operands
    *batch, m, _ = a.array_shape.dims
    mats = _Matrices(emit, tuple(batch))
    lower = bool(instr.attrs.get("lower", False))
    left = bool(instr.attrs.get("left_side", False))
    if instr.attrs["transpose_a"] != "NO_TRANSPOSE":
        a, lower = mats.transpose(a), not lower          # op(a) itself; the other triangle
    rows, cols = mats.iota(m, m, 0), mats.iota(m, m, 1)
    inside = emit.compare("GE" if lower else "LE", rows, cols)
    a = emit.select(inside, a, emit.constant(0, a.array_shape))
    if instr.attrs.get("unit_diagonal", False):
        a = emit.select(emit.compare("EQ", rows, cols), emit.constant(1, a.array_shape), a)
    if not left:                                          # x a = b  <=>  a^T x^T = b^T
        a, b, lower = mats.transpose(a), mats.transpose(b), not lower
    if not lower:                                         # rows and columns reversed: lower
        a = emit.op("reverse", a, shape=a.array_shape, dimensions=(mats.nb, mats.nb + 1))
        b = emit.op("reverse", b, shape=b.array_shape, dimensions=(mats.nb,))
    n = b.array_shape.dims[-1]

    def row(emit: Emitter, i, values):
        a, b, x = values
        mm = _Matrices(emit, mats.batch)
        known = mm.matmul(mm.window(a, i, 0, 1, m), x, rhs_contracting=0)       # a[i, :] x, [.., 1, n]
        rest = emit.binary("subtract", mm.window(b, i, 0, 1, n), known)
        solved = emit.binary("divide", rest, mm.spread(mm.window(a, i, i, 1, 1), 1, n))
        return [a, b, mm.update(x, solved, i, 0)]

    x = emit.for_loop(m, [a, b, emit.constant(0, b.array_shape.without_layout())], row)[2]
    if not lower:
        x = emit.op("reverse", x, shape=x.array_shape, dimensions=(mats.nb,))
    return x if left else mats.transpose(x)


register(OpDef("cholesky", "opaque", _cholesky_shape, evaluate_expanded, arity=1, optional_attrs=("lower",),
               doc="The Cholesky factor of symmetric positive definite matrices (lower or upper).",
               extra={"expand": _expand_cholesky}))

register(OpDef("triangular-solve", "opaque", _triangular_solve_shape, evaluate_expanded, arity=2,
               required_attrs=("transpose_a",), optional_attrs=("left_side", "lower", "unit_diagonal"),
               doc="x solving op(a) x = b or x op(a) = b for triangular matrices a.",
               extra={"expand": _expand_triangular_solve}))
