"""Weight-gradient convolutions (f32, f64) as one GEMM per kernel tap, on pyxla's GEMM
micro-kernel and packing (dot/gemm.py).

Reverse mode turns a convolution's kernel cotangent into a convolution that contracts over
the images' batch (autodiff/transpose_rules.py, as XLA and JAX do): for an NHWC forward
convolution with an HWIO kernel, `dW = convolution(x, dy), window={size=HoxWo pad=..},
dim_labels=f01b_i01o->01bf`; for NCHW/OIHW `fb01_io01->fb01`; pyxla.torch's, over operands
transposed to channels first, `bf01_oi01->bf01` (`b01f_oi01->b01f` after the
convolution-layout pass). Its "window" is
the whole output gradient, its "batch" the input channels, its result's spatial dimensions
the kernel's taps. In the convolution's own terms (S the window stride, D the window
dilation, lo the low padding):

    out[c, o, t] = sum over n, p of  xpad[n, c, t*S + p*D] * dy[n, o, p]

so each tap t is one matrix product, out_t[C, O] = X_t[C, K] DY[K, O], K running over the
images and the gradient's positions. The register tiles (conv/tiles.py) would instead run
C x taps positions over a window of the whole image: a quarter to two thirds of this
route's speed on NHWC forms, level on NCHW ones (docs/perf-log.md, 2026-11-26).

The input is first staged in kernel scratch as [image][row][column][channel] with its zero
border (only the positions the windows reach; a negative padding crops), so a tap's rows of
A hold its channels side by side (packed a vector at a time, whatever the input's layout)
and every tap's depth is the same list of runs: one per image and gradient row, a run the
gradient's row of L positions (the staged input's row D columns apart). The products with
the border's zeros are computed, as the evaluator's are (a zero times an infinite gradient
is NaN in both).

The products (_RunsGemmIr) are dot/gemm.py's: its MR x NR micro-kernel and its packing
functions, driven by KC-deep slices of whole runs; per slice the gradient's columns are
packed once and used by every tap. The sum of a result element is in k order within a
slice, slices in order, as in the GEMM.

Threads. The runs are cut into `chunks` contiguous ranges, one task each, each summing every
tap over its range into a partial result in kernel scratch; a final loop adds an element's
partial results in chunk order and applies the output fusion's epilogue. The number of
chunks depends on the number of threads, so the rounding does too (as for any split
reduction, docs/cpu-backend.md).
"""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape
from ...llvm.convolution import ConvGeometry
from ...llvm.ir_types import F32, F64, I8, I64, PTR, VOID, fma_intrinsic, i64, smin
from ...llvm.loops import counted_loop
from ..codegen import TASKS_PER_THREAD
from ..dot import gemm
from ..dot.gemm import NC, tiling
from . import winograd  # noqa: F401  (registers first, so this route is inserted before it)
from .pointwise import row_major_float
from .tiles import EMITTERS, ConvolutionEmitter

# void wgrad.<t>.product(m, n, taps, tap_offsets, r0, runs, run_len, rows, a, a_rs, a_ks, a_sn, a_sr,
#                             b, b_cs, b_ks, b_sn, b_sr, c, c_tap, ldc, workspace)
WGRAD_TYPE = ir.FunctionType(VOID, [I64, I64, I64, PTR] + [I64] * 4 + [PTR] + [I64] * 4 + [PTR] + [I64] * 4
                             + [PTR, I64, I64, PTR])


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


