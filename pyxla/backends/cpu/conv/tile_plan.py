"""The plan of a tiled convolution (tiles.py), decided at compile time: which convolutions the
tiles take, how many positions a register tile has, how the positions x panels matrix is cut
into blocks for the worker pool, how the depth is sliced so a panel's kernel rows stay in L1,
and the order a constant kernel is taken in (KernelPanels). Nothing here emits IR.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

import numpy as np

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, element_strides
from ....runtime.memory import aligned_copy
from ...llvm.convolution import ConvGeometry
from ...llvm.ir_types import etype
from ..codegen import PARALLEL_MIN_WORK, TASKS_PER_THREAD
from ..runtime.llvm_jit import host_jit
from ..tuning.machine import cache_sizes
from ..tuning.params import ConvParams, conv_slice_bytes

# Positions of a tile by the host's vector width (llvm_jit.LlvmJit.vector_bytes): positions x
# TILE_VECTORS accumulators, 12 of AVX2's 16 registers, 16 of AVX-512's 32. AVX-512's wider
# tile runs the CNN block 20.6 -> 14.6 ms (one Xeon, one process); 12 positions are no faster.
# AVX-512 also has tiles of 7, for 7x7 and 14x14 maps (3x3 256 -> 256 at 7x7 on one thread,
# best of many runs: 105-112 -> 111-114 GFLOP/s against 8). A kernel in panel order
# (KernelPanels) also has tiles of 14, 28 accumulators: each kernel row loaded serves 14
# positions, not 8 (in one process: Inception v2 18.0 -> 16.8 ms and 19.3 -> 18.5, ResNet-50
# and SqueezeNet 1-3% faster, DenseNet-121 and VGG-19 the same within the noise); over a
# kernel read where it lies, rows a row of output features apart, they ran the CNN block
# 4-5% slower. Over a kernel in panel order a tile may have any of 7 to 14 positions
# (ROW_TILE_POSITIONS) when that divides the output rows: tiles of 13, 11 and 9 over
# SqueezeNet's 13-, 55- and 27-wide maps, no tile cut short and each tile's pixels one step
# apart (SqueezeNet 2.85 -> 2.69 ms, Inception v1 11.3 -> 10.9, in one process). Where none
# divides the rows (111 wide), a tile costs its positions plus TILE_OVERHEAD (loads of the
# kernel rows, the loop), and the candidates' cheapest covering of the positions is taken.
TILE_POSITIONS = {32: (6,), 64: (8, 7)}
PANEL_TILE_POSITIONS = {32: (6,), 64: (14, 8, 7)}
ROW_TILE_POSITIONS = {64: tuple(range(14, 6, -1))}
TILE_OVERHEAD = 3
TILE_VECTORS = 2
BLOCK_BYTES = 1 << 17      # a task's block of results, on its stack
KERNEL_SLICE_BYTES = 1 << 14   # a panel's kernel rows one slice of the depth reads (see _block) ...
SLICED_FROM_BYTES = 1 << 16    # ... when its whole depth of rows is larger than this
# A kernel in panel order (KernelPanels) has its slice's rows one after another, in all of
# L1's sets, so a slice twice the size stays in L1 (Inception v2 24.4 -> 22.7 ms, VGG-19 and
# ResNet-50 the same within the noise; not slicing at all was no faster either).
PANEL_SLICE_BYTES = 1 << 15
MIN_GROUP_FEATURES = 4     # fewer output features per group (depthwise): conv/depthwise.py


# --- the plan -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TilePlan:
    """Compile-time decisions for one convolution."""
    g: ConvGeometry
    lanes: int                 # elements per vector
    vectors: int               # vectors per tile row
    positions: int             # positions per tile
    taps: int                  # window offsets
    panel_columns: int         # output features of a panel (padded within a group)
    group_columns: int         # a group's output features, padded to whole panels
    panels: int
    total_positions: int
    block_positions: int       # a task's positions (a multiple of `positions`) ...
    block_panels: int          # ... and panels
    pack_kernel: bool
    panel_ordered: bool        # the kernel comes in KernelPanels' order
    stage_input: bool
    input_spatial: tuple[int, ...]   # the input's spatial dims as the tiles read it (padded when staged)
    run_taps: int              # window offsets of the last spatial dim in one contiguous run (or 1)
    segment: int               # values of a run per slice of the depth; 0: the depth is not sliced
    pixel_step: int | None     # elements between the pixels of neighbouring positions of a tile, when
                               # every tile's are that far apart (None: each tile finds each of its own)

    @property
    def segments(self) -> int:
        return ceil(self.run / self.segment) if self.segment else 1

    @property
    def slices(self) -> int:
        """Slices of the depth, each one segment of one outer tap's run (1: not sliced)."""
        return self.outer_taps * self.segments if self.segment else 1

    @property
    def run(self) -> int:
        """Values the inner loop reads per tap: input features, times run_taps."""
        return self.run_taps * self.g.input_features

    @property
    def outer_taps(self) -> int:
        return self.taps // self.run_taps

    @property
    def panels_per_group(self) -> int:
        return self.group_columns // self.panel_columns

    @property
    def position_blocks(self) -> int:
        return ceil(self.total_positions / self.block_positions)

    @property
    def panel_blocks(self) -> int:
        return ceil(self.panels / self.block_panels)

    @property
    def block_columns(self) -> int:
        return self.block_panels * self.panel_columns


