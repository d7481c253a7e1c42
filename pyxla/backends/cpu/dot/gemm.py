"""pyxla's own matrix product, C = A B for f32 and f64: a tiled kernel in LLVM IR, compiled
once per process (like the worker pool) and called by generated code for batched dots
(codegen.py says when).

Why not always BLAS. OpenBLAS parallelises each call over its own threads, which then
wait for each other inside the call. For a batch of small products (attention's 64 heads of
256x256x64) that per-call handshake costs more than the arithmetic, and on a loaded machine
one descheduled BLAS thread stalls the other; a product per task of pyxla's pool, each on
one thread with no handshake, keeps both cores busy. One thread of this kernel runs at
OpenBLAS's single-thread speed on such products (measured: 256x256x64 and 256x64x256), and
at 0.90-1.01x of it on the blocks of the MLP's, attention's and the transformers' products
(docs/perf-log.md, 2026-11-27).

Summation order. Every element is

    c[i, j] = fma(a[i, K-1], b[K-1, j], ... fma(a[i, 1], b[1, j], fma(a[i, 0], b[0, j], +0)))

one fused multiply-add per term in k order, wherever the element lies in the tiles: the
result is a function of the row of A and the column of B alone.

Structure (BLIS's). `pyxla_gemm_<t>_<bits>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, ws)`
computes one product on the calling thread:

    for each NC-wide block of columns:
        for each KC-deep slice of K:
            for each MC rows:
                pack those rows of A: MR-high panels, k-major (zero past the edge)
                for each panel of B:
                    first MC rows only: pack a group of panels of the block's columns of B
                        when the panel starts one (NR-wide panels, k-major, zero past the edge)
                    for each panel of A: the micro-kernel, the next tile of C prefetched

When the columns are a single panel of B (NR or fewer: a classifier's 10 outputs), each value
of A is used once, and the tiles read A where it lies instead of packing it (micro_rows).

B's panels are packed where the first rows use them (OpenBLAS's order), in groups that fill
half of L2, depth by depth when B's rows are contiguous: packed a panel at a time before any
tile, each panel read kc rows a page apart (for a wide B) that the hardware prefetchers do not
follow, and came back from L3 to be used. Measured on a 2-core Zen 3 with one thread, packing
B took a third of 64x4096x1024's time (4.0 of 11.6 ms) and a sixth of 256x1024x1024's (1.35 of
7.8); packed so, about half of that (2.1 and 0.75 ms).

The micro-kernel keeps an MR x NR tile of C in 2 * MR vector registers (6 x 16 floats in
12 AVX2 registers, 8 x 32 in 16 AVX-512 registers), and per k broadcasts MR values of A
against two vectors of B, four depths a trip of its loop. Its first slice starts from
zero, later slices from the tile stored by the one before (a float is stored and loaded
exactly, so slicing K does not change the sums). An edge tile runs the same micro-kernel on a copy in a full-size tile
buffer. Packing reads A and B through (row stride, column stride), so transposed and
strided operands cost no copy beyond it.
`ws` is the caller's workspace of workspace_bytes(...) bytes, 64-byte aligned.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import llvmlite.ir as ir

from ...llvm.ir_types import (
    F32,
    F64,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    fma_intrinsic,
    i64,
    prefetch,
    smin,
    splat,
    transpose_square,
)
from ...llvm.loops import counted_loop
from ..runtime.llvm_jit import host_jit
from ..runtime.native_target import native_function
from ..tuning import machine
from ..tuning.params import GEMM_NC, GEMM_TABLE, GemmParams, gemm_defaults

NC = GEMM_NC               # columns of B packed at once: KC x NC floats, in L3

# void pyxla_gemm_<t>_<vector bits>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, workspace)
GEMM_TYPE = ir.FunctionType(VOID, [I64, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, I64, PTR])


@dataclass(frozen=True)
class Tiling:
    """The register tile and block sizes for one element type on this host."""
    element_bytes: int
    vector_bytes: int    # the host's: AVX2 32, AVX-512 64
    mr: int              # rows of the register tile (MR), which is MR x 2 vectors
    kc: int              # depth of a packed slice (KC): an NR-wide panel of B stays in L1
    mc: int              # rows of A packed at once (MC): MC x KC stays in L2
    nc: int = NC         # columns of B packed at once (NC): KC x NC stays in L3

    @property
    def lanes(self) -> int:
        return self.vector_bytes // self.element_bytes

    @property
    def nr(self) -> int:   # columns of the register tile (NR)
        return 2 * self.lanes


# (MR, KC, MC of f32) by vector width, chosen by single-thread GFLOP/s over the products the
# MLP and attention cut into blocks. AVX2 (16 registers: 12 accumulators), on Zen 3 (32 KiB
# L1, 512 KiB L2): KC 512 / MC 72 gave 85-93, KC 256 / MC 144 78-91, OpenBLAS 80-85.
# AVX-512 (32 registers: 16 accumulators), on a Xeon with 48 KiB L1 and 2 MiB L2 per core:
# 8 / 256 / 128 gave 157-184, 6 / 512 / 72 139-168, 12 / 256 / 96 130-175.
# Measured again with B packed where it is used and the 4-depth loop (one Zen 3 thread,
# 256x1024x1024, 256x4096x256, 512x512x512, 128x768x3072, 64x4096x1024): KC 256/384/512 with
# MC 72/96/144, and NC 512, all within the noise (a few percent) of 512 / 72 / 1024.
# These are the cost model's tables (tuning/params.py gemm_defaults), which shrinks them on
# smaller caches; a tuning database may choose others per product (tuning/selection.py).
BLOCKING = GEMM_TABLE


def tiling(dtype_name: str, params: GemmParams | None = None) -> Tiling:
    """The blocking for `dtype_name` on this host: the cost model's, with what `params`
    sets in its place."""
    size = {"f32": 4, "f64": 8}[dtype_name]
    vector_bytes = host_jit().vector_bytes
    d = gemm_defaults(vector_bytes, size, machine.cache_sizes())
    p = params or GemmParams()
    return Tiling(size, vector_bytes, p.mr or d.mr, p.kc or d.kc, p.mc or d.mc, p.nc or d.nc)


def sweep_panels(t: Tiling) -> int:
    """Panels of B packed together (GemmIr._emit_sweep) before the first rows' tiles use them:
    as many as fill half of L2, where the later rows' tiles find them."""
    return max(1, machine.cache_sizes().get("L2", 1 << 19) // 2 // (t.kc * t.nr * t.element_bytes))


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def workspace_bytes(dtype_name: str, m: int, n: int, k: int, params: GemmParams | None = None) -> int:
    """The workspace of one m x n x k product: packed rows of A (at most MC + MR high), packed
    columns of B (at most NC wide) at most KC deep, and an edge tile; 64-byte aligned parts."""
    t = tiling(dtype_name, params)
    depth = max(1, min(k, t.kc))
    parts = [_round_up(min(m, t.mc), t.mr) * depth, _round_up(min(n, t.nc), t.nr) * depth, t.mr * t.nr]
    return sum(_round_up(p * t.element_bytes, 64) for p in parts)


class GemmIr:
    """The module for one element type: the micro-kernel, packing, the product."""

    # rows of B ahead whose values the depth-by-depth packing prefetches (each row's run starts
    # a new page): 4 measured 2-5% faster than none on 64x4096x1024, 128x768x3072, 256x1024x1024
    sweep_ahead = 4
    # depths per trip of the micro-kernel's loop, its pointers stepped once a trip: 4 and 8
    # measured alike and 5-9% faster than 1 (2 after LLVM's unrolling, which recomputed the
    # addresses from the depth at every step) on the MLP's and BERT's blocks, one Zen 3 thread
    micro_unroll = 4


    def __init__(self, dtype_name: str, triple: str, t: Tiling | None = None, prepacked_b: bool = False):
        self.name = dtype_name
        self.t = t or tiling(dtype_name)
        self.prepacked_b = prepacked_b
        self.sweep_panels = sweep_panels(self.t)
        self.scalar = F32 if dtype_name == "f32" else F64
        self.vector = ir.VectorType(self.scalar, self.t.lanes)
        self.m = ir.Module(name=_symbol(dtype_name, self.t, prepacked_b))
        self.m.triple = triple
        self.fma = fma_intrinsic(self.m, self.vector)
        self.micro = self._emit_micro()
        self.micro_rows = self._emit_micro(rows_of_a=True)
        self.pack_a = self._emit_pack("pack_a", self.t.mr)
        if not prepacked_b:
            self.pack_b = self._emit_pack("pack_b", self.t.nr)
            self.sweep_b = self._emit_sweep("sweep_b", self.t.nr, self.pack_b)
        self.entry = self._emit_product()

    # helpers
    def _function(self, name: str, args: list, ret=VOID, internal=True) -> tuple[ir.Function, ir.IRBuilder]:
        fn = ir.Function(self.m, ir.FunctionType(ret, args), name=name)
        if internal:
            fn.linkage = "internal"
            fn.attributes.add("noinline")   # each piece optimised once: less for LLVM to compile
        return fn, ir.IRBuilder(fn.append_basic_block("start"))

    def _at(self, b: ir.IRBuilder, ptr, index):
        return b.gep(ptr, [index], source_etype=self.scalar)

    def _steps(self, b: ir.IRBuilder, total, step: int, body) -> None:
        """body(start, count) for start = 0, step, ... < total, count = min(step, total - start)."""
        chunks = b.udiv(b.add(total, i64(step - 1)), i64(step))

        def one(i):
            start = b.mul(i, i64(step))
            body(start, smin(b, i64(step), b.sub(total, start)))

        counted_loop(b, i64(0), chunks, one)

    # the micro-kernel
    def _emit_micro(self, rows_of_a: bool = False) -> ir.Function:
        """void micro(i64 kc, ptr ap, ptr bp, ptr c, i64 ldc, i1 accumulate): the MR x NR
        tile at c (rows ldc apart) = (accumulate ? itself : 0) + A panel x B panel.
        rows_of_a: micro_rows(..., i64 a_k, i64 a_r, i64 rows), reading A where it lies, row
        r's depth p at ap[r * a_r + p * a_k], rows from `rows` on reading the last row again
        (their results are not kept: the tile is then an edge tile's buffer)."""
        extra = [I64, I64, I64] if rows_of_a else []
        fn, b = self._function("gemm.micro_rows" if rows_of_a else "gemm.micro", [I64, PTR, PTR, PTR, I64, I1] + extra)
        kc, ap, bp, c, ldc, accumulate = fn.args[:6]
        lanes = self.t.lanes
        if rows_of_a:
            a_k, a_r, a_rows = fn.args[6:]
            row_starts = [self._at(b, ap, b.mul(smin(b, i64(r), b.sub(a_rows, i64(1))), a_r)) for r in range(self.t.mr)]
        tiles = [(r, h) for r in range(self.t.mr) for h in range(2)]

        def tile_ptr(r, h):
            return self._at(b, c, b.add(b.mul(i64(r), ldc), i64(h * lanes)))

        start = b.block
        load_block = b.append_basic_block("load_c")
        loop_pre = b.append_basic_block("loop_pre")
        b.cbranch(accumulate, load_block, loop_pre)
        b.position_at_end(load_block)
        loaded = [b.load(tile_ptr(r, h), typ=self.vector, align=self.t.element_bytes) for r, h in tiles]
        b.branch(loop_pre)
        b.position_at_end(loop_pre)
        initial = []
        for value in loaded:
            phi = b.phi(self.vector)
            phi.add_incoming(value, load_block)
            phi.add_incoming(ir.Constant(self.vector, None), start)
            initial.append(phi)
        # per depth: 2 vectors of B and MR broadcasts of A against them, `micro_unroll` depths
        # per trip with pointers stepped once per trip, then the depths left one per trip
        a_step = a_k if rows_of_a else i64(self.t.mr)
        unrolled = b.udiv(kc, i64(self.micro_unroll))
        rows = row_starts if rows_of_a else None
        accs, a_at, b_at = self._k_loop(b, unrolled, self.micro_unroll, initial, i64(0) if rows_of_a else ap, bp,
                                        a_step, rows)
        final, _, _ = self._k_loop(b, b.sub(kc, b.mul(unrolled, i64(self.micro_unroll))), 1, accs, a_at, b_at,
                                   a_step, rows)
        for (r, h), value in zip(tiles, final):
            b.store(value, tile_ptr(r, h), align=self.t.element_bytes)
        b.ret_void()
        return fn

    def _k_loop(self, b: ir.IRBuilder, trips, depths: int, accs: list, a_at, b_at, a_step, rows) -> tuple:
        """`trips` trips of `depths` depths each on the accumulators `accs` (MR x 2 vectors, in
        k order: one fma per term), A's depth at a_at (the next depth a_step elements on;
        rows: A read in place, row r at rows[r] + the offset a_at holds) and B's at b_at.
        Gives the accumulators and both positions after them."""
        lanes, mr = self.t.lanes, self.t.mr
        before = b.block
        loop = b.append_basic_block("k")
        after = b.append_basic_block("k.after")
        b.cbranch(b.icmp_signed(">", trips, i64(0)), loop, after)
        b.position_at_end(loop)
        trip = b.phi(I64)
        trip.add_incoming(i64(0), before)
        a_phi = b.phi(I64 if rows is not None else PTR)
        a_phi.add_incoming(a_at, before)
        b_phi = b.phi(PTR)
        b_phi.add_incoming(b_at, before)
        phis = []
        for value in accs:
            phi = b.phi(self.vector)
            phi.add_incoming(value, before)
            phis.append(phi)
        current = list(phis)
        for d in range(depths):
            bk = self._at(b, b_phi, i64(d * 2 * lanes))
            bv = [b.load(self._at(b, bk, i64(h * lanes)), typ=self.vector, align=self.t.element_bytes)
                  for h in range(2)]
            new = []
            for r in range(mr):
                if rows is not None:
                    at = self._at(b, rows[r], b.add(a_phi, b.mul(i64(d), a_step)))
                else:
                    at = self._at(b, a_phi, i64(d * mr + r))
                a = splat(b, self.vector, b.load(at, typ=self.scalar))
                for h in range(2):
                    new.append(b.call(self.fma, [a, bv[h], current[2 * r + h]]))
            current = new
        a_next = b.add(a_phi, b.mul(i64(depths), a_step)) if rows is not None else \
            self._at(b, a_phi, i64(depths * mr))
        b_next = self._at(b, b_phi, i64(depths * 2 * lanes))
        nxt = b.add(trip, i64(1))
        end = b.block
        trip.add_incoming(nxt, end)
        a_phi.add_incoming(a_next, end)
        b_phi.add_incoming(b_next, end)
        for phi, value in zip(phis, current):
            phi.add_incoming(value, end)
        b.cbranch(b.icmp_signed("<", nxt, trips), loop, after)
        b.position_at_end(after)
        out = []
        for value, acc in zip(accs, current):
            phi = b.phi(self.vector)
            phi.add_incoming(value, before)
            phi.add_incoming(acc, end)
            out.append(phi)
        a_out = b.phi(a_phi.type)
        a_out.add_incoming(a_at, before)
        a_out.add_incoming(a_next, end)
        b_out = b.phi(PTR)
        b_out.add_incoming(b_at, before)
        b_out.add_incoming(b_next, end)
        return out, a_out, b_out

    # packing
    def _emit_pack(self, name: str, width: int) -> ir.Function:
        """void pack(i64 count, i64 kc, ptr x, i64 x_rs, i64 x_cs, ptr packed): `count` lines
        of x (line i, depth k at x[i * x_rs + k * x_cs]) into panels of `width` lines, each
        panel k-major (packed[panel][k][line]), zero past the last line."""
        fn, b = self._function(f"gemm.{name}", [I64, I64, PTR, I64, I64, PTR])
        count, kc, x, x_rs, x_cs, packed = fn.args

        def panel(start, lines):
            out = self._at(b, packed, b.mul(start, kc))
            base = self._at(b, x, b.mul(start, x_rs))
            full = b.icmp_signed("==", lines, i64(width))
            vector = b.append_basic_block(f"{name}.vector")
            scalar = b.append_basic_block(f"{name}.scalar")
            strided = b.append_basic_block(f"{name}.strided")
            partial = b.append_basic_block(f"{name}.partial")
            after = b.append_basic_block(f"{name}.after")
            b.cbranch(full, scalar, partial)
            b.position_at_end(scalar)
            line_starts = [self._at(b, base, b.mul(i64(i), x_rs)) for i in range(width)]

            def strided_k(k):
                dest = self._at(b, out, b.mul(k, i64(width)))
                at = b.mul(k, x_cs)
                for i in range(width):
                    b.store(b.load(self._at(b, line_starts[i], at), typ=self.scalar), self._at(b, dest, i64(i)))

            not_contiguous = b.append_basic_block(f"{name}.not_contiguous")
            b.cbranch(b.icmp_signed("==", x_rs, i64(1)), vector, not_contiguous)
            b.position_at_end(not_contiguous)
            if width % self.t.lanes and width > self.t.lanes:
                b.branch(strided)
            else:   # each line's depths adjacent (a transposed B, a row-major A): transposed in registers
                transposing = b.append_basic_block(f"{name}.transposing")
                b.cbranch(b.icmp_signed("==", x_cs, i64(1)), transposing, strided)
                b.position_at_end(transposing)
                self._pack_transposing(b, line_starts, kc, out, width, strided_k)
                b.branch(after)

            b.position_at_end(vector)   # the lines' values at one depth are adjacent: a vector copy
            vec = ir.VectorType(self.scalar, width)

            def vector_k(k):
                value = b.load(self._at(b, base, b.mul(k, x_cs)), typ=vec, align=self.t.element_bytes)
                b.store(value, self._at(b, out, b.mul(k, i64(width))), align=self.t.element_bytes)

            counted_loop(b, i64(0), kc, vector_k)
            b.branch(after)

            b.position_at_end(strided)
            counted_loop(b, i64(0), kc, strided_k)
            b.branch(after)

            b.position_at_end(partial)   # the last panel: lines past the edge are zero

            def partial_k(k):
                dest = self._at(b, out, b.mul(k, i64(width)))
                for i in range(width):
                    b.store(ir.Constant(self.scalar, 0.0), self._at(b, dest, i64(i)))
                counted_loop(b, i64(0), lines, lambda i: b.store(
                    b.load(self._at(b, base, b.add(b.mul(i, x_rs), b.mul(k, x_cs))), typ=self.scalar),
                    self._at(b, dest, i)))

            counted_loop(b, i64(0), kc, partial_k)
            b.branch(after)
            b.position_at_end(after)

        self._steps(b, count, width, panel)
        b.ret_void()
        return fn

    def _pack_transposing(self, b: ir.IRBuilder, line_starts: list, kc, out, width: int, rest_k) -> None:
        """One full panel whose lines each hold their depths adjacently (a transposed B, [n, k]
        row-major, or a row-major A): per `lanes` depths, each `lanes` lines' vectors
        transposed in registers (llvm/ir_types.py transpose_square) into the depths' vectors
        of the panel; the depths past the last whole group by rest_k(k). A panel narrower than
        a vector (A's MR = 6 lines of 8 lanes) transposes its last line again in the missing
        lines' places and stores each depth's first `width` lanes. Element by element this was
        2 x width scalar accesses a depth (measured on a 2-core Zen 3, one thread: packing
        128x1024x1024's transposed B took a fifth of the product)."""
        lanes = self.t.lanes
        groups = b.udiv(kc, i64(lanes))
        narrow = ir.Constant(ir.VectorType(I32, width), list(range(width))) if width < lanes else None

        def group(g):
            k0 = b.mul(g, i64(lanes))
            for first in range(0, width, lanes):
                rows = [b.load(self._at(b, line_starts[min(first + i, width - 1)], k0), typ=self.vector,
                               align=self.t.element_bytes) for i in range(lanes)]
                for d, column in enumerate(transpose_square(b, rows)):
                    at = b.add(b.mul(b.add(k0, i64(d)), i64(width)), i64(first))
                    if narrow is not None:
                        column = b.shuffle_vector(column, ir.Constant(self.vector, ir.Undefined), narrow)
                    b.store(column, self._at(b, out, at), align=self.t.element_bytes)

        counted_loop(b, i64(0), groups, group)
        counted_loop(b, b.mul(groups, i64(lanes)), kc, rest_k)

    def _emit_sweep(self, name: str, width: int, pack: ir.Function) -> ir.Function:
        """void sweep(i64 count, i64 kc, ptr x, i64 x_rs, i64 x_cs, ptr packed): as `pack`, but
        when the lines are adjacent (x_rs 1: B's rows, a row of count values per depth) the whole
        panels are packed depth by depth, reading each depth's values in one run: a panel at a
        time reads `width` values from each of kc rows, a page apart for a wide B, which the
        hardware prefetchers do not follow (measured on a 2-core Zen 3, one thread: packing
        64x4096x1024's B took 4 ms a panel at a time, 2 ms depth by depth)."""
        fn, b = self._function(f"gemm.{name}", [I64, I64, PTR, I64, I64, PTR])
        count, kc, x, x_rs, x_cs, packed = fn.args
        whole = b.udiv(count, i64(width))
        sweep = b.and_(b.icmp_signed("==", x_rs, i64(1)), b.icmp_signed(">", whole, i64(1)))
        with b.if_else(sweep) as (then, otherwise):
            with then:
                vec = ir.VectorType(self.scalar, width)

                def depth(k):
                    row = self._at(b, x, b.mul(k, x_cs))
                    ahead = self._at(b, x, b.mul(b.add(k, i64(self.sweep_ahead)), x_cs))
                    out = self._at(b, packed, b.mul(k, i64(width)))

                    def one(p):
                        prefetch(b, self._at(b, ahead, b.mul(p, i64(width))))
                        b.store(b.load(self._at(b, row, b.mul(p, i64(width))), typ=vec, align=self.t.element_bytes),
                                self._at(b, out, b.mul(p, b.mul(kc, i64(width)))), align=self.t.element_bytes)

                    counted_loop(b, i64(0), whole, one)

                counted_loop(b, i64(0), kc, depth)
                done = b.mul(whole, i64(width))
                b.call(pack, [b.sub(count, done), kc, self._at(b, x, done), x_rs, x_cs,
                              self._at(b, packed, b.mul(done, kc))])
            with otherwise:
                b.call(pack, [count, kc, x, x_rs, x_cs, packed])
        b.ret_void()
        return fn

    # a product
    def _emit_product(self) -> ir.Function:
        """pyxla_gemm_<t>_<bits> (GEMM_TYPE): C[m, n] (rows ldc apart) = A[m, k] B[k, n], element
        (i, p) of A at a[i * a_rs + p * a_cs], element (p, j) of B at b[p * b_rs + j * b_cs].
        The prepacked variant (..._prepacked) reads B already in its panels (dot/plan.py
        GemmPanels, made with this blocking): b is the product's panels, b_rs its columns
        rounded up to whole panels, b_cs the column (a whole number of panels) where this
        product's C starts."""
        fn, b = self._function(self.m.name, list(GEMM_TYPE.args), internal=False)
        m, n, k, a, a_rs, a_cs, bm, b_rs, b_cs, c, ldc, workspace = fn.args
        t = self.t

        def part_bytes(lines, most: int, step: int, depth):   # as workspace_bytes lays them out
            lines = b.mul(b.udiv(b.add(smin(b, lines, i64(most)), i64(step - 1)), i64(step)), i64(step))
            return b.and_(b.add(b.mul(b.mul(lines, depth), i64(t.element_bytes)), i64(63)), i64(~63))

        depth = smin(b, k, i64(t.kc))
        ap = workspace
        bp = b.gep(ap, [part_bytes(m, t.mc, t.mr, depth)], source_etype=ir.IntType(8))
        edge = b.gep(bp, [part_bytes(n, t.nc, t.nr, depth)], source_etype=ir.IntType(8))

        zero_k = b.append_basic_block("zero_k")
        work = b.append_basic_block("work")
        b.cbranch(b.icmp_signed("==", k, i64(0)), zero_k, work)

        b.position_at_end(zero_k)   # an empty sum: C = 0
        counted_loop(b, i64(0), m, lambda i: counted_loop(
            b, i64(0), n, lambda j: b.store(ir.Constant(self.scalar, 0.0),
                                            self._at(b, c, b.add(b.mul(i, ldc), j)))))
        b.ret_void()

        b.position_at_end(work)

        def columns(jc, nc):
            def slice_k(pc, kc):
                accumulate = b.icmp_signed(">", pc, i64(0))
                if self.prepacked_b:
                    return prepacked_slice(jc, nc, pc, kc, accumulate)
                b_slice = self._at(b, bm, b.add(b.mul(pc, b_rs), b.mul(jc, b_cs)))

                # a single panel of B: packed first, and A's rows read where they lie (each value
                # is used once); else B's panels packed by the first rows' tiles, and A packed
                narrow = b.icmp_signed("<=", nc, i64(t.nr))
                with b.if_then(narrow):
                    b.call(self.pack_b, [nc, kc, b_slice, b_cs, b_rs, bp])

                def rows(ic, mc):
                    a_at = self._at(b, a, b.add(b.mul(ic, a_rs), b.mul(pc, a_cs)))
                    with b.if_then(b.not_(narrow)):
                        b.call(self.pack_a, [mc, kc, a_at, a_rs, a_cs, ap])
                    first = b.and_(b.icmp_signed("==", ic, i64(0)), b.not_(narrow))
                    group = self.sweep_panels * t.nr

                    def pack_panel(jr, nr):   # a group of NR-wide panels of B, before their first use
                        starts = b.icmp_signed("==", b.urem(jr, i64(group)), i64(0))
                        with b.if_then(b.and_(first, starts)):
                            b.call(self.sweep_b, [smin(b, i64(group), b.sub(nc, jr)), kc,
                                                  self._at(b, b_slice, b.mul(jr, b_cs)), b_cs, b_rs,
                                                  self._at(b, bp, b.mul(jr, kc))])

                    self.tiles(b, kc, ic, mc, jc, nc, c, ap, bp, edge, ldc, accumulate, pack_panel,
                               (a_at, a_rs, a_cs, narrow))

                self._steps(b, m, t.mc, rows)

            self._steps(b, k, t.kc, slice_k)

        def prepacked_slice(jc, nc, pc, kc, accumulate):
            # B's panels as GemmPanels lays them out: the slice at depth pc starts pc * b_rs
            # elements in (b_rs: the product's columns rounded up to whole panels), and the
            # column b_cs + jc (a whole number of panels) at that times kc in the slice
            bpanels = self._at(b, bm, b.add(b.mul(pc, b_rs), b.mul(b.add(b_cs, jc), kc)))
            narrow = b.icmp_signed("<=", nc, i64(t.nr))

            def rows(ic, mc):
                a_at = self._at(b, a, b.add(b.mul(ic, a_rs), b.mul(pc, a_cs)))
                with b.if_then(b.not_(narrow)):
                    b.call(self.pack_a, [mc, kc, a_at, a_rs, a_cs, ap])
                self.tiles(b, kc, ic, mc, jc, nc, c, ap, bpanels, edge, ldc, accumulate, None,
                           (a_at, a_rs, a_cs, narrow))

            self._steps(b, m, t.mc, rows)

        self._steps(b, n, t.nc, columns)
        b.ret_void()
        return fn

    def tiles(self, b, kc, ic, mc, jc, nc, c, ap, bp, edge, ldc, accumulate, pack_panel=None, a_rows=None) -> None:
        """The register tiles of rows ic.. (mc, packed at ap) by columns jc.. (nc, packed at bp):
        the micro-kernel on whole tiles, the edge kernel on the rest (also the weight-gradient
        route's, conv/weight_gradient.py). pack_panel(jr, nr), when given, packs each panel of
        B right before its tiles: the panel is then in L1 for them, instead of coming back
        from L2 or L3 after the whole KC x NC block was packed. a_rows, when given, is
        (A's element at row ic, the slice's first depth; a_rs; a_cs; in place): where `in
        place` (an i1) holds, A is read there, unpacked.
        When B is a single panel, each value of A is used once: packing A cost as much as the
        products (measured, 256x1024x10 on one Zen 3 thread: 0.08 of 0.20 ms)."""
        t = self.t

        def column_panel(jr, nr):
            bpanel = self._at(b, bp, b.mul(jr, kc))
            if pack_panel is not None:
                pack_panel(jr, nr)

            def row_panel(ir_, mr):
                apanel = self._at(b, ap, b.mul(ir_, kc))

                def micro(tile, ldc_):
                    if a_rows is None:
                        b.call(self.micro, [kc, apanel, bpanel, tile, ldc_, accumulate])
                        return
                    a_at, a_rs, a_cs, in_place = a_rows
                    with b.if_else(in_place) as (unpacked, packed):
                        with unpacked:
                            b.call(self.micro_rows, [kc, self._at(b, a_at, b.mul(ir_, a_rs)), bpanel, tile, ldc_,
                                                     accumulate, a_cs, a_rs, mr])
                        with packed:
                            b.call(self.micro, [kc, apanel, bpanel, tile, ldc_, accumulate])
                tile = self._at(b, c, b.add(b.mul(b.add(ic, ir_), ldc), b.add(jc, jr)))
                whole = b.and_(b.icmp_signed("==", mr, i64(t.mr)), b.icmp_signed("==", nr, i64(t.nr)))
                with b.if_else(whole) as (then, otherwise):
                    with then:
                        # the next tile's rows of C (below, or at the top of the next panel)
                        # fetched while this one computes: the micro-kernel's first FMAs wait
                        # for its tile when accumulating, and its stores for their lines
                        # (measured 1-3% on the MLP's and BERT's blocks, one Zen 3 thread)
                        below = b.icmp_signed("<", b.add(ir_, i64(t.mr)), mc)
                        following = b.select(below, self._at(b, tile, b.mul(i64(t.mr), ldc)),
                                             self._at(b, c, b.add(b.mul(ic, ldc), b.add(jc, b.add(jr, i64(t.nr))))))
                        for r in range(t.mr):
                            row = self._at(b, following, b.mul(i64(r), ldc))
                            prefetch(b, row)
                            prefetch(b, self._at(b, row, i64(t.nr - 1)))
                        micro(tile, ldc)
                    with otherwise:
                        self._edge_tile(b, tile, ldc, accumulate, mr, nr, edge, micro)

            self._steps(b, mc, t.mr, row_panel)

        self._steps(b, nc, t.nr, column_panel)

    def _edge_tile(self, b, tile, ldc, accumulate, mr, nr, edge, micro) -> None:
        """A tile cut by the edge of C: the micro-kernel on the full-size buffer `edge`,
        holding the tile's part of C when accumulating, then that part copied back."""
        nr_full = self.t.nr

        def copy(to_edge: bool):
            def row(i):
                def col(j):
                    inside = self._at(b, tile, b.add(b.mul(i, ldc), j))
                    buffer = self._at(b, edge, b.add(b.mul(i, i64(nr_full)), j))
                    src, dst = (inside, buffer) if to_edge else (buffer, inside)
                    b.store(b.load(src, typ=self.scalar), dst)
                counted_loop(b, i64(0), nr, col)
            counted_loop(b, i64(0), mr, row)

        with b.if_then(accumulate):
            copy(True)
        micro(edge, i64(nr_full))
        copy(False)


def gemm_address(dtype_name: str, params: GemmParams | None = None, prepacked_b: bool = False) -> int:
    """The address of the kernel for the host's vector width (llvm_jit.LlvmJit.vector_bytes;
    a test may narrow it) and the blocking `params` choose (prepacked_b: the variant reading
    B in its panels), compiled on first use, once per process, width and blocking."""
    return _kernel_address(dtype_name, host_jit().vector_bytes, tiling(dtype_name, params), prepacked_b)


@cache
def _kernel_address(dtype_name: str, vector_bytes: int, t: Tiling, prepacked_b: bool) -> int:
    jit = host_jit()
    triple = jit.target_machine.triple
    name = _symbol(dtype_name, t, prepacked_b)
    return jit.compile_helper(name, lambda: str(GemmIr(dtype_name, triple, t, prepacked_b).m), (name,),
                              recipe=(dtype_name, triple, t, prepacked_b))[name]


def _symbol(dtype_name: str, t: Tiling, prepacked_b: bool = False) -> str:
    """The default blocking's kernel keeps its plain name; another names its blocking."""
    name = f"pyxla_gemm_{dtype_name}_{8 * t.vector_bytes}"
    d = tiling(dtype_name)
    if (t.mr, t.kc, t.mc, t.nc) != (d.mr, d.kc, d.mc, d.nc):
        name += f"_mr{t.mr}_kc{t.kc}_mc{t.mc}_nc{t.nc}"
    return name + "_prepacked" if prepacked_b else name


_BLOCKED = re.compile(r"pyxla_gemm_(f32|f64)_(\d+)(?:_mr(\d+)_kc(\d+)_mc(\d+)_nc(\d+))?(_prepacked)?$")


def kernel_symbol(dtype_name: str, params: GemmParams | None = None, prepacked_b: bool = False) -> str:
    """The kernel's function name for the host's vector width and the blocking `params` choose."""
    return _symbol(dtype_name, tiling(dtype_name, params), prepacked_b)


def address_of_symbol(symbol: str) -> int | None:
    """This process's address of the GEMM kernel named `symbol` (compiled when needed), or
    None when it is no GEMM kernel of this host's width (the executable cache's loader)."""
    match = _BLOCKED.match(symbol)
    if match is None or int(match.group(2)) != 8 * host_jit().vector_bytes:
        return None
    dt = match.group(1)
    blocking = match.groups()[2:6]
    params = GemmParams(*map(int, blocking)) if blocking[0] is not None else None
    return gemm_address(dt, params, match.group(7) is not None)


def kernel_ir(dtype_name: str, params: GemmParams | None = None, prepacked_b: bool = False) -> str:
    """The kernel's module for the host's vector width (an object file links it in)."""
    return str(GemmIr(dtype_name, host_jit().target_machine.triple, tiling(dtype_name, params), prepacked_b).m)


def emit_own_gemm(b: ir.IRBuilder, dtype_name: str, c_ptr, a_ptr, b_ptr, m, n, k: int, strides: tuple, ldc: int,
                  workspace, params: GemmParams | None = None, prepacked_b: bool = False) -> None:
    """C[m,n] (rows ldc apart) = A[m,k] @ B[k,n] on the calling thread; m and n are ints or
    i64 values, strides is (a_rs, a_cs, b_rs, b_cs) in elements, `workspace` holds
    workspace_bytes(dtype_name, m, n, k, params) bytes (of the largest m and n), 64-byte
    aligned; `params` chooses the blocking (tuning/params.py). prepacked_b: b_ptr is B in
    its panels (the prepacked kernel's b, b_rs, b_cs: see GemmIr._emit_product)."""
    a_rs, a_cs, b_rs, b_cs = strides

    def value(x):
        return i64(x) if isinstance(x, int) else x

    fn = native_function(b, GEMM_TYPE, kernel_symbol(dtype_name, params, prepacked_b),
                         lambda: gemm_address(dtype_name, params, prepacked_b),
                         lambda: kernel_ir(dtype_name, params, prepacked_b))
    b.call(fn, [value(m), value(n), i64(k), a_ptr, i64(a_rs), i64(a_cs), b_ptr, value(b_rs),
                value(b_cs), c_ptr, i64(ldc), workspace])
