"""Convolution layout: convolutions over features-last activations (NHWC), and the
transposes that this takes moved out of the way.

A model imported from ONNX or PyTorch computes its convolutions with the features before
the spatial dimensions (NCHW). The convolution kernels read features-last pixels: each
pixel's input features one contiguous run, each output pixel's features written as whole
vectors (backends/cpu/conv/tiles.py). Given NCHW they copy the input to NHWC and write their output back
plane by plane, around every convolution of the model. This pass gives each such
convolution NHWC input and output instead, between a transpose of its input and one of its
result, and then sinks every transpose toward the outputs (below elementwise ops, pools,
reductions, concatenation and padding) until it meets the next convolution's input
transpose and the two cancel. A chain of convolutions and the ops between them then runs
features-last from the first transpose of the model's input to the end, where a global
pool's reduction over the spatial dimensions needs no transpose at all. A transpose that
meets an op it cannot pass (a reshape that shuffles channels) stays, as a copy. Last, a
padded convolution whose input is another features-last convolution's result (through
its epilogue) and nothing else's gets that input padded by an explicit pad instead, which
the fusion pass puts at the end of the producer's output fusion: the producer writes its
result inside the zero border, where the padded convolution would copy its input with its
border on every call (Inception v2 16.5 -> 16.0 ms, VGG-19 132 -> 131, ResNet-50 the same,
in one process).

Left in NCHW: grouped convolutions, whose kernels read feature planes (depthwise ones,
backends/cpu/conv/depthwise.py; ShuffleNet's grouped 1x1 ones, backends/cpu/conv/planes.py: ShuffleNet ran 2.8 ->
4.6 ms with them NHWC). A colour stem (3 features under 3x3) writes NHWC too: the tiles
over a features-last image beat conv_planes' window planes over an NCHW one (SqueezeNet's
3x3 stride 2: 603 -> 223 us). A padded one reads its image as it is, though (at most
FEW_FEATURES features): the tiles copy a padded input features-last anyway, and a
transpose before them is a kernel of its own (ResNet-50's stem with its transpose: 928 ->
888 us); an unpadded one reads a transposed image where it lies (SqueezeNet's: 223 us
against 294 for its copy of the NCHW image).
"""
from __future__ import annotations

from dataclasses import replace

from ..hlo.attributes import ConvDimensionNumbers, PadDim, features_first
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from .algebraic_simplifier import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE, identity_transpose, transpose_of_transpose
from .dce import remove_dead_instructions
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

CONVOLUTIONS = RuleTable("convolution-layout")
SINKING = RuleTable("transpose-sinking")
PADDED_INPUTS = RuleTable("padded-inputs")
FEW_FEATURES = 4


def _permuted(shape: ArrayShape, perm: tuple[int, ...]) -> ArrayShape:
    """The shape of transpose(x of `shape`, dimensions=perm)."""
    return ArrayShape(shape.dtype, tuple(shape.dims[d] for d in perm))


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for i, d in enumerate(perm):
        inverse[d] = i
    return tuple(inverse)


def _transpose(ctx, x: HloInstruction, perm: tuple[int, ...], like: HloInstruction) -> HloInstruction:
    return ctx.add("transpose", [x], _permuted(x.array_shape, perm), {"dimensions": tuple(perm)}, like=like)


def _wants_features_last(conv: HloInstruction, dn: ConvDimensionNumbers) -> bool:
    """A floating-point convolution of one group with NCHW-like input and output."""
    if not conv.array_shape.dtype.is_float or not dn.input_spatial or \
            conv.attrs.get("batch_group_count", 1) != 1 or conv.attrs.get("feature_group_count", 1) != 1:
        return False
    return features_first(conv.operands[0].array_shape.rank, dn.input_batch, dn.input_feature,
                          dn.input_spatial) is True \
        and features_first(conv.array_shape.rank, dn.output_batch, dn.output_feature, dn.output_spatial) is True


def _copies_its_input(conv: HloInstruction) -> bool:
    """Whether the convolution kernels copy the input (with its padding or dilation holes)
    before reading it, features last whatever its layout."""
    return any(w.pad_low or w.pad_high or w.lhs_dilate != 1 for w in conv.attrs["window"])


