"""pyxla's matrix-vector product y = x M for f32 and f64 (a canonical dot with m == 1, or
n == 1 read the other way round): two kernels in LLVM IR, compiled once per process like the
GEMM (dot/gemm.py), and the dot cut into parts on the worker pool, the output fusion's
epilogue (bias, ReLU) applied to each part's results once they are final. codegen.py routes
every f32/f64 canonical dot with m or n of 1 here.

Why not the GEMM. A matrix-vector product does one multiply-add per element of M, each read
once: it is bound by memory bandwidth, not arithmetic. The GEMM packs M into panels first
(a second read and a write of every element) and runs register tiles of which 7/8 is
padding when m == 1; BLAS's sgemm does much the same. Here every element of M is read once,
where it lies, by vector loads of the host's width (llvm_jit.LlvmJit.vector_bytes).

The kernels, on one thread (`count` results, depth `k`, rows of M `ld` elements apart):

    rows   M is [k, count] (B of a dot as it comes): y = 0; then per ROWS_AT_ONCE rows of M
           one pass over y, y[j] = fma(x[p+3], M[p+3, j], ... fma(x[p], M[p, j], y[j])):
           ROWS_AT_ONCE contiguous streams, and y's loads and stores (in L1) cut by as much
    dots   M is [count, k] (B transposed): y[j] = x . M[j, :] for DOTS_AT_ONCE rows at once,
           each with ACCUMULATORS vector accumulators (one load of x serves them all), the
           lanes summed at the end of the row

`pyxla_gemv_<rows|dots>_<t>_<bits>(k, count, x, m, ld, y)`. Elements past the last whole
vector (odd k or count) take scalar fused multiply-adds. The vectors are explicit: LLVM does
not vectorise a float dot product (it may not reassociate the sum).

The parts. Each task should stream one contiguous run of M: then the hardware prefetchers
keep up and the two cores together reach the bandwidth OpenBLAS's sgemv reaches. With the
dots kernel a part is a run of whole rows of M, so a part is a block of y. With the rows
kernel a block of y would read a short piece of every row of M (measured, 1x9216x4096: 8
column blocks 29 GB/s, 2 column blocks 40, 8 slices of rows 45); so a part is a slice of at
least MIN_SLICE_ROWS whole rows of M, into a partial y of its own in kernel scratch, and the
partials are summed in order afterwards (count x slices additions, besides k x count
multiply-adds), then the epilogue runs. Only when k is too short for enough slices are
column blocks cut as well. The batch's products count as parts first: a batch as long as
the task count needs no cut.

Summation order. The rows kernel adds the terms in k order, one fused multiply-add each, as
the GEMM does: a product in one slice equals the GEMM's to the bit; cut in slices, each
slice's sum is added in slice order, so the rounding depends on the number of threads (as a
split reduction's does, codegen.py). The dots kernel sums lanes and accumulators apart.

Measured on the 2-core Xeon (AVX-512) in one process, interleaved, medians, f32 1 x k x n
with bias + ReLU, two threads; before: the GEMM route (B packed) or BLAS; the matrix stays
in the large L3 between runs, hence rates above the copy bandwidth (~25 GB/s):

    k x n          B [k, n]: before -> now (GB/s)  NumPy    B^T [n, k]: before -> now  NumPy
    9216 x 4096    14.8 -> 42.3                    42.0     11.2 -> 44.8               45.4
    4096 x 4096    20.8 -> 58.7                    60.1     13.4 -> 53.7               56.9
    4096 x 1000    24.5 -> 67.2                    60.2     14.5 -> 55.3               56.7
    25088 x 4096   12.4 -> 35.6                    31.0     12.4 -> 39.1               31.3
    2048 x 1000    26.4 -> 67.9                    60.3     15.4 -> 56.6               57.0

On one thread about 25 GB/s (9216 x 4096) to 38 (2048 x 1000). Those figures have the pool's
workers awake (the kernel before used them). Waking sleeping workers costs tens of
microseconds, which can cost more than a second core saves on the smaller matrices
(1x2048x1000: 0.32-0.39 ms from asleep, 0.12 awake, 0.29 on one thread; ResNet-50's last
layer follows a small kernel and takes 0.3 ms).
"""
from __future__ import annotations

from functools import cache

import llvmlite.ir as ir

from ...llvm.ir_types import F32, F64, I32, I64, PTR, VOID, alloca_in_entry, fma_intrinsic, i64, splat
from ...llvm.loops import counted_loop
from ..runtime.llvm_jit import host_jit
from ..runtime.native_target import native_function

