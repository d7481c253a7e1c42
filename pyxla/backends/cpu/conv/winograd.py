"""3x3 convolutions of stride 1 by Winograd's minimal filtering F(m x m, 3x3) (f32, f64): each
m x m block of output pixels (a tile) is computed from the (m + 2) x (m + 2) input patch
under it with (m + 2)^2 products per input feature and output feature where the direct sum
takes 9 m^2: F(2x2, 3x3) 16 for 36, F(4x4, 3x3) (over outputs at least LARGE_TILES_FROM
wide) 36 for 144. The multiplications, the work of a convolution, drop 2.25- and 4-fold for
more additions, in transforms that cost little beside them.

    Y = A^T [ (G g G^T) . (B^T d B) ] A

g is the 3x3 kernel of one input and one output feature, d the input patch, `.` the product
element by element; the products summed over the input features are one matrix product per
element xi of the transformed patch: M[xi] = V[xi] (tiles x input features) times U[xi]
(input features x output features). The kernel's transform U is made once, in float64, when
the weights are bound (WinogradKernel, a form of runtime/parameter_forms.py) for a kernel that is a
constant parameter (an ONNX model's weights), and by the kernel itself on every call
otherwise (as pyxla.jit passes its arguments: the CNN block benchmark 14.6 -> 7.7 ms).
F(2x2, 3x3)'s coefficients are 0, +-1 and +-1/2, and it rounds about as the direct sum does;
F(4x4, 3x3)'s reach 8 and 1/24 and round further (see LARGE_TILES_FROM). PYXLA_WINOGRAD
chooses (largest_tile).

A task takes a run of tiles (row-major over batch, tile row, tile column) and a block of
panels of output features. For each strip of up to 14 tiles (TILES) it transforms their
input patches into V (on its stack, [xi][tile][input feature]); then, panel by panel, it
multiplies each xi's V by the panel's U[xi] in the register tiles of conv/tiles.py (a
strip's tiles x one panel of output features, the accumulators in registers, one loop over
the input features), keeps M on its stack and transforms it back into output pixels,
written through the epilogue. An output whose height or width the tiles do not divide ends
in a tile moved back, which leaves the pixels the tile before it wrote; a strip moved back
to end where the task's tiles end writes only its tiles past the strip before it.

The input is read as the tiles read it (tiles.TiledConvolution._stage_input: padding
written as zeros, features minor-most), or in place when it is NHWC and unpadded (the
padded input a producer writes, passes/convolution_layout.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from math import ceil, prod

import llvmlite.ir as ir
import numpy as np

from ....hlo.instruction import HloInstruction
from ...llvm.convolution import ConvGeometry
from ...llvm.ir_types import alloca_in_entry, etype, i64, smin
from ...llvm.loops import for_range, stepped_loop
from ..codegen import PARALLEL_MIN_WORK, TASKS_PER_THREAD
from ..runtime.llvm_jit import host_jit
from ..tuning.selection import conv_params
from .tile_plan import TILE_OVERHEAD, output_tiles_first, panel_layout, window_strides
from .tile_plan import fits as tiles_fit
from .tiles import EMITTERS, TiledConvolution


@dataclass(frozen=True)
class Transform:
    """F(m x m, 3x3): the kernel's (G), the input patch's (B^T) and the product's (A^T)
    transforms (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)."""
    tile: int                  # m: output pixels per tile along each dimension
    kernel: np.ndarray         # G, (m + 2) x 3
    input: np.ndarray          # B^T, (m + 2) x (m + 2)
    output: np.ndarray         # A^T, m x (m + 2)

    @property
    def patch(self) -> int:
        """Input pixels per tile along each dimension."""
        return self.tile + 2

    @property
    def points(self) -> int:
        """Elements of a transformed patch (xi)."""
        return self.patch * self.patch


TRANSFORMS = {
    2: Transform(2, np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
                 np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
                 np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: Transform(4, np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                              [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
                 np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                           [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
                 np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])),
}
# Tiles of 4x4 pixels (F(4x4, 3x3): 36 products for 16 pixels, where F(2x2, 3x3) takes 64)
# over outputs at least this wide and high; over narrower ones the last tile of a row, moved
# back, repeats too much (over a 14-wide output four tiles cover 16 columns). In one process
# against F(2x2, 3x3): 3x3 64 -> 64 at 56x56 368 -> 297 us, 128 -> 128 at 28x28 406 -> 358,
# 512 -> 512 at 28x28 5.6 -> 4.6 ms, 32 -> 128 at 27x27 104 -> 97 us; 256 -> 256 at 14x14 453
# -> 635 us, 64 -> 256 at 13x13 92 -> 145 us. Its coefficients (up to 8, and 1/24) round
# further: about 1.7e-6 of the largest result over 64 input features of random values, against
# 2.2e-7 for F(2x2, 3x3) and 1.1e-7 for the direct sum (NumPy's f32 sum).
LARGE_TILES_FROM = 24
# Tiles per strip, the positions of a register tile: of these, the one that covers the tiles
# with the least work, counting tile_plan.TILE_OVERHEAD per strip (7 x 7 = 49 tiles: 4 strips
# of 13, where strips of 14 compute 56).
TILES = {32: (6,), 64: tuple(range(14, 6, -1))}
# The transformed kernel is 16/9 of the kernel: with few tiles a convolution reads more kernel
# than it saves work, and keeps the direct tiles (ResNet-50's 3x3 512 -> 512 at 7x7, 16
# tiles, its weights from L3: 865-946 -> 988-1408 us in the model). With many, the larger
# kernel costs nothing (3x3 512 -> 512 at 28x28 10.3 -> 5.2 ms, at 14x14 2.4 -> 1.4 ms).
MIN_TILES = 32
# A task keeps a strip's transformed input and products on its stack (pyxla's worker threads
# and a Python thread have 8 MiB where RLIMIT_STACK is 8 MiB, glibc's default): at most this
# much, so F(4x4, 3x3) over 512 input features (1 MiB) takes F(2x2, 3x3) (0.45 MiB), and more
# than about 1100 take the direct tiles.
STRIP_BYTES = 1 << 20


@dataclass(frozen=True)
class WinogradKernel:
    """The kernel's transform as the tiles read it: U = G g G^T for every input and output
    feature, [panel][xi][input feature][the panel's output features], the output features
    zero-padded to whole panels."""
    output_dim: int
    input_dim: int
    spatial_dims: tuple[int, ...]
    panel_columns: int
    tile: int                  # the Transform's (TRANSFORMS)

    def pack(self, kernel: np.ndarray) -> np.ndarray:
        f = TRANSFORMS[self.tile]
        g = np.transpose(kernel, (*self.spatial_dims, self.input_dim, self.output_dim)).astype(np.float64)
        inputs, outputs = g.shape[2:]
        # G g, then each of its rows times G^T, as matrix products (einsum took 0.26 s for a
        # 3x3 512 -> 512 kernel, these 0.05)
        rows = (f.kernel @ g.reshape(3, -1)).reshape(f.patch, 3, -1)
        u = np.matmul(f.kernel, rows).reshape(f.points, inputs, outputs).astype(kernel.dtype)
        return output_tiles_first(u, 1, self.panel_columns)


def largest_tile() -> int:
    """PYXLA_WINOGRAD: 4 (the default: F(4x4, 3x3) where LARGE_TILES_FROM allows, else
    F(2x2, 3x3)), 2 (F(2x2, 3x3) only: rounds about as the direct sum does) or 0 (no
    Winograd: the direct tiles for every convolution)."""
    setting = os.environ.get("PYXLA_WINOGRAD", "").strip() or "4"
    if setting not in ("0", "2", "4"):
        raise ValueError(f"PYXLA_WINOGRAD must be 0, 2 or 4, got {setting!r}")
    return int(setting)


def fits(conv: HloInstruction) -> bool:
    """A 3x3 window of stride 1 without dilation or reversal, one group, input features a
    whole number of vectors, an output at least one tile high and wide and MIN_TILES tiles
    in all."""
    if not tiles_fit(conv) or not largest_tile():
        return False
    g = ConvGeometry.of(conv)
    lanes = host_jit().vector_bytes // etype(conv).bytes
    return len(g.window) == 2 and g.groups == 1 and g.batch_groups == 1 and \
        all(w.size == 3 and w.stride == 1 and w.lhs_dilate == 1 and w.rhs_dilate == 1 and not w.reversal and
            w.pad_low >= 0 and w.pad_high >= 0 for w in g.window) and \
        g.input_features % lanes == 0 and all(n >= 2 for n in g.output_spatial) and \
        g.batch * prod(ceil(n / 2) for n in g.output_spatial) >= MIN_TILES and \
        _strip_bytes(TRANSFORMS[2], conv) <= STRIP_BYTES


def transform(conv: HloInstruction) -> Transform:
    """F(4x4, 3x3) over outputs at least LARGE_TILES_FROM wide and high whose strips fit
    STRIP_BYTES (unless PYXLA_WINOGRAD says 2), else F(2x2, 3x3). A tuning database may
    choose either where the strips fit (tuning/params.py ConvParams.winograd_tile)."""
    g = ConvGeometry.of(conv)
    chosen = conv_params(conv).winograd_tile
    wide = min(g.output_spatial) >= LARGE_TILES_FROM if chosen not in (2, 4) else chosen == 4
    large = largest_tile() >= 4 and wide and _strip_bytes(TRANSFORMS[4], conv) <= STRIP_BYTES
    return TRANSFORMS[4 if large else 2]


def _strip_bytes(f: Transform, conv: HloInstruction) -> int:
    """A task's stack for a strip of the most tiles: V and M."""
    g, t = ConvGeometry.of(conv), etype(conv)
    _, _, panel = panel_layout(g, t)
    return f.points * max(TILES[host_jit().vector_bytes]) * (g.input_features + panel) * t.bytes


@dataclass(frozen=True)
class WinogradPlan:
    tiles_y: int
    tiles_x: int
    total: int                 # tiles of the whole output
    tiles: int                 # tiles per strip
    block_strips: int          # a task's strips ...
    block_panels: int          # ... and panels

    @property
    def strips(self) -> int:
        return ceil(self.total / self.tiles)

    @property
    def strip_blocks(self) -> int:
        return ceil(self.strips / self.block_strips)


class WinogradConvolution(TiledConvolution):
    ROUTE = "winograd"

    def __init__(self, ke, conv: HloInstruction):
        super().__init__(ke, conv)
        g, p = self.g, self.p
        self.f = transform(conv)
        height, width = g.output_spatial
        tiles_y, tiles_x = ceil(height / self.f.tile), ceil(width / self.f.tile)
        total = g.batch * tiles_y * tiles_x
        choices = TILES[host_jit().vector_bytes]
        tiles = min(self.params.positions if self.params.positions and self.params.positions <= max(choices) else
                    min(choices, key=lambda n: ceil(total / n) * (n + TILE_OVERHEAD)), total)
        strips = ceil(total / tiles)
        work = total * self.f.points * g.input_features * p.panels * p.panel_columns
        wanted = self.threads * (self.params.tasks_per_thread or TASKS_PER_THREAD) \
            if self.threads > 1 and work >= PARALLEL_MIN_WORK else 1
        # strips first (each task transforms its strips' input once for all its panels), then
        # panels when there are fewer strips than tasks; cutting the panels first, to keep a
        # task's transformed kernel in L2 as its strips read it again, was slower (3x3 512 ->
        # 512 at 28x28 5.2 -> 6.4 ms)
        block_strips = ceil(strips / min(strips, wanted))
        panel_cut = max(1, min(p.panels, wanted // ceil(strips / block_strips)))
        self.w = WinogradPlan(tiles_y, tiles_x, total, tiles, block_strips, ceil(p.panels / panel_cut))

    @staticmethod
    def kernel_form(conv: HloInstruction) -> WinogradKernel:
        g = ConvGeometry.of(conv)
        _, _, panel = panel_layout(g, etype(conv))
        dn = g.dn
        return WinogradKernel(dn.kernel_output_feature, dn.kernel_input_feature, tuple(dn.kernel_spatial), panel,
                              transform(conv).tile)

    def emit(self, out_ptr, out_shape, epilogue) -> None:
        if self.p.stage_input:
            self._stage_input()
        if not isinstance(self.formed_kernel, WinogradKernel):
            self._transform_kernel()
        w, p = self.w, self.p
        panel_blocks = ceil(p.panels / w.block_panels)
        self._run_tasks(w.strip_blocks * panel_blocks,
                        lambda index: self._strips(index, panel_blocks, out_ptr, out_shape, epilogue))

    def _transform_kernel(self) -> None:
        """U = G g G^T into kernel scratch on every call, in WinogradKernel's order, for a
        kernel that is not a constant parameter (as pyxla.jit passes its arguments): the
        output features innermost, so the loop vectorises over them."""
        ke, b, g, p = self.ke, self.b, self.g, self.p
        extents = (p.panels, g.input_features, p.panel_columns)
        ptr = ke.reserve_scratch(self.f.points * p.panels * g.input_features * p.panel_columns * self.t.bytes)
        source, shape = self.rhs_ptr, self.rhs_shape
        zero = ir.Constant(self.st, 0.0)

        def transform(index):
            q, feature, lane = index
            out_feature = b.add(b.mul(q, i64(p.panel_columns)), lane)
            inside = b.icmp_unsigned("<", out_feature, i64(g.group_features))
            feature_of = smin(b, out_feature, i64(g.group_features - 1))   # (a padded lane reads a real one)
            taps = [[b.select(inside, ke.load(source, shape, g.kernel_index(b, feature_of, feature, (i64(i), i64(j)))),
                              zero) for j in range(3)] for i in range(3)]
            values = _two_sided(b, self.f.kernel, taps)
            for a in range(self.f.patch):
                for c in range(self.f.patch):
                    at = b.add(b.mul(b.add(b.mul(q, i64(self.f.points)), i64(a * self.f.patch + c)),
                                     i64(g.input_features * p.panel_columns)),
                               b.add(b.mul(feature, i64(p.panel_columns)), lane))
                    b.store(values[a][c], b.gep(ptr, [at], source_etype=self.st))

        ke.loop_nest(list(extents), transform, self.f.points * 9 * p.panels * g.input_features * p.panel_columns)
        self.rhs_ptr = ptr

    # --- one task ---------------------------------------------------------------------------------
    def _strips(self, task, panel_blocks: int, out_ptr, out_shape, epilogue) -> None:
        b, p, w = self.b, self.p, self.w
        features = self.g.input_features
        sb, qb = (b.udiv(task, i64(panel_blocks)), b.urem(task, i64(panel_blocks))) if panel_blocks > 1 \
            else (task, i64(0))
        first = b.mul(sb, i64(w.block_strips * w.tiles))
        end = smin(b, b.add(first, i64(w.block_strips * w.tiles)), i64(w.total))
        first_panel = b.mul(qb, i64(w.block_panels))
        end_panel = smin(b, b.add(first_panel, i64(w.block_panels)), i64(p.panels))
        transformed = self._stack_block(self.f.points * w.tiles * features)       # V
        products = self._stack_block(self.f.points * w.tiles * p.panel_columns)   # M
        pixels = self._stack_block(self.f.tile * self.f.tile * p.panel_columns)
        strips = b.udiv(b.add(b.sub(end, first), i64(w.tiles - 1)), i64(w.tiles))

        def strip(s):
            nominal = b.add(first, b.mul(s, i64(w.tiles)))
            start = smin(b, nominal, b.sub(end, i64(w.tiles)))
            stepped_loop(b, i64(0), i64(w.tiles), lambda t: self._transform_input(b.add(start, t), t, transformed))

            def panel(q):
                stepped_loop(b, i64(0), i64(self.f.points), lambda xi: self._multiply(xi, q, transformed, products))
                stepped_loop(b, i64(0), i64(w.tiles), lambda t: self._transform_output(
                    b.add(start, t), t, nominal, q, products, pixels, out_ptr, out_shape, epilogue))
            stepped_loop(b, first_panel, end_panel, panel)

        stepped_loop(b, i64(0), strips, strip)

    def _tile_origin(self, tile) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value]:
        """(batch element, top row, left column, nominal top row, nominal left column) of a
        tile's output pixels; a tile past the output's height or width is moved back."""
        b, w = self.b, self.w
        height, width = self.g.output_spatial
        per_image = w.tiles_y * w.tiles_x
        batch, inside = b.udiv(tile, i64(per_image)), b.urem(tile, i64(per_image))
        y = b.mul(b.udiv(inside, i64(w.tiles_x)), i64(self.f.tile))
        x = b.mul(b.urem(inside, i64(w.tiles_x)), i64(self.f.tile))
        return batch, smin(b, y, i64(height - self.f.tile)), smin(b, x, i64(width - self.f.tile)), y, x

    def _transform_input(self, tile, t, transformed) -> None:
        """V[xi][t][:] = B^T d B for the tile's input patch d, a vector of input features
        at a time."""
        b, g, p = self.b, self.g, self.p
        dn = g.dn
        strides = window_strides(self.lhs_shape)
        batch, y, x, _, _ = self._tile_origin(tile)
        row_step, column_step = strides[dn.input_spatial[0]], strides[dn.input_spatial[1]]
        corner = b.add(b.mul(batch, i64(strides[dn.input_batch])),
                       b.add(b.mul(y, i64(row_step)), b.mul(x, i64(column_step))))
        features = g.input_features

        def vector(c):
            patch = [[self._load(self.lhs_ptr, b.add(corner, b.add(c, i64(i * row_step + j * column_step))))
                      for j in range(self.f.patch)] for i in range(self.f.patch)]
            values = _two_sided(b, self.f.input, patch)                               # B^T d B
            base = b.add(b.mul(t, i64(features)), c)
            for i in range(self.f.patch):
                for j in range(self.f.patch):
                    self._store(transformed, b.add(base, i64((i * self.f.patch + j) * self.w.tiles * features)),
                                values[i][j])
        stepped_loop(b, i64(0), i64(features), vector, step=p.lanes)

    def _multiply(self, xi, q, transformed, products) -> None:
        """M[xi][t][panel q] = V[xi][t][:] . U[q][xi]: a register tile of the strip's tiles by
        the panel over the input features."""
        b, p, w = self.b, self.p, self.w
        features = self.g.input_features
        source = b.gep(transformed, [b.mul(xi, i64(w.tiles * features))], source_etype=self.st)
        inputs = [(source, t * features) for t in range(w.tiles)]
        kernel = b.gep(self.rhs_ptr, [b.mul(b.add(b.mul(q, i64(self.f.points)), xi), i64(features * p.panel_columns))],
                       source_etype=self.st)
        accumulators = [[alloca_in_entry(b, self.vector) for _ in range(p.vectors)] for _ in range(w.tiles)]
        zero = ir.Constant(self.vector, None)
        for row in accumulators:
            for slot in row:
                b.store(zero, slot)
        self._dot(inputs, kernel, p.panel_columns, accumulators, i64(0), i64(features))
        base = b.mul(xi, i64(w.tiles * p.panel_columns))
        for t, row in enumerate(accumulators):
            for v, slot in enumerate(row):
                self._store(products, b.add(base, i64(t * p.panel_columns + v * p.lanes)), b.load(slot))

    def _transform_output(self, tile, t, nominal, q, products, pixels, out_ptr, out_shape, epilogue) -> None:
        """The tile's output pixels A^T M A for panel q, through the epilogue to the
        output: those of a tile before `nominal` (the strip before wrote them) or before the
        tile's nominal origin (the tile before wrote them) are left."""
        b, p, w = self.b, self.p, self.w
        batch, y, x, y_nominal, x_nominal = self._tile_origin(tile)
        for v in range(p.vectors):
            base = b.add(b.mul(t, i64(p.panel_columns)), i64(v * p.lanes))
            m = [[self._load(products, b.add(base, i64((i * self.f.patch + j) * w.tiles * p.panel_columns)))
                  for j in range(self.f.patch)] for i in range(self.f.patch)]
            values = _two_sided(b, self.f.output, m)                                  # A^T M A
            for i in range(self.f.tile):
                for j in range(self.f.tile):
                    self._store(pixels, i64((i * self.f.tile + j) * p.panel_columns + v * p.lanes), values[i][j])
        mine = b.icmp_signed(">=", tile, nominal)
        column = b.mul(q, i64(p.panel_columns))
        size = self.f.tile

        def pixel(k):   # one loop over the pixels, so that LLVM vectorises one epilogue loop, not 16
            at = (b.add(y, b.udiv(k, i64(size))), b.add(x, b.urem(k, i64(size))))
            wanted = b.and_(mine, b.and_(b.icmp_signed(">=", at[0], y_nominal), b.icmp_signed(">=", at[1], x_nominal)))
            offset = b.mul(k, i64(p.panel_columns))

            def lane(index):
                value = b.load(b.gep(pixels, [b.add(index[0], offset)], source_etype=self.st), typ=self.st)
                self._store_result(out_ptr, out_shape, epilogue, batch, at, i64(0), b.add(column, index[0]), value)
            with b.if_then(wanted):
                for_range(b, [p.panel_columns], lane)
        stepped_loop(b, i64(0), i64(size * size), pixel)

    def _load(self, base, offset) -> ir.Value:
        value = self.b.load(self.b.gep(base, [offset], source_etype=self.st), typ=self.vector)
        value.align = self.t.bytes
        return value

    def _store(self, base, offset, value) -> None:
        self.b.store(value, self.b.gep(base, [offset], source_etype=self.st)).align = self.t.bytes


def _two_sided(b: ir.IRBuilder, matrix: np.ndarray, patch: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """matrix @ patch @ matrix^T."""
    rows = _combine(b, matrix, patch)
    return _transposed(_combine(b, matrix, _transposed(rows)))


def _transposed(m: list[list]) -> list[list]:
    return [list(r) for r in zip(*m)]


def _combine(b: ir.IRBuilder, matrix: np.ndarray, rows: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """matrix @ rows, for a matrix of 0, +-1 and +-1/2 (the transforms') and rows of
    values: sums and differences, halved where the coefficient is."""
    out = []
    for coefficients in matrix:
        row = []
        for k in range(len(rows[0])):
            total = None
            for c, r in zip(coefficients, rows):
                if c == 0:
                    continue
                term = r[k] if abs(c) == 1 else b.fmul(r[k], ir.Constant(r[k].type, abs(float(c))))
                if total is None:
                    total = term if c > 0 else b.fneg(term)
                else:
                    total = b.fadd(total, term) if c > 0 else b.fsub(total, term)
            row.append(total)
        out.append(row)
    return out


EMITTERS.insert(0, (fits, WinogradConvolution))
