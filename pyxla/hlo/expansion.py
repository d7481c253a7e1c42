"""Expansions: an opcode defined as a small graph of other opcodes, as XLA's expanders do.

An op record may hold `extra["expand"] = fn(instr, emit) -> HloInstruction`: the value of
`instr` built from its operands with `emit`, out of opcodes every backend runs. The evaluator
runs such an opcode by evaluating its expansion (evaluate_expanded), and a backend that does
not emit the opcode itself replaces it by its expansion (expand_instructions), so both see
one definition, e.g. stochastic-convert as XLA's StochasticConvertDecomposer writes it.

An expansion may loop (Emitter.for_loop, XLA's ForEachIndex): a while over a tuple of
(s32 index, values), its condition and body new computations, which a backend files in its
module before the computation being expanded (callees before callers).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .computation import HloComputation
from .instruction import HloInstruction
from .shape import ArrayShape, Shape, TupleShape
from .types import PRED, S32

# An expansion's new computations (loop bodies and conditions) go to this callback.
AddComputation = Callable[[HloComputation], None]
LoopBody = Callable[["Emitter", HloInstruction, list[HloInstruction]], Sequence[HloInstruction]]


class Emitter:
    """Adds the instructions of an expansion next to the instruction it replaces."""

    def __init__(self, comp: HloComputation, like: HloInstruction, fresh_name: Callable[[str], str],
                 add_computation: AddComputation | None = None):
        self.comp, self.like, self.fresh_name = comp, like, fresh_name
        self.add_computation: AddComputation = add_computation or (lambda comp: None)

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

    def for_loop(self, count: int, state: Sequence[HloInstruction], body: LoopBody) -> list[HloInstruction]:
        """XLA's ForEachIndex: `state` threaded through body(emit, i, values) for the s32
        index i = 0 .. count-1, as a while loop; the final values."""
        index = ArrayShape(S32, ())
        loop_shape = TupleShape((index, *(v.shape.without_layout() for v in state)))

        def computation(kind: str) -> tuple[HloComputation, Emitter, list[HloInstruction]]:
            comp = HloComputation(self.fresh_name(f"{self.like.opcode}.{kind}"))
            param = comp.add_instruction(HloInstruction(self.fresh_name("param"), "parameter", loop_shape,
                                                        parameter_number=0))
            emit = Emitter(comp, self.like, self.fresh_name, self.add_computation)
            return comp, emit, [emit.op("get-tuple-element", param, shape=s, index=k)
                                for k, s in enumerate(loop_shape.elements)]

        cond, cond_emit, (i, *_) = computation("condition")
        cond.root = cond_emit.op("compare", i, cond_emit.constant(count, index), shape=ArrayShape(PRED, ()),
                                 direction="LT")
        loop, loop_emit, (i, *values) = computation("body")
        results = list(body(loop_emit, i, values))
        step = loop_emit.binary("add", i, loop_emit.constant(1, index))
        loop.root = loop_emit.op("tuple", step, *results, shape=loop_shape)
        self.add_computation(cond)
        self.add_computation(loop)
        start = self.op("tuple", self.constant(0, index), *state, shape=loop_shape)
        done = self.op("while", start, shape=loop_shape, condition=cond, body=loop)
        return [self.op("get-tuple-element", done, shape=s, index=k + 1)
                for k, s in enumerate(loop_shape.elements[1:])]


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
                        keep: Callable[[HloInstruction], bool] = lambda instr: False,
                        add_computation: Callable[[HloComputation, HloComputation], None] | None = None) -> bool:
    """Replace every instruction that has an expansion (and that `keep` does not keep) by it;
    whether any was. The expansions' new computations go to add_computation(new, caller),
    which must file them before `caller` (an expansion that loops needs it)."""
    changed = False
    for comp in list(computations):
        for instr in list(comp.instructions):
            rule = expansion_rule(instr.opcode)
            if rule is None or keep(instr):
                continue

            def add(new: HloComputation, caller: HloComputation = comp, opcode: str = instr.opcode) -> None:
                if add_computation is None:
                    raise NotImplementedError(f"{opcode}'s expansion loops: its caller must take "
                                              "new computations")
                add_computation(new, caller)
            replacement = rule(instr, Emitter(comp, instr, fresh_name, add))
            comp.replace_instruction(instr, replacement)
            if instr.parent is comp and not instr.users and instr is not comp.root:
                comp.remove_instruction(instr)
            changed = True
        if changed:
            comp.sort_topologically()
    return changed