# One thread, 1x9216x4096 f32 from L3, GB/s: rows kernel 1 / 2 / 4 / 8 rows at once 17 / 20 /
# 23 / 23; dots kernel rows x accumulators 1x4 / 2x2 / 4x1 / 4x2 / 8x1 16 / 21 / 24 / 24 / 24.
ROWS_AT_ONCE = 4      # rows kernel: rows of M per pass over y
DOTS_AT_ONCE = 4      # dots kernel: rows of M whose dot products share each load of x
ACCUMULATORS = 2      # dots kernel: vector accumulators per row (independent FMA chains)
MIN_SLICE_ROWS = 64   # rows kernel: rows in a slice at least (the partials then add < 2/64 to M's traffic)

# void pyxla_gemv_<rows|dots>_<t>_<bits>(i64 k, i64 count, ptr x, ptr m, i64 ld, ptr y)
GEMV_TYPE = ir.FunctionType(VOID, [I64, I64, PTR, PTR, I64, PTR])


class _GemvIr:
    """The module for one element type and vector width: the rows and the dots kernel."""

    def __init__(self, dtype_name: str, vector_bytes: int, triple: str):
        self.scalar = F32 if dtype_name == "f32" else F64
        self.size = 4 if dtype_name == "f32" else 8
        self.lanes = vector_bytes // self.size
        self.vector = ir.VectorType(self.scalar, self.lanes)
        self.m = ir.Module(name=f"pyxla_gemv_{dtype_name}_{8 * vector_bytes}")
        self.m.triple = triple
        self.fma = fma_intrinsic(self.m, self.vector)
        self.fma1 = fma_intrinsic(self.m, self.scalar)
        suffix = f"{dtype_name}_{8 * vector_bytes}"
        self.rows = self._emit_rows(f"pyxla_gemv_rows_{suffix}")
        self.dots = self._emit_dots(f"pyxla_gemv_dots_{suffix}")

    # helpers
    def _function(self, name: str):
        fn = ir.Function(self.m, GEMV_TYPE, name=name)
        for arg in (fn.args[2], fn.args[3], fn.args[5]):
            arg.add_attribute("noalias")   # x, M and y never overlap: loads may move past stores
        return fn, ir.IRBuilder(fn.append_basic_block("start"))

    def _at(self, b, ptr, index):
        return b.gep(ptr, [index], source_etype=self.scalar)

    def _load(self, b, ptr, index, vector=True):
        return b.load(self._at(b, ptr, index), typ=self.vector if vector else self.scalar, align=self.size)

    def _slot(self, b, ty, value):
        """A stack cell holding `value` (SROA turns it into a register)."""
        cell = alloca_in_entry(b, ty)
        b.store(value, cell)
        return cell

    def _lane_sum(self, b, v):
        """The sum of a vector's lanes, halving it each step."""
        width = self.lanes
        while width > 1:
            half = width // 2
            undef = ir.Constant(v.type, ir.Undefined)
            low = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, half), list(range(half))))
            high = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, half), list(range(half, width))))
            v, width = b.fadd(low, high), half
        return b.extract_element(v, ir.Constant(I32, 0))

    def _groups(self, b, total, size: int, body) -> None:
        """body(start, size) for whole groups of `size` in [0, total), then body(start, 1) for
        the rest."""
        whole = b.udiv(total, i64(size))
        counted_loop(b, i64(0), whole, lambda g: body(b.mul(g, i64(size)), size))
        if size > 1:
            counted_loop(b, b.mul(whole, i64(size)), total, lambda i: body(i, 1))

    # y[0:count] = x[0:k] M[0:k, 0:count]
    def _emit_rows(self, name: str) -> ir.Function:
        fn, b = self._function(name)
        k, count, x, mat, ld, y = fn.args
        zero = ir.Constant(self.scalar, 0.0)
        counted_loop(b, i64(0), count, lambda j: b.store(zero, self._at(b, y, j)))
        vectors = b.udiv(count, i64(self.lanes))
        vector_end = b.mul(vectors, i64(self.lanes))

        def rows(p, n_rows: int):
            coefficients = [b.load(self._at(b, x, b.add(p, i64(r))), typ=self.scalar) for r in range(n_rows)]
            splats = [splat(b, self.vector, c) for c in coefficients]
            lines = [self._at(b, mat, b.mul(b.add(p, i64(r)), ld)) for r in range(n_rows)]

            def vector(v):
                j = b.mul(v, i64(self.lanes))
                acc = self._load(b, y, j)
                for coefficient, line in zip(splats, lines):
                    acc = b.call(self.fma, [coefficient, self._load(b, line, j), acc])
                b.store(acc, self._at(b, y, j), align=self.size)

            def scalar(j):
                acc = self._load(b, y, j, vector=False)
                for c, line in zip(coefficients, lines):
                    acc = b.call(self.fma1, [c, self._load(b, line, j, vector=False), acc])
                b.store(acc, self._at(b, y, j))

            counted_loop(b, i64(0), vectors, vector)
            counted_loop(b, vector_end, count, scalar)

        self._groups(b, k, ROWS_AT_ONCE, rows)
        b.ret_void()
        return fn

    # y[j] = x[0:k] . M[j, 0:k] for j < count
    def _emit_dots(self, name: str) -> ir.Function:
        fn, b = self._function(name)
        k, count, x, mat, ld, y = fn.args
        lanes, step = self.lanes, self.lanes * ACCUMULATORS
        chunks = b.udiv(k, i64(step))
        vectors = b.udiv(k, i64(lanes))
        vector_end = b.mul(vectors, i64(lanes))
        zero_v, zero = ir.Constant(self.vector, None), ir.Constant(self.scalar, 0.0)

        def dots(j, n_rows: int):
            lines = [self._at(b, mat, b.mul(b.add(j, i64(r)), ld)) for r in range(n_rows)]
            accs = [[self._slot(b, self.vector, zero_v) for _ in range(ACCUMULATORS)] for _ in lines]
            tails = [self._slot(b, self.scalar, zero) for _ in lines]

            def fma_at(p, u):   # the vectors at p into accumulator u of every row
                xv = self._load(b, x, p)
                for line, acc in zip(lines, accs):
                    b.store(b.call(self.fma, [xv, self._load(b, line, p), b.load(acc[u])]), acc[u])

            def chunk(c):
                p = b.mul(c, i64(step))
                for u in range(ACCUMULATORS):
                    fma_at(b.add(p, i64(u * lanes)), u)

            def tail(p):
                xs = self._load(b, x, p, vector=False)
                for line, cell in zip(lines, tails):
                    b.store(b.call(self.fma1, [xs, self._load(b, line, p, vector=False), b.load(cell)]), cell)

            counted_loop(b, i64(0), chunks, chunk)
            counted_loop(b, b.mul(chunks, i64(ACCUMULATORS)), vectors, lambda v: fma_at(b.mul(v, i64(lanes)), 0))
            counted_loop(b, vector_end, k, tail)
            for r, (acc, cell) in enumerate(zip(accs, tails)):
                total = b.load(acc[0])
                for cell_u in acc[1:]:
                    total = b.fadd(total, b.load(cell_u))
                b.store(b.fadd(self._lane_sum(b, total), b.load(cell)), self._at(b, y, b.add(j, i64(r))))

        self._groups(b, count, DOTS_AT_ONCE, dots)
        b.ret_void()
        return fn


