"""Expanders: rewrite composite ops into basic ones that every backend emits.

- batch-norm-inference / -training / -grad become broadcasts, elementwise arithmetic and
  add-reductions (always: no backend emits them directly).
- logistic becomes 1 / (1 + exp(-x)), for a backend that asks for it.
- rng-bit-generator with Philox (rng_default, rng_philox) becomes the integer ops of
  Philox4x32-10, bit for bit what the evaluator (and XLA's CPU expander) computes, for a
  backend that asks for it. Threefry states stay as they are.
"""
from __future__ import annotations

from typing import cast

from ..hlo.attributes import SliceDim
from ..hlo.builder import scalar_computation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops.rng import PHILOX_MULTIPLIERS, PHILOX_WEYL
from ..hlo.shape import ArrayShape
from ..hlo.types import PRED, U32, U64
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

BATCH_NORM_RULES = RuleTable("batch-norm-expander")
LOGISTIC_RULES = RuleTable("logistic-expander")


class _Emit:
    """Shorthand for building an expansion next to the instruction it replaces."""

    def __init__(self, ctx: RewriteContext, like: HloInstruction):
        self.ctx, self.like = ctx, like

    def op(self, opcode, *operands, shape=None, **attrs):
        return self.ctx.add(opcode, list(operands), shape or operands[0].shape, attrs, like=self.like)

    def splat(self, value, shape: ArrayShape):
        c = self.ctx.constant(value, ArrayShape(shape.dtype, ()), like=self.like)
        return c if shape.rank == 0 else self.op("broadcast", c, shape=shape, dimensions=())

    def along(self, vector, shape: ArrayShape, feature: int):
        """A per-feature vector broadcast over `shape`."""
        return self.op("broadcast", vector, shape=shape, dimensions=(feature,))

    def sum_except(self, x, feature: int, module: HloModule):
        """Sum over every dimension but `feature`."""
        dims = tuple(d for d in range(x.shape.rank) if d != feature)
        adder = scalar_computation("add", x.shape.dtype, module.fresh_name("add_reducer"))
        module.computations.insert(0, adder)
        zero = self.ctx.constant(0, ArrayShape(x.shape.dtype, ()), like=self.like)
        return self.op("reduce", x, zero, shape=ArrayShape(x.shape.dtype, (x.shape.dims[feature],)),
                       dimensions=dims, to_apply=adder)


def _inv_std(e: _Emit, var, eps: float):
    return e.op("rsqrt", e.op("add", var, e.splat(eps, var.shape)))


