"""Depthwise and thin-group convolution (f32, f64): the convolution kernel for groups with
fewer than MIN_GROUP_FEATURES output features (a depthwise convolution has one input and a
few output features per group), alone or with its elementwise epilogue. Register tiles
across output features (conv/tiles.py) would be almost all padding there; this kernel
vectorises across output positions instead.

One output feature's results over all output positions (a plane) are a sum, over the
group's input features and the window offsets (taps), of a weight times the input plane
shifted by the tap. The input plane of each input feature is first copied into kernel
scratch with the padding around it, and split by the window strides into phase planes
(the elements at positions congruent to each phase modulo the stride, along each spatial
dimension): output position o under tap k reads staged position o * stride + k * dilation,
which is phase (k * dilation) % stride at (o + (k * dilation) // stride). In the phase
planes flattened row-major, a tap is then one constant shift for every position, so the
plane is computed as a 1-D run of "virtual" positions, the output's positions numbered
with the phase planes' row length: contiguous vector loads, no bounds checks, taps
unrolled with their shifts and weights known to the loop. The virtual positions past an
output row's end are computed and dropped (28 wide rows in rows of 30: 7% more work).
Padding is zero in the staged planes, so 0 * inf stays NaN as the evaluator's zero padding
gives.

A task takes batch elements x blocks of groups: it zeroes its staging area once (padding
and the spare tail are never written again), copies each group's input planes, computes
each output plane into scratch and writes the block's planes to the output through the
fused epilogue. Copies and writes run in the order of the input's and output's memory:
a group block of CHANNEL_BLOCK when features are minor-most (NHWC), so each pixel's run of
features is read and written together; planes one by one otherwise (NCHW, rows contiguous).

Not here (the elemental loops compute them): base (lhs) dilation, batch groups, a window
of more than MAX_TAPS offsets, convolutions without spatial dimensions.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import ceil, prod

import llvmlite.ir as ir

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, default_layout
from ...llvm.convolution import ConvGeometry
from ...llvm.indices import linear_index
from ...llvm.ir_types import I1, I8, I64, PTR, alloca_in_entry, etype, fma_intrinsic, i64, splat
from ...llvm.loops import for_range, stepped_loop
from ..codegen import PARALLEL_MIN_WORK, TASKS_PER_THREAD
from ..runtime.llvm_jit import host_jit
from .tile_plan import MIN_GROUP_FEATURES, minor_dimension
from .tiles import EMITTERS, ConvolutionEmitter

CHUNK_VECTORS = 4          # vectors of virtual positions per trip: independent chains of FMAs
MAX_TAPS = 81              # window offsets unrolled in the inner loop (9x9)
CHANNEL_BLOCK = 16         # groups per block when features are minor-most (a 64-byte run of f32)
STAGE_BUDGET = 1 << 18     # at most this many staged elements per task (the block shrinks to fit) ...
MAX_GROUP_STAGE = 1 << 22  # ... but a group's input features are staged whole: larger, the loops
MAX_ROW = 256              # rows up to this long are copied and written in unrolled pieces ...
PIECE = 32                 # ... of this many elements


@dataclass(frozen=True)
class DepthwisePlan:
    """Compile-time decisions for one convolution (elements, not bytes, unless named so)."""
    g: ConvGeometry
    lanes: int
    phases: tuple[int, ...]          # per spatial dim: the window stride
    phase_dims: tuple[int, ...]      # per spatial dim: positions of a phase plane, ceil(padded / stride)
    row_strides: tuple[int, ...]     # of the flattened phase plane (and of the virtual positions)
    tap_offsets: tuple[int, ...]     # per tap (row-major over the window): its phase plane + shift
    chunks: int                      # trips of CHUNK_VECTORS vectors over the virtual positions
    channel_elements: int            # a staged input feature: its phase planes and a spare tail
    block_groups: int
    units: int                       # batch elements x group blocks
    units_per_task: int
    tasks: int

    @property
    def chunk(self) -> int:
        return CHUNK_VECTORS * self.lanes

    @property
    def virtual(self) -> int:
        """Virtual positions of an output plane, rounded up to whole chunks."""
        return self.chunks * self.chunk

    @property
    def group_blocks(self) -> int:
        return ceil(self.g.groups / self.block_groups)

    @property
    def stage_elements(self) -> int:
        return self.block_groups * self.g.input_features * self.channel_elements

    @property
    def task_elements(self) -> int:
        """A task's scratch: staged input planes, then computed output planes; whole vectors."""
        out = self.block_groups * self.g.group_features * self.virtual
        return ceil((self.stage_elements + out) / 16) * 16