class _RunsGemmIr(gemm.GemmIr):
    """dot/gemm.py's module (micro-kernel, packing) with, as its entry, `taps` products that
    share their B and their depth, a list of runs: run r (from r0, `runs` of them) is image
    r // rows, row r % rows. Tap t's A element (i, run r, j) lies at a[tap_offsets[t] + i*a_rs
    + (r // rows)*a_sn + (r % rows)*a_sr + j*a_ks], B's (run r, j, column) at b[(r // rows)*b_sn
    + (r % rows)*b_sr + j*b_ks + column*b_cs], j < run_len. C_t[m, n] (at c + t*c_tap, rows ldc
    apart) = A_t B; zero when the depth is empty.

    Per KC-deep slice of whole runs, B's columns are packed once and each tap's rows of A
    against them: the output gradient is read from memory once, and the input (the slice plus
    the window's reach) stays in cache across the taps. (Taps moving B instead, with the
    gradient's rows packed once as A, measured no faster on the shapes of docs/perf-log.md's
    entry and slower for a colour stem's 3 channels, which fill few of B's NR lanes.)"""

    def __init__(self, dtype_name: str, module: ir.Module):   # (gemm's, into the kernels' module)
        self.name = dtype_name
        self.t = gemm.tiling(dtype_name)
        self.scalar = F32 if dtype_name == "f32" else F64
        self.vector = ir.VectorType(self.scalar, self.t.lanes)
        self.m = module
        self.fma = fma_intrinsic(self.m, self.vector)
        self.micro = self._emit_micro()
        self.pack_a = self._emit_pack("pack_a", self.t.mr)
        self.pack_b = self._emit_pack("pack_b", self.t.nr)
        self.entry = self._emit_product()

    def _function(self, name: str, args: list, ret=VOID, internal=True):
        return super()._function(f"wgrad.{self.name}.{name}", args, ret, True)

    def _emit_product(self) -> ir.Function:
        fn, b = self._function("product", list(WGRAD_TYPE.args))
        (m, n, taps, tap_offsets, r0, runs, run_len, rows, a, a_rs, a_ks, a_sn, a_sr,
         bm, b_cs, b_ks, b_sn, b_sr, c, c_tap, ldc, workspace) = fn.args
        t = self.t
        # runs per slice: as many whole runs as fit KC (at least one, so a run longer than
        # KC makes a deeper slice: WeightGradientConvolution._depth sizes the workspace for it)
        longest = b.select(b.icmp_unsigned(">", run_len, i64(0)), run_len, i64(1))   # (no division by 0)
        per_slice = b.select(b.icmp_unsigned(">", longest, i64(t.kc)), i64(1), b.udiv(i64(t.kc), longest))
        depth = b.mul(smin(b, runs, per_slice), run_len)

        def part_bytes(lines, most: int, step: int):   # as workspace_bytes lays them out
            lines = b.mul(b.udiv(b.add(smin(b, lines, i64(most)), i64(step - 1)), i64(step)), i64(step))
            return b.and_(b.add(b.mul(b.mul(lines, depth), i64(t.element_bytes)), i64(63)), i64(~63))

        ap = workspace
        bp = b.gep(ap, [part_bytes(m, t.mc, t.mr)], source_etype=I8)
        edge = b.gep(bp, [part_bytes(n, NC, t.nr)], source_etype=I8)

        zero_k = b.append_basic_block("zero_k")
        work = b.append_basic_block("work")
        b.cbranch(b.icmp_signed("==", b.mul(runs, run_len), i64(0)), zero_k, work)
        b.position_at_end(zero_k)   # an empty sum: C = 0
        counted_loop(b, i64(0), b.mul(taps, m), lambda i: counted_loop(b, i64(0), n, lambda j: b.store(
            ir.Constant(self.scalar, 0.0), self._at(b, c, b.add(b.mul(b.udiv(i, m), c_tap),
                                                                b.add(b.mul(b.urem(i, m), ldc), j))))))
        b.ret_void()
        b.position_at_end(work)

        def pack_runs(pack, width, packed, first, count, lines, line_start, x, x_rs, x_ks, sn, sr, kc):
            """The slice's `count` runs from run `first`, lines line_start.. of x, into the
            panel at packed + line_start * kc, run after run (pack writes one panel of
            `width` lines, k-major, zero past `lines`)."""
            panel = self._at(b, packed, b.mul(line_start, kc))
            base = self._at(b, x, b.mul(line_start, x_rs))

            def run(i):
                r = b.add(first, i)
                at = b.add(b.mul(b.udiv(r, rows), sn), b.mul(b.urem(r, rows), sr))
                b.call(pack, [lines, run_len, self._at(b, base, at), x_rs, x_ks,
                              self._at(b, panel, b.mul(b.mul(i, run_len), i64(width)))])

            counted_loop(b, i64(0), count, run, unrolled=False)

        def pack_rows(x, ic, mc, first, count, kc):   # rows ic.. of A, MR-high panels
            rows_at = self._at(b, x, b.mul(ic, a_rs))
            self._steps(b, mc, t.mr, lambda ir_, mr: pack_runs(
                self.pack_a, t.mr, ap, first, count, mr, ir_, rows_at, a_rs, a_ks, a_sn, a_sr, kc))

        def pack_columns(x, jc, nc, first, count, kc):   # columns jc.. of B, NR-wide panels
            columns_at = self._at(b, x, b.mul(jc, b_cs))
            self._steps(b, nc, t.nr, lambda jr, nr: pack_runs(
                self.pack_b, t.nr, bp, first, count, nr, jr, columns_at, b_cs, b_ks, b_sn, b_sr, kc))

        def each_tap(body):   # body(tap's operand offset, tap's C)
            counted_loop(b, i64(0), taps, lambda k: body(
                b.load(b.gep(tap_offsets, [k], source_etype=I64), typ=I64), self._at(b, c, b.mul(k, c_tap))),
                unrolled=False)

        def columns(jc, nc):
            def slice_k(first, count, kc, accumulate):
                def rows_block(ic, mc, x, c_at):
                    pack_rows(x, ic, mc, first, count, kc)
                    self.tiles(b, kc, ic, mc, jc, nc, c_at, ap, bp, edge, ldc, accumulate)

                pack_columns(bm, jc, nc, first, count, kc)
                each_tap(lambda offset, c_at: self._steps(b, m, t.mc, lambda ic, mc: rows_block(
                    ic, mc, self._at(b, a, offset), c_at)))

            slices = b.udiv(b.add(runs, b.sub(per_slice, i64(1))), per_slice)   # (a step known at run time)

            def one(i):
                start = b.mul(i, per_slice)
                count = smin(b, per_slice, b.sub(runs, start))
                slice_k(b.add(r0, start), count, b.mul(count, run_len), b.icmp_signed(">", start, i64(0)))

            counted_loop(b, i64(0), slices, one, unrolled=False)

        self._steps(b, n, NC, columns)
        b.ret_void()
        return fn