@CONVOLUTIONS.rule("convolution")
def features_last_convolution(conv: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """conv(x) over NCHW == transpose(conv'(transpose(x))) with conv' over NHWC."""
    dn: ConvDimensionNumbers = conv.attrs["dim_labels"]
    if not _wants_features_last(conv, dn):
        return None
    x, kernel = conv.operands
    spatial = len(dn.input_spatial)
    to_input = (dn.input_batch, *dn.input_spatial, dn.input_feature)
    nhwc = ConvDimensionNumbers(0, spatial + 1, tuple(range(1, spatial + 1)), dn.kernel_input_feature,
                                dn.kernel_output_feature, dn.kernel_spatial, 0, spatial + 1,
                                tuple(range(1, spatial + 1)))
    to_output = (dn.output_batch, *dn.output_spatial, dn.output_feature)
    # a colour image: read as it is
    if x.array_shape.dims[dn.input_feature] <= FEW_FEATURES and _copies_its_input(conv):
        nhwc = replace(nhwc, input_batch=dn.input_batch, input_feature=dn.input_feature, input_spatial=dn.input_spatial)
    else:
        x = _transpose(ctx, x, to_input, conv)
    inner = ctx.add("convolution", [x, kernel], _permuted(conv.array_shape, to_output),
                    dict(conv.semantic_attrs(), dim_labels=nhwc), like=conv)
    return _transpose(ctx, inner, _inverse(to_output), conv)


# --- sinking transposes -------------------------------------------------------------------------

def _unpermuted(o: HloInstruction, perm: tuple[int, ...], ctx) -> HloInstruction | None:
    """The operand whose transpose by `perm` is `o`: a transpose's operand, or a broadcast
    re-aimed at the permuted dimensions (a per-feature bias, a splat); None otherwise."""
    if o.opcode == "transpose" and tuple(o.attrs["dimensions"]) == perm:
        return o.operands[0]
    if o.opcode == "broadcast":
        dims = tuple(perm[d] for d in o.attrs["dimensions"])
        if list(dims) != sorted(dims):
            return None
        return ctx.add("broadcast", [o.operands[0]], _permuted(o.array_shape, _inverse(perm)), {"dimensions": dims},
                       like=o)
    return None


def _transposed_operand(instr: HloInstruction) -> HloInstruction | None:
    return next((o for o in instr.operands
                 if o.opcode == "transpose" and o.array_shape.rank == instr.array_shape.rank), None)


@SINKING.rule(*UNARY_ELEMENTWISE, *BINARY_ELEMENTWISE, "select", "clamp")
def elementwise_of_transposes(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """f(transpose(x), transpose(y), broadcast(b)) == transpose(f(x, y, broadcast'(b)))."""
    t = _transposed_operand(instr)
    if t is None:
        return None
    perm = tuple(t.attrs["dimensions"])
    operands = []
    for o in instr.operands:
        inner = o if o.array_shape.rank == 0 else _unpermuted(o, perm, ctx)   # clamp's scalar bounds
        if inner is None:
            return None
        operands.append(inner)
    inner = ctx.add(instr.opcode, operands, _permuted(instr.array_shape, _inverse(perm)), dict(instr.semantic_attrs()),
                    like=instr)
    return _transpose(ctx, inner, perm, instr)


@SINKING.rule("reduce-window")
def pool_of_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """A window over transpose(x) is the permuted window over x."""
    if len(instr.operands) != 2:
        return None
    x, init = instr.operands
    if x.opcode != "transpose":
        return None
    perm = tuple(x.attrs["dimensions"])
    window = instr.attrs["window"]
    inner_window = tuple(window[i] for i in _inverse(perm))
    inner = ctx.add("reduce-window", [x.operands[0], init], _permuted(instr.array_shape, _inverse(perm)),
                    dict(instr.semantic_attrs(), window=inner_window), like=instr)
    return _transpose(ctx, inner, perm, instr)


@SINKING.rule("reduce")
def reduce_of_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Reducing transpose(x) over some dimensions is reducing x over theirs, then
    transposing what is left only if its order changed (a global pool's [N, C]: it does not)."""
    if len(instr.operands) != 2:
        return None
    x, init = instr.operands
    if x.opcode != "transpose":
        return None
    perm = tuple(x.attrs["dimensions"])
    reduced = set(instr.attrs["dimensions"])
    inner_reduced = tuple(sorted(perm[d] for d in reduced))
    kept = [perm[d] for d in range(len(perm)) if d not in reduced]      # x's dims, in the result's order
    inner_kept = sorted(kept)
    inner_shape = ArrayShape(instr.array_shape.dtype, tuple(x.operands[0].array_shape.dims[d] for d in inner_kept))
    inner = ctx.add("reduce", [x.operands[0], init], inner_shape,
                    dict(instr.semantic_attrs(), dimensions=inner_reduced), like=instr)
    order = tuple(inner_kept.index(d) for d in kept)
    return inner if order == tuple(range(len(order))) else _transpose(ctx, inner, order, instr)


@SINKING.rule("concatenate")
def concatenate_of_transposes(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Concatenating transposes by one permutation is transposing the concatenation. When
    at least half of the operands are such transposes, the others (the pool before
    DenseNet's first block) are transposed the other way to join them."""
    t = _transposed_operand(instr)
    if t is None:
        return None
    perm = tuple(t.attrs["dimensions"])
    moved = [o.opcode == "transpose" and tuple(o.attrs["dimensions"]) == perm for o in instr.operands]
    if 2 * sum(moved) < len(moved):
        return None
    operands = [o.operands[0] if m else _transpose(ctx, o, _inverse(perm), instr)
                for o, m in zip(instr.operands, moved)]
    (axis,) = instr.attrs["dimensions"]
    inner = ctx.add("concatenate", operands, _permuted(instr.array_shape, _inverse(perm)),
                    dict(instr.semantic_attrs(), dimensions=(perm[axis],)), like=instr)
    return _transpose(ctx, inner, perm, instr)


@SINKING.rule("pad")
def pad_of_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Padding transpose(x) is padding x by the permuted widths."""
    x, value = instr.operands
    if x.opcode != "transpose":
        return None
    perm = tuple(x.attrs["dimensions"])
    padding = instr.attrs["padding"]
    inner = ctx.add("pad", [x.operands[0], value], _permuted(instr.array_shape, _inverse(perm)),
                    dict(instr.semantic_attrs(), padding=tuple(padding[i] for i in _inverse(perm))), like=instr)
    return _transpose(ctx, inner, perm, instr)


SINKING.rule("transpose")(identity_transpose)
SINKING.rule("transpose")(transpose_of_transpose)


# --- padded inputs ---------------------------------------------------------------------------

def _product_of_convolution(x: HloInstruction, depth: int = 8) -> bool:
    """Whether x is a features-last convolution's result, or elementwise ops of one (its
    epilogue: bias, ReLU), each used by nothing else: what an output fusion computes."""
    if len(x.users) != 1 or depth == 0:
        return False
    if x.opcode == "convolution":
        dn = x.attrs["dim_labels"]
        return features_first(x.array_shape.rank, dn.output_batch, dn.output_feature, dn.output_spatial) is False
    if x.opcode not in UNARY_ELEMENTWISE and x.opcode not in BINARY_ELEMENTWISE:
        return False
    return any(o.array_shape.dims == x.array_shape.dims and _product_of_convolution(o, depth - 1) for o in x.operands)


@PADDED_INPUTS.rule("convolution")
def padded_input(conv: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """conv(x) with its window padded == conv'(pad(x)) unpadded, when x is another
    features-last convolution's result used by nothing else: the fusion pass lets that
    convolution write its result inside the zero border (an output fusion ending in the
    pad), where conv would copy x with its border on every call (3-9% of a padded 3x3 at
    56x56 or 28x28)."""
    dn: ConvDimensionNumbers = conv.attrs["dim_labels"]
    window = conv.attrs["window"]
    x, kernel = conv.operands
    if not conv.array_shape.dtype.is_float or not window or \
            features_first(x.array_shape.rank, dn.input_batch, dn.input_feature, dn.input_spatial) is not False or \
            not any(w.pad_low > 0 or w.pad_high > 0 for w in window) or \
            any(w.pad_low < 0 or w.pad_high < 0 or w.lhs_dilate != 1 for w in window) or \
            not _product_of_convolution(x):
        return None
    padding = [PadDim(0, 0)] * x.array_shape.rank
    dims = list(x.array_shape.dims)
    for d, w in zip(dn.input_spatial, window):
        padding[d] = PadDim(w.pad_low, w.pad_high)
        dims[d] += w.pad_low + w.pad_high
    zero = ctx.constant(0, ArrayShape(x.array_shape.dtype, ()), like=conv)
    padded = ctx.add("pad", [x, zero], ArrayShape(x.array_shape.dtype, tuple(dims)), {"padding": tuple(padding)},
                     like=conv)
    unpadded = tuple(replace(w, pad_low=0, pad_high=0) for w in window)
    return ctx.add("convolution", [padded, kernel], conv.shape, dict(conv.semantic_attrs(), window=unpadded), like=conv)


@hlo_pass("convolution-layout")
def convolution_layout(module: HloModule) -> bool:
    """Convolutions over NHWC activations; transposes sunk until they cancel; a padded
    convolution's input padded by the convolution that computes it."""
    if not apply_rules(module, CONVOLUTIONS):
        return False
    apply_rules(module, SINKING)
    for comp in module.computations:   # the transposes that cancelled: dead users of what comes next
        remove_dead_instructions(comp)
    apply_rules(module, PADDED_INPUTS)
    return True