def window_strides(shape: ArrayShape) -> list[int]:
    """Elements between neighbours along each logical dimension of `shape` in memory."""
    return element_strides(shape)

def minor_dimension(shape: ArrayShape, dim: int) -> bool:
    """Whether neighbours along `dim` are neighbours in memory."""
    return shape.dims[dim] == 1 or window_strides(shape)[dim] == 1


def fits(conv: HloInstruction) -> bool:
    t = etype(conv)
    if t.name not in ("f32", "f64") or any(etype(op) != t for op in conv.operands):
        return False
    g = ConvGeometry.of(conv)
    return conv.shape.size > 0 and conv.operands[0].shape.size > 0 and g.input_features > 0 and \
        g.group_features >= MIN_GROUP_FEATURES


def panel_layout(g: ConvGeometry, t) -> tuple[int, int, int]:
    """(lanes, vectors, output features per panel) of the tiles over `g`."""
    lanes = host_jit().vector_bytes // t.bytes
    vectors = TILE_VECTORS if g.group_features > lanes else 1
    return lanes, vectors, lanes * vectors


def plan(conv: HloInstruction, lhs: ArrayShape, rhs: ArrayShape, threads: int, panel_ordered: bool = False,
         params: ConvParams | None = None) -> TilePlan:
    """The plan of `conv`'s tiles; what `params` sets (a tuning database's choice,
    tuning/params.py) replaces the cost model's choice here."""
    g = ConvGeometry.of(conv)
    t = etype(conv)
    params = params or ConvParams()
    vector_bytes = host_jit().vector_bytes
    lanes, vectors, panel = panel_layout(g, t)
    group_columns = ceil(g.group_features / panel) * panel
    panels = g.groups * group_columns // panel
    total = g.batch * prod(g.output_spatial)
    positions = min(params.positions, total) if params.positions else \
        _tile_positions(g, total, vector_bytes, panel_ordered)
    taps = prod(w.size for w in g.window)
    depth = taps * g.input_features
    pack = not panel_ordered and (group_columns != g.group_features
                                  or not minor_dimension(rhs, g.dn.kernel_output_feature))
    stage = not minor_dimension(lhs, g.dn.input_feature) or \
        any(w.pad_low > 0 or w.pad_high > 0 or w.lhs_dilate != 1 for w in g.window)
    input_spatial = tuple((n - 1) * w.lhs_dilate + 1 + w.pad_low + w.pad_high
                          for n, w in zip(g.input_spatial, g.window)) \
        if stage else g.input_spatial
    run_taps = _run_taps(g, lhs, rhs, stage, pack or panel_ordered)

    work = total * panels * panel * depth
    wanted = threads * (params.tasks_per_thread or TASKS_PER_THREAD) if threads > 1 and work >= PARALLEL_MIN_WORK \
        else 1
    kernel_bytes = panels * panel * depth
    input_bytes = total * depth
    if kernel_bytes > input_bytes:      # cut along the output features first
        block_panels = ceil(panels / min(panels, wanted))
        block_positions = total
        if ceil(panels / block_panels) < wanted:
            block_positions = ceil(total / ceil(wanted / ceil(panels / block_panels)))
    else:
        block_panels = panels
        block_positions = ceil(total / wanted)
    row_bytes = panel * t.bytes
    block_bytes = params.block_bytes or BLOCK_BYTES
    block_panels = max(1, min(block_panels, block_bytes // (2 * positions * row_bytes)))
    block_positions = min(block_positions, block_bytes // (block_panels * row_bytes) - positions)
    if block_positions < total:   # whole tiles, but for the last block's
        block_positions = max(positions, block_positions // positions * positions)
    run = run_taps * g.input_features
    segment = 0   # not sliced
    if depth * row_bytes > SLICED_FROM_BYTES:
        slice_bytes = params.slice_bytes or (conv_slice_bytes(PANEL_SLICE_BYTES, cache_sizes(), 1) if panel_ordered
                                             else conv_slice_bytes(KERNEL_SLICE_BYTES, cache_sizes(), 2))
        segment = max(1, slice_bytes // row_bytes)
        segment = ceil(run / ceil(run / segment))   # segments of equal length
    return TilePlan(g, lanes, vectors, positions, taps, panel, group_columns, panels, total,
                    block_positions, block_panels, pack, panel_ordered, stage, input_spatial, run_taps, segment,
                    _pixel_step(g, lhs, stage, positions))


def _pixel_step(g: ConvGeometry, lhs: ArrayShape, stage: bool, positions: int) -> int | None:
    """Elements between the input pixels of neighbouring positions when no tile crosses
    the end of an output row: the tiles' positions divide the row (and so every block's
    tiles, whole tiles but for a last one moved back to end where a row ends). The tile then
    addresses its pixels as one pointer and constant offsets, where a pointer each ran out
    of registers (14 of them, reloaded from the stack in the inner loop)."""
    if not g.window or g.output_spatial[-1] % positions:
        return None
    last = g.window[-1]
    if stage:   # features minor-most, then the last spatial dim
        along = lhs.dims[g.dn.input_feature]
    else:
        along = window_strides(lhs)[g.dn.input_spatial[-1]]
    return last.stride * along


def _tile_positions(g: ConvGeometry, total: int, vector_bytes: int, panel_ordered: bool) -> int:
    """Positions of a tile: the most of the row candidates that divide an output row (no
    tile cut short, and pixels one step apart: _pixel_step), else the candidates' cheapest
    (tiles x (positions + TILE_OVERHEAD)), the first of them on a tie."""
    candidates = (PANEL_TILE_POSITIONS if panel_ordered else TILE_POSITIONS)[vector_bytes]
    rows = ROW_TILE_POSITIONS.get(vector_bytes, candidates) if panel_ordered else candidates
    width = g.output_spatial[-1] if g.output_spatial else 0
    dividing = [n for n in rows if width and width % n == 0]
    if dividing:
        return min(max(dividing), total)
    return min(min(candidates, key=lambda n: ceil(total / n) * (n + TILE_OVERHEAD)), total)


def _run_taps(g: ConvGeometry, lhs: ArrayShape, rhs: ArrayShape, stage: bool, reordered: bool) -> int:
    """The window offsets along the last spatial dimension that join the input features in
    one contiguous run: all of them when, in the input as read and in the kernel as read,
    the next offset's features follow the last feature of this one; else 1."""
    if not g.window:
        return 1
    last = g.window[-1]
    if last.rhs_dilate != 1 or last.reversal or g.feature_groups != 1:
        return 1
    features = g.input_features
    if not stage:
        strides = window_strides(lhs)
        if strides[g.dn.input_spatial[-1]] != features:
            return 1
    if not reordered:   # (the kernel as packed or in panel order is tap, input feature, output feature)
        strides = window_strides(rhs)
        if strides[g.dn.kernel_spatial[-1]] != features * strides[g.dn.kernel_input_feature]:
            return 1
    return last.size


# --- kernels in panel order ---------------------------------------------------------------------

@dataclass(frozen=True)
class KernelPanels:
    """How the tiles of a convolution want its kernel when it can be reordered once (an
    entry parameter with a fixed value): [panel][window offset, in the kernel's spatial
    dims' order][input feature][the panel's output features], each group's output features
    zero-padded to whole panels. `pack` makes that array from the kernel as the HLO shape
    describes it (logical dimension order)."""
    output_dim: int
    input_dim: int
    spatial_dims: tuple[int, ...]
    groups: int
    panel_columns: int

    def pack(self, kernel: np.ndarray) -> np.ndarray:
        return output_tiles_first(np.transpose(kernel, (*self.spatial_dims, self.input_dim, self.output_dim)),
                                  self.groups, self.panel_columns)


def output_tiles_first(kernel: np.ndarray, groups: int, width: int) -> np.ndarray:
    """`kernel` (..., output features) with each group's output features zero-padded to
    whole tiles of `width` and the tiles moved to the front: (groups x tiles of a group,
    ..., width), 64-byte aligned. The order both KernelPanels and conv_planes' WeightTiles
    take a constant kernel in."""
    lead, features = kernel.shape[:-1], kernel.shape[-1] // groups
    tiles = ceil(features / width)
    kernel = kernel.reshape(*lead, groups, features)
    if tiles * width != features:
        kernel = np.pad(kernel, [(0, 0)] * (kernel.ndim - 1) + [(0, tiles * width - features)])
    return aligned_copy(np.moveaxis(kernel.reshape(*lead, groups * tiles, width), -2, 0))

