"""The attention kernel: an attention fusion (fusion/attention.py: softmax(f(Q K^T)) V, f32)
by blocks of queries with flash attention's online softmax, so the score matrix never goes
to memory.

A task takes one (batch element, block of BQ queries) at a time. Its state, on its stack:
the accumulator acc[BQ, Dv], the running row maxima m and sums l. For each block of BK keys:

    S = Q_blk K_blk^T                      pyxla's GEMM (dot/gemm.py) into S[BQ, BK]
    x = f(S)                               the fusion's own elementwise ops (scale, mask,
                                           select), by the elemental emitter, per element
    m' = max(m, rowmax(x));  a = exp(m - m');  P = exp(x - m')
    l = a l + rowsum(P);  acc = a acc + P V_blk   (P V_blk by the GEMM into T[BQ, Dv])

and at the end out = acc / l. So each score is computed once and lives in S (L1/L2) only.
The GEMM reads Q, K and V through their strides wherever they lie, so transposed operands
cost nothing extra.

Semantics kept (the unfused graph's, fusion/attention.py): a row whose scores are all -inf
gives NaN (there acc = 0 and l = 0); a NaN score makes its row NaN (through P and l); a +inf
score makes its row NaN (inf - inf). `a` uses m'' = (m' == -inf ? 0 : m') so a row that is
still all -inf after a block keeps acc = l = 0 and does not become NaN early.

Masks from a constant (select(mask, x, -inf) with the predicate a constant broadcast over
the batch dimensions, as a causal mask is) also say which key blocks are wholly masked for
each query block: those blocks are skipped, a table of (first, end) key block per query
block being a constant of the module. Skipping is exact there: a skipped score is -inf and
contributes exp(-inf - m') = 0 (and a row with no key left is all -inf: NaN either way).

Block sizes (a cost model, not one machine's tuning). The two products are pyxla's GEMM
on blocks, which packs its operands on every call: K and V blocks are packed once per BQ
queries, Q and P rows once per BK keys, so packing costs about 1/BQ + 1/BK copies per
multiply-add, against 1/256 + 1/256 for the unfused products of a 256-token head; with
BQ = 64 and BK = 128 the packing was a third of the kernel (measured on the 2-core EPYC,
8 x 8 heads of 256 x 64: 64 x 128 blocks 113 ms, 256 x 128 76 ms, 256 x 256 72 ms, the
unfused program 84-108 ms). So both start at 256 (the row loops' overheads, two reductions
and a rescaling of acc per row and key block, are then under 2%) and are halved, BK first
(BQ appears in two packings, BK in one), until a task's working set (S, acc and T, the
packed blocks: working_set_bytes) fits in L2 (tuning/machine.py's cache sizes); then BQ is
halved (down to 16) while there are fewer than TASKS_PER_THREAD (batch, block) items per
thread, so that a short sequence keeps every thread busy. Items go to tasks round robin
(task t takes t, t + n, ...) so a causal mask's long and short query blocks mix.
"""
from __future__ import annotations

from types import SimpleNamespace

import llvmlite.ir as ir
import numpy as np

from ....fusion.attention import operand_view, output_view, parts_of_fusion
from ....hlo.instruction import HloInstruction
from ...llvm.fast_math import fast_unary
from ...llvm.indices import delinearize
from ...llvm.ir_types import F32, I32, I64, i64
from ...llvm.loops import counted_loop
from ..dot.gemm import emit_own_gemm, workspace_bytes
from ..runtime.llvm_jit import host_jit
from ..runtime.parallel import emit_parallel_tasks, worker_pool
from ..tuning.machine import cache_sizes

BLOCK_KEYS = 256
BLOCK_QUERIES = 256
MIN_BLOCK_QUERIES = 16
TASKS_PER_THREAD = 4
DEFAULT_L2_BYTES = 1 << 20
NEG_INF = float("-inf")


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def working_set_bytes(bq: int, bk: int, d: int, dv: int) -> int:
    """A task's memory per key block: S, acc and T, the GEMM's packed Q (or P) and K and V."""
    lanes = host_jit().vector_bytes // 4
    return 4 * (bq * bk + 2 * bq * _round_up(dv, lanes) + bq * max(d, bk) + bk * (d + dv))


