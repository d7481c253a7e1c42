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
    fused = ke.fused
    parts = parts_of_fusion(fused)
    b = ke.b
    e = ke.e
    d1, d2 = parts.scores_dot, parts.output_dot
    # batch ranks: of Q K^T, of P V and of the scores (torch's decomposition multiplies over
    # a flattened batch, reshaped to [batch, heads] around the softmax); each flattens to the
    # same number of matrices
    nb1, nb = len(d1.attrs.get("lhs_batch_dims", ())), len(d2.attrs.get("lhs_batch_dims", ()))
    nbs = parts.scores.shape.rank - 2
    q_op, k_op = d1.operands
    v_op = d2.operands[1]
    batch_dims = d2.shape.dims[:nb]
    batch = int(np.prod(batch_dims)) if nb else 1
    sq, sk = d1.shape.dims[nb1], d1.shape.dims[nb1 + 1]
    q_contract, k_contract = d1.attrs["lhs_contracting_dims"][0], d1.attrs["rhs_contracting_dims"][0]
    v_contract = d2.attrs["rhs_contracting_dims"][0]
    q_row = nb1 + 1 if q_contract == nb1 else nb1
    k_row = nb1 + 1 if k_contract == nb1 else nb1
    v_col = nb + 1 if v_contract == nb else nb
    depth, dv = q_op.shape.dims[q_contract], d2.shape.dims[nb + 1]
    # each operand read where it lies: the array beneath its views, by strides from an offset
    (q_src, _, qs, q_off), (k_src, _, ks, k_off), (v_src, _, vs, v_off) = (operand_view(o) for o in (q_op, k_op, v_op))
    q_ptr, k_ptr, v_ptr = (ke.operand_pointer(o) for o in (q_src, k_src, v_src))
    out_strides = output_view(d2, fused.root)
    pool = worker_pool()
    threads = pool.threads if pool is not None else 1
    bq, bk = block_sizes(batch, sq, sk, depth, dv, threads)
    lanes = host_jit().vector_bytes // 4
    dvp = _round_up(dv, lanes)           # accumulator rows padded to whole vectors
    nq, nk = -(-sq // bq), -(-sk // bk)
    tail = sk - (nk - 1) * bk            # keys in the last key block
    kept = _constant_mask(parts, nbs, ke.instr.operands)
    table = _block_table(kept, sq, sk, bq, bk)
    items = batch * nq
    work = batch * sq * sk * (depth + dv)
    n_tasks = min(items, TASKS_PER_THREAD * threads) if pool is not None and work >= (1 << 18) else 1

    module = b.module
    table_ty = ir.ArrayType(I32, 2 * nq)
    table_global = ir.GlobalVariable(module, table_ty, module.get_unique_name("attention_blocks"))
    table_global.global_constant = True
    table_global.linkage = "internal"
    table_global.initializer = ir.Constant(table_ty, [int(x) for x in table.reshape(-1)])
    ws_bytes = workspace_bytes("f32", bq, max(bk, dvp), max(depth, bk))
    exp = fast_unary("exponential", F32)
    vec = ir.VectorType(F32, lanes)
    vmax = _intrinsic(module, f"llvm.maxnum.v{lanes}f32", vec, [vec, vec])
    smax = _intrinsic(module, "llvm.maxnum.f32", F32, [F32, F32])

    def buffer(count: int, ty=F32):
        here = b.block
        b.position_at_start(b.function.entry_basic_block)
        slot = b.alloca(ty, size=i64(count))
        slot.align = 64
        b.position_at_end(here)
        return slot

    def at(ptr, offset, ty=F32):
        return b.gep(ptr, [offset], source_etype=ty)

    def f32_at(ptr, offset):
        return at(ptr, offset)

    def ld(ptr):
        return b.load(ptr, typ=F32)

    def byte_offset(ptr, elements):
        return b.gep(ptr, [b.mul(elements, i64(4))], source_etype=ir.IntType(8))

    def horizontal(v, combine):
        """Fold the lanes of v with combine (a tree of halves)."""
        n = lanes
        while n > 1:
            half = n // 2
            lo = b.shuffle_vector(v, ir.Constant(ir.VectorType(F32, n), ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(v, ir.Constant(ir.VectorType(F32, n), ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, half), list(range(half, n))))
            v = combine(lo, hi, half)
            n = half
        return b.extract_element(v, ir.Constant(I32, 0))

    def one_item(item, s_buf, acc, t_buf, m_buf, l_buf, a_buf, ws):
        bi = b.udiv(item, i64(nq))
        qb = b.urem(item, i64(nq))
        bidx = delinearize(b, bi, batch_dims, tuple(reversed(range(nb)))) if nb else ()
        bidx1 = delinearize(b, bi, d1.shape.dims[:nb1], tuple(reversed(range(nb1)))) if nb1 else ()
        bidxs = delinearize(b, bi, parts.scores.shape.dims[:nbs], tuple(reversed(range(nbs)))) if nbs else ()
        q0 = b.mul(qb, i64(bq))
        rows = b.sub(i64(sq), q0)
        rows = b.select(b.icmp_unsigned("<", rows, i64(bq)), rows, i64(bq))

        def base(strides, index):
            off = i64(0)
            for d, ix in enumerate(index):
                off = b.add(off, b.mul(ix, i64(strides[d])))
            return off

        q_base = b.add(b.add(base(qs, bidx1), i64(q_off)), b.mul(q0, i64(qs[q_row])))
        k_base, v_base = b.add(base(ks, bidx1), i64(k_off)), b.add(base(vs, bidx), i64(v_off))
        o_base = base(out_strides, bidx)

        def init_row(i):
            b.store(ir.Constant(F32, NEG_INF), f32_at(m_buf, i))
            b.store(ir.Constant(F32, 0.0), f32_at(l_buf, i))
            counted_loop(b, i64(0), i64(dvp), lambda j: b.store(ir.Constant(F32, 0.0),
                                                                 f32_at(acc, b.add(b.mul(i, i64(dvp)), j))))
        counted_loop(b, i64(0), rows, init_row, unrolled=False)

        def key_block(kb, n: int):
            k0 = b.mul(kb, i64(bk))
            # S = Q_blk K_blk^T: A = Q rows (row stride, depth stride), B[depth, key]
            emit_own_gemm(b, "f32", s_buf, byte_offset(q_ptr, q_base),
                          byte_offset(k_ptr, b.add(k_base, b.mul(k0, i64(ks[k_row])))), rows, i64(n), depth,
                          (qs[q_row], qs[q_contract], ks[k_contract], ks[k_row]), bk, ws)

            def row(i):
                q = b.add(q0, i)
                srow = b.mul(i, i64(bk))

                def read_scores(index):
                    return ld(f32_at(s_buf, b.add(srow, b.sub(index[nb1 + 1], k0))))

                def score(j):
                    e.push_scope()
                    e.buffer_reads[id(d1)] = read_scores
                    x = e.value(parts.scores, tuple(bidxs) + (q, b.add(k0, j)))
                    del e.buffer_reads[id(d1)]
                    e.pop_scope()
                    b.store(x, f32_at(s_buf, b.add(srow, j)))
                counted_loop(b, i64(0), i64(n), score)
                if n < bk:
                    counted_loop(b, i64(n), i64(bk), lambda j: b.store(ir.Constant(F32, NEG_INF),
                                                                       f32_at(s_buf, b.add(srow, j))))
                vptr = f32_at(s_buf, srow)
                vectors = [b.load(b.gep(vptr, [i64(c * lanes)], source_etype=F32), typ=vec, align=4)
                           for c in range(bk // lanes)]
                best = vectors[0]
                for v in vectors[1:]:
                    best = b.call(vmax, [best, v])
                block_max = horizontal(best, lambda lo, hi, n: b.call(
                    _intrinsic(module, f"llvm.maxnum.v{n}f32", ir.VectorType(F32, n),
                               [ir.VectorType(F32, n)] * 2), [lo, hi]))
                m_old = ld(f32_at(m_buf, i))
                m_new = b.call(smax, [m_old, block_max])
                m_safe = b.select(b.fcmp_ordered("==", m_new, ir.Constant(F32, NEG_INF)), ir.Constant(F32, 0.0), m_new)
                alpha = exp(e, b.fsub(m_old, m_safe))
                b.store(m_new, f32_at(m_buf, i))
                b.store(alpha, f32_at(a_buf, i))

                def prob(j):
                    ptr = f32_at(s_buf, b.add(srow, j))
                    b.store(exp(e, b.fsub(ld(ptr), m_safe)), ptr)
                counted_loop(b, i64(0), i64(bk), prob)
                vectors = [b.load(b.gep(vptr, [i64(c * lanes)], source_etype=F32), typ=vec, align=4)
                           for c in range(bk // lanes)]
                total = vectors[0]
                for v in vectors[1:]:
                    total = b.fadd(total, v)
                row_sum = horizontal(total, lambda lo, hi, n: b.fadd(lo, hi))
                lp = f32_at(l_buf, i)
                b.store(b.fadd(b.fmul(ld(lp), alpha), row_sum), lp)
            counted_loop(b, i64(0), rows, row, unrolled=False)
            # T = P V_blk: A = P [rows, n] (row stride bk), B = V [key, dv]
            emit_own_gemm(b, "f32", t_buf, s_buf, byte_offset(v_ptr, b.add(v_base, b.mul(k0, i64(vs[v_contract])))),
                          rows, i64(dv), n, (bk, 1, vs[v_contract], vs[v_col]), dvp, ws)

            def update(i):
                alpha = ld(f32_at(a_buf, i))

                def one(j):
                    o = b.add(b.mul(i, i64(dvp)), j)
                    b.store(b.fadd(b.fmul(ld(f32_at(acc, o)), alpha), ld(f32_at(t_buf, o))), f32_at(acc, o))
                counted_loop(b, i64(0), i64(dv), one)
            counted_loop(b, i64(0), rows, update, unrolled=False)

        first = b.load(b.gep(table_global, [i64(0), b.mul(qb, i64(2))], source_etype=table_ty), typ=I32)
        end = b.load(b.gep(table_global, [i64(0), b.add(b.mul(qb, i64(2)), i64(1))], source_etype=table_ty), typ=I32)
        first, end = b.zext(first, I64), b.zext(end, I64)
        full_end = i64(nk - 1) if tail < bk else i64(nk)
        stop = b.select(b.icmp_unsigned("<", end, full_end), end, full_end)
        counted_loop(b, first, stop, lambda kb: key_block(kb, bk), unrolled=False)
        if tail < bk:
            with b.if_then(b.icmp_unsigned("==", end, i64(nk))):
                key_block(i64(nk - 1), tail)

        def write(i):
            inv = ld(f32_at(l_buf, i))
            q = b.add(q0, i)
            # l == 0 exactly when every score of the row is -inf (any finite score adds
            # exp(0) = 1, a NaN makes l NaN)
            masked = b.fcmp_ordered("==", inv, ir.Constant(F32, 0.0))

            def one(j):
                value = b.fdiv(ld(f32_at(acc, b.add(b.mul(i, i64(dvp)), j))), inv)
                if parts.zero_masked_rows:   # the graph's select: rows of -inf scores are 0
                    value = b.select(masked, ir.Constant(F32, 0.0), value)
                at_out = b.add(o_base, b.add(b.mul(q, i64(out_strides[nb])), b.mul(j, i64(out_strides[nb + 1]))))
                b.store(value, f32_at(ke.out_ptr, at_out))
            counted_loop(b, i64(0), i64(dv), one)
        counted_loop(b, i64(0), rows, write, unrolled=False)

    def task(t):
        s_buf = buffer(bq * bk)
        acc = buffer(bq * dvp)
        t_buf = buffer(bq * dvp)
        m_buf, l_buf, a_buf = buffer(bq), buffer(bq), buffer(bq)
        ws = buffer(ws_bytes // 4 + 16)

        def item_body(item):
            e.push_scope()
            one_item(item, s_buf, acc, t_buf, m_buf, l_buf, a_buf, ws)
            e.pop_scope()
        # items t, t + n_tasks, ...: a causal mask's long and short blocks spread over tasks
        per_task = -(-items // n_tasks)

        def step(s):
            item = b.add(t, b.mul(s, i64(n_tasks)))
            with b.if_then(b.icmp_unsigned("<", item, i64(items))):
                item_body(item)
        counted_loop(b, i64(0), i64(per_task), step, unrolled=False)

    if n_tasks > 1:
        emit_parallel_tasks(b, pool, n_tasks, task)
    else:
        task(i64(0))
