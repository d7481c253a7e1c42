"""Expansions: an opcode defined as a small graph of other opcodes, as XLA's expanders do.

An op record may hold `extra["expand"] = fn(instr, emit) -> HloInstruction`: the value of
`instr` built from its operands with `emit`, out of opcodes every backend runs. The evaluator
runs such an opcode by evaluating its expansion (evaluate_expanded), and a backend that does
not emit the opcode itself replaces it by its expansion (expand_instructions), so both see
one definition, e.g. stochastic-convert as XLA's StochasticConvertDecomposer writes it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .computation import HloComputation
from .instruction import HloInstruction
from .shape import ArrayShape, Shape


class Emitter:
    """Adds the instructions of an expansion next to the instruction it replaces."""

    def __init__(self, comp: HloComputation, like: HloInstruction, fresh_name: Callable[[str], str]):
        self.comp, self.like, self.fresh_name = comp, like, fresh_name

    def op(self, opcode: str, *operands: HloInstruction, shape: Shape, **attrs: Any) -> HloInstruction:
        if "metadata" in self.like.attrs:   # errors in the expansion still point at the source
            attrs.setdefault("metadata", self.like.attrs["metadata"])
        return self.comp.add_instruction(HloInstruction(self.fresh_name(opcode), opcode, shape, operands, attrs))

    def constant(self, value: Any, like: ArrayShape) -> HloInstruction:
        """`value` in every element of an array of `like`'s type and dimensions."""
        scalar = ArrayShape(like.dtype, ())
        literal = np.asarray(value).astype(like.dtype.np_dtype).reshape(())
        c = self.comp.add_instruction(HloInstruction(self.fresh_name("constant"), "constant", scalar,
                                                     literal=literal))
        return c if like.rank == 0 else self.op("broadcast", c, shape=like.without_layout(), dimensions=())

    def unary(self, opcode: str, x: HloInstruction, dtype=None) -> HloInstruction:
        shape = x.array_shape if dtype is None else x.array_shape.with_dtype(dtype)
        return self.op(opcode, x, shape=shape)

    def binary(self, opcode: str, a: HloInstruction, b: HloInstruction) -> HloInstruction:
        return self.op(opcode, a, b, shape=a.array_shape)

    def compare(self, direction: str, a: HloInstruction, b: HloInstruction) -> HloInstruction:
        from .types import PRED
        return self.op("compare", a, b, shape=a.array_shape.with_dtype(PRED), direction=direction)

    def select(self, p: HloInstruction, a: HloInstruction, b: HloInstruction) -> HloInstruction:
        return self.op("select", p, a, b, shape=a.array_shape)


def expansion_rule(opcode: str):
    from .ops import op_def
    return op_def(opcode).extra.get("expand")


def evaluate_expanded(instr: HloInstruction, operands: Sequence[Any], ctx: Any) -> Any:
    """The value of `instr`, by evaluating its expansion on `operands`."""
    comp = HloComputation(f"{instr.name}.expanded")
    counter = iter(range(1 << 62))
    params = [comp.add_instruction(HloInstruction(f"p{i}", "parameter", op.shape, parameter_number=i))
              for i, op in enumerate(instr.operands)]
    twin = HloInstruction(instr.name, instr.opcode, instr.shape, params, dict(instr.attrs))
    emit = Emitter(comp, twin, lambda base: f"{base}.{next(counter)}")
    comp.root = expansion_rule(instr.opcode)(twin, emit)
    return ctx.call(comp, list(operands))


def expand_instructions(computations: Sequence[HloComputation], fresh_name: Callable[[str], str],
                        keep: Callable[[HloInstruction], bool] = lambda instr: False) -> bool:
    """Replace every instruction that has an expansion (and that `keep` does not keep) by it;
    whether any was."""
    changed = False
    for comp in computations:
        for instr in list(comp.instructions):
            rule = expansion_rule(instr.opcode)
            if rule is None or keep(instr):
                continue
            replacement = rule(instr, Emitter(comp, instr, fresh_name))
            comp.replace_instruction(instr, replacement)
            if instr.parent is comp and not instr.users and instr is not comp.root:
                comp.remove_instruction(instr)
            changed = True
        if changed:
            comp.sort_topologically()
    return changed