def block_sizes(batch: int, sq: int, sk: int, d: int, dv: int, threads: int) -> tuple[int, int]:
    """(BQ, BK) for these sizes (the module docstring's cost model)."""
    lanes = host_jit().vector_bytes // 4
    l2 = cache_sizes().get("L2", DEFAULT_L2_BYTES)
    bk = min(BLOCK_KEYS, _round_up(sk, lanes))
    bq = min(BLOCK_QUERIES, _round_up(sq, 4))
    while working_set_bytes(bq, bk, d, dv) > l2 and (bk > lanes or bq > MIN_BLOCK_QUERIES):
        if bk > lanes and (bk >= bq or bq <= MIN_BLOCK_QUERIES):
            bk = max(lanes, bk // 2)
        else:
            bq = max(MIN_BLOCK_QUERIES, bq // 2)
    while bq > MIN_BLOCK_QUERIES and batch * -(-sq // bq) < TASKS_PER_THREAD * threads:
        bq //= 2
    return bq, bk


def _constant_mask(parts, nb: int, outer_operands: list):
    """For select(mask, x, -inf) / select(mask, -inf, x) as the softmax's input, with the
    predicate a constant broadcast over the batch dimensions: the [Sq, Sk] boolean array of
    kept scores; else None."""
    x = parts.scores
    if x.opcode != "select":
        return None
    pred, on_true, on_false = x.operands

    def neg_inf(i: HloInstruction) -> bool:
        while i.opcode == "broadcast":
            i = i.operands[0]
        return i.opcode == "constant" and i.shape.size == 1 and float(np.asarray(i.literal).reshape(-1)[0]) == NEG_INF

    if neg_inf(on_false):
        keep_when = True
    elif neg_inf(on_true):
        keep_when = False
    else:
        return None
    if pred.opcode != "broadcast":
        return None
    source = pred.operands[0]
    if source.opcode == "parameter":   # a constant the fusion reads as its operand
        source = outer_operands[source.parameter_number]
    if source.opcode != "constant":
        return None
    dims = [d - nb for d in pred.attrs["dimensions"]]
    if any(d < 0 for d in dims):
        return None
    full = np.transpose(np.asarray(source.literal).astype(bool), np.argsort(dims))
    for axis in (0, 1):
        if axis not in dims:
            full = np.expand_dims(full, axis)
    return np.broadcast_to(full, pred.shape.dims[nb:]) == keep_when


def _block_table(kept: np.ndarray | None, sq: int, sk: int, bq: int, bk: int) -> np.ndarray:
    """[query block, 2]: the first key block and one past the last that hold a kept score."""
    nq, nk = -(-sq // bq), -(-sk // bk)
    table = np.zeros((nq, 2), np.int32)
    table[:, 1] = nk
    if kept is None:
        return table
    for qb in range(nq):
        cols = np.nonzero(kept[qb * bq:(qb + 1) * bq].any(axis=0))[0]
        if cols.size == 0:
            table[qb] = (0, 0)
        else:
            table[qb] = (cols[0] // bk, cols[-1] // bk + 1)
    return table


def _intrinsic(module: ir.Module, name: str, ret, args):
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn


def emit_attention(ke) -> None:
    """KERNELS-style entry (codegen's dispatch): the kernel of attention fusion ke.instr."""
    _AttentionKernel(ke).emit()


class _AttentionKernel:
    """The plan (sizes, strides, blocks) and the IR of one attention fusion's kernel."""

    def __init__(self, ke):
        self.ke, self.b, self.e = ke, ke.b, ke.e
        parts = self.parts = parts_of_fusion(ke.fused)
        d1, d2 = self.d1, self.d2 = parts.scores_dot, parts.output_dot
        # batch ranks: of Q K^T, of P V and of the scores (torch's decomposition multiplies
        # over a flattened batch, reshaped to [batch, heads] around the softmax); each
        # flattens to the same number of matrices
        self.nb1, self.nb = len(d1.attrs.get("lhs_batch_dims", ())), len(d2.attrs.get("lhs_batch_dims", ()))
        self.nbs = parts.scores.shape.rank - 2
        nb1, nb = self.nb1, self.nb
        q_op, k_op = d1.operands
        v_op = d2.operands[1]
        self.batch = int(np.prod(d2.shape.dims[:nb])) if nb else 1
        self.sq, self.sk = d1.shape.dims[nb1], d1.shape.dims[nb1 + 1]
        self.q_contract, self.k_contract = d1.attrs["lhs_contracting_dims"][0], d1.attrs["rhs_contracting_dims"][0]
        self.v_contract = d2.attrs["rhs_contracting_dims"][0]
        self.q_row = nb1 + 1 if self.q_contract == nb1 else nb1
        self.k_row = nb1 + 1 if self.k_contract == nb1 else nb1
        self.v_col = nb + 1 if self.v_contract == nb else nb
        self.depth, self.dv = q_op.shape.dims[self.q_contract], d2.shape.dims[nb + 1]
        # each operand read where it lies: the array beneath its views, by strides from an offset
        (q_src, _, self.qs, self.q_off), (k_src, _, self.ks, self.k_off), (v_src, _, self.vs, self.v_off) = (
            operand_view(o) for o in (q_op, k_op, v_op))
        self.q_ptr, self.k_ptr, self.v_ptr = (ke.operand_pointer(o) for o in (q_src, k_src, v_src))
        self.out_strides = output_view(d2, ke.fused.root)
        self.pool = worker_pool()
        threads = self.pool.threads if self.pool is not None else 1
        self.bq, self.bk = block_sizes(self.batch, self.sq, self.sk, self.depth, self.dv, threads)
        self.lanes = host_jit().vector_bytes // 4
        self.dvp = _round_up(self.dv, self.lanes)        # accumulator rows padded to whole vectors
        self.nq, self.nk = -(-self.sq // self.bq), -(-self.sk // self.bk)
        self.tail = self.sk - (self.nk - 1) * self.bk     # keys in the last key block
        self.table = _block_table(_constant_mask(parts, self.nbs, ke.instr.operands), self.sq, self.sk,
                                  self.bq, self.bk)
        self.items = self.batch * self.nq
        work = self.batch * self.sq * self.sk * (self.depth + self.dv)
        self.n_tasks = min(self.items, TASKS_PER_THREAD * threads) if self.pool is not None and work >= (1 << 18) \
            else 1
        self.exp = fast_unary("exponential", F32)

    # --- small IR helpers ---------------------------------------------------------------------
    def buffer(self, count: int):
        """count floats on the task's stack (in the function's entry block), 64-byte aligned."""
        b = self.b
        here = b.block
        b.position_at_start(b.function.entry_basic_block)
        slot = b.alloca(F32, size=i64(count))
        slot.align = 64
        b.position_at_end(here)
        return slot

    def at(self, ptr, offset):
        return self.b.gep(ptr, [offset], source_etype=F32)

    def ld(self, ptr):
        return self.b.load(ptr, typ=F32)

    def byte_offset(self, ptr, elements):
        return self.b.gep(ptr, [self.b.mul(elements, i64(4))], source_etype=ir.IntType(8))

    def intrinsic(self, name: str, ret, args):
        return _intrinsic(self.b.module, name, ret, args)

    def row_vectors(self, row_ptr) -> list:
        vec = ir.VectorType(F32, self.lanes)
        return [self.b.load(self.b.gep(row_ptr, [i64(c * self.lanes)], source_etype=F32), typ=vec, align=4)
                for c in range(self.bk // self.lanes)]

    def horizontal(self, v, combine):
        """Fold the lanes of v with combine(lo, hi, lanes) (a tree of halves)."""
        b, n = self.b, self.lanes
        while n > 1:
            half = n // 2
            undef = ir.Constant(ir.VectorType(F32, n), ir.Undefined)
            lo = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, half), list(range(half, n))))
            v = combine(lo, hi, half)
            n = half
        return b.extract_element(v, ir.Constant(I32, 0))

    def vmax(self, lo, hi, n: int):
        vec = ir.VectorType(F32, n)
        return self.b.call(self.intrinsic(f"llvm.maxnum.v{n}f32", vec, [vec, vec]), [lo, hi])

    # --- the kernel ---------------------------------------------------------------------------
    def emit(self) -> None:
        module = self.b.module
        table_ty = ir.ArrayType(I32, 2 * self.nq)
        self.table_ty = table_ty
        self.table_global = ir.GlobalVariable(module, table_ty, module.get_unique_name("attention_blocks"))
        self.table_global.global_constant = True
        self.table_global.linkage = "internal"
        self.table_global.initializer = ir.Constant(table_ty, [int(x) for x in self.table.reshape(-1)])
        if self.n_tasks > 1:
            emit_parallel_tasks(self.b, self.pool, self.n_tasks, self.task)
        else:
            self.task(i64(0))

    def task(self, t) -> None:
        """Items t, t + n_tasks, ...: a causal mask's long and short blocks spread over tasks."""
        b, bq = self.b, self.bq
        ws_bytes = workspace_bytes("f32", bq, max(self.bk, self.dvp), max(self.depth, self.bk))
        st = SimpleNamespace(s=self.buffer(bq * self.bk), acc=self.buffer(bq * self.dvp),
                             t=self.buffer(bq * self.dvp), m=self.buffer(bq), l=self.buffer(bq), a=self.buffer(bq),
                             ws=self.buffer(ws_bytes // 4 + 16))

        def step(s):
            item = b.add(t, b.mul(s, i64(self.n_tasks)))
            with b.if_then(b.icmp_unsigned("<", item, i64(self.items))):
                self.e.push_scope()
                self.item(item, st)
                self.e.pop_scope()
        counted_loop(b, i64(0), i64(-(-self.items // self.n_tasks)), step, unrolled=False)

    def item(self, item, st) -> None:
        """One (batch element, query block): the accumulators set, every key block that
        holds a kept score folded in, the rows written."""
        b, bq, bk, nk = self.b, self.bq, self.bk, self.nk
        bi, qb = b.udiv(item, i64(self.nq)), b.urem(item, i64(self.nq))

        def batch_index(dims, rank):
            return delinearize(b, bi, dims[:rank], tuple(reversed(range(rank)))) if rank else ()

        def base(strides, index):
            off = i64(0)
            for d, ix in enumerate(index):
                off = b.add(off, b.mul(ix, i64(strides[d])))
            return off

        it = SimpleNamespace(bidx=batch_index(self.d2.shape.dims, self.nb),
                             bidx1=batch_index(self.d1.shape.dims, self.nb1),
                             bidxs=batch_index(self.parts.scores.shape.dims, self.nbs), q0=b.mul(qb, i64(bq)))
        rows = b.sub(i64(self.sq), it.q0)
        it.rows = b.select(b.icmp_unsigned("<", rows, i64(bq)), rows, i64(bq))
        it.q_base = b.add(b.add(base(self.qs, it.bidx1), i64(self.q_off)), b.mul(it.q0, i64(self.qs[self.q_row])))
        it.k_base = b.add(base(self.ks, it.bidx1), i64(self.k_off))
        it.v_base = b.add(base(self.vs, it.bidx), i64(self.v_off))
        it.o_base = base(self.out_strides, it.bidx)

        def init_row(i):
            b.store(ir.Constant(F32, NEG_INF), self.at(st.m, i))
            b.store(ir.Constant(F32, 0.0), self.at(st.l, i))
            counted_loop(b, i64(0), i64(self.dvp), lambda j: b.store(
                ir.Constant(F32, 0.0), self.at(st.acc, b.add(b.mul(i, i64(self.dvp)), j))))
        counted_loop(b, i64(0), it.rows, init_row, unrolled=False)

        def entry(k):
            ptr = b.gep(self.table_global, [i64(0), b.add(b.mul(qb, i64(2)), i64(k))], source_etype=self.table_ty)
            return b.zext(b.load(ptr, typ=I32), I64)
        first, end = entry(0), entry(1)
        full_end = i64(nk - 1) if self.tail < bk else i64(nk)
        stop = b.select(b.icmp_unsigned("<", end, full_end), end, full_end)
        counted_loop(b, first, stop, lambda kb: self.key_block(it, st, kb, bk), unrolled=False)
        if self.tail < bk:
            with b.if_then(b.icmp_unsigned("==", end, i64(nk))):
                self.key_block(it, st, i64(nk - 1), self.tail)
        counted_loop(b, i64(0), it.rows, lambda i: self.write_row(it, st, i), unrolled=False)

    def key_block(self, it, st, kb, n: int) -> None:
        """Fold keys [kb BK, kb BK + n) into the accumulators."""
        b, bk, dvp = self.b, self.bk, self.dvp
        k0 = b.mul(kb, i64(bk))
        # S = Q_blk K_blk^T: A = Q rows (row stride, depth stride), B[depth, key]
        emit_own_gemm(b, "f32", st.s, self.byte_offset(self.q_ptr, it.q_base),
                      self.byte_offset(self.k_ptr, b.add(it.k_base, b.mul(k0, i64(self.ks[self.k_row])))),
                      it.rows, i64(n), self.depth,
                      (self.qs[self.q_row], self.qs[self.q_contract], self.ks[self.k_contract], self.ks[self.k_row]),
                      bk, st.ws)
        counted_loop(b, i64(0), it.rows, lambda i: self.softmax_row(it, st, i, k0, n), unrolled=False)
        # T = P V_blk: A = P [rows, n] (row stride bk), B = V [key, dv]
        emit_own_gemm(b, "f32", st.t, st.s,
                      self.byte_offset(self.v_ptr, b.add(it.v_base, b.mul(k0, i64(self.vs[self.v_contract])))),
                      it.rows, i64(self.dv), n, (bk, 1, self.vs[self.v_contract], self.vs[self.v_col]), dvp, st.ws)

        def update(i):
            alpha = self.ld(self.at(st.a, i))

            def one(j):
                o = b.add(b.mul(i, i64(dvp)), j)
                b.store(b.fadd(b.fmul(self.ld(self.at(st.acc, o)), alpha), self.ld(self.at(st.t, o))),
                        self.at(st.acc, o))
            counted_loop(b, i64(0), i64(self.dv), one)
        counted_loop(b, i64(0), it.rows, update, unrolled=False)

    def softmax_row(self, it, st, i, k0, n: int) -> None:
        """Row i of the block: its scores through the fusion's ops, the online softmax step
        (m, l and the rescaling factor a), P in place of the scores."""
        b, e, bk, nb1 = self.b, self.e, self.bk, self.nb1
        q = b.add(it.q0, i)
        srow = b.mul(i, i64(bk))

        def read_scores(index):
            return self.ld(self.at(st.s, b.add(srow, b.sub(index[nb1 + 1], k0))))

        def score(j):
            e.push_scope()
            e.buffer_reads[id(self.d1)] = read_scores
            x = e.value(self.parts.scores, tuple(it.bidxs) + (q, b.add(k0, j)))
            del e.buffer_reads[id(self.d1)]
            e.pop_scope()
            b.store(x, self.at(st.s, b.add(srow, j)))
        counted_loop(b, i64(0), i64(n), score)
        if n < bk:
            counted_loop(b, i64(n), i64(bk), lambda j: b.store(ir.Constant(F32, NEG_INF),
                                                               self.at(st.s, b.add(srow, j))))
        row_ptr = self.at(st.s, srow)
        vectors = self.row_vectors(row_ptr)
        best = vectors[0]
        for v in vectors[1:]:
            best = self.vmax(best, v, self.lanes)
        m_old = self.ld(self.at(st.m, i))
        m_new = b.call(self.intrinsic("llvm.maxnum.f32", F32, [F32, F32]), [m_old, self.horizontal(best, self.vmax)])
        m_safe = b.select(b.fcmp_ordered("==", m_new, ir.Constant(F32, NEG_INF)), ir.Constant(F32, 0.0), m_new)
        alpha = self.exp(e, b.fsub(m_old, m_safe))
        b.store(m_new, self.at(st.m, i))
        b.store(alpha, self.at(st.a, i))

        def prob(j):
            ptr = self.at(st.s, b.add(srow, j))
            b.store(self.exp(e, b.fsub(self.ld(ptr), m_safe)), ptr)
        counted_loop(b, i64(0), i64(bk), prob)
        vectors = self.row_vectors(row_ptr)
        total = vectors[0]
        for v in vectors[1:]:
            total = b.fadd(total, v)
        lp = self.at(st.l, i)
        b.store(b.fadd(b.fmul(self.ld(lp), alpha), self.horizontal(total, lambda lo, hi, n: b.fadd(lo, hi))), lp)

    def write_row(self, it, st, i) -> None:
        b, nb = self.b, self.nb
        inv = self.ld(self.at(st.l, i))
        q = b.add(it.q0, i)
        # l == 0 exactly when every score of the row is -inf (any finite score adds exp(0) = 1,
        # a NaN makes l NaN)
        masked = b.fcmp_ordered("==", inv, ir.Constant(F32, 0.0))

        def one(j):
            value = b.fdiv(self.ld(self.at(st.acc, b.add(b.mul(i, i64(self.dvp)), j))), inv)
            if self.parts.zero_masked_rows:   # the graph's select: rows of -inf scores are 0
                value = b.select(masked, ir.Constant(F32, 0.0), value)
            at_out = b.add(it.o_base, b.add(b.mul(q, i64(self.out_strides[nb])),
                                            b.mul(j, i64(self.out_strides[nb + 1]))))
            b.store(value, self.at(self.ke.out_ptr, at_out))
        counted_loop(b, i64(0), i64(self.dv), one)
