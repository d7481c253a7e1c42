"""Call inlining: replace each `call` by a copy of the computation it calls."""
from __future__ import annotations

from typing import cast

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from .hlo_pass import hlo_pass


def inline_computation(module: HloModule, caller: HloComputation, callee: HloComputation,
                       operands: list[HloInstruction]) -> HloInstruction:
    """Copy `callee` into `caller` applied to `operands`; returns the copy of the callee's ROOT."""
    mapping: dict[int, HloInstruction] = {}
    for instr in callee.post_order():
        if instr.opcode == "parameter":
            mapping[id(instr)] = operands[cast(int, instr.parameter_number)]
            continue
        copy = HloInstruction(module.fresh_name(instr.name), instr.opcode, instr.shape,
                              [mapping[id(o)] for o in instr.operands], dict(instr.attrs),
                              literal=instr.literal, parameter_number=instr.parameter_number)
        copy.attrs.pop("control-predecessors", None)
        caller.add_instruction(copy)
        mapping[id(instr)] = copy
    return mapping[id(callee.root)]


@hlo_pass("call-inliner")
def call_inliner(module: HloModule) -> bool:
    """Inline every `call` instruction (JAX's nested jits) into its caller."""
    changed = False
    for comp in module.reachable_computations():   # callees first: their calls are gone when copied
        calls = [i for i in comp.post_order() if i.opcode == "call"]
        for call in calls:
            comp.replace_instruction(call, inline_computation(module, comp, call.attrs["to_apply"], call.operands))
        if calls:
            comp.sort_topologically()
            changed = True
    if changed:
        module.computations = module.reachable_computations()
    return changed
