"""Common subexpression elimination.

Two instructions are the same value when they have the same opcode, shape, operands,
semantic attributes (metadata ignored), called computations and, for constants, the same
literal bits. Side-effecting and random ops are never merged.
"""
from __future__ import annotations

from ..hlo.module import HloModule
from .dce import _has_side_effects
from .hlo_pass import hlo_pass


def _attr_key(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if hasattr(value, "instructions"):   # a computation: identity, not structure
        return ("computation", id(value))
    return value


def _key(instr):
    if instr.opcode == "constant":
        lit = instr.literal
        literal = (lit.dtype.str, lit.shape, lit.tobytes()) if not isinstance(lit, tuple) else \
            tuple((x.dtype.str, x.shape, x.tobytes()) for x in lit)
    else:
        literal = None
    return (instr.opcode, instr.shape, tuple(id(o) for o in instr.operands),
            _attr_key(instr.semantic_attrs()), literal)


@hlo_pass("cse")
def common_subexpression_elimination(module: HloModule) -> bool:
    """Replace each instruction that repeats an earlier identical one by that one."""
    changed = False
    for comp in module.computations:
        seen = {}
        for instr in comp.post_order():
            if instr.opcode in ("parameter", "rng-bit-generator", "rng") or _has_side_effects(instr):
                continue
            key = _key(instr)
            first = seen.get(key)
            if first is None:
                seen[key] = instr
            elif first is not instr:
                comp.replace_instruction(instr, first)
                changed = True
    return changed
