"""Convolution by register tiles (f32, f64): the convolution kernel of the CPU backend, alone
or with its elementwise epilogue (an output fusion). Groups with few output features
(depthwise) have a kernel of their own (conv/depthwise.py), and 3x3 windows of stride 1 over
enough output go to Winograd's transforms (conv/winograd.py), whose products run in these
tiles' inner loop; other element types are computed by the elemental loops (llvm/convolution.py).

The output is a matrix of positions by output features: a position is one output batch
element at one output spatial point (row-major over batch then the spatial dimensions in
dim_labels order); its row is the dot product of the input under its window (every window
offset, every input feature of the group) with the kernel. A tile is TILE_POSITIONS
consecutive positions by one panel of TILE_VECTORS vectors of output features (6 x 16 f32
with AVX2, 8 x 32 with AVX-512):
its accumulators stay in registers while a loop over the window offsets (taps) and, inside,
over the input features adds broadcast(input element) * kernel vector for each position and
vector. There is no patch matrix: per tap, each position of the tile reads its input pixel
where it is, the tap only moving every position's pointer by the same offset.

That needs every window inside the input and each pixel's features contiguous. A
convolution's output fusion that ends in a pad (the next convolution's padded input,
passes/convolution_layout.py) writes its result inside the border and fills the border.
An input that has padding or base dilation, or whose features are not its minor-most
dimension (NCHW), is otherwise first copied into kernel scratch with its features minor-most and the
padding and dilation holes written as zeros (0 * inf stays NaN, as the evaluator's zero
padding gives); an NHWC input without padding (a 1x1 or VALID convolution) is read where it
is. When the input's pixels are also contiguous along the last spatial dimension, as they
are then, the window offsets along it join the input features in one contiguous run (3 x 64
values for a 3x3 window over 64 features), so the inner loop is long and taps are few. A
kernel is read where it is when its output features are minor-most and each group's count
is a whole number of panels (HWIO, as the ONNX importer stores known weights and JAX passes
them); otherwise it is packed once per call as [group][tap][input feature][output feature,
zero padded]. A kernel that is an entry parameter with a fixed value (an ONNX model's
weights, see runtime/parameter_forms.py) comes in panel order instead, made once when the weights
are bound (KernelPanels): panel by panel, each panel's rows one after another, so the
rows a tile reads are one sequential stream that stays whole in L1 (rows a row of output
features apart map to few of its sets), and a deep kernel's slices of its depth can be
twice as long (PANEL_SLICE_BYTES).

Threads. The positions x panels matrix is cut into blocks, one task each (runtime/parallel.py); a
task computes its block tile by tile into a buffer on its stack, panel by panel (so the
panel's kernel rows are reused from cache by every tile of the block), then writes the
block to the output, applying the fused epilogue element by element while the block is
still in cache. Blocks along the positions suit convolutions whose input is larger than
their kernel; the late layers of a CNN, with more kernel than input, are cut along the
output features, so that each kernel row is read from memory once.
"""
from __future__ import annotations

from math import ceil, prod

import llvmlite.ir as ir

from ....fusion.buffer_assignment import read_elementwise
from ....hlo.attributes import WindowDim, features_first
from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, default_layout
from ...llvm.convolution import ConvGeometry
from ...llvm.indices import delinearize, linear_index
from ...llvm.ir_types import (
    PTR,
    alloca_in_entry,
    etype,
    fma_intrinsic,
    i64,
    prefetch,
    smin,
    splat,
    storage_type,
    transpose_square,
)
from ...llvm.loops import for_range, stepped_loop
from ...llvm.windows import window_source
from ..codegen import KERNELS, OUTPUT_FUSION_KERNELS, kernel_root, register_kernels
from ..runtime.parallel import emit_parallel_tasks, worker_pool
from ..tuning.params import ConvParams
from ..tuning.selection import conv_params
from .tile_plan import KernelPanels, fits, minor_dimension, panel_layout, plan, window_strides

UNROLL = 1                 # input features per trip of the inner loop: LLVM unrolls it as it sees
                           # fit; 4 by hand made machine code 25% slower to build and no faster run
# A panel's kernel rows lie a row of output features apart (1.5 KB for 384 of them), a
# stride the hardware prefetchers do not follow: the tile asks for the rows
# KERNEL_PREFETCH_ROWS ahead itself. Convolutions over small maps read far more kernel
# than input: 8 rows ahead, 3x3 384 -> 384 at 6x6 1055 -> 905 us, 256 -> 256 at 14x14
# 1271 -> 953 us; with the kernel out of cache (as in a model, whose weights outgrow the
# caches) 32 rows ahead gain another 5-17% over 8 (3x3 128 -> 128 at 28x28: 1.89 -> 1.57 ms),
# and in cache the same within the noise.
KERNEL_PREFETCH_ROWS = 32