def products(module: ir.Module, dtype_name: str) -> ir.Function:
    """The products' function (WGRAD_TYPE) in the kernels' module, emitted on first use.
    It is not a runtime helper compiled once per process, as dot/gemm.py's product is: a
    helper must be known by name to the executable cache (runtime/executable_cache.py's
    `resolve`), so the micro-kernel and packing are compiled with each module that uses them
    (about 20 functions' worth of LLVM time)."""
    found = module.globals.get(f"wgrad.{dtype_name}.product")
    return found if found is not None else _RunsGemmIr(dtype_name, module).entry


def workspace_bytes(dtype_name: str, m: int, n: int, depth: int) -> int:
    """One job's workspace: packed rows of A and columns of B `depth` deep, an edge tile."""
    t = tiling(dtype_name)
    parts = [_round_up(min(m, t.mc), t.mr) * depth, _round_up(min(n, NC), t.nr) * depth, t.mr * t.nr]
    return sum(_round_up(p * t.element_bytes, 64) for p in parts)


def _strides(shape: ArrayShape) -> list[int]:
    out, step = [0] * shape.rank, 1
    for d in reversed(range(shape.rank)):
        out[d] = step
        step *= shape.dims[d]
    return out


def fits(conv: HloInstruction) -> bool:
    """A weight-gradient-shaped convolution: f32/f64 throughout and row-major, one group, one
    or two spatial dimensions, no base dilation or reversal, and a window that covers at least
    as many positions as the result has (the result is the kernel's taps, the window the
    output gradient), so that each result position is one deep matrix product. A 1x1
    convolution over a 1x1 map (a classifier) stays with conv/pointwise.py's GEMV."""
    if not row_major_float(conv):
        return False
    g = ConvGeometry.of(conv)
    if g.groups != 1 or not 1 <= len(g.window) <= 2 or g.input_features == 0:
        return False
    if any(w.lhs_dilate != 1 or w.reversal for w in g.window):
        return False
    window = prod(w.size for w in g.window)
    return window >= prod(g.output_spatial) and window > 1   # (a 1x1 over a 1x1 map is a classifier's)


