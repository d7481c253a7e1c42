"""Tuple simplification: get-tuple-element(tuple(a, b, ...)), i) is the element itself, and
tuple(get-tuple-element(t, 0), ..., get-tuple-element(t, n-1)) is t."""
from __future__ import annotations

from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import TupleShape
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

RULES = RuleTable("tuple")


@RULES.rule("get-tuple-element")
def element_of_tuple(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (operand,) = instr.operands
    if operand.opcode == "tuple":
        return operand.operands[instr.attrs["index"]]
    return None


@RULES.rule("tuple")
def tuple_of_all_elements(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    ops = instr.operands
    if not ops or any(o.opcode != "get-tuple-element" for o in ops):
        return None
    source = ops[0].operands[0]
    if all(o.operands[0] is source and o.attrs["index"] == i for i, o in enumerate(ops)) \
            and isinstance(source.shape, TupleShape) and len(source.shape.elements) == len(ops):
        return source
    return None


@hlo_pass("tuple-simplifier")
def tuple_simplifier(module: HloModule) -> bool:
    """Fold get-tuple-element of tuple and tuple of all get-tuple-elements."""
    return apply_rules(module, RULES)
