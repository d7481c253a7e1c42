"""The mechanics of fusion: wrap an instruction in a `fusion`, pull a producer into one.

A fusion instruction has one operand per distinct input buffer and calls a fused
computation whose parameters receive them, in operand order.
"""
from __future__ import annotations

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..passes.call_inliner import inline_computation


def fusion_kind(comp: HloComputation) -> str:
    """XLA's name for what the kernel is built around: a reduction (kInput), a dot or
    convolution with an epilogue (kOutput), or elementwise loops (kLoop)."""
    opcodes = {i.opcode for i in comp.instructions}
    if opcodes & {"dot", "convolution"}:
        return "kOutput"
    if "reduce" in opcodes:
        return "kInput"
    return "kLoop"


def _clone_into(module: HloModule, comp: HloComputation, instr: HloInstruction,
                operands: list[HloInstruction]) -> HloInstruction:
    clone = HloInstruction(module.fresh_name(instr.opcode), instr.opcode, instr.shape, operands,
                           {k: v for k, v in instr.attrs.items() if k != "control-predecessors"},
                           literal=instr.literal)
    return comp.add_instruction(clone)


def make_fusion(module: HloModule, instr: HloInstruction) -> HloInstruction:
    """Replace `instr` by a fusion instruction that computes just it."""
    parent = instr.parent
    comp = HloComputation(module.fresh_name("fused_computation"))
    comp.is_fusion_computation = True
    distinct: list[HloInstruction] = []
    for op in instr.operands:
        if op not in distinct:
            distinct.append(op)
    params = [comp.add_instruction(HloInstruction(module.fresh_name("param"), "parameter", op.shape,
                                                  parameter_number=i)) for i, op in enumerate(distinct)]
    comp.root = _clone_into(module, comp, instr, [params[distinct.index(op)] for op in instr.operands])
    fusion = HloInstruction(module.fresh_name("fusion"), "fusion", instr.shape, distinct,
                            {"kind": fusion_kind(comp), "calls": comp})
    if "metadata" in instr.attrs:
        fusion.attrs["metadata"] = instr.attrs["metadata"]
    parent.add_instruction(fusion)
    parent.replace_instruction(instr, fusion)
    module.computations.insert(module.computations.index(parent), comp)
    return fusion


def fuse_producer(module: HloModule, fusion: HloInstruction, producer: HloInstruction) -> None:
    """Compute `producer` inside `fusion` instead of reading it; its operands become inputs.

    When the producer has other users it stays where it is for them (it is duplicated).
    """
    comp: HloComputation = fusion.attrs["calls"]
    parent: HloComputation = fusion.parent
    index = fusion.operands.index(producer)
    param = next(p for p in comp.parameters if p.parameter_number == index)
    operand_params = []
    for op in producer.operands:
        if op in fusion.operands:
            number = fusion.operands.index(op)
            operand_params.append(next(p for p in comp.parameters if p.parameter_number == number))
        else:
            number = len(fusion.operands)
            fusion.operands.append(op)
            op.users.append(fusion)
            operand_params.append(comp.add_instruction(
                HloInstruction(module.fresh_name("param"), "parameter", op.shape, parameter_number=number)))
    if producer.opcode == "fusion":   # merge the producer's kernel into this one
        clone = inline_computation(module, comp, producer.attrs["calls"], operand_params)
    else:
        clone = _clone_into(module, comp, producer, operand_params)
    comp.replace_all_uses(param, clone)
    comp.remove_instruction(param)
    _drop_operand(fusion, index)
    comp.sort_topologically()
    fusion.attrs["kind"] = fusion_kind(comp)
    if not producer.users and producer is not parent.root:
        parent.remove_instruction(producer)
        if producer.opcode == "fusion":
            module.computations.remove(producer.attrs["calls"])


def _drop_operand(fusion: HloInstruction, index: int) -> None:
    """Remove operand `index` of a fusion and renumber the parameters after it."""
    removed = fusion.operands.pop(index)
    if removed not in fusion.operands and fusion in removed.users:
        removed.users.remove(fusion)
    for p in fusion.attrs["calls"].instructions:
        if p.opcode == "parameter" and p.parameter_number > index:
            p.parameter_number -= 1
