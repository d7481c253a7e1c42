"""Expanders: rewrite composite ops into basic ones that every backend emits.

- batch-norm-inference / -training / -grad become broadcasts, elementwise arithmetic and
  add-reductions (always: no backend emits them directly).
- logistic becomes 1 / (1 + exp(-x)), for a backend that asks for it.

rng-bit-generator expansion (Philox as integer ops) is not written yet: a backend that
cannot run rng-bit-generator must refuse it.
"""
from __future__ import annotations

from ..hlo.builder import scalar_computation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape, TupleShape
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
def expand_inference(instr, ctx):
    x, scale, offset, mean, var = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    factor = e.op("multiply", scale, _inv_std(e, var, eps))
    centered = e.op("subtract", x, e.along(mean, x.shape, f))
    return e.op("add", e.op("multiply", centered, e.along(factor, x.shape, f)), e.along(offset, x.shape, f))


def _mean(e: _Emit, x, f: int):
    n = x.shape.size // x.shape.dims[f] if x.shape.size else 1
    total = e.sum_except(x, f, e.ctx.module)
    return e.op("divide", total, e.splat(float(n), total.shape)), n


@BATCH_NORM_RULES.rule("batch-norm-training")
def expand_training(instr, ctx):
    x, scale, offset = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    mean, _ = _mean(e, x, f)
    centered = e.op("subtract", x, e.along(mean, x.shape, f))
    var, _ = _mean(e, e.op("multiply", centered, centered), f)
    factor = e.op("multiply", scale, _inv_std(e, var, eps))
    out = e.op("add", e.op("multiply", centered, e.along(factor, x.shape, f)), e.along(offset, x.shape, f))
    return e.op("tuple", out, mean, var, shape=instr.shape)


@BATCH_NORM_RULES.rule("batch-norm-grad")
def expand_grad(instr, ctx):
    x, scale, mean, var, dy = instr.operands
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    e = _Emit(ctx, instr)
    n = x.shape.size // x.shape.dims[f] if x.shape.size else 1
    inv_std = _inv_std(e, var, eps)
    centered = e.op("subtract", x, e.along(mean, x.shape, f))
    normalized = e.op("multiply", centered, e.along(inv_std, x.shape, f))
    grad_offset = e.sum_except(dy, f, ctx.module)
    grad_scale = e.sum_except(e.op("multiply", dy, normalized), f, ctx.module)
    # grad_x = scale * inv_std / n * (n * dy - grad_offset - normalized * grad_scale)
    inner = e.op("subtract",
                 e.op("subtract", e.op("multiply", dy, e.splat(float(n), x.shape)), e.along(grad_offset, x.shape, f)),
                 e.op("multiply", normalized, e.along(grad_scale, x.shape, f)))
    coeff = e.op("divide", e.op("multiply", scale, inv_std), e.splat(float(n), scale.shape))
    grad_x = e.op("multiply", e.along(coeff, x.shape, f), inner)
    return e.op("tuple", grad_x, grad_scale, grad_offset, shape=instr.shape)


@LOGISTIC_RULES.rule("logistic")
def expand_logistic(instr, ctx):
    (x,) = instr.operands
    e = _Emit(ctx, instr)
    one = e.splat(1.0, x.shape)
    return e.op("divide", one, e.op("add", one, e.op("exponential", e.op("negate", x))))


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
