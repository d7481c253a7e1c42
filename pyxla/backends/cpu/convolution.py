"""Convolution on the CPU backend (XLA's ConvGeneralDilated): any dimension numbers,
strides, padding (negative crops), base (lhs) and window (rhs) dilation, window reversal,
feature groups and batch groups.

Two ways to compute it, with the evaluator's semantics (dot_conv.py):

  elemental  one output element is a loop over the window offsets and the input features
             of its group, products summed in the result's compute type; padding and
             dilation holes read as zero (0 * inf is NaN, as the evaluator's zero padding
             gives). Any element types; it is also how a convolution fused with an
             elementwise epilogue is computed inside the fusion's loop.
  gemm       f32/f64: im2col + BLAS. Per batch element and group, a chunk of output
             positions is unrolled into a patch matrix P[position, (window offset, input
             feature)], multiplied by the group's kernel packed as W[(window offset, input
             feature), output feature], and the product is written to the output in its
             layout. Chunks bound the patch matrix's memory. In an output fusion the
             convolution goes to scratch memory and the epilogue loop reads it there.

Group arithmetic: G = feature_group_count * batch_group_count groups (one count is 1);
output feature o is in group o // (O / G). With feature groups, group g reads input
features g * I .. g * I + I - 1 (I = the kernel's input features); with batch groups it
reads input batch element g * B + b for output batch element b (B = batch / batch groups).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import llvmlite.ir as ir

from ...hlo.attributes import ConvDimensionNumbers, WindowDim
from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape
from ...hlo.types import ElementType
from .blas import emit_gemm
from .codegen import KERNELS, OUTPUT_FUSION_KERNELS
from .elemental import RULES, ElementalEmitter, alloca_in_entry, convert, delinearize, etype
from .ir_types import I8, compute_type, i64, storage_type
from .loops import for_range
from .sorting import counted_loop, kernel_root
from .windows import window_source

PATCH_CHUNK_ELEMENTS = 1 << 18   # patch matrix elements per BLAS call (1 MiB of f32)
GEMM_MIN_GROUP_FEATURES = 4      # fewer output features per group (depthwise): elemental loops


@dataclass(frozen=True)
class ConvGeometry:
    dn: ConvDimensionNumbers
    window: tuple[WindowDim, ...]
    feature_groups: int
    batch_groups: int
    input_features: int          # per group: the kernel's input feature dimension (I)
    group_features: int          # output features per group (O / G)
    batch: int                   # output batch (B)
    input_spatial: tuple[int, ...]
    output_spatial: tuple[int, ...]

    @property
    def groups(self) -> int:
        return self.feature_groups * self.batch_groups

    @property
    def patch_columns(self) -> int:
        """Columns of the patch matrix: every window offset times every input feature of a group."""
        return prod(w.size for w in self.window) * self.input_features

    @staticmethod
    def of(conv: HloInstruction) -> "ConvGeometry":
        lhs, rhs = (op.shape for op in conv.operands)
        dn: ConvDimensionNumbers = conv.attrs["dim_labels"]
        fgc = conv.attrs.get("feature_group_count", 1)
        bgc = conv.attrs.get("batch_group_count", 1)
        out = conv.shape
        return ConvGeometry(dn, tuple(conv.attrs.get("window", ())), fgc, bgc, rhs.dims[dn.kernel_input_feature],
                            out.dims[dn.output_feature] // (fgc * bgc), out.dims[dn.output_batch],
                            tuple(lhs.dims[d] for d in dn.input_spatial),
                            tuple(out.dims[d] for d in dn.output_spatial))

    def group_of(self, b: ir.IRBuilder, feature: ir.Value) -> ir.Value:
        return b.udiv(feature, i64(self.group_features)) if self.groups > 1 else i64(0)

    def input_index(self, b: ir.IRBuilder, batch: ir.Value, group: ir.Value, feature: ir.Value,
                    spatial: tuple) -> tuple:
        """The input index of output batch element `batch`, input feature `feature` of `group`."""
        dn = self.dn
        index = [None] * (2 + len(spatial))
        index[dn.input_batch] = b.add(b.mul(group, i64(self.batch)), batch) if self.batch_groups > 1 else batch
        index[dn.input_feature] = b.add(b.mul(group, i64(self.input_features)), feature) \
            if self.feature_groups > 1 else feature
        for d, i in zip(dn.input_spatial, spatial):
            index[d] = i
        return tuple(index)

    def kernel_index(self, b: ir.IRBuilder, out_feature: ir.Value, in_feature: ir.Value, offsets: tuple) -> tuple:
        dn = self.dn
        index = [None] * (2 + len(offsets))
        index[dn.kernel_output_feature] = out_feature
        index[dn.kernel_input_feature] = in_feature
        for d, k, w in zip(dn.kernel_spatial, offsets, self.window):
            index[d] = b.sub(i64(w.size - 1), k) if w.reversal else k
        return tuple(index)


def _multiply_add(b: ir.IRBuilder, t: ElementType, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    """acc + x * y in the result type; pred: acc or (x and y)."""
    if t.is_pred:
        return b.or_(acc, b.and_(x, y))
    if t.is_float:
        return b.fadd(acc, b.fmul(x, y))
    return b.add(acc, b.mul(x, y))


def _zero(t: ElementType) -> ir.Constant:
    return ir.Constant(compute_type(t), 0.0 if t.is_float else 0)


def _input_value(e: ElementalEmitter, conv: HloInstruction, geometry: ConvGeometry, batch, group, feature,
                 output_spatial: tuple, offsets: tuple) -> ir.Value:
    """An input element under the window, converted to the result type; zero in padding and holes."""
    b = e.b
    lhs = conv.operands[0]
    t = etype(conv)
    valid, spatial = window_source(b, output_spatial, offsets, geometry.window, geometry.input_spatial)
    x = convert(e, e.value(lhs, geometry.input_index(b, batch, group, feature, spatial)), etype(lhs), t)
    return x if valid is None else b.select(valid, x, _zero(t))


# --- elemental --------------------------------------------------------------------------------

def _convolution(e: ElementalEmitter, conv, index):
    b = e.b
    g = ConvGeometry.of(conv)
    dn = g.dn
    rhs = conv.operands[1]
    t = etype(conv)
    batch, feature = index[dn.output_batch], index[dn.output_feature]
    spatial = tuple(index[d] for d in dn.output_spatial)
    group = g.group_of(b, feature)
    acc = alloca_in_entry(b, compute_type(t))
    b.store(_zero(t), acc)

    def body(loop):
        offsets, in_feature = loop[:-1], loop[-1]
        x = _input_value(e, conv, g, batch, group, in_feature, spatial, offsets)
        w = convert(e, e.value(rhs, g.kernel_index(b, feature, in_feature, offsets)), etype(rhs), t)
        b.store(_multiply_add(b, t, b.load(acc), x, w), acc)

    if conv.operands[0].shape.size:   # an empty input leaves every window to padding: zero
        e.push_scope()
        for_range(b, [w.size for w in g.window] + [g.input_features], body)
        e.pop_scope()
    return b.load(acc)


# --- im2col + GEMM ----------------------------------------------------------------------------

def gemm_fits(conv: HloInstruction) -> bool:
    t = etype(conv)
    if t.name not in ("f32", "f64") or any(etype(op) != t for op in conv.operands):
        return False
    g = ConvGeometry.of(conv)
    return conv.shape.size > 0 and conv.operands[0].shape.size > 0 and g.patch_columns > 0 and \
        g.group_features >= GEMM_MIN_GROUP_FEATURES


def emit_convolution(ke) -> None:
    """A convolution kernel (alone, or the root of a fusion): BLAS where it fits, else loops."""
    conv = kernel_root(ke)
    if not gemm_fits(conv):
        return ke._emit_loop(conv)
    emit_conv_gemm(ke, conv, ke.out_ptr, ke.instr.shape)


def emit_conv_output_fusion(ke) -> None:
    """A convolution with its elementwise epilogue: the convolution by BLAS into scratch
    memory, then the epilogue loop reading it there (any epilogue, since the convolution's
    result is whole before the loop reads it). Where BLAS does not fit, one loop does all."""
    conv = next(i for i in ke.fused.instructions if i.opcode == "convolution")
    root = kernel_root(ke)
    if not gemm_fits(conv):
        return ke._emit_loop(root)
    result = ke.reserve_scratch(conv.shape.size * etype(conv).bytes)
    emit_conv_gemm(ke, conv, result, conv.shape)
    ke.e.buffer_reads[id(conv)] = lambda index: ke._load(result, conv.shape, index)
    ke._emit_loop(root)


def emit_conv_gemm(ke, conv: HloInstruction, out_ptr: ir.Value, out_shape: ArrayShape) -> None:
    """The convolution into `out_ptr` (laid out as out_shape) by im2col + GEMM."""
    b, e = ke.b, ke.e
    g = ConvGeometry.of(conv)
    dn = g.dn
    t = etype(conv)
    st = storage_type(t)
    columns, features = g.patch_columns, g.group_features
    positions = prod(g.output_spatial)
    rows = max(1, min(positions, PATCH_CHUNK_ELEMENTS // columns))
    weights = ke.reserve_scratch(g.groups * columns * features * t.bytes)
    patches = ke.reserve_scratch(rows * columns * t.bytes)
    product = ke.reserve_scratch(rows * features * t.bytes)
    _pack_weights(ke, conv, g, weights)
    window_sizes = [w.size for w in g.window]

    def chunk(batch, group, start, count: int):
        """Output positions start .. start + count - 1 of one batch element and group."""
        def fill_row(r):
            e.push_scope()
            spatial = delinearize(b, b.add(start, r[0]), g.output_spatial, tuple(range(len(g.output_spatial) - 1, -1, -1)))
            row = b.gep(patches, [b.mul(r[0], i64(columns))], source_etype=st)

            def fill(loop):
                offsets, in_feature = loop[:-1], loop[-1]
                column = _row_major(b, loop, window_sizes + [g.input_features])
                x = _input_value(e, conv, g, batch, group, in_feature, spatial, offsets)
                b.store(x, b.gep(row, [column], source_etype=st))

            for_range(b, window_sizes + [g.input_features], fill)
            e.pop_scope()

        for_range(b, [count], fill_row)
        group_weights = b.gep(weights, [b.mul(group, i64(columns * features * t.bytes))], source_etype=I8)
        emit_gemm(b, t.name, product, patches, group_weights, count, features, columns, False, False)

        def write(loop):
            r, x = loop
            spatial = delinearize(b, b.add(start, r), g.output_spatial, tuple(range(len(g.output_spatial) - 1, -1, -1)))
            index = [None] * out_shape.rank
            index[dn.output_batch] = batch
            index[dn.output_feature] = b.add(b.mul(group, i64(features)), x) if g.groups > 1 else x
            for d, i in zip(dn.output_spatial, spatial):
                index[d] = i
            value = b.load(b.gep(product, [b.add(b.mul(r, i64(features)), x)], source_etype=st), typ=st)
            ke._store(out_ptr, out_shape, tuple(index), value)

        for_range(b, [count, features], write)

    full, rest = divmod(positions, rows)

    def per_block(block):
        batch, group = block
        if full:
            counted_loop(b, i64(0), i64(full * rows), lambda start: chunk(batch, group, start, rows), rows)
        if rest:
            chunk(batch, group, i64(full * rows), rest)

    for_range(b, [g.batch, g.groups], per_block)


def _pack_weights(ke, conv: HloInstruction, g: ConvGeometry, packed: ir.Value) -> None:
    """packed[group][(window offset, input feature)][output feature of the group], row-major."""
    b, e = ke.b, ke.e
    rhs = conv.operands[1]
    st = storage_type(etype(conv))
    extents = [g.groups] + [w.size for w in g.window] + [g.input_features, g.group_features]

    def body(loop):
        group, offsets, in_feature, x = loop[0], loop[1:-2], loop[-2], loop[-1]
        out_feature = b.add(b.mul(group, i64(g.group_features)), x) if g.groups > 1 else x
        e.push_scope()
        w = e.value(rhs, g.kernel_index(b, out_feature, in_feature, offsets))
        b.store(w, b.gep(packed, [_row_major(b, loop, extents)], source_etype=st))
        e.pop_scope()

    for_range(b, extents, body)


def _row_major(b: ir.IRBuilder, index, extents) -> ir.Value:
    offset = i64(0)
    stride = 1
    for i, n in zip(reversed(list(index)), reversed(list(extents))):
        if n != 1:
            offset = b.add(offset, b.mul(i, i64(stride)) if stride != 1 else i)
        stride *= n
    return offset


RULES["convolution"] = _convolution
KERNELS["convolution"] = emit_convolution
OUTPUT_FUSION_KERNELS["convolution"] = emit_conv_output_fusion