@BATCH_NORM_RULES.rule("batch-norm-inference")
def expand_inference(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, scale, offset, mean, var = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    factor = e.op("multiply", scale, _inv_std(e, var, eps))
    centered = e.op("subtract", x, e.along(mean, x.array_shape, f))
    return e.op("add", e.op("multiply", centered, e.along(factor, x.array_shape, f)), e.along(offset, x.array_shape, f))


def _mean(e: _Emit, x, f: int):
    n = x.shape.size // x.shape.dims[f] if x.shape.size else 1
    total = e.sum_except(x, f, e.ctx.module)
    return e.op("divide", total, e.splat(float(n), total.shape)), n


@BATCH_NORM_RULES.rule("batch-norm-training")
def expand_training(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, scale, offset = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    mean, _ = _mean(e, x, f)
    centered = e.op("subtract", x, e.along(mean, x.array_shape, f))
    var, _ = _mean(e, e.op("multiply", centered, centered), f)
    factor = e.op("multiply", scale, _inv_std(e, var, eps))
    out = e.op("add", e.op("multiply", centered, e.along(factor, x.array_shape, f)), e.along(offset, x.array_shape, f))
    return e.op("tuple", out, mean, var, shape=instr.shape)


@BATCH_NORM_RULES.rule("batch-norm-grad")
def expand_grad(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, scale, mean, var, dy = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    n = x.array_shape.size // x.array_shape.dims[f] if x.array_shape.size else 1
    inv_std = _inv_std(e, var, eps)
    centered = e.op("subtract", x, e.along(mean, x.array_shape, f))
    normalized = e.op("multiply", centered, e.along(inv_std, x.array_shape, f))
    grad_offset = e.sum_except(dy, f, ctx.module)
    grad_scale = e.sum_except(e.op("multiply", dy, normalized), f, ctx.module)
    # grad_x = scale * inv_std / n * (n * dy - grad_offset - normalized * grad_scale)
    inner = e.op("subtract",
                 e.op("subtract", e.op("multiply", dy, e.splat(float(n), x.array_shape)),
                      e.along(grad_offset, x.array_shape, f)),
                 e.op("multiply", normalized, e.along(grad_scale, x.array_shape, f)))
    coeff = e.op("divide", e.op("multiply", scale, inv_std), e.splat(float(n), scale.array_shape))
    grad_x = e.op("multiply", e.along(coeff, x.array_shape, f), inner)
    return e.op("tuple", grad_x, grad_scale, grad_offset, shape=instr.shape)


@LOGISTIC_RULES.rule("logistic")
def expand_logistic(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    e = _Emit(ctx, instr)
    one = e.splat(1.0, x.array_shape)
    return e.op("divide", one, e.op("add", one, e.op("exponential", e.op("negate", x))))


RNG_RULES = RuleTable("rng-bit-generator-expander")


@RNG_RULES.rule("rng-bit-generator")
def expand_philox(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    if instr.attrs.get("algorithm", "rng_default") not in ("rng_default", "rng_philox"):
        return None
    (state,) = instr.operands
    bits_shape = cast(ArrayShape, instr.tuple_shape.elements[1])   # (new state, bits)
    width = bits_shape.dtype.bits
    if width not in (32, 64):
        return None
    e = _Emit(ctx, instr)
    scalar_u64, scalar_u32 = ArrayShape(U64, ()), ArrayShape(U32, ())

    def element(i):
        one = e.op("slice", state, shape=ArrayShape(U64, (1,)), slice=(SliceDim(i, i + 1, 1),))
        return e.op("reshape", one, shape=scalar_u64)

    def const(value, t):
        return ctx.constant(value, ArrayShape(t, ()), like=instr)

    def low_high(x, shape_u32):   # (low, high) u32 words of u64 values
        shift = e.op("broadcast", const(32, U64), shape=x.shape, dimensions=()) if x.shape.rank else const(32, U64)
        return (e.op("convert", x, shape=shape_u32),
                e.op("convert", e.op("shift-right-logical", x, shift), shape=shape_u32))

    n_state = state.array_shape.dims[0]
    key, low = element(0), element(1)
    high = element(2) if n_state >= 3 else key   # a u64[2] state read backwards is the counter
    count = bits_shape.size
    blocks = max(1, -(-count * (width // 32) // 4))
    vec64, vec32 = ArrayShape(U64, (blocks,)), ArrayShape(U32, (blocks,))
    lows = e.op("add", e.op("broadcast", low, shape=vec64, dimensions=()),
                e.op("iota", shape=vec64, iota_dimension=0))
    wrapped = e.op("compare", lows, e.op("broadcast", low, shape=vec64, dimensions=()),
                   shape=ArrayShape(PRED, (blocks,)), direction="LT")
    high_next = e.op("add", high, const(1, U64))
    highs = e.op("select", wrapped, e.op("broadcast", high_next, shape=vec64, dimensions=()),
                 e.op("broadcast", high, shape=vec64, dimensions=()), shape=vec64)
    c0, c1 = low_high(lows, vec32)
    c2, c3 = low_high(highs, vec32)
    k0, k1 = low_high(key, scalar_u32)
    m0, m1 = (e.op("broadcast", const(m, U64), shape=vec64, dimensions=()) for m in PHILOX_MULTIPLIERS)
    for round_ in range(10):
        hi0, lo0 = low_high(e.op("multiply", e.op("convert", c0, shape=vec64), m0), vec32)[::-1]
        hi1, lo1 = low_high(e.op("multiply", e.op("convert", c2, shape=vec64), m1), vec32)[::-1]
        kr0 = e.op("add", k0, const((round_ * PHILOX_WEYL[0]) & 0xFFFFFFFF, U32))
        kr1 = e.op("add", k1, const((round_ * PHILOX_WEYL[1]) & 0xFFFFFFFF, U32))
        c0, c1, c2, c3 = (e.op("xor", e.op("xor", hi1, c1), e.op("broadcast", kr0, shape=vec32, dimensions=())),
                          lo1,
                          e.op("xor", e.op("xor", hi0, c3), e.op("broadcast", kr1, shape=vec32, dimensions=())),
                          lo0)
    words = [c0, c1, c2, c3]
    word_t = U32
    if width == 64:   # (w0 | w1 << 32), (w2 | w3 << 32)
        shift = e.op("broadcast", const(32, U64), shape=vec64, dimensions=())
        join = [e.op("or", e.op("convert", lo, shape=vec64),
                     e.op("shift-left", e.op("convert", hi, shape=vec64), shift)) for lo, hi in ((c0, c1), (c2, c3))]
        words, word_t = join, U64
    column = ArrayShape(word_t, (blocks, 1))
    stacked = e.op("concatenate", *[e.op("reshape", w, shape=column) for w in words],
                   shape=ArrayShape(word_t, (blocks, len(words))), dimensions=(1,))
    flat = e.op("reshape", stacked, shape=ArrayShape(word_t, (blocks * len(words),)))
    taken = e.op("slice", flat, shape=ArrayShape(word_t, (count,)), slice=(SliceDim(0, count, 1),))
    bits = e.op("reshape", taken, shape=ArrayShape(word_t, bits_shape.dims))
    if bits_shape.dtype != word_t:
        bits = e.op("bitcast-convert", bits, shape=ArrayShape(bits_shape.dtype, bits_shape.dims))
    new_low = e.op("add", low, const(blocks, U64))
    parts = [key, new_low]
    if n_state >= 3:
        carried = e.op("convert", e.op("compare", new_low, low, shape=ArrayShape(PRED, ()), direction="LT"),
                       shape=scalar_u64)
        parts.append(e.op("add", high, carried))
    one = ArrayShape(U64, (1,))
    new_state = e.op("concatenate", *[e.op("reshape", p_, shape=one) for p_ in parts],
                     shape=ArrayShape(U64, (n_state,)), dimensions=(0,))
    return e.op("tuple", new_state, bits, shape=instr.shape)


@hlo_pass("rng-bit-generator-expander")
def rng_bit_generator_expander(module: HloModule) -> bool:
    """Rewrite Philox rng-bit-generator into integer ops for backends without a generator."""
    return apply_rules(module, RNG_RULES)


@hlo_pass("batch-norm-expander")
def batch_norm_expander(module: HloModule) -> bool:
    """Rewrite batch-norm-inference/-training/-grad into elementwise ops and reductions."""
    changed = apply_rules(module, BATCH_NORM_RULES)
    if changed:
        module.uniquify_names()
    return changed


@hlo_pass("logistic-expander")
def logistic_expander(module: HloModule) -> bool:
    """Rewrite logistic(x) as 1 / (1 + exp(-x)) for backends without a logistic kernel."""
    return apply_rules(module, LOGISTIC_RULES)