# Convolution kernels, tried in order: (fits(conv), emitter class); an emitter is made with
# (kernel emitter, conv) and has emit(out_ptr, out_shape, epilogue root or None), and names
# its route in ROUTE. The tiles come first; conv/depthwise.py adds its kernel after them.
EMITTERS: list = []


def routes(conv: HloInstruction) -> list[str]:
    """The ROUTE of every emitter that fits `conv`, the default (the first) first."""
    return [emitter.ROUTE for accepts, emitter in EMITTERS if accepts(conv)]


def emitter_class(conv: HloInstruction):
    """The emitter class of `conv`: the route a tuning database chose for it when that route
    fits (tuning/selection.py), else the first of EMITTERS that fits; None: none fits.
    Every route is registered first: the route chosen here decides the form a constant
    kernel is packed in (kernel_form), so it must be the route the code is emitted for."""
    register_kernels()
    route = conv_params(conv).route
    fitting = [emitter for accepts, emitter in EMITTERS if accepts(conv)]
    chosen = [emitter for emitter in fitting if emitter.ROUTE == route]
    return (chosen or fitting or [None])[0]


def kernel_form(conv: HloInstruction):
    """The form `conv`'s emitter (emitter_class) wants its kernel in when the kernel is a
    constant parameter (runtime/parameter_forms.py), or None."""
    emitter = emitter_class(conv)
    form = getattr(emitter, "kernel_form", None)   # (an emitter that reads its kernel in place has none)
    return form(conv) if form is not None else None


# --- the kernels --------------------------------------------------------------------------------

def emit_convolution(ke) -> None:
    """A convolution kernel: the first emitter that fits, else the elemental loops."""
    conv = kernel_root(ke)
    emitter = _emitter(ke, conv)
    if emitter is None:
        return ke.emit_loop(conv)
    emitter.emit(ke.out_ptr, ke.instr.shape, None)


def emit_conv_output_fusion(ke) -> None:
    """A convolution with its elementwise epilogue. When the epilogue reads the convolution
    only at the element it computes, each task applies it to its block; otherwise the
    convolution is computed whole into scratch first and the epilogue loop reads it there."""
    conv = next(i for i in ke.fused.instructions if i.opcode == "convolution")
    root = kernel_root(ke)
    emitter = _emitter(ke, conv)
    if emitter is None:
        return ke.emit_loop(root)
    if read_elementwise(conv, root):
        return emitter.emit(ke.out_ptr, ke.instr.shape, root)
    if isinstance(emitter, TiledConvolution) and _padding_root(root) and read_elementwise(conv, root.operands[0], root):
        # the result inside a zero border (passes/convolution_layout.py: the padding of the next
        # convolution's input, written here rather than copied there)
        lows = tuple(d.low for d in root.attrs["padding"])
        _fill_border(ke, root, lows)
        emitter.origin = lows
        return emitter.emit(ke.out_ptr, ke.instr.shape, root.operands[0])
    result = ke.reserve_scratch(conv.shape.size * etype(conv).bytes)
    emitter.emit(result, conv.shape, None)
    ke.e.buffer_reads[id(conv)] = lambda index: ke.load(result, conv.shape, index)
    ke.emit_loop(root)


def _padding_root(root: HloInstruction) -> bool:
    """A pad with no interior padding and no cropping: its operand lies whole inside it."""
    return root.opcode == "pad" and all(d.low >= 0 and d.high >= 0 and d.interior == 0 for d in root.attrs["padding"])


def _fill_border(ke, pad: HloInstruction, lows: tuple[int, ...]) -> None:
    """The pad's value in every element of its result outside the padded operand: for each
    dimension, the slabs before and after the operand's extent (the dimensions before it
    within the operand's extent, those after it whole)."""
    b = ke.b
    shape, inner = pad.shape, pad.operands[0].shape.dims
    ke.e.push_scope()
    value = ke.e.value(pad.operands[1], ())
    ke.e.pop_scope()
    for d in range(shape.rank):
        for start, count in ((0, lows[d]), (lows[d] + inner[d], shape.dims[d] - lows[d] - inner[d])):
            if count <= 0:
                continue
            extents = [inner[k] if k < d else count if k == d else shape.dims[k] for k in range(shape.rank)]
            offsets = [lows[k] if k < d else start if k == d else 0 for k in range(shape.rank)]
            ke.loop_nest(extents, lambda i, offsets=offsets: ke.store(
                ke.out_ptr, shape, tuple(b.add(x, i64(o)) if o else x for x, o in zip(i, offsets)),
                value), prod(extents))


def _emitter(ke, conv: HloInstruction):
    """The emitter of `conv` (emitter_class), or None."""
    emitter = emitter_class(conv)
    return emitter(ke, conv) if emitter is not None else None


