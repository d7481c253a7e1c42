"""Whether a dot goes to the CPU's matrix-product kernels, and with what dimensions: the plan
codegen.py emits a GEMV, pyxla's GEMM in tasks, or BLAS from. Nothing here emits IR."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape
from ...llvm.ir_types import etype


@dataclass(frozen=True)
class GemmPlan:
    """A canonical f32/f64 dot as `batch` products of an m x k and a k x n matrix, each
    operand row-major and possibly transposed (its contracting dimension the major one)."""
    dot: HloInstruction
    dtype: str
    batch_dims: tuple[int, ...]
    m: int
    n: int
    k: int
    a_transposed: bool
    b_transposed: bool

    @property
    def batch(self) -> int:
        return prod(self.batch_dims)


def plan_gemm(root: HloInstruction, fused, result: ArrayShape) -> GemmPlan | None:
    """The plan of the dot `root` computes (itself, or the dot inside its fusion `fused`,
    whose operands must then be the fusion's parameters), writing `result`; None when the
    dot does not fit the matrix-product kernels (the elemental loops then compute it): not
    f32/f64, batch dimensions not leading, several contracting dimensions, layouts not
    row-major, or an empty product."""
    dot = root if root.opcode == "dot" else next((i for i in fused.instructions if i.opcode == "dot"), None)
    if dot is None:
        return None
    lhs, rhs = dot.operands
    t = etype(dot)
    if t.name not in ("f32", "f64") or etype(lhs) != t or etype(rhs) != t:
        return None
    if fused is not None and not (lhs.opcode == "parameter" and rhs.opcode == "parameter"):
        return None
    a = dot.attrs
    nb = len(a.get("lhs_batch_dims", ()))
    if tuple(a.get("lhs_batch_dims", ())) != tuple(range(nb)) or tuple(a.get("rhs_batch_dims", ())) != tuple(range(nb)):
        return None
    if len(a.get("lhs_contracting_dims", ())) != 1 or len(a.get("rhs_contracting_dims", ())) != 1:
        return None
    lshape, rshape, oshape = lhs.shape, rhs.shape, dot.shape
    if not all(s.is_row_major for s in (lshape, rshape, oshape, result)) or oshape.dims != result.dims:
        return None
    lc, rc = a["lhs_contracting_dims"][0], a["rhs_contracting_dims"][0]
    k = lshape.dims[lc]
    m = lshape.size // max(1, k) // max(1, prod(lshape.dims[:nb]))
    n = rshape.size // max(1, k) // max(1, prod(rshape.dims[:nb]))
    a_transposed = lshape.rank == nb + 2 and lc == nb
    b_transposed = rshape.rank == nb + 2 and rc == nb + 1
    batch_dims = tuple(oshape.dims[:nb])
    if prod(batch_dims) == 0 or m == 0 or n == 0 or k == 0 or result.dtype != t:
        return None
    return GemmPlan(dot, t.name, batch_dims, m, n, k, a_transposed, b_transposed)
