"""A canonical dot as tasks of the worker pool, each block of the result computed on one
thread by pyxla's own GEMM (dot/gemm.py), and the output fusion's epilogue applied to the
block right after it, while the block is in cache.

Why not BLAS here. OpenBLAS splits every call over threads of its own that meet several times
inside the call: for a batch of small products (attention's 64 heads of 256x256x64) those
meetings cost more than the arithmetic, and on a loaded machine a descheduled BLAS thread
stalls the other at every meeting (measured on this 2-core machine with other work running:
the MLP's second GEMM 256x4096x1024 took 108 ms instead of 11). Blocks claimed by the pool's
threads need no meeting until the end: a late thread only does fewer blocks. BLAS's threads
also keep spinning after a call, against the pool's next kernel.

The blocks: the products of a batch, and when they are fewer than the pool's tasks, each
product cut into row blocks x column blocks. A block packs its own rows of A and columns of
B, so cutting repacks A once per column block and B once per row block; the cut chosen is
the one that repacks least.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from ....hlo.shape import default_layout
from ...llvm.indices import delinearize
from ...llvm.ir_types import I8, i64, smin
from ...llvm.loops import counted_loop
from ..runtime.parallel import worker_pool
from ..tuning.params import GemmParams
from .gemm import emit_own_gemm, tiling, workspace_bytes
from .plan import GemmPanels, gemm_blocking


@dataclass(frozen=True)
class Blocks:
    rows: int        # of a block (the last of a product may be shorter)
    columns: int
    row_blocks: int
    column_blocks: int

    @property
    def per_product(self) -> int:
        return self.row_blocks * self.column_blocks


def plan_blocks(dtype_name: str, batch: int, m: int, n: int, tasks: int, params: GemmParams | None = None) -> Blocks:
    """Blocks for `tasks` tasks: whole products when the batch has enough of them, else each
    product cut so that there are at least `tasks` blocks, repacking the least."""
    wanted = -(-tasks // batch)
    if wanted <= 1:
        return Blocks(m, n, 1, 1)
    t = tiling(dtype_name, params)
    mr, nr = t.mr, t.nr
    best = None
    for column_blocks in range(1, wanted + 1):
        row_blocks = -(-wanted // column_blocks)
        columns = -(-n // column_blocks)
        rows = -(-m // row_blocks)
        if columns < nr and column_blocks > 1 or rows < mr and row_blocks > 1:
            continue
        columns = -(-columns // nr) * nr if column_blocks > 1 else n   # whole register tiles
        rows = -(-rows // mr) * mr if row_blocks > 1 else m
        repacked = m * (column_blocks - 1) + n * (row_blocks - 1)
        if best is None or repacked < best[0]:
            best = (repacked, Blocks(rows, columns, -(-m // rows), -(-n // columns)))
    return best[1] if best else Blocks(m, n, 1, 1)


def operand_strides(m: int, n: int, k: int, a_transposed: bool, b_transposed: bool) -> tuple:
    """(a_rs, a_cs, b_rs, b_cs) in elements for row-major A [m,k] (or [k,m] transposed) and
    B [k,n] (or [n,k] transposed)."""
    a = (1, m) if a_transposed else (k, 1)
    b = (1, k) if b_transposed else (n, 1)
    return a + b


def emit_dot_tasks(kernel, dtype_name: str, out_ptr, a_ptr, b_ptr, batch_dims: tuple, m: int, n: int, k: int,
                   a_transposed: bool, b_transposed: bool, tasks: int, epilogue=None, m_bound=None,
                   packed_b: GemmPanels | None = None) -> None:
    """The products C[p] = A[p] B[p] (p over batch_dims, each [m, n] row-major in out_ptr) on
    the pool in at most `tasks` tasks. epilogue(batch_index, i, j), when given, is emitted
    for each element of a block after the block is computed (the result must then have
    dimensions batch_dims + (m, n)). A tuning database may choose the blocking and the
    blocks per thread (tuning/params.py GemmParams). `m_bound` (an i64 value at most m), when
    given, is the number of rows of each product needed: blocks past it do nothing (the
    padding rows of a dynamically sized dot, passes/dynamic_padder/bounded_rows.py).
    `packed_b`, when given, is the form B comes in (a constant parameter packed once,
    plan.GemmPanels): the blocks read its panels at their first column, packing no B, with
    the blocking the panels were made for. A block's columns are whole panels (plan_blocks
    cuts at whole register tiles, the kernel's column blocks are whole panels), so its panels
    lie one after another in each slice."""
    b: ir.IRBuilder = kernel.b
    batch = 1
    for d in batch_dims:
        batch *= d
    size = 8 if dtype_name == "f64" else 4
    params = gemm_blocking(dtype_name, batch, m, n, k, a_transposed, b_transposed)
    if packed_b is not None:
        params = packed_b.params
        if (packed_b.dtype, packed_b.batch, packed_b.k, packed_b.n, packed_b.transposed) != \
                (dtype_name, batch, k, n, b_transposed) or tiling(dtype_name, params).nr != packed_b.nr:
            raise ValueError(f"B's panels {packed_b} do not fit the {dtype_name} dot of {batch} x "
                             f"{m}x{n}x{k} (B transposed: {b_transposed}) on this host")
    pool = worker_pool() if params.blocks_per_thread and tasks > 1 else None
    if pool is not None:   # (in place of the caller's tasks per thread)
        tasks = pool.threads * params.blocks_per_thread
    plan = plan_blocks(dtype_name, batch, m, n, tasks, params)
    total = batch * plan.per_product
    n_tasks = min(total, tasks)
    ws_bytes = workspace_bytes(dtype_name, plan.rows, plan.columns, k, params)
    workspace = kernel.reserve_scratch(n_tasks * ws_bytes)
    a_rs, a_cs, b_rs, b_cs = operand_strides(m, n, k, a_transposed, b_transposed)

    def offset(ptr, elements):
        return b.gep(ptr, [b.mul(elements, i64(size))], source_etype=I8)

    def block(f, ws):
        p = b.udiv(f, i64(plan.per_product))
        within = b.urem(f, i64(plan.per_product))
        i0 = b.mul(b.udiv(within, i64(plan.column_blocks)), i64(plan.rows))
        j0 = b.mul(b.urem(within, i64(plan.column_blocks)), i64(plan.columns))
        rows = smin(b, i64(plan.rows), b.sub(i64(m) if m_bound is None else m_bound, i0))
        columns = smin(b, i64(plan.columns), b.sub(i64(n), j0))
        if m_bound is None:
            return product(p, i0, j0, rows, columns, ws)
        with b.if_then(b.icmp_signed(">", rows, i64(0))):
            product(p, i0, j0, rows, columns, ws)

    def product(p, i0, j0, rows, columns, ws):
        a = offset(a_ptr, b.add(b.mul(p, i64(m * k)), b.mul(i0, i64(a_rs))))
        c = offset(out_ptr, b.add(b.mul(p, i64(m * n)), b.add(b.mul(i0, i64(n)), j0)))
        if packed_b is not None:   # the product's panels, the block's first column
            bm = offset(b_ptr, b.mul(p, i64(k * packed_b.padded_n)))
            emit_own_gemm(b, dtype_name, c, a, bm, rows, columns, k, (a_rs, a_cs, packed_b.padded_n, j0), n, ws,
                          params, prepacked_b=True)
        else:
            bm = offset(b_ptr, b.add(b.mul(p, i64(k * n)), b.mul(j0, i64(b_cs))))
            emit_own_gemm(b, dtype_name, c, a, bm, rows, columns, k, (a_rs, a_cs, b_rs, b_cs), n, ws, params)
        if epilogue is not None:
            prefix = delinearize(b, p, batch_dims, default_layout(len(batch_dims)))
            counted_loop(b, i0, b.add(i0, rows), lambda i: counted_loop(
                b, j0, b.add(j0, columns), lambda j: epilogue(prefix, i, j)))

    kernel.parallel_chunks([total], 1, n_tasks, lambda task, begin, end: counted_loop(
        b, begin, end, lambda f: block(f, b.gep(workspace, [b.mul(task, i64(ws_bytes))], source_etype=I8))))



def packed_weights(kernel, operand) -> GemmPanels | None:
    """The form of the dot operand `operand` (of kernel emitter `kernel`'s instruction, or a
    parameter of its fusion) when it is an entry parameter given in GEMM panels
    (runtime/parameter_forms.py), else None."""
    if operand.opcode == "parameter" and kernel.fused is not None:
        operand = kernel.instr.operands[operand.parameter_number]
    entry = kernel.codegen.hlo.entry
    if operand.opcode != "parameter" or entry.parameters[operand.parameter_number] is not operand:
        return None
    form = kernel.codegen.parameter_forms.get(operand.parameter_number)
    return form if isinstance(form, GemmPanels) else None