class ConvolutionEmitter:
    """What a convolution emitter (EMITTERS) starts from: the kernel emitter, the convolution,
    its element type, its operands' buffers, the form its kernel comes in when that is not
    its layout's (`kernel_form`, see runtime/parameter_forms.py) and the worker pool (None: one
    thread)."""
    ROUTE = ""   # the route's name, as a tuning database chooses it (tuning/params.py ConvParams)

    def __init__(self, ke, conv: HloInstruction):
        self.ke, self.b, self.conv = ke, ke.b, conv
        self.t = etype(conv)
        self.st = storage_type(self.t)
        self.lhs_ptr, self.lhs_shape = conv_operand(ke, conv.operands[0])
        self.rhs_ptr, self.rhs_shape = conv_operand(ke, conv.operands[1])
        kernel = _outer(ke, conv.operands[1])
        entry = ke.codegen.hlo.entry
        self.formed_kernel = ke.codegen.parameter_forms.get(kernel.parameter_number) \
            if kernel.opcode == "parameter" and entry.parameters[kernel.parameter_number] is kernel else None
        self.pool = worker_pool()

    @staticmethod
    def kernel_form(conv: HloInstruction):
        """The form this emitter would read `conv`'s kernel in when it is a constant
        parameter; None: where its layout puts it."""
        return None

    @property
    def threads(self) -> int:
        return self.pool.threads if self.pool is not None else 1

    def _run_tasks(self, n_tasks: int, body) -> None:
        """body(task index) for each of n_tasks tasks, each in a scope of its own of the
        elemental emitter: inline for one task, on the pool, or in a loop without one."""
        def task(index):
            self.ke.e.push_scope()
            body(index)
            self.ke.e.pop_scope()

        if n_tasks == 1:
            task(i64(0))
        elif self.pool is not None:
            emit_parallel_tasks(self.b, self.pool, n_tasks, task)
        else:
            stepped_loop(self.b, i64(0), i64(n_tasks), task)


