"""Reshape and transpose mover: sink reshapes and transposes below elementwise ops.

op(reshape(a), reshape(b)) == reshape(op(a, b)) when a and b have the same shape, and
likewise for transposes with the same permutation; a splat operand (a broadcast scalar)
fits any shape. Moving the movement toward the outputs lets it meet another reshape or
transpose and cancel (the algebraic simplifier folds the pairs), and leaves the
elementwise work on the operands' own layout.
"""
from __future__ import annotations

from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from .algebraic_simplifier import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

RULES = RuleTable("reshape-mover")
MOVABLE = ("reshape", "transpose")


def _is_splat(instr: HloInstruction) -> bool:
    return instr.opcode == "broadcast" and instr.operands[0].array_shape.rank == 0


def _same_movement(a: HloInstruction, b: HloInstruction) -> bool:
    if a.opcode != b.opcode or a.operands[0].array_shape.dims != b.operands[0].array_shape.dims:
        return False
    return a.opcode == "reshape" or a.attrs["dimensions"] == b.attrs["dimensions"]


@RULES.rule(*UNARY_ELEMENTWISE, *BINARY_ELEMENTWISE, "select", "clamp")
def sink_movement(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    movers = [o for o in instr.operands if o.opcode in MOVABLE]
    if not movers:
        return None
    first = movers[0]
    if any(not _same_movement(first, m) for m in movers[1:]):
        return None
    for i, o in enumerate(instr.operands):
        clamp_bound = instr.opcode == "clamp" and i != 1 and o.array_shape.rank == 0
        if o.opcode not in MOVABLE and not _is_splat(o) and not clamp_bound:
            return None
    if any(len(m.users) > 1 for m in movers):
        return None   # the movement is needed anyway: moving it would duplicate work
    inner_dims = first.operands[0].array_shape.dims
    operands = []
    for o in instr.operands:
        if o.opcode in MOVABLE:
            operands.append(o.operands[0])
        elif not _is_splat(o):
            operands.append(o)   # clamp's scalar bounds
        else:
            operands.append(ctx.add("broadcast", [o.operands[0]], ArrayShape(o.array_shape.dtype, inner_dims),
                                    {"dimensions": ()}, like=o))
    inner = ctx.add(instr.opcode, operands, ArrayShape(instr.array_shape.dtype, inner_dims),
                    dict(instr.semantic_attrs()), like=instr)
    attrs = {"dimensions": first.attrs["dimensions"]} if first.opcode == "transpose" else {}
    return ctx.add(first.opcode, [inner], instr.shape, attrs, like=instr)


@hlo_pass("reshape-mover")
def reshape_mover(module: HloModule) -> bool:
    """Move reshapes and transposes below elementwise ops, toward the outputs."""
    return apply_rules(module, RULES)