class WeightGradientConvolution(ConvolutionEmitter):
    """The emitter (tiles.EMITTERS' protocol) of a convolution that `fits`."""
    ROUTE = "weight_gradient"

    def __init__(self, ke, conv: HloInstruction):
        super().__init__(ke, conv)
        g = self.g = ConvGeometry.of(conv)
        # a tap's product: C x O, its rows (the channels) staged as whole register tiles (MR
        # rows), zero past C, so that every panel of A is packed a vector per k and no tile is
        # an edge tile (cnn_train's 16 channels would be 6 + 6 + 4 rows, the last panel packed
        # element by element: 11.3-11.5 -> 11.1 ms on one thread). Packing A per tap is then
        # about a fifth of the time (without it, wrong but timed: 9.0 ms).
        self.m, self.n = _round_up(g.batch, tiling(self.t.name).mr), g.group_features
        # the staged input: [image][padded rows][padded columns][channel], covering exactly the
        # positions the windows reach (a negative padding crops)
        self.padded = tuple((t - 1) * w.stride + (w.size - 1) * w.rhs_dilate + 1
                            for t, w in zip(g.output_spatial, g.window))
        self.runs = g.input_features * (g.window[0].size if len(g.window) == 2 else 1)
        # about TASKS_PER_THREAD chunks of the depth per thread, so that the thread that
        # finishes last waits for at most a small one
        self.chunks = min(self.runs, self.threads * TASKS_PER_THREAD) if self.pool is not None else 1

    def _depth(self) -> int:
        """The deepest slice: whole runs up to KC, one run when a run is longer."""
        run_len = self.g.window[-1].size
        return min(self.runs, max(1, tiling(self.t.name).kc // run_len)) * run_len

    def emit(self, out_ptr, out_shape: ArrayShape, epilogue: HloInstruction | None) -> None:
        ke, b, g = self.ke, self.b, self.g
        dn = g.dn
        name, size = self.t.name, self.t.bytes
        staged = self._stage()
        xs = _strides(ArrayShape(self.lhs_shape.dtype, (g.input_features, *self.padded, self.m)))
        ds = _strides(self.rhs_shape)
        two = len(g.window) == 2
        taps = [sum(t * w.stride * st for t, w, st in zip(at, g.window, xs[1:-1]))
                for at in _tap_coordinates(g.output_spatial)]
        # (line, depth, image, row) strides of A (the staged input) and B (the gradient), in elements
        a_side = (1, g.window[-1].rhs_dilate * xs[-2], xs[0], g.window[0].rhs_dilate * xs[1] if two else 0)
        b_side = (ds[dn.kernel_output_feature], ds[dn.kernel_spatial[-1]], ds[dn.kernel_input_feature],
                  ds[dn.kernel_spatial[0]] if two else 0)
        table = _offset_table(b.module, taps)
        per_chunk = len(taps) * self.m * self.n
        partials = ke.reserve_scratch(self.chunks * per_chunk * size)
        ws_bytes = workspace_bytes(name, self.m, self.n, self._depth())
        workspace = ke.reserve_scratch(self.chunks * ws_bytes)
        fn = products(b.module, name)

        def chunk(index):
            r0 = b.udiv(b.mul(index, i64(self.runs)), i64(self.chunks))
            r1 = b.udiv(b.mul(b.add(index, i64(1)), i64(self.runs)), i64(self.chunks))
            c = b.gep(partials, [b.mul(index, i64(per_chunk * size))], source_etype=I8)
            ws = b.gep(workspace, [b.mul(index, i64(ws_bytes))], source_etype=I8)
            b.call(fn, [i64(self.m), i64(self.n), i64(len(taps)), table, r0, b.sub(r1, r0), i64(g.window[-1].size),
                        i64(g.window[0].size if two else 1), staged, *map(i64, a_side), self.rhs_ptr, *map(i64, b_side),
                        c, i64(self.m * self.n), i64(self.n), ws])

        self._run_tasks(self.chunks, chunk)
        self._combine(partials, out_ptr, out_shape, epilogue)

    def _stage(self):
        """The input as [image][row][column][channel] in kernel scratch over the positions the
        windows reach, zero where they reach into the padding (so a padding zero times an
        infinite gradient is NaN, as in the evaluator): the rows of A then hold a tap's
        channels side by side, which the GEMM packs a vector at a time, whatever the input's
        layout (an NCHW input is transposed here, once, rather than gathered per tap)."""
        ke, b, g = self.ke, self.b, self.g
        dn = g.dn
        dims = (g.input_features, *self.padded, self.m)
        shape = ArrayShape(self.lhs_shape.dtype, dims)
        ptr = ke.reserve_scratch(shape.size * self.t.bytes)

        def copy(index):
            source = [None] * self.lhs_shape.rank
            inside = b.icmp_unsigned("<", index[-1], i64(g.batch))
            source[dn.input_feature], source[dn.input_batch] = index[0], b.select(inside, index[-1], i64(0))
            for d, at, w, extent in zip(dn.input_spatial, index[1:-1], g.window, g.input_spatial):
                shifted = b.sub(at, i64(w.pad_low)) if w.pad_low else at
                ok = b.icmp_unsigned("<", shifted, i64(extent))
                inside = b.and_(inside, ok)
                source[d] = b.select(ok, shifted, i64(0))
            value = ke.load(self.lhs_ptr, self.lhs_shape, tuple(source))
            ke.store(ptr, shape, index, b.select(inside, value, ir.Constant(self.st, 0.0)))

        ke.loop_nest(list(dims), copy, shape.size)
        return ptr

    def _combine(self, partials, out_ptr, out_shape: ArrayShape, epilogue) -> None:
        """Each result element: its tap's partial products summed in chunk order, through the
        epilogue, stored where the output lies."""
        ke, b, g, conv = self.ke, self.b, self.g, self.conv
        dn = g.dn
        step = prod(g.output_spatial) * self.m * self.n

        def element(index):
            tap = _linear(b, [index[d] for d in dn.output_spatial], tuple(g.output_spatial))
            at = b.add(b.mul(tap, i64(self.m * self.n)),
                       b.add(b.mul(index[dn.output_batch], i64(self.n)), index[dn.output_feature]))
            value = None
            for chunk in range(self.chunks):
                part = b.load(b.gep(partials, [b.add(at, i64(chunk * step))], source_etype=self.st), typ=self.st)
                value = part if value is None else b.fadd(value, part)
            if epilogue is not None:
                ke.e.push_scope()
                ke.e.buffer_reads[id(conv)] = lambda _index, v=value: v
                value = ke.e.value(epilogue, index)
                ke.e.pop_scope()
            ke.store(out_ptr, out_shape, index, value)

        ke.loop_nest(list(conv.shape.dims), element, conv.shape.size * self.chunks)


def _linear(b: ir.IRBuilder, coords: list, extents: tuple) -> ir.Value:
    """The row-major linear index of `coords` over `extents`."""
    flat = i64(0)
    for x, n in zip(coords, extents):
        flat = b.add(b.mul(flat, i64(n)), x)
    return flat


def _tap_coordinates(extents) -> list[tuple[int, ...]]:
    out = [()]
    for n in extents:
        out = [at + (i,) for at in out for i in range(n)]
    return out


def _offset_table(module: ir.Module, values: list[int]) -> ir.GlobalVariable:
    """The taps' offsets into the staged input, as a constant i64 array."""
    ty = ir.ArrayType(I64, len(values))
    table = ir.GlobalVariable(module, ty, name=module.get_unique_name("wgrad.taps"))
    table.initializer = ir.Constant(ty, values)
    table.global_constant = True
    table.linkage = "internal"
    return table


EMITTERS.insert(0, (fits, WeightGradientConvolution))
