"""Common subexpression elimination.

Two instructions are the same value when they have the same opcode, shape, operands,
semantic attributes (metadata ignored), called computations and, for constants, the same
literal bits. Side-effecting and random ops are never merged.
"""
from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import has_side_effects
from .hlo_pass import hlo_pass


def _literal_key(instr):
    lit = instr.literal
    if lit is None:
        return None
    if isinstance(lit, tuple):
        return tuple((x.dtype.str, x.shape, x.tobytes()) for x in lit)
    return (lit.dtype.str, lit.shape, lit.tobytes())


class StructureKeys:
    """Hashable keys of instructions, with called computations compared by structure, names
    aside: JAX emits one reducer computation per reduce, and identical ones must not keep
    two reduces apart. Keys of computations are memoised for one pass run (a computation
    changed by a later pass gets a new StructureKeys)."""

    def __init__(self) -> None:
        self._computations: dict[int, tuple] = {}

    def attr(self, value: Any) -> Hashable:
        if isinstance(value, dict):
            return tuple(sorted((k, self.attr(v)) for k, v in value.items()))
        if isinstance(value, (list, tuple)):
            return tuple(self.attr(v) for v in value)
        if hasattr(value, "instructions"):
            return self.computation(value)
        return value

    def computation(self, comp: HloComputation) -> tuple:
        if id(comp) not in self._computations:
            order = comp.post_order()
            position = {id(i): n for n, i in enumerate(order)}
            self._computations[id(comp)] = tuple(
                (i.opcode, i.shape, i.parameter_number, tuple(position[id(o)] for o in i.operands),
                 self.attr(i.semantic_attrs()), _literal_key(i)) for i in order) + (position[id(comp.root)],)
        return self._computations[id(comp)]

    def instruction(self, instr: HloInstruction) -> tuple:
        return (instr.opcode, instr.shape, tuple(id(o) for o in instr.operands),
                self.attr(instr.semantic_attrs()), _literal_key(instr))


@hlo_pass("cse")
def common_subexpression_elimination(module: HloModule) -> bool:
    """Replace each instruction that repeats an earlier identical one by that one."""
    changed = False
    keys = StructureKeys()
    for comp in module.computations:
        seen: dict[tuple, HloInstruction] = {}
        for instr in comp.post_order():
            if instr.opcode in ("parameter", "rng-bit-generator", "rng") or has_side_effects(instr):
                continue
            key = keys.instruction(instr)
            first = seen.get(key)
            if first is None:
                seen[key] = instr
            elif first is not instr:
                comp.replace_instruction(instr, first)
                changed = True
    return changed
