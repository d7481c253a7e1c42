"""Convolution on the CPU backend (XLA's ConvGeneralDilated): any dimension numbers,
strides, padding (negative crops), base (lhs) and window (rhs) dilation, window reversal,
feature groups and batch groups.

Here: the geometry every convolution emitter shares, and the elemental rule, with the
evaluator's semantics (dot_conv.py): one output element is a loop over the window offsets
and the input features of its group, products summed in the result's compute type; padding
and dilation holes read as zero (0 * inf is NaN, as the evaluator's zero padding gives).
It computes any element type, and a convolution inside a loop fusion. The convolution
kernels (f32 and f64 by register tiles, depthwise and thin groups by conv/depthwise.py, the
rest by these loops) are dispatched in conv/tiles.py.

Group arithmetic: G = feature_group_count * batch_group_count groups (one count is 1);
output feature o is in group o // (O / G). With feature groups, group g reads input
features g * I .. g * I + I - 1 (I = the kernel's input features); with batch groups it
reads input batch element g * B + b for output batch element b (B = batch / batch groups).
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from ...hlo.attributes import ConvDimensionNumbers, WindowDim
from ...hlo.instruction import HloInstruction
from ...hlo.types import ElementType
from .elemental import RULES, ElementalEmitter, convert
from .ir_types import alloca_in_entry, compute_type, etype, i64
from .loops import for_range
from .windows import window_source


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

    @staticmethod
    def of(conv: HloInstruction) -> ConvGeometry:
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


RULES["convolution"] = _convolution
