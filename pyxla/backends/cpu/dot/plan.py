"""Whether a dot goes to the CPU's matrix-product kernels, and with what dimensions: the plan
codegen.py emits a GEMV, pyxla's GEMM in tasks, or BLAS from. Nothing here emits IR."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from ....fusion.policy import same_rows
from ....hlo.instruction import HloInstruction
from ....hlo.ops.registry import op_def
from ....hlo.shape import ArrayShape
from ....runtime.memory import aligned_empty
from ...llvm.ir_types import etype
from ..runtime.native_target import aot_emission
from ..tuning import machine
from ..tuning.params import GemmParams
from ..tuning.selection import gemm_params
from .gemm import tiling


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
    # the kernel's result holds the product's elements where the product would (its dims, or
    # the same rows reshaped: fusion/policy.py same_rows) in the product's type, so an epilogue
    # can write each block as it is computed; else the product goes to scratch first and the
    # epilogue (a convert to another type, say) runs over the result afterwards
    epilogue_by_rows: bool = True

    @property
    def batch(self) -> int:
        return prod(self.batch_dims)


def plan_gemm(root: HloInstruction, fused, result: ArrayShape) -> GemmPlan | None:
    """The plan of the dot `root` computes (itself, or the dot inside its fusion `fused`,
    whose operands must then be the fusion's parameters), the kernel writing `result`
    (epilogue_by_rows says whether that is the product's bytes); None when the dot does not
    fit the matrix-product kernels (the elemental loops then compute it): not f32/f64, batch
    dimensions not leading, several contracting dimensions, layouts not row-major, or an
    empty product."""
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
    if not all(s.is_row_major for s in (lshape, rshape, oshape)) or not isinstance(result, ArrayShape):
        return None
    # an epilogue's result may reshape the product's rows (fusion/policy.py same_rows)
    by_rows = result.is_row_major and result.dtype == t and \
        (result.dims == oshape.dims or same_rows(result.dims, oshape.dims))
    lc, rc = a["lhs_contracting_dims"][0], a["rhs_contracting_dims"][0]
    k = lshape.dims[lc]
    m = lshape.size // max(1, k) // max(1, prod(lshape.dims[:nb]))
    n = rshape.size // max(1, k) // max(1, prod(rshape.dims[:nb]))
    a_transposed = lshape.rank == nb + 2 and lc == nb
    b_transposed = rshape.rank == nb + 2 and rc == nb + 1
    batch_dims = tuple(oshape.dims[:nb])
    if prod(batch_dims) == 0 or m == 0 or n == 0 or k == 0:
        return None
    return GemmPlan(dot, t.name, batch_dims, m, n, k, a_transposed, b_transposed, by_rows)


# --- a constant B in the GEMM's panels ------------------------------------------------------------

@dataclass(frozen=True)
class GemmPanels:
    """How pyxla's GEMM wants a dot's B when it is a constant parameter (an ONNX model's
    weights, runtime/parameter_forms.py): packed once into the panels the kernel would pack it
    into on every call, so that the prepacked kernel (dot/gemm.py) reads them as they lie.
    For each product of the batch, for each slice of `kc` depths (the last one shorter), the
    columns in panels of `nr` (the last one zero-padded), each panel depth-major:
    [product][slice][panel][depth in the slice][column of the panel]. The dot's B is then
    one run of batch x k x padded_n elements. `params` is the whole blocking the dot is
    compiled with (its kc the panels' depth): the kernel reading the panels takes it from
    here, so the panels and the kernel cannot disagree."""
    dtype: str
    batch: int
    k: int
    n: int
    transposed: bool     # B comes as [n, k] (row-major), else [k, n]
    nr: int
    params: GemmParams   # mr, kc, mc and nc resolved

    @property
    def padded_n(self) -> int:
        return -(-self.n // self.nr) * self.nr

    def pack(self, array: np.ndarray) -> np.ndarray:
        """The panels of `array` (the parameter's value, its logical shape row-major). Each
        slice's whole panels are one strided copy from `array` into place (a model's weights
        are hundreds of MB: GPT-2 small's 650 MB took 1.2 s with the copies this replaced);
        the last panel, when short, is zero-filled first."""
        batch, k, n, nr, kc, pn = self.batch, self.k, self.n, self.nr, self.params.kc, self.padded_n
        source = np.ascontiguousarray(array).reshape(batch, n, k).swapaxes(1, 2) if self.transposed \
            else np.ascontiguousarray(array).reshape(batch, k, n)      # [batch, k, n], a view
        whole = n // nr
        out = aligned_empty(batch * k * pn, source.dtype)
        rows = out.reshape(batch, k * pn)
        for pc in range(0, k, kc):
            depth = min(kc, k - pc)
            # [batch, panel, depth, column]: splitting one axis of a slice of `out`, a view of it
            panels = rows[:, pc * pn:(pc + depth) * pn].reshape(batch, pn // nr, depth, nr)
            part = source[:, pc:pc + depth]
            panels[:, :whole] = part[:, :, :whole * nr].reshape(batch, depth, whole, nr).transpose(0, 2, 1, 3)
            if whole < pn // nr:
                panels[:, whole] = 0
                panels[:, whole, :, :n - whole * nr] = part[:, :, whole * nr:]
        return out


def gemm_blocking(dtype_name: str, batch: int, m: int, n: int, k: int, a_transposed: bool,
                  b_transposed: bool) -> GemmParams:
    """The parameters a dot's GEMM is compiled with: the tuning database's (tuning/selection.py),
    and where it sets no MC, all the rows of A at once when they are few enough for L2 (at
    most half of it at KC deep) but more than the cost model's MC: each panel of B, which
    comes from memory when the weights do not fit L3 (a transformer's), is then used by every
    row while it is in L1 instead of coming back from L3 for a second pass of rows (GPT-2's
    128 tokens, MC 72 on AVX2: 2.5-6% of the whole model, interleaved runs on a loaded 2-core
    EPYC). The summation order does not depend on MC."""
    tuned = gemm_params(dtype_name, batch, m, n, k, a_transposed, b_transposed)
    if tuned.mc is not None or aot_emission() is not None:   # another machine's caches
        return tuned
    t = tiling(dtype_name, tuned)
    rows = -(-m // t.mr) * t.mr
    l2 = machine.cache_sizes().get("L2")
    if l2 is None or rows <= t.mc or m * min(k, t.kc) * t.element_bytes > l2 // 2:
        return tuned
    return GemmParams(tuned.mr, tuned.kc, rows, tuned.nc, tuned.blocks_per_thread)


def gemm_panels(plan: GemmPlan) -> GemmPanels | None:
    """The panels the GEMM of `plan` would read its B from when B is a constant parameter; None
    when the dot does not take pyxla's GEMM (m or n of 1: the matrix-vector kernels) or the
    blocking's column blocks are not whole panels."""
    if plan.m == 1 or plan.n == 1:
        return None
    tuned = gemm_blocking(plan.dtype, plan.batch, plan.m, plan.n, plan.k, plan.a_transposed, plan.b_transposed)
    t = tiling(plan.dtype, tuned)
    if t.nc % t.nr:
        return None
    params = GemmParams(t.mr, t.kc, t.mc, t.nc, tuned.blocks_per_thread)
    return GemmPanels(plan.dtype, plan.batch, plan.k, plan.n, plan.b_transposed, t.nr, params)


def epilogue_in_place(dot: HloInstruction, root: HloInstruction) -> bool:
    """Whether element i of `root` reads element i of `dot` alone (buffer_assignment's
    read_elementwise), also through reshapes (plan_gemm): row-major, element i of a reshape
    is element i of what it reshapes."""
    if root is dot:
        return True
    pending, seen = [dot], set()
    while pending:
        for u in pending.pop().users:
            if id(u) in seen:
                continue
            seen.add(id(u))
            elementwise = op_def(u.opcode).fusion_kind == "elementwise" or u.opcode in ("reshape", "bitcast")
            if not elementwise or not isinstance(u.shape, ArrayShape) or u.shape.size != dot.shape.size \
                    or not u.shape.is_row_major:
                return False
            pending.append(u)
    return id(root) in seen