def gemv_address(dtype_name: str, transposed: bool) -> int:
    """The rows kernel (M [k, count]) or, transposed, the dots kernel (M [count, k]) for the
    host's vector width, compiled on first use, once per process and width."""
    return _kernel_addresses(dtype_name, host_jit().vector_bytes)[1 if transposed else 0]


@cache
def _kernel_addresses(dtype_name: str, vector_bytes: int) -> tuple[int, int]:
    jit = host_jit()
    triple = jit.target_machine.triple
    suffix = f"{dtype_name}_{8 * vector_bytes}"
    names = (f"pyxla_gemv_rows_{suffix}", f"pyxla_gemv_dots_{suffix}")
    addresses = jit.compile_helper(f"pyxla_gemv_{suffix}", lambda: str(_GemvIr(dtype_name, vector_bytes, triple).m),
                                   names, recipe=(dtype_name, vector_bytes, triple))
    return addresses[names[0]], addresses[names[1]]


def emit_gemv(kernel, dtype_name: str, out_ptr, x_ptr, m_ptr, batch: int, count: int, k: int, transposed: bool,
              tasks: int, epilogue=None) -> None:
    """y[p] = x[p] M[p] for p < batch: x[p] of k elements, M[p] [k, count] (or [count, k]
    when transposed), y[p] of count elements, each contiguous and one after another from
    x_ptr, m_ptr and out_ptr. In at most `tasks` tasks on the pool (1: on the calling
    thread). epilogue(flat), when given, is emitted for each element y.flat[flat] once it
    is final."""
    b: ir.IRBuilder = kernel.b
    size = 8 if dtype_name == "f64" else 4
    scalar = F64 if dtype_name == "f64" else F32
    vector_bytes = host_jit().vector_bytes
    fn = native_function(b, GEMV_TYPE, f"pyxla_gemv_{'dots' if transposed else 'rows'}_{dtype_name}_{8 * vector_bytes}",
                         lambda: gemv_address(dtype_name, transposed),
                         lambda: str(_GemvIr(dtype_name, vector_bytes, host_jit().target_machine.triple).m))

    def at(ptr, elements):
        return b.gep(ptr, [elements], source_etype=scalar)

    def shorter(step: int, start, length: int):   # min(step, length - start)
        rest = b.sub(i64(length), start)
        return b.select(b.icmp_unsigned("<", rest, i64(step)), rest, i64(step))

    def final(first, n):
        if epilogue is not None:
            counted_loop(b, first, b.add(first, n), epilogue)

    if transposed:   # a part: a run of y, whole DOTS_AT_ONCE groups; a contiguous run of rows of M
        width = part_length(count, DOTS_AT_ONCE, batch, tasks)
        parts = -(-count // width)

        def part(p, s):
            j0 = b.mul(s, i64(width))
            n = shorter(width, j0, count)
            first = b.add(b.mul(p, i64(count)), j0)
            b.call(fn, [i64(k), n, at(x_ptr, b.mul(p, i64(k))), at(m_ptr, b.mul(first, i64(k))), i64(k),
                        at(out_ptr, first)])
            final(first, n)

        return _run_parts(kernel, batch, parts, tasks, part)

    # a part: a slice of whole rows of M (contiguous) into y when it is the only slice, else
    # into its own partial result (the partials are summed in order afterwards); only when
    # k is too short for enough slices, also a block of columns
    slices = max(1, min(-(-tasks // batch), k // MIN_SLICE_ROWS))
    depth = part_length(k, ROWS_AT_ONCE, 1, slices)
    slices = -(-k // depth)
    width = part_length(count, host_jit().vector_bytes // size, batch * slices, tasks)
    blocks = -(-count // width)
    partials = kernel.reserve_scratch(batch * slices * count * size) if slices > 1 else None

    def part(p, s):
        row_slice = b.udiv(s, i64(blocks))
        k0 = b.mul(row_slice, i64(depth))
        j0 = b.mul(b.urem(s, i64(blocks)), i64(width))
        n = shorter(width, j0, count)
        first = b.add(b.mul(p, i64(count)), j0)
        y = at(out_ptr, first) if partials is None else \
            at(partials, b.add(b.mul(b.add(b.mul(p, i64(slices)), row_slice), i64(count)), j0))
        b.call(fn, [shorter(depth, k0, k), n, at(x_ptr, b.add(b.mul(p, i64(k)), k0)),
                    at(m_ptr, b.add(b.mul(b.mul(p, i64(count)), i64(k)), b.add(b.mul(k0, i64(count)), j0))),
                    i64(count), y])
        if partials is None:
            final(first, n)

    _run_parts(kernel, batch, slices * blocks, tasks, part)
    if partials is not None:
        def element(flat):
            p, j = b.udiv(flat, i64(count)), b.urem(flat, i64(count))
            row = b.add(b.mul(b.mul(p, i64(slices)), i64(count)), j)
            total = b.load(at(partials, row), typ=scalar)
            for s in range(1, slices):
                total = b.fadd(total, b.load(at(partials, b.add(row, i64(s * count))), typ=scalar))
            b.store(total, at(out_ptr, flat))
            if epilogue is not None:
                epilogue(flat)

        counted_loop(b, i64(0), i64(batch * count), element)


def part_length(length: int, unit: int, batch: int, tasks: int) -> int:
    """The length of a part when each of `batch` products is cut along `length` into parts of
    whole units (the last may be shorter): whole products when the batch gives `tasks` parts,
    else about tasks / batch parts per product."""
    wanted = -(-tasks // batch)
    if wanted <= 1 or length <= unit:
        return length
    units = -(-length // unit)
    return -(-units // min(wanted, units)) * unit


def _run_parts(kernel, batch: int, parts: int, tasks: int, part) -> None:
    """part(p, s) for every part s < parts of every product p < batch, in at most `tasks`
    tasks on the pool (or on the calling thread)."""
    b: ir.IRBuilder = kernel.b
    total = batch * parts

    def one(f):
        part(b.udiv(f, i64(parts)), b.urem(f, i64(parts)))

    if min(tasks, total) <= 1:
        counted_loop(b, i64(0), i64(total), one)
    else:
        kernel.parallel_chunks([total], 1, min(tasks, total), lambda task, begin, end: counted_loop(b, begin, end, one))
