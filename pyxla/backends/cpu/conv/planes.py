"""Convolution over feature planes (NCHW), output positions along the vector lanes (f32,
f64), alone or with its elementwise epilogue: pointwise (1x1) convolutions, and those with
a window over a few input features (a CNN's colour stem) over a copy of their windows.

With its features before its spatial dimensions, each input feature of an image is a plane
of contiguous positions, and so is each output feature:

    out[n, o, p] = sum over c of W[c, o] x[n, c, p]      (p: the flattened spatial position)

A tile is FEATURES output features by VECTORS vectors of consecutive positions. Per input
feature c it loads the tile's VECTORS vectors of plane c and broadcasts its FEATURES weights
W[c, o..], FEATURES x VECTORS fused multiply-adds into accumulators held in registers, each
output element the sum in c order. Neither operand is packed or copied per call (a plane's
positions are contiguous in x; a position's weights are contiguous in an HWIO kernel and at
a stride in OIHW; a constant kernel comes as WeightTiles, each tile's weights one stream,
made once), and the tile's rows are stored to the output as whole vectors. The last tile of a
plane whose positions are not whole vectors loads and stores its last vector under a mask.
The depth runs in chunks of CHUNK_BYTES of the planes under a position tile, which stay in
L1 while every feature tile of the block reads them, the sums waiting in the output between
chunks; the epilogue then runs over the position tile's results, still in cache.

A window (PATCH_MAX_ROWS) is a copy first: the input under each window offset is a plane
of its own, in the order the kernel holds the offsets' weights, so the kernel is again a
[planes, output features] matrix.

Against the other routes for such convolutions: conv/tiles.py copies an NCHW input to NHWC
and writes its output back feature by feature, and pyxla's GEMM (conv/pointwise.py) packs
both operands; with few input features (ResNet-50's 64 -> 256 at 56x56) packing and
writing the product costs more than the arithmetic.

Groups (ShuffleNet's grouped 1x1 convolutions) read their own planes; a tile's features
never straddle two groups. A strided 1x1 convolution reads conv/pointwise.py's subsampled
copy of its input; one over a 1x1 map is conv/pointwise.py's matrix-vector product.

Threads. The tiles of every image are cut into blocks of whole feature tiles by whole
position tiles, a block per task, the cut the one that re-reads least: a block of features
reads all its planes once per block of positions, a block of positions all its weights once
per block of features.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

import llvmlite.ir as ir
import numpy as np

from ....hlo.attributes import features_first
from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape
from ...llvm.convolution import ConvGeometry
from ...llvm.indices import linear_index
from ...llvm.ir_types import I1, I64, PTR, alloca_in_entry, etype, fma_intrinsic, i64, prefetch, smin, splat
from ...llvm.loops import stepped_loop
from ...llvm.windows import window_source
from ..codegen import PARALLEL_MIN_WORK, TASKS_PER_THREAD
from ..runtime.llvm_jit import host_jit
from ..tuning.machine import cache_sizes
from ..tuning.params import ConvParams, conv_slice_bytes
from ..tuning.selection import conv_params
from .pointwise import pointwise, row_major_float, subsampled_input
from .tile_plan import output_tiles_first, window_strides
from .tiles import EMITTERS, ConvolutionEmitter

# (features, vectors) of a tile by the host's vector width: 4 x 3 accumulators of AVX2's 16
# registers, 8 x 3 of AVX-512's 32 (with a register per loaded vector and one broadcast);
# AVX-512's 8 x 3 runs 4-8% faster than 6 x 4 (2 threads: 1024 -> 256 at 14x14 201 -> 220
# GFLOP/s), but planes of 49 to 64 positions (7x7) fit one 6 x 4 tile, where 8 x 3 adds a
# tile for the last position (512 -> 2048 at 7x7: 199 against 153 GFLOP/s).
TILE = {32: (4, 3), 64: (8, 3)}
ONE_TILE = {32: (4, 3), 64: (6, 4)}
CHUNK_BYTES = 1 << 14       # a depth chunk of the planes under a position tile, kept in L1
# A tile's weights for one input feature lie a row of the kernel's output features from the
# next one's, at a stride the prefetchers do not follow (2048 output features: 8 KB): the
# tile asks for those PREFETCH_AHEAD input features ahead itself (ResNet-50's 1x1
# convolutions at 7x7, 512 -> 2048: 836 -> 630 us).
PREFETCH_AHEAD = 8
# Weight tiles (WeightTiles) are one stream, 24-32 bytes per input feature, read once per
# call from memory in a model whose weights outgrow the caches: 8 features ahead is a few
# lines, less than memory's latency; 32 ahead (about 1 KB) ran ResNet-50 38.1 -> 35.3 ms,
# Inception v2 21.2 -> 20.3 (64 and 128 the same within the noise).
TILED_PREFETCH_AHEAD = 32


# A convolution with a window and few input features (a CNN's first layer, over the three
# colours of an image) runs over a copy of its windows, a plane per window offset and input
# feature, when it has at most PATCH_MAX_FEATURES input features, those rows are at most
# PATCH_MAX_ROWS and the copy at most PATCH_MAX_BYTES. Measured against conv/tiles.py (2
# threads, AVX-512): VGG's 3 -> 64 3x3 at 224x224 3.05 -> 1.36 ms, SqueezeNet's 3x3 stride 2
# in the model 0.87 -> 0.71 ms. A 7x7 window's copy (147 rows: ResNet-50's first layer) is
# slower in the model (1.6 -> 2.5 ms), though faster alone; and with 16 or more input
# features the tiles are faster (16 -> 64 3x3 at 55x55: 388 against 425 us).
PATCH_MAX_FEATURES = 4
PATCH_MAX_ROWS = 32
PATCH_MAX_BYTES = 1 << 24


def _patched(conv: HloInstruction, g: ConvGeometry) -> bool:
    """Whether `conv` runs over a copy of its windows (see PATCH_MAX_ROWS): one group, no
    base dilation or reversal, and a kernel whose output features are its outer- or
    inner-most dimension (so its rows, the other dimensions, lie at one stride)."""
    kernel = conv.operands[1].shape
    rows = g.input_features * prod(w.size for w in g.window)
    return g.groups == 1 and all(w.lhs_dilate == 1 and not w.reversal for w in g.window) and \
        g.dn.kernel_output_feature in (kernel.minor_to_major[0], kernel.minor_to_major[-1]) and \
        g.input_features <= PATCH_MAX_FEATURES and rows <= PATCH_MAX_ROWS and \
        g.batch * rows * prod(g.output_spatial) * etype(conv).bytes <= PATCH_MAX_BYTES


def fits(conv: HloInstruction) -> bool:
    if not row_major_float(conv):
        return False
    x = conv.operands[0]
    g = ConvGeometry.of(conv)
    dn = g.dn
    if g.batch_groups != 1 or g.input_features == 0:
        return False
    if not (pointwise(g) or _patched(conv, g)) or prod(g.output_spatial) == 1:
        return False   # over a 1x1 map: conv/pointwise.py's matrix-vector product
    return features_first(x.shape.rank, dn.input_batch, dn.input_feature, dn.input_spatial) is True and \
        features_first(conv.shape.rank, dn.output_batch, dn.output_feature, dn.output_spatial) is True


@dataclass(frozen=True)
class PlanePlan:
    features: int              # output features of a full tile
    vectors: int               # vectors of positions of a full tile
    lanes: int
    positions: int             # per image
    position_tiles: int        # per image
    group_tiles: int           # feature tiles per group
    feature_block: int         # feature tiles of a task's block ...
    position_block: int        # ... by position tiles
    chunk: int                 # input features per pass over the block's feature tiles

    @property
    def tile_positions(self) -> int:
        return self.vectors * self.lanes


def plan(g: ConvGeometry, depth: int, threads: int, element_bytes: int, params: ConvParams | None = None) -> PlanePlan:
    """depth: the planes each output feature sums over (input features per group, times the
    window's offsets when its windows are copied); what `params` sets (a tuning database's
    choice: tasks per thread, chunk bytes) replaces the cost model's."""
    params = params or ConvParams()
    vector_bytes = host_jit().vector_bytes
    lanes = vector_bytes // element_bytes
    positions = prod(g.output_spatial)
    features, vectors = TILE[vector_bytes]
    if vectors * lanes < positions <= ONE_TILE[vector_bytes][1] * lanes:
        features, vectors = ONE_TILE[vector_bytes]
    position_tiles = ceil(positions / (vectors * lanes))
    group_tiles = ceil(g.group_features / features)
    feature_tiles = g.groups * group_tiles
    work = g.batch * positions * g.groups * g.group_features * depth
    wanted = ceil(threads * (params.tasks_per_thread or TASKS_PER_THREAD) / g.batch) \
        if threads > 1 and work >= PARALLEL_MIN_WORK else 1
    plane_bytes = depth * positions * element_bytes          # x of one image
    weight_bytes = depth * g.groups * g.group_features * element_bytes
    best = None
    for feature_blocks in range(1, min(wanted, feature_tiles) + 1):
        position_blocks = min(position_tiles, ceil(wanted / feature_blocks))
        reread = (feature_blocks - 1) * plane_bytes + (position_blocks - 1) * weight_bytes
        if best is None or (feature_blocks * position_blocks >= wanted, -reread) > best[0]:
            best = ((feature_blocks * position_blocks >= wanted, -reread), feature_blocks, position_blocks)
    _, feature_blocks, position_blocks = best
    chunk = max(1, (params.slice_bytes or conv_slice_bytes(CHUNK_BYTES, cache_sizes(), 2)) // (vectors * vector_bytes))
    chunk = ceil(depth / ceil(depth / chunk))     # chunks of equal depth
    return PlanePlan(features, vectors, lanes, positions, position_tiles, group_tiles,
                     ceil(feature_tiles / feature_blocks), ceil(position_tiles / position_blocks), chunk)


@dataclass(frozen=True)
class WeightTiles:
    """How the tiles want a kernel that can be reordered once (a constant parameter, see
    runtime/parameter_forms.py): [group][feature tile of the group][row][the tile's output
    features], a row per plane the tiles read (an input feature, or an input feature under
    one window offset in the order of the kernel's `row_dims`), each group's features
    zero-padded to whole tiles. A tile's weights are then one sequential stream, where in
    HWIO the weights of consecutive planes lie a row of output features apart. `pack` takes
    the kernel in logical dimension order."""
    output_dim: int
    row_dims: tuple[int, ...]
    groups: int
    features: int              # per tile

    def pack(self, kernel: np.ndarray) -> np.ndarray:
        rows = np.transpose(kernel, (*self.row_dims, self.output_dim))
        tiles = output_tiles_first(rows.reshape(-1, rows.shape[-1]), self.groups, self.features)
        return tiles.reshape(self.groups, -1, *tiles.shape[1:])


def _row_dims(kernel: ArrayShape, output_dim: int) -> tuple[int, ...]:
    """The kernel's dimensions other than the output features, major to minor: the order of
    the rows the window copy makes (_copy_windows)."""
    return tuple(d for d in reversed(kernel.minor_to_major) if d != output_dim)


class PlaneConvolution(ConvolutionEmitter):
    ROUTE = "planes"

    def __init__(self, ke, conv: HloInstruction):
        super().__init__(ke, conv)
        self.g = g = ConvGeometry.of(conv)
        self.patched = not pointwise(g)
        self.depth = g.input_features * (prod(w.size for w in g.window) if self.patched else 1)
        self.params = conv_params(conv)
        self.p = plan(g, self.depth, self.threads, self.t.bytes, self.params)
        # the weights of plane c: w_c apart along the planes, w_o along the output features
        self.tiled_weights = isinstance(self.formed_kernel, WeightTiles)
        strides = window_strides(self.rhs_shape)
        self.w_o = 1 if self.tiled_weights else strides[g.dn.kernel_output_feature]
        self.w_c = self.p.features if self.tiled_weights else \
            min(s for d, s in enumerate(strides) if d != g.dn.kernel_output_feature) if self.patched \
            else strides[g.dn.kernel_input_feature]
        self.vector = ir.VectorType(self.st, self.p.lanes)

    @staticmethod
    def kernel_form(conv: HloInstruction) -> WeightTiles:
        g = ConvGeometry.of(conv)
        depth = g.input_features * (1 if pointwise(g) else prod(w.size for w in g.window))
        features = plan(g, depth, 1, etype(conv).bytes).features
        output = g.dn.kernel_output_feature
        return WeightTiles(output, _row_dims(conv.operands[1].shape, output), g.groups, features)

    def emit(self, out_ptr: ir.Value, out_shape: ArrayShape, epilogue: HloInstruction | None) -> None:
        ke, g, p = self.ke, self.g, self.p
        if self.patched:
            self._copy_windows()
        elif any(w.stride != 1 for w in g.window):
            self.lhs_ptr, self.lhs_shape = subsampled_input(ke, self.conv, self.lhs_ptr, self.lhs_shape)
        # The tiles' rows land in the output when it is laid out as the convolution's result;
        # otherwise in kernel scratch, and a loop then writes the output (through the epilogue).
        in_place = out_shape.is_row_major and out_shape.dims == self.conv.shape.dims
        product = out_ptr if in_place else ke.reserve_scratch(self.conv.shape.size * self.t.bytes)
        feature_blocks = ceil(g.groups * p.group_tiles / p.feature_block)
        position_blocks = ceil(p.position_tiles / p.position_block)
        n_tasks = g.batch * feature_blocks * position_blocks

        self._run_tasks(n_tasks, lambda index: self._block(index, feature_blocks, position_blocks, product,
                                                           epilogue if in_place else None))
        if not in_place:
            ke.e.buffer_reads[id(self.conv)] = lambda index: ke.load(product, self.conv.shape, index)
            ke.emit_loop(epilogue if epilogue is not None else self.conv)

    def _copy_windows(self) -> None:
        """The input under every window into kernel scratch as planes [image][row][position],
        a row per input feature and window offset in the order the kernel holds their
        weights (HWIO: offset-major; OIHW: feature-major), padding as zeros. Each output row
        (the last spatial dimension) is a zero run, a copy of the input's row (contiguous for
        stride 1, so LLVM vectorises it) and a zero run."""
        ke, b, g = self.ke, self.b, self.g
        dn = g.dn
        kernel = self.rhs_shape
        row_dims = _row_dims(kernel, dn.kernel_output_feature)
        extents = [g.batch, *(kernel.dims[d] for d in row_dims), *g.output_spatial]
        staged = ArrayShape(self.lhs_shape.dtype, tuple(extents))
        ptr = ke.reserve_scratch(staged.size * self.t.bytes)
        source, shape = self.lhs_ptr, self.lhs_shape
        spatial_of = {d: k for k, d in enumerate(dn.kernel_spatial)}
        last, width, size = g.window[-1], g.output_spatial[-1], g.input_spatial[-1]
        zero = ir.Constant(self.st, 0.0)

        def copy_row(loop):
            image, rows, outer = loop[0], loop[1:1 + len(row_dims)], loop[1 + len(row_dims):]
            offsets = [None] * len(g.window)
            feature = None
            for d, i in zip(row_dims, rows):
                if d == dn.kernel_input_feature:
                    feature = i
                else:
                    offsets[spatial_of[d]] = i
            valid, inside = window_source(b, tuple(outer), tuple(offsets[:-1]), g.window[:-1], g.input_spatial[:-1])
            row = b.gep(ptr, [linear_index(b, (*loop, i64(0)), staged.dims, staged.minor_to_major)],
                        source_etype=self.st)
            # x reads input column x * stride + shift: inside the input for x in [begin, end)
            shift = b.sub(b.mul(offsets[-1], i64(last.rhs_dilate)), i64(last.pad_low))
            begin = self._ceil_div(b, b.sub(i64(0), shift), last.stride, width)
            end = self._ceil_div(b, b.sub(i64(size), shift), last.stride, width)
            end = b.select(b.icmp_signed("<", end, begin), begin, end)
            if valid is not None:   # the whole row in the padding of an outer dimension
                begin = b.select(valid, begin, i64(width))
                end = b.select(valid, end, i64(width))

            def store_zero(x):
                b.store(zero, b.gep(row, [x], source_etype=self.st))

            def store_copy(x):
                column = b.add(b.mul(x, i64(last.stride)), shift)
                value = ke.load(source, shape, g.input_index(b, image, i64(0), feature, (*inside, column)))
                b.store(value, b.gep(row, [x], source_etype=self.st))

            stepped_loop(b, i64(0), begin, store_zero)
            stepped_loop(b, begin, end, store_copy)
            stepped_loop(b, end, i64(width), store_zero)

        ke.loop_nest(extents[:-1], copy_row, staged.size)
        self.lhs_ptr = ptr

    @staticmethod
    def _ceil_div(b: ir.IRBuilder, n: ir.Value, d: int, most: int) -> ir.Value:
        """ceil(n / d) clamped to [0, most], for a positive constant d."""
        n = b.select(b.icmp_signed("<", n, i64(0)), i64(0), n)
        q = b.udiv(b.add(n, i64(d - 1)), i64(d))
        return b.select(b.icmp_signed(">", q, i64(most)), i64(most), q)

    def _block(self, task, feature_blocks: int, position_blocks: int, out_ptr, epilogue) -> None:
        """A task's block: per position tile, the depth a chunk at a time over every feature
        tile (the chunk of the planes under the position tile stays in L1 while the feature
        tiles read it; the tiles' sums wait in the output between chunks), then the epilogue
        over the position tile's results."""
        b, g, p = self.b, self.g, self.p
        per_image = feature_blocks * position_blocks
        image, rest = b.udiv(task, i64(per_image)), b.urem(task, i64(per_image))
        fb, pb = b.udiv(rest, i64(position_blocks)), b.urem(rest, i64(position_blocks))
        f0 = b.mul(fb, i64(p.feature_block))
        f1 = smin(b, b.add(f0, i64(p.feature_block)), i64(g.groups * p.group_tiles))
        t0 = b.mul(pb, i64(p.position_block))
        t1 = smin(b, b.add(t0, i64(p.position_block)), i64(p.position_tiles))
        chunks = ceil(self.depth / p.chunk)

        def position_tile(t):
            def chunk(k):
                stepped_loop(b, f0, f1, lambda f: self._tile(image, f, t, out_ptr, k))
            if chunks == 1:
                chunk(i64(0))
            else:
                stepped_loop(b, i64(0), i64(chunks), chunk)
            if epilogue is not None:
                first = b.mul(t, i64(p.tile_positions))
                end = smin(b, b.add(first, i64(p.tile_positions)), i64(p.positions))
                self._epilogue(image, self._first_feature(f0)[2], self._first_feature(f1)[2], first, end, out_ptr,
                               epilogue)

        stepped_loop(b, t0, t1, position_tile)

    def _first_feature(self, f):
        """(group, tile within the group, first output feature) of feature tile f; for f one
        past the last tile, the first feature is the number of output features."""
        b, g, p = self.b, self.g, self.p
        group, within = (b.udiv(f, i64(p.group_tiles)), b.urem(f, i64(p.group_tiles))) if g.groups > 1 else (i64(0), f)
        return group, within, b.add(b.mul(group, i64(g.group_features)),
                                    smin(b, b.mul(within, i64(p.features)), i64(g.group_features)))

    def _tile(self, image, f, t, out_ptr, chunk) -> None:
        """The sums over depth chunk `chunk` of feature tile f by position tile t of one
        image, by the tile function of its size (a group's last feature tile may be narrower,
        a plane's last position tile shorter)."""
        b, g, p = self.b, self.g, self.p
        group, within, first_feature = self._first_feature(f)
        first_position = b.mul(t, i64(p.tile_positions))
        last_features = g.group_features - (p.group_tiles - 1) * p.features
        last_positions = p.positions - (p.position_tiles - 1) * p.tile_positions

        def emit(features, positions):
            self._sums(image, f, group, first_feature, features, first_position, positions, out_ptr, chunk)

        def by_positions(features):
            if last_positions == p.tile_positions:
                return emit(features, p.tile_positions)
            with b.if_else(b.icmp_unsigned("<", t, i64(p.position_tiles - 1))) as (full, last):
                with full:
                    emit(features, p.tile_positions)
                with last:
                    emit(features, last_positions)

        if last_features == p.features:
            return by_positions(p.features)
        with b.if_else(b.icmp_unsigned("<", within, i64(p.group_tiles - 1))) as (full, last):
            with full:
                by_positions(p.features)
            with last:
                by_positions(last_features)

    def _sums(self, image, f, group, first_feature, features: int, first_position, positions: int, out_ptr,
              chunk) -> None:
        """`features` output features from first_feature (of feature tile f) by `positions`
        positions from first_position: the sums over depth chunk `chunk` of the group's input
        features, added to the output (stored there for the first chunk)."""
        b, g, p = self.b, self.g, self.p
        w_c, w_o = self.w_c, self.w_o
        plane = i64(p.positions)
        first_input = b.mul(chunk, i64(p.chunk))
        first_plane = b.add(b.add(b.mul(image, i64(g.groups * self.depth)), b.mul(group, i64(self.depth))),
                            first_input)
        x = b.gep(self.lhs_ptr, [b.add(b.mul(first_plane, plane), first_position)], source_etype=self.st)
        first_weight = b.mul(f, i64(self.depth * p.features)) if self.tiled_weights else b.mul(first_feature, i64(w_o))
        w = b.gep(self.rhs_ptr, [b.add(b.mul(first_input, i64(w_c)), first_weight)], source_etype=self.st)
        out_first = b.add(b.mul(b.add(b.mul(image, i64(g.groups * g.group_features)), first_feature), plane),
                          first_position)
        out = b.gep(out_ptr, [out_first], source_etype=self.st)
        depth = smin(b, i64(p.chunk), b.sub(i64(self.depth), first_input))
        ahead = TILED_PREFETCH_AHEAD if self.tiled_weights else PREFETCH_AHEAD
        if self.params.prefetch_rows is not None:
            ahead = self.params.prefetch_rows
        b.call(self._tile_function(features, positions, w_o, ahead),
               [x, w, out, depth, b.icmp_unsigned("!=", chunk, i64(0)), plane, i64(w_c)])

    def _tile_function(self, features: int, positions: int, w_o: int, ahead: int) -> ir.Function:
        """void tile(x, w, out, depth, add, plane, w_c): a tile's sums over `depth` input
        features from its first plane x (planes `plane` elements apart, as are the output's)
        and first weight w (w_c apart along the input features, w_o along the output
        features, prefetched `ahead` input features ahead), stored at out, or added to what
        is there when `add`. A function of its own per tile size, shared by every
        convolution of the program: inlined, the accumulators of one size's loop shared the
        register allocation of another's and spilled, and a copy per convolution doubled the
        LLVM time of DenseNet-121."""
        p = self.p
        vectors = ceil(positions / p.lanes)
        tail = positions - (vectors - 1) * p.lanes        # lanes of the last vector
        module = self.b.module
        name = f"pyxla.conv_planes.{self.t.name}x{p.lanes}.tile{features}x{vectors}.tail{tail}.wo{w_o}.ahead{ahead}"
        if name in module.globals:
            return module.globals[name]
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, I1, I64, I64]), name=name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        x, w, out, depth, add, plane, w_c = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        mask = None if tail == p.lanes else \
            ir.Constant(ir.VectorType(I1, p.lanes), [ir.Constant(I1, lane < tail) for lane in range(p.lanes)])
        fma = fma_intrinsic(module, self.vector)
        outs = [[b.gep(out, [b.add(b.mul(plane, i64(k)), i64(v * p.lanes))], source_etype=self.st)
                 for v in range(vectors)] for k in range(features)]
        sums = [[alloca_in_entry(b, self.vector) for _ in range(vectors)] for _ in range(features)]
        with b.if_else(add) as (later, first):
            with later:
                for slots, ats in zip(sums, outs):
                    for v, (slot, at) in enumerate(zip(slots, ats)):
                        b.store(self._load(b, at, mask if v == vectors - 1 else None), slot)
            with first:
                for slots in sums:
                    for slot in slots:
                        b.store(ir.Constant(self.vector, None), slot)

        def step(c):
            row = b.gep(x, [b.mul(c, plane)], source_etype=self.st)
            xs = [self._load(b, b.gep(row, [i64(v * p.lanes)], source_etype=self.st),
                             mask if v == vectors - 1 else None)
                  for v in range(vectors)]
            weights = b.gep(w, [b.mul(c, w_c)], source_etype=self.st)
            prefetch(b, b.gep(weights, [b.mul(w_c, i64(ahead))], source_etype=self.st))
            for k, slots in enumerate(sums):
                weight = splat(b, self.vector,
                               b.load(b.gep(weights, [i64(k * w_o)], source_etype=self.st), typ=self.st))
                for xv, slot in zip(xs, slots):
                    b.store(b.call(fma, [weight, xv, b.load(slot)]), slot)

        stepped_loop(b, i64(0), depth, step)
        for slots, ats in zip(sums, outs):
            for v, (slot, at) in enumerate(zip(slots, ats)):
                self._store(b, b.load(slot), at, mask if v == vectors - 1 else None)
        b.ret_void()
        return fn

    def _load(self, b: ir.IRBuilder, at, mask):
        if mask is None:
            value = b.load(at, typ=self.vector)
            value.align = self.t.bytes
            return value
        return b.call(self._masked(b.module, "load"), [at, ir.Constant(ir.IntType(32), self.t.bytes), mask,
                                             ir.Constant(self.vector, None)])

    def _store(self, b: ir.IRBuilder, value, at, mask) -> None:
        if mask is None:
            b.store(value, at).align = self.t.bytes
        else:
            b.call(self._masked(b.module, "store"), [value, at, ir.Constant(ir.IntType(32), self.t.bytes), mask])

    def _masked(self, module: ir.Module, what: str) -> ir.Function:
        """llvm.masked.load / llvm.masked.store over this kernel's vector type."""
        vector = self.vector
        name = f"llvm.masked.{what}.v{vector.count}{'f32' if self.t.bytes == 4 else 'f64'}.p0"
        fn = module.globals.get(name)
        if fn is None:
            mask, align = ir.VectorType(I1, vector.count), ir.IntType(32)
            fnty = ir.FunctionType(vector, [PTR, align, mask, vector]) if what == "load" else \
                ir.FunctionType(ir.VoidType(), [vector, PTR, align, mask])
            fn = ir.Function(module, fnty, name=name)
        return fn

    def _epilogue(self, image, first_feature, end_feature, first_position, end_position, out_ptr,
                  epilogue: HloInstruction) -> None:
        """The epilogue over features [first_feature, end_feature) by positions
        [first_position, end_position), in place: each result read back from the output
        (in cache) and the fused computation's value stored over it; LLVM vectorises the
        positions. One loop for every tile size (a copy per size doubled LLVM's time)."""
        ke, b, g = self.ke, self.b, self.g
        dn = g.dn
        shape = self.conv.shape
        spatial = g.output_spatial

        def element(feature, position):
            index = [None] * shape.rank
            index[dn.output_batch] = image
            index[dn.output_feature] = feature
            for d, i in zip(dn.output_spatial, _spatial_index(b, position, spatial)):
                index[d] = i
            index = tuple(index)
            ke.e.push_scope()
            product = ke.load(out_ptr, shape, index)
            ke.e.buffer_reads[id(self.conv)] = lambda _index, value=product: value
            ke.store(out_ptr, shape, index, ke.e.value(epilogue, index))
            ke.e.pop_scope()

        stepped_loop(b, first_feature, end_feature, lambda feature: stepped_loop(
            b, first_position, end_position, lambda position: element(feature, position)))


def _spatial_index(b: ir.IRBuilder, position: ir.Value, spatial: tuple[int, ...]) -> list[ir.Value]:
    """The spatial index of a flat position of an image, the outermost without a modulo: the
    linear index the loads and stores of the epilogue compute from it then folds back to the
    position (LLVM simplifies (p / W) * W + p % W, but not a reduction mod H*W), and the
    loop over positions vectorises."""
    index = []
    for n in reversed(spatial[1:]):
        index.append(b.urem(position, i64(n)))
        position = b.udiv(position, i64(n))
    return [position, *reversed(index)]


EMITTERS.insert(0, (fits, PlaneConvolution))