class TiledConvolution(ConvolutionEmitter):
    ROUTE = "tiles"

    def __init__(self, ke, conv: HloInstruction):
        super().__init__(ke, conv)
        self.params: ConvParams = conv_params(conv)
        self.p = plan(conv, self.lhs_shape, self.rhs_shape, self.threads,
                      panel_ordered=isinstance(self.formed_kernel, KernelPanels),
                      params=self.params if self.ROUTE == TiledConvolution.ROUTE else None)
        self.prefetch_rows = KERNEL_PREFETCH_ROWS if self.params.prefetch_rows is None else self.params.prefetch_rows
        self.unroll = self.params.unroll or UNROLL
        self.g = self.p.g
        self.vector = ir.VectorType(self.st, self.p.lanes)
        self.origin: tuple[int, ...] | None = None   # where the result starts in the output (a padded one)

    @staticmethod
    def kernel_form(conv: HloInstruction) -> KernelPanels | None:
        """Panel order (KernelPanels), unless the window is reversed."""
        g = ConvGeometry.of(conv)
        if any(w.reversal for w in g.window):
            return None
        _, _, panel = panel_layout(g, etype(conv))
        dn = g.dn
        return KernelPanels(dn.kernel_output_feature, dn.kernel_input_feature, tuple(dn.kernel_spatial), g.groups,
                            panel)

    # --- the whole kernel ---------------------------------------------------------------------------
    def emit(self, out_ptr: ir.Value, out_shape: ArrayShape, epilogue: HloInstruction | None) -> None:
        p = self.p
        if p.stage_input:
            self._stage_input()
        if p.pack_kernel:
            self._pack_kernel()
        self._run_tasks(p.position_blocks * p.panel_blocks,
                        lambda index: self._block(index, out_ptr, out_shape, epilogue))

    def _stage_input(self) -> None:
        """Copy the input into scratch as it is read: features minor-most (after batch and the
        spatial dims in dim_labels order, NHWC for NCHW), padding and base-dilation holes
        written as zeros, negative padding cropped."""
        ke, g, p = self.ke, self.g, self.p
        shape = self.lhs_shape
        dn = g.dn
        dims = list(shape.dims)
        for d, n in zip(dn.input_spatial, p.input_spatial):
            dims[d] = n
        order = [dn.input_batch, *dn.input_spatial, dn.input_feature]
        staged = ArrayShape(shape.dtype, tuple(dims), tuple(reversed(order)))
        ptr = ke.reserve_scratch(staged.size * self.t.bytes)
        if self._images_by_blocks():
            self._stage_by_blocks(ptr)
        else:
            self._stage_by_elements(ptr, staged, order)
        self.lhs_ptr, self.lhs_shape = ptr, staged

    def _images_by_blocks(self) -> bool:
        """Whether the input is staged by square blocks (_stage_by_blocks): NCHW images, at
        least a vector's worth of features and of columns, no base dilation or cropping. The
        batch must be the outermost dimension: a weight gradient's input (dim_labels f01b, the
        images' batch minor-most) is features-first too, but its rows are not contiguous."""
        g, p, shape = self.g, self.p, self.lhs_shape
        return len(g.window) == 2 and g.batch_groups == 1 and shape.is_row_major and g.dn.input_batch == 0 and \
            features_first(shape.rank, g.dn.input_batch, g.dn.input_feature, g.dn.input_spatial) is True and \
            g.groups * g.input_features >= p.lanes and g.input_spatial[-1] >= p.lanes and \
            all(w.lhs_dilate == 1 and w.pad_low >= 0 and w.pad_high >= 0 for w in g.window)

    def _stage_by_blocks(self, ptr) -> None:
        """NCHW into NHWC with its padding, by blocks of a vector's worth of features by as
        many columns: each block read as rows of contiguous columns, transposed in registers
        and written as rows of contiguous features, where the copy element by element
        gathers each feature from its own plane (the convolutions 1-3% faster: 3x3 256 -> 256
        at 56x56 10.06 -> 9.79 ms; the copy is then as fast as memory). The last block of a
        row or of the features overlaps the one before rather than running short; the
        padding is zeroed around the copy."""
        ke, b, g, p = self.ke, self.b, self.g, self.p
        n = p.lanes
        vector = self.vector
        features = g.groups * g.input_features
        (height, width), (rows, columns) = g.input_spatial, p.input_spatial
        top, left = g.window[0].pad_low, g.window[1].pad_low
        source = self.lhs_ptr
        row_elements = columns * features

        def at(*offsets):
            return b.gep(ptr, [linear_index(b, offsets, (g.batch, rows, columns, features), (3, 2, 1, 0))],
                         source_etype=self.st)

        def zero_rows(first: int, count: int):
            if count:
                ke.loop_nest([g.batch, count * row_elements], lambda i: b.store(
                    ir.Constant(self.st, 0.0), b.gep(ptr, [b.add(b.mul(i[0], i64(rows * row_elements)),
                                                                 b.add(i64(first * row_elements), i[1]))],
                                                     source_etype=self.st)), g.batch * count * row_elements)

        def zero_columns(first: int, count: int):
            if count:
                ke.loop_nest([g.batch, height, count * features], lambda i: b.store(
                    ir.Constant(self.st, 0.0), b.gep(at(i[0], b.add(i[1], i64(top)), i64(first), i64(0)), [i[2]],
                                                     source_etype=self.st)), g.batch * height * count * features)

        zero_rows(0, top)
        zero_rows(top + height, rows - top - height)
        zero_columns(0, left)
        zero_columns(left + width, columns - left - width)

        def block(i):
            image, y, column_block, feature_block = i
            x0 = smin(b, b.mul(column_block, i64(n)), i64(width - n))
            c0 = smin(b, b.mul(feature_block, i64(n)), i64(features - n))
            loaded = []
            for k in range(n):
                plane = b.add(b.mul(image, i64(features)), b.add(c0, i64(k)))
                row = b.gep(source, [b.add(b.mul(b.add(b.mul(plane, i64(height)), y), i64(width)), x0)],
                            source_etype=self.st)
                value = b.load(row, typ=vector)
                value.align = self.t.bytes
                loaded.append(value)
            for k, value in enumerate(transpose_square(b, loaded)):
                b.store(value, at(image, b.add(y, i64(top)), b.add(x0, i64(left + k)), c0)).align = self.t.bytes

        extents = [g.batch, height, ceil(width / n), ceil(features / n)]
        ke.loop_nest(extents, block, g.batch * height * width * features)

    def _stage_by_elements(self, ptr, staged: ArrayShape, order: list) -> None:
        """The general copy (any layout, base dilation, cropping), element by element."""
        ke, b, g = self.ke, self.b, self.g
        shape = self.lhs_shape
        dn = g.dn
        dims = staged.dims
        source = self.lhs_ptr
        holes = tuple(WindowDim(1, 1, w.pad_low, w.pad_high, w.lhs_dilate) for w in g.window)

        def copy(loop):
            index = [None] * shape.rank
            for d, i in zip(order, loop):
                index[d] = i
            at = tuple(index[d] for d in dn.input_spatial)
            valid, inside = window_source(b, at, (i64(0),) * len(at), holes, g.input_spatial)
            for d, i in zip(dn.input_spatial, inside):
                index[d] = i
            value = ke.load(source, shape, tuple(index))
            if valid is not None:
                value = b.select(valid, value, ir.Constant(self.st, 0.0))
            for d, i in zip(dn.input_spatial, at):
                index[d] = i
            ke.store(ptr, staged, tuple(index), value)

        ke.loop_nest([dims[d] for d in order], copy, staged.size)

    def _pack_kernel(self) -> None:
        """packed[tap][input feature][group][output feature of the group, zero padded]."""
        ke, b, g, p = self.ke, self.b, self.g, self.p
        windows = [w.size for w in g.window]
        extents = [*windows, g.input_features, g.groups, p.group_columns]
        ptr = ke.reserve_scratch(prod(extents) * self.t.bytes)
        source, shape = self.rhs_ptr, self.rhs_shape

        def pack(loop):
            offsets, feature, group, column = loop[:-3], loop[-3], loop[-2], loop[-1]
            at = b.gep(ptr, [linear_index(b, loop, tuple(extents), default_layout(len(extents)))],
                       source_etype=self.st)
            out_feature = b.add(b.mul(group, i64(g.group_features)), column)
            if p.group_columns == g.group_features:
                b.store(ke.load(source, shape, g.kernel_index(b, out_feature, feature, offsets)), at)
                return
            inside = b.icmp_unsigned("<", column, i64(g.group_features))
            with b.if_else(inside) as (then, otherwise):
                with then:
                    b.store(ke.load(source, shape, g.kernel_index(b, out_feature, feature, offsets)), at)
                with otherwise:
                    b.store(ir.Constant(self.st, 0.0), at)

        ke.loop_nest(extents, pack, prod(extents))
        # the packed kernel, described as a kernel array (window reversal done) with the
        # output features of every group padded, laid out tap, input feature, output feature
        dn = g.dn
        dims = [0] * (2 + len(windows))
        dims[dn.kernel_output_feature] = g.groups * p.group_columns
        dims[dn.kernel_input_feature] = g.input_features
        for d, n in zip(dn.kernel_spatial, windows):
            dims[d] = n
        order = [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
        self.rhs_ptr, self.rhs_shape = ptr, ArrayShape(shape.dtype, tuple(dims), tuple(reversed(order)))

    # --- one task: a block of positions x panels ---------------------------------------------------
    def _block(self, task: ir.Value, out_ptr, out_shape: ArrayShape, epilogue) -> None:
        b, p = self.b, self.p
        pb, qb = (b.udiv(task, i64(p.panel_blocks)), b.urem(task, i64(p.panel_blocks))) \
            if p.panel_blocks > 1 else (task, i64(0))
        first = b.mul(pb, i64(p.block_positions))
        end = smin(b, b.add(first, i64(p.block_positions)), i64(p.total_positions))
        first_panel = b.mul(qb, i64(p.block_panels))
        end_panel = smin(b, b.add(first_panel, i64(p.block_panels)), i64(p.panels))
        # rows of the block: a tile's positions spare rows before the first, where a block's last
        # tile, moved back to end at the block's end, may start
        block = self._stack_block((p.block_positions + p.positions) * p.block_columns)
        tiles = b.udiv(b.add(b.sub(end, first), i64(p.positions - 1)), i64(p.positions))

        def panels(depth_slice):
            def panel(q):
                def tile(k):
                    nominal = b.add(first, b.mul(k, i64(p.positions)))
                    start = smin(b, nominal, b.sub(end, i64(p.positions)))
                    self._tile(start, nominal, q, block, first, first_panel, depth_slice)
                stepped_loop(b, i64(0), tiles, tile)
            stepped_loop(b, first_panel, end_panel, panel)

        # A deep kernel (3x3 over 512 features: 590 KB per panel) is read in slices of the
        # depth, each KERNEL_SLICE_BYTES of a panel's rows, which stay in L1 while every tile
        # of the block runs its slice, the tiles' sums kept in the block between slices.
        # Measured (GFLOP/s, 2 threads, AVX-512, NHWC): 3x3 512 -> 512 at 28x28 94 -> 232 and
        # at 14x14 101 -> 267, 3x3 256 -> 256 at 56x56 165 -> 297, 1x1 2048 -> 512 at 7x7
        # 77 -> 202; 64 features (72 KB per panel) 268-300 either way, so shallow kernels are
        # read whole by each tile.
        if p.slices == 1:
            panels(None)
        else:
            stepped_loop(b, i64(0), i64(p.slices), panels)
        self._write_block(block, first, end, first_panel, end_panel, out_ptr, out_shape, epilogue)

    def _stack_block(self, elements: int) -> ir.Value:
        here = self.b.block
        self.b.position_at_start(self.b.function.entry_basic_block)
        block = self.b.alloca(self.st, size=i64(elements))
        block.align = 64
        block.type = PTR   # llvmlite types an alloca's address by its contents; vectors are stored here too
        self.b.position_at_end(here)
        return block

    def _tile(self, start: ir.Value, nominal: ir.Value, q: ir.Value, block: ir.Value, first: ir.Value,
              first_panel: ir.Value, depth_slice: ir.Value | None) -> None:
        """Positions start .. start + positions - 1 by panel q, into the block: the whole
        depth, or one slice of it (a segment of one outer tap's run) added to the block's
        sums of the slices before it. A block's last tile starts before `nominal` when moved
        back to end at the block's end; its rows before `nominal` belong to the tile before,
        which has added this slice to them already, so they are not stored again."""
        b, g, p = self.b, self.g, self.p
        group, column = (b.udiv(q, i64(p.panels_per_group)), b.urem(q, i64(p.panels_per_group))) \
            if g.groups > 1 else (i64(0), q)
        column = b.mul(column, i64(p.panel_columns))
        pixels = self._tile_pixels(start, group)
        accumulators, in_block = self._start_tile(start, q, block, first, first_panel, depth_slice)
        out_feature = b.add(b.mul(group, i64(g.group_features if not p.pack_kernel else p.group_columns)), column) \
            if g.groups > 1 else column

        def tap(t, segment=()):
            self._tap(t, q, out_feature, pixels, accumulators, segment)

        if depth_slice is not None:
            t = b.udiv(depth_slice, i64(p.segments))
            begin = b.mul(b.urem(depth_slice, i64(p.segments)), i64(p.segment))
            tap(t, (begin, smin(b, b.add(begin, i64(p.segment)), i64(p.run))))
        elif p.outer_taps == 1:
            tap(i64(0))
        else:
            stepped_loop(b, i64(0), i64(p.outer_taps), tap)
        self._finish_tile(start, nominal, accumulators, in_block, depth_slice)

    def _tile_pixels(self, start: ir.Value, group: ir.Value) -> list[tuple[ir.Value, int]]:
        """Each position's input pixel under the window's first tap, as (pointer, constant offset)."""
        p = self.p
        if p.pixel_step is None:
            return [(self._pixel(self.b.add(start, i64(r)), group), 0) for r in range(p.positions)]
        first_pixel = self._pixel(start, group)
        return [(first_pixel, r * p.pixel_step) for r in range(p.positions)]

    def _start_tile(self, start: ir.Value, q: ir.Value, block: ir.Value, first: ir.Value, first_panel: ir.Value,
                    depth_slice: ir.Value | None) -> tuple[list, list]:
        """The tile's accumulators (stack slots the registers are promoted from) and where its
        sums lie in the block; the accumulators start at zero, or at the block's sums of the
        depth's earlier slices."""
        b, p = self.b, self.p
        accumulators = [[alloca_in_entry(b, self.vector) for _ in range(p.vectors)] for _ in range(p.positions)]
        row0 = b.add(b.sub(start, first), i64(p.positions))
        col0 = b.mul(b.sub(q, first_panel), i64(p.panel_columns))
        in_block = [[b.gep(block, [b.add(b.add(b.mul(b.add(row0, i64(r)), i64(p.block_columns)), col0),
                                         i64(v * p.lanes))],
                           source_etype=self.st) for v in range(p.vectors)] for r in range(p.positions)]
        zero = ir.Constant(self.vector, None)
        later_slice = b.icmp_unsigned("!=", depth_slice, i64(0)) if depth_slice is not None else None
        for row, sums in zip(accumulators, in_block):
            for slot, at in zip(row, sums):
                if later_slice is None:
                    b.store(zero, slot)
                else:
                    with b.if_else(later_slice) as (then, otherwise):
                        with then:
                            loaded = b.load(at, typ=self.vector)
                            loaded.align = self.t.bytes
                            b.store(loaded, slot)
                        with otherwise:
                            b.store(zero, slot)
        return accumulators, in_block

    def _tap(self, t: ir.Value, q: ir.Value, out_feature: ir.Value, pixels: list, accumulators: list,
             segment: tuple) -> None:
        """One outer tap t of the window (its run of input features, or a segment of it) added
        to the tile's accumulators: each pixel moved by the tap's offset, times the kernel rows
        of the tap and the tile's panel."""
        b, g, p = self.b, self.g, self.p
        sizes = self.outer_tap_sizes
        offsets = delinearize(b, t, sizes, default_layout(len(sizes)))
        in_strides = window_strides(self.lhs_shape)
        shift = i64(0)
        for k, w, d in zip(offsets, g.window, g.dn.input_spatial):
            step = w.rhs_dilate * in_strides[d]
            if step and sizes and w.size > 1:
                shift = b.add(shift, b.mul(k, i64(step)))
        inputs = [(b.gep(pixel, [shift], source_etype=self.st), offset) for pixel, offset in pixels]
        if p.panel_ordered:
            windows = tuple(w.size for w in g.window)
            tap_index = linear_index(b, offsets, windows, default_layout(len(windows))) \
                if windows else i64(0)
            kernel = b.gep(self.rhs_ptr, [b.add(b.mul(q, i64(p.taps * g.input_features * p.panel_columns)),
                                                b.mul(tap_index, i64(g.input_features * p.panel_columns)))],
                           source_etype=self.st)
            self._dot(inputs, kernel, p.panel_columns, accumulators, *segment)
            return
        rhs = self.rhs_shape
        if p.pack_kernel:   # (its window reversal is done)
            index = [None] * rhs.rank
            index[g.dn.kernel_output_feature], index[g.dn.kernel_input_feature] = out_feature, i64(0)
            for d, k in zip(g.dn.kernel_spatial, offsets):
                index[d] = k
        else:
            index = g.kernel_index(b, out_feature, i64(0), offsets)
        kernel = b.gep(self.rhs_ptr, [linear_index(b, index, rhs.dims, rhs.minor_to_major)], source_etype=self.st)
        self._dot(inputs, kernel, window_strides(rhs)[g.dn.kernel_input_feature], accumulators, *segment)

    @property
    def outer_tap_sizes(self) -> tuple[int, ...]:
        """The extents of the window's taps a tile loops over: every spatial dimension of the
        window, but the last one's offsets join the input features in one run unless the plan
        has a run of one tap."""
        window = self.g.window
        if self.p.run_taps == 1:
            return tuple(w.size for w in window)
        return tuple(w.size for w in window[:-1]) + ((1,) if window else ())

    def _finish_tile(self, start: ir.Value, nominal: ir.Value, accumulators: list, in_block: list,
                     depth_slice: ir.Value | None) -> None:
        """The accumulators stored to the block, but for a moved-back tile's rows before
        `nominal` when the depth is sliced (the tile before has added this slice to them)."""
        b, p = self.b, self.p
        for r, (row, sums) in enumerate(zip(accumulators, in_block)):
            def store(row=row, sums=sums):
                for slot, at in zip(row, sums):
                    b.store(b.load(slot), at).align = self.t.bytes
            if depth_slice is None or r >= p.positions - 1:   # recomputing the whole depth is harmless
                store()
            else:
                with b.if_then(b.icmp_signed(">=", b.add(start, i64(r)), nominal)):
                    store()

    def _position(self, position: ir.Value) -> tuple[ir.Value, tuple]:
        """(output batch element, output spatial index) of a position."""
        dims = (self.g.batch, *self.g.output_spatial)
        index = delinearize(self.b, position, dims, default_layout(len(dims)))
        return index[0], tuple(index[1:])

    def _pixel(self, position: ir.Value, group) -> ir.Value:
        """The group's first input feature under the first window offset of a position, in
        the input as the tiles read it."""
        b, g = self.b, self.g
        batch, spatial = self._position(position)
        at = []
        for i, w in zip(spatial, g.window):
            x = b.mul(i, i64(w.stride)) if w.stride != 1 else i
            if not self.p.stage_input and w.pad_low:   # negative padding: a crop
                x = b.add(x, i64(-w.pad_low))
            at.append(x)
        index = g.input_index(b, batch, group, i64(0), tuple(at))
        shape = self.lhs_shape
        return b.gep(self.lhs_ptr, [linear_index(b, index, shape.dims, shape.minor_to_major)], source_etype=self.st)

    def _dot(self, inputs: list, kernel: ir.Value, kernel_stride: int, accumulators, begin=None, end=None) -> None:
        """accumulators[r][v] += input r's run . kernel rows, vector v: the inner loop, over
        the whole run or over values [begin, end) of it."""
        b, p = self.b, self.p
        fma = fma_intrinsic(b.module, self.vector)

        def step(c):
            rows = [b.load(b.gep(kernel, [b.add(b.mul(c, i64(kernel_stride)), i64(v * p.lanes))],
                                 source_etype=self.st), typ=self.vector) for v in range(p.vectors)]
            for row in rows:
                row.align = self.t.bytes
            if self.prefetch_rows:
                for v in range(p.vectors):
                    ahead = b.gep(kernel, [b.add(b.mul(c, i64(kernel_stride)),
                                                 i64(self.prefetch_rows * kernel_stride + v * p.lanes))],
                                  source_etype=self.st)
                    prefetch(b, ahead)
            for (pixel, offset), slots in zip(inputs, accumulators):
                at = b.gep(pixel, [b.add(c, i64(offset)) if offset else c], source_etype=self.st)
                x = splat(b, self.vector, b.load(at, typ=self.st))
                for row, slot in zip(rows, slots):
                    b.store(b.call(fma, [x, row, b.load(slot)]), slot)

        if begin is not None:
            stepped_loop(b, begin, end, step)
            return
        length = p.run
        unroll = self.unroll
        main = length // unroll * unroll
        if main:
            stepped_loop(b, i64(0), i64(main), lambda c: [step(b.add(c, i64(u)) if u else c) for u in range(unroll)],
                         step=unroll)
        for c in range(main, length):
            step(i64(c))

    # --- writing a block ---------------------------------------------------------------------------
    def _write_block(self, block, first, end, first_panel, end_panel, out_ptr, out_shape: ArrayShape,
                     epilogue) -> None:
        """Each result of the block to the output (through the epilogue), in the order of the
        output's memory: a loop over a panel's features per position when output features are
        its minor-most dimension, over positions per feature otherwise; LLVM vectorises either
        (the features' loop, rather than a copy of the epilogue per feature, took 12 ms less
        of LLVM's time on the CNN block, and runs as fast). Positions per feature go row by
        row of the output, the column the loop's variable: over the flat position LLVM kept
        a division per element to find its row and ran the loop scalar (3x3 64 -> 64 at
        224x224 265 -> 304 GFLOP/s). Every feature of a row is written before the next row,
        so the row's part of the block stays in L1 while the features gather from it (a
        feature at a time down the whole block read a line from L2 per element: ResNet-50's
        7x7 stem 193 -> 249 GFLOP/s, SqueezeNet 4.9 -> 4.7 ms). Reading the block a square
        at a time and transposing it in registers, rather than LLVM's gathers, was no
        faster."""
        b, g, p = self.b, self.g, self.p
        dn = g.dn

        def store(position, q, lanes, at=None):
            """Lanes `lanes` of panel q at a position (whose batch element and spatial index
            are `at`, when known) to the output."""
            group, column = (b.udiv(q, i64(p.panels_per_group)), b.urem(q, i64(p.panels_per_group))) \
                if g.groups > 1 else (i64(0), q)
            batch, spatial = at if at is not None else self._position(position)
            row = b.mul(b.add(b.sub(position, first), i64(p.positions)), i64(p.block_columns))
            row = b.add(row, b.mul(b.sub(q, first_panel), i64(p.panel_columns)))
            for lane in lanes:
                value = b.load(b.gep(block, [b.add(row, lane)], source_etype=self.st), typ=self.st)
                self._store_result(out_ptr, out_shape, epilogue, batch, spatial, group,
                                   b.add(b.mul(column, i64(p.panel_columns)), lane), value)

        if minor_dimension(out_shape, dn.output_feature):
            stepped_loop(b, first, end, lambda position: stepped_loop(
                b, first_panel, end_panel,
                lambda q: for_range(b, [p.panel_columns], lambda lane: store(position, q, lane))))
        else:
            def row(start, at, begin, stop):
                def columns(q, lane):
                    stepped_loop(b, begin, stop, lambda x: store(
                        b.add(start, x), q, lane, (at[0], (*at[1], x)[:len(g.output_spatial)])))
                stepped_loop(b, first_panel, end_panel,
                             lambda q: for_range(b, [p.panel_columns], lambda lane: columns(q, lane)))
            self._by_rows(first, end, row)

    def _store_result(self, out_ptr, out_shape: ArrayShape, epilogue, batch, spatial, group, feature,
                      value) -> None:
        """One result of the convolution, output feature `feature` of `group` (counted within
        the group's panels) at (batch element, spatial index), through the epilogue to the
        output; nothing for a feature of a group's last panel past the group's features."""
        ke, b, g, p = self.ke, self.b, self.g, self.p
        dn = g.dn
        index = [None] * out_shape.rank
        index[dn.output_batch] = batch
        index[dn.output_feature] = b.add(b.mul(group, i64(g.group_features)), feature) if g.groups > 1 else feature
        for d, i in zip(dn.output_spatial, spatial):
            index[d] = i
        if epilogue is not None:
            ke.e.push_scope()
            ke.e.buffer_reads[id(self.conv)] = lambda _index: value
            value = ke.e.value(epilogue, tuple(index))
            ke.e.pop_scope()
        if self.origin is not None:
            index = [b.add(i, i64(o)) if o else i for i, o in zip(index, self.origin)]
        if p.group_columns == g.group_features:
            ke.store(out_ptr, out_shape, tuple(index), value)
        else:   # the padding of a group's last panel
            with b.if_then(b.icmp_unsigned("<", feature, i64(g.group_features))):
                ke.store(out_ptr, out_shape, tuple(index), value)

    def _by_rows(self, first, end, body) -> None:
        """body(first position of the row, (batch element, spatial index but the last), first
        column, end column) for the positions first .. end - 1, by runs along the output's
        last spatial dimension."""
        b, g = self.b, self.g
        width = g.output_spatial[-1] if g.output_spatial else 1
        outer = (g.batch, *g.output_spatial[:-1])

        def run(r):
            start = b.mul(r, i64(width))
            index = delinearize(b, r, outer, default_layout(len(outer)))
            begin = b.sub(b.select(b.icmp_signed(">", first, start), first, start), start)
            stop = b.sub(smin(b, end, b.add(start, i64(width))), start)
            body(start, (index[0], tuple(index[1:])), begin, stop)

        stepped_loop(b, b.udiv(first, i64(width)), b.udiv(b.add(end, i64(width - 1)), i64(width)), run)


def _outer(ke, value: HloInstruction) -> HloInstruction:
    """The instruction whose buffer a convolution operand is (a fusion parameter's is the
    fusion's operand)."""
    if value.opcode == "parameter" and ke.fused is not None:
        return ke.instr.operands[value.parameter_number]
    return value


def conv_operand(ke, value: HloInstruction) -> tuple[ir.Value, ArrayShape]:
    """The buffer of a convolution operand and its shape."""
    outer = _outer(ke, value)
    return ke.pointers[id(outer)], outer.shape


EMITTERS.append((fits, TiledConvolution))
KERNELS["convolution"] = emit_convolution
OUTPUT_FUSION_KERNELS["convolution"] = emit_conv_output_fusion