def fits(conv: HloInstruction) -> bool:
    t = etype(conv)
    if t.name not in ("f32", "f64") or any(etype(op) != t for op in conv.operands):
        return False
    g = ConvGeometry.of(conv)
    if not (conv.shape.size > 0 and conv.operands[0].shape.size > 0 and g.input_features > 0 and
            g.group_features < MIN_GROUP_FEATURES and g.batch_groups == 1 and len(g.window) > 0 and
            all(w.lhs_dilate == 1 for w in g.window) and prod(w.size for w in g.window) <= MAX_TAPS):
        return False
    return g.input_features * _staging(g, host_jit().vector_bytes // t.bytes)[-1] <= MAX_GROUP_STAGE


def _staging(g: ConvGeometry, lanes: int) -> tuple:
    """(phases, phase_dims, row_strides, tap_offsets, chunks, channel_elements) of the plan."""
    padded = [n + w.pad_low + w.pad_high for n, w in zip(g.input_spatial, g.window)]
    phases = tuple(w.stride for w in g.window)
    phase_dims = tuple(ceil(p / s) for p, s in zip(padded, phases))
    row_strides = tuple(prod(phase_dims[d + 1:]) for d in range(len(phase_dims)))
    plane = prod(phase_dims)
    offsets = []
    for k in itertools.product(*(range(w.size) for w in g.window)):
        reach = [i * w.rhs_dilate for i, w in zip(k, g.window)]
        phase = sum((r % s) * prod(phases[d + 1:]) for d, (r, s) in enumerate(zip(reach, phases)))
        offsets.append(phase * plane + sum((r // s) * rs for r, s, rs in zip(reach, phases, row_strides)))
    virtual = sum((o - 1) * rs for o, rs in zip(g.output_spatial, row_strides)) + 1
    chunks = ceil(virtual / (CHUNK_VECTORS * lanes))
    reads = max(offsets) + chunks * CHUNK_VECTORS * lanes    # the last read of the last chunk, plus one
    channel = ceil(max(prod(phases) * plane, reads) / lanes) * lanes
    return phases, phase_dims, row_strides, tuple(offsets), chunks, channel


def plan(conv: HloInstruction, lhs: ArrayShape, out: ArrayShape, threads: int) -> DepthwisePlan:
    g = ConvGeometry.of(conv)
    lanes = host_jit().vector_bytes // etype(conv).bytes
    phases, phase_dims, row_strides, offsets, chunks, channel = _staging(g, lanes)
    work = g.batch * g.groups * g.group_features * g.input_features * len(offsets) * prod(g.output_spatial)
    wanted = threads * TASKS_PER_THREAD if threads > 1 and work >= PARALLEL_MIN_WORK else 1
    dn = g.dn
    block = CHANNEL_BLOCK if minor_dimension(lhs, dn.input_feature) or minor_dimension(out, dn.output_feature) else 1
    block = max(1, min(block, g.groups, STAGE_BUDGET // (g.input_features * channel)))
    if g.batch * ceil(g.groups / block) < wanted:      # smaller blocks, so every thread has work
        block = max(1, ceil(g.groups / ceil(wanted / g.batch)))
    units = g.batch * ceil(g.groups / block)
    per_task = ceil(units / min(units, wanted))
    return DepthwisePlan(g, lanes, phases, phase_dims, row_strides, offsets, chunks, channel, block,
                         units, per_task, ceil(units / per_task))


class DepthwiseConvolution(ConvolutionEmitter):
    ROUTE = "depthwise"

    def __init__(self, ke, conv: HloInstruction):
        super().__init__(ke, conv)
        self.p = plan(conv, self.lhs_shape, conv.shape, self.threads)
        self.g = self.p.g
        self.vector = ir.VectorType(self.st, self.p.lanes)

    def emit(self, out_ptr: ir.Value, out_shape: ArrayShape, epilogue: HloInstruction | None) -> None:
        b, p = self.b, self.p
        scratch = self.ke.reserve_scratch(p.tasks * p.task_elements * self.t.bytes)

        def task(index):
            area = b.gep(scratch, [b.mul(index, i64(p.task_elements))], source_etype=self.st)
            memset = b.module.declare_intrinsic("llvm.memset", [PTR, I64])
            b.call(memset, [area, ir.Constant(I8, 0), i64(p.stage_elements * self.t.bytes), ir.Constant(I1, 0)])
            first = b.mul(index, i64(p.units_per_task))
            last = b.add(first, i64(p.units_per_task))
            end = b.select(b.icmp_signed("<", last, i64(p.units)), last, i64(p.units))
            stepped_loop(b, first, end, lambda unit: self._unit(unit, area, out_ptr, out_shape, epilogue))

        self._run_tasks(p.tasks, task)

    def _unit(self, unit, area, out_ptr, out_shape: ArrayShape, epilogue) -> None:
        """One batch element x one block of groups: stage, compute, write."""
        b, p = self.b, self.p
        batch, block = b.udiv(unit, i64(p.group_blocks)), b.urem(unit, i64(p.group_blocks))
        first = b.mul(block, i64(p.block_groups))
        rest = b.sub(i64(self.g.groups), first)
        count = b.select(b.icmp_signed("<", rest, i64(p.block_groups)), rest, i64(p.block_groups))
        planes = b.gep(area, [i64(p.stage_elements)], source_etype=self.st)
        self._stage(batch, first, count, area)
        stepped_loop(b, i64(0), count, lambda group: self._compute(first, group, area, planes))
        self._write(batch, first, count, planes, out_ptr, out_shape, epilogue)

    # --- staging the input planes ----------------------------------------------------------------
    def _stage(self, batch, first, count, area) -> None:
        """Each input feature of the block's groups into its phase planes; the padding around
        them stays as the task zeroed it. With features minor-most, pixel by pixel (a pixel's
        features are one run); otherwise row by row along the last spatial dimension."""
        b, g, p = self.b, self.g, self.p
        channels = b.mul(count, i64(g.input_features)) if g.input_features > 1 else count
        outer_phases = itertools.product(*(range(s) for s in p.phases[:-1]))
        last = g.window[-1]
        row = range(max(0, -last.pad_low), g.input_spatial[-1] + min(0, last.pad_high))
        if minor_dimension(self.lhs_shape, g.dn.input_feature) or len(row) > MAX_ROW:
            return self._stage_pixels(batch, first, channels, area)
        for phase in outer_phases:
            lows, extents = self._inside(phase, range(len(phase)))
            if any(e <= 0 for e in extents):
                continue
            stepped_loop(b, i64(0), channels, lambda channel, phase=phase, lows=lows, extents=extents: for_range(
                b, extents, lambda at: self._stage_row(batch, first, channel, phase, lows, at, row, area)))

    def _inside(self, phase: tuple, dims) -> tuple[list, list]:
        """Per spatial dim in `dims`: the first phase position of `phase` that holds an input
        position (q * stride + phase - pad_low), and how many do."""
        lows, extents = [], []
        for d, ph in zip(dims, phase):
            n, w, s = self.g.input_spatial[d], self.g.window[d], self.p.phases[d]
            low = max(0, _ceil_div(w.pad_low - ph, s))
            high = min(_ceil_div(n + w.pad_low - ph, s), _ceil_div(n + w.pad_low + w.pad_high - ph, s))
            lows.append(low)
            extents.append(high - low)
        return lows, extents

    def _source(self, batch, first, channel, spatial: tuple) -> ir.Value:
        """Input feature `channel` of the block (group-major) at input position `spatial`."""
        b, g = self.b, self.g
        features = g.input_features
        group, feature = (b.udiv(channel, i64(features)), b.urem(channel, i64(features))) \
            if features > 1 else (channel, i64(0))
        index = g.input_index(b, batch, b.add(first, group), feature, spatial)
        return self.ke.load(self.lhs_ptr, self.lhs_shape, index)

    def _staged_offset(self, channel, phase: tuple, q: tuple) -> ir.Value:
        b, p = self.b, self.p
        flat = sum(ph * prod(p.phases[d + 1:]) for d, ph in enumerate(phase))
        at = linear_index(b, tuple(q), p.phase_dims, default_layout(len(q)))
        return b.add(b.mul(channel, i64(p.channel_elements)), b.add(i64(flat * prod(p.phase_dims)), at))

    def _stage_row(self, batch, first, channel, phase: tuple, lows: list, at: tuple, row: range, area) -> None:
        """One row of the input along the last spatial dim, into its phases: every load of a
        piece before its stores, so LLVM may make vectors of both (no store can change what
        a later load reads)."""
        b, g, p = self.b, self.g, self.p
        q = [b.add(i, i64(low)) for i, low in zip(at, lows)]
        outer = [b.add(b.mul(i, i64(w.stride)), i64(ph - w.pad_low)) for i, w, ph in zip(q, g.window, phase)]
        last, stride = g.window[-1], p.phases[-1]
        for piece in range(row.start, row.stop, PIECE):
            ns = range(piece, min(piece + PIECE, row.stop))
            values = [self._source(batch, first, channel, (*outer, i64(n))) for n in ns]
            for n, value in sorted(zip(ns, values), key=lambda nv: (nv[0] + last.pad_low) % stride):
                staged = n + last.pad_low
                to = self._staged_offset(channel, (*phase, staged % stride), (*q, i64(staged // stride)))
                b.store(value, b.gep(area, [to], source_etype=self.st))

    def _stage_pixels(self, batch, first, channels, area) -> None:
        """The staging element by element, features innermost when they are minor-most."""
        b, g, p = self.b, self.g, self.p
        feature_minor = minor_dimension(self.lhs_shape, g.dn.input_feature)
        for phase in itertools.product(*(range(s) for s in p.phases)):
            lows, extents = self._inside(phase, range(len(phase)))
            if any(e <= 0 for e in extents):
                continue

            def copy(channel, at, phase=phase, lows=lows):
                q = [b.add(i, i64(low)) for i, low in zip(at, lows)]
                spatial = tuple(b.add(b.mul(i, i64(w.stride)), i64(ph - w.pad_low))
                                for i, w, ph in zip(q, g.window, phase))
                value = self._source(batch, first, channel, spatial)
                b.store(value, b.gep(area, [self._staged_offset(channel, phase, q)], source_etype=self.st))

            if feature_minor:
                for_range(b, extents, lambda at, copy=copy: stepped_loop(
                    b, i64(0), channels, lambda channel: copy(channel, at)))
            else:
                stepped_loop(b, i64(0), channels, lambda channel, copy=copy: for_range(
                    b, extents, lambda at: copy(channel, at)))

    # --- computing the output planes -------------------------------------------------------------
    def _compute(self, first, group, area, planes) -> None:
        """The output planes of one group of the block, into `planes` at virtual positions."""
        b, g, p = self.b, self.g, self.p
        fma = fma_intrinsic(b.module, self.vector)
        accumulators = [alloca_in_entry(b, self.vector) for _ in range(CHUNK_VECTORS)]
        for m in range(g.group_features):
            out_feature = b.add(b.mul(b.add(first, group), i64(g.group_features)), i64(m)) \
                if g.group_features > 1 else b.add(first, group)
            out = b.gep(planes, [b.mul(b.add(b.mul(group, i64(g.group_features)), i64(m)), i64(p.virtual))],
                        source_etype=self.st)
            hoisted = self._weights(out_feature, i64(0)) if g.input_features == 1 else None

            def chunk(c, out_feature=out_feature, out=out, hoisted=hoisted):
                start = b.mul(c, i64(p.chunk))
                for slot in accumulators:
                    b.store(ir.Constant(self.vector, None), slot)

                def feature(i, weights):
                    channel = b.add(b.mul(group, i64(g.input_features)), i) if g.input_features > 1 else group
                    base = b.gep(area, [b.add(b.mul(channel, i64(p.channel_elements)), start)],
                                 source_etype=self.st)
                    for offset, w in zip(p.tap_offsets, weights):
                        for u, slot in enumerate(accumulators):
                            x = b.load(b.gep(base, [i64(offset + u * p.lanes)], source_etype=self.st),
                                       typ=self.vector)
                            x.align = self.t.bytes
                            b.store(b.call(fma, [x, w, b.load(slot)]), slot)

                if hoisted is not None:
                    feature(i64(0), hoisted)
                else:
                    stepped_loop(b, i64(0), i64(g.input_features), lambda i: feature(i, self._weights(out_feature, i)))
                for u, slot in enumerate(accumulators):
                    at = b.gep(out, [b.add(start, i64(u * p.lanes))], source_etype=self.st)
                    b.store(b.load(slot), at).align = self.t.bytes

            stepped_loop(b, i64(0), i64(p.chunks), chunk)

    def _weights(self, out_feature, in_feature) -> list:
        """The kernel's weight for each tap, as vectors."""
        b, g = self.b, self.g
        rhs = self.rhs_shape
        weights = []
        for offsets in itertools.product(*(range(w.size) for w in g.window)):
            index = g.kernel_index(b, out_feature, in_feature, tuple(i64(k) for k in offsets))
            at = b.gep(self.rhs_ptr, [linear_index(b, index, rhs.dims, rhs.minor_to_major)], source_etype=self.st)
            weights.append(splat(b, self.vector, b.load(at, typ=self.st)))
        return weights

    # --- writing the output ----------------------------------------------------------------------
    def _write(self, batch, first, count, planes, out_ptr, out_shape: ArrayShape, epilogue) -> None:
        """Each valid position of the block's output planes to the output, through the
        epilogue: pixel by pixel with features innermost when they are minor-most, else row by
        row along the last spatial dimension."""
        b, g = self.b, self.g
        channels = b.mul(count, i64(g.group_features)) if g.group_features > 1 else count
        *outer, last = g.output_spatial
        write = lambda channel, at: self._store(batch, first, channel, at, planes, out_ptr, out_shape, epilogue)  # noqa: E731
        if minor_dimension(out_shape, g.dn.output_feature):
            for_range(b, g.output_spatial, lambda at: stepped_loop(b, i64(0), channels, lambda c: write(c, [at])))
        elif last > MAX_ROW:
            stepped_loop(b, i64(0), channels, lambda c: for_range(b, g.output_spatial, lambda at: write(c, [at])))
        else:   # a piece's results all computed before any is stored, so LLVM may make vectors of them
            stepped_loop(b, i64(0), channels, lambda c: for_range(b, outer, lambda at: [
                write(c, [(*at, i64(o)) for o in range(piece, min(piece + PIECE, last))])
                for piece in range(0, last, PIECE)]))

    def _store(self, batch, first, channel, positions: list, planes, out_ptr, out_shape: ArrayShape,
               epilogue) -> None:
        """The results of output feature `channel` of the block at `positions` (output spatial
        indices), through the epilogue, then stored."""
        b, g, p, ke = self.b, self.g, self.p, self.ke
        dn = g.dn
        results = []
        for at in positions:
            value = b.load(b.gep(planes, [b.add(b.mul(channel, i64(p.virtual)), self._virtual(at))],
                                 source_etype=self.st), typ=self.st)
            index = [None] * out_shape.rank
            index[dn.output_batch] = batch
            index[dn.output_feature] = b.add(b.mul(first, i64(g.group_features)), channel)
            for d, i in zip(dn.output_spatial, at):
                index[d] = i
            if epilogue is not None:
                ke.e.push_scope()
                ke.e.buffer_reads[id(self.conv)] = lambda _index, value=value: value
                value = ke.e.value(epilogue, tuple(index))
                ke.e.pop_scope()
            results.append((tuple(index), value))
        for index, value in results:
            ke.store(out_ptr, out_shape, index, value)

    def _virtual(self, at: tuple) -> ir.Value:
        b = self.b
        offset = i64(0)
        for i, stride in zip(at, self.p.row_strides):
            offset = b.add(offset, b.mul(i, i64(stride)) if stride != 1 else i)
        return offset


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


EMITTERS.append((fits, DepthwiseConvolution))
