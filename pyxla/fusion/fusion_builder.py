"""The mechanics of fusion: wrap an instruction in a `fusion`, pull a producer into one.

A fusion instruction has one operand per distinct input buffer and calls a fused
computation whose parameters receive them, in operand order.
"""
from __future__ import annotations

from typing import cast

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import TupleShape
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
    assert parent is not None, f"{instr.describe()} is in no computation"
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


def prepare_fusions(module: HloModule) -> bool:
    """Fusions a module arrives with (hand-written or XLA-dumped HLO) in the form fusion
    builds: multi-output loop fusions split, and no fused computation shared."""
    changed = split_loop_multi_output(module)
    return unshare_fused_computations(module) or changed


def split_loop_multi_output(module: HloModule) -> bool:
    """Replace each fusion whose root is a tuple of arrays and that holds no reduction (XLA's
    multi-output loop fusion) by one fusion per output: backends compile tuple roots only
    for the row kernels of multi-output reductions. An output that is a parameter is the
    fusion's operand itself."""
    changed = False
    for comp in list(module.computations):
        for fusion in [i for i in comp.instructions if i.opcode == "fusion"]:
            fused: HloComputation = fusion.attrs["calls"]
            root = fused.root
            if (root is None or root.opcode != "tuple" or any(isinstance(o.shape, TupleShape) for o in root.operands)
                    or any(i.opcode == "reduce" for i in fused.instructions)):
                continue
            parts = [_output_part(module, comp, fusion, out) for out in root.operands]
            for user in list(fusion.users):
                if user.opcode == "get-tuple-element":
                    comp.replace_instruction(user, parts[user.attrs["index"]])
            if fusion.users or fusion is comp.root:
                comp.replace_instruction(fusion, comp.add_instruction(
                    HloInstruction(module.fresh_name("tuple"), "tuple", fusion.shape, parts)))
            else:
                comp.remove_instruction(fusion)
            if not any(i.attrs.get("calls") is fused for c in module.computations for i in c.instructions):
                module.computations.remove(fused)
            comp.sort_topologically()
            changed = True
    return changed


def _output_part(module: HloModule, comp: HloComputation, fusion: HloInstruction,
                 out: HloInstruction) -> HloInstruction:
    """A fusion in `comp` computing the one output `out` of `fusion`'s computation (its
    operands are all of `fusion`'s), or the operand that `out` passes through."""
    if out.opcode == "parameter":
        return fusion.operands[cast(int, out.parameter_number)]
    fused: HloComputation = fusion.attrs["calls"]
    part = HloComputation(module.fresh_name(fused.name))
    part.is_fusion_computation = True
    needed: set[int] = set()
    stack = [out]
    while stack:
        instr = stack.pop()
        if id(instr) not in needed:
            needed.add(id(instr))
            stack.extend(instr.operands)
    mapping: dict[int, HloInstruction] = {}
    for p in fused.parameters:      # every parameter, so the part takes the fusion's operands
        mapping[id(p)] = part.add_instruction(HloInstruction(module.fresh_name(p.name), "parameter", p.shape,
                                                             parameter_number=p.parameter_number))
    for instr in fused.post_order():
        if id(instr) in needed and instr.opcode != "parameter":
            mapping[id(instr)] = _clone_into(module, part, instr, [mapping[id(o)] for o in instr.operands])
    part.root = mapping[id(out)]
    new = HloInstruction(module.fresh_name("fusion"), "fusion", out.shape, list(fusion.operands),
                         {**{k: v for k, v in fusion.attrs.items() if k != "control-predecessors"},
                          "kind": fusion_kind(part), "calls": part})
    comp.add_instruction(new)
    module.computations.insert(module.computations.index(fused), part)
    return new


def unshare_fused_computations(module: HloModule) -> bool:
    """Give every fusion instruction a fused computation of its own.

    Fusion edits a fusion's computation in place (pulling producers in, merging siblings)
    and drops it when the fusion goes; XLA never emits two fusions calling one computation,
    but hand-written HLO may, and there an edit meant for one fusion would change the
    other's kernel, or remove the computation it still calls."""
    seen: set[int] = set()
    changed = False
    for comp in list(module.computations):
        for instr in comp.instructions:
            if instr.opcode != "fusion":
                continue
            called: HloComputation = instr.attrs["calls"]
            if id(called) in seen:
                instr.attrs["calls"] = _copy_fused_computation(module, called)
                module.computations.insert(module.computations.index(called), instr.attrs["calls"])
                changed = True
            seen.add(id(called))
    return changed


def _copy_fused_computation(module: HloModule, comp: HloComputation) -> HloComputation:
    copy = HloComputation(module.fresh_name(comp.name))
    copy.is_fusion_computation = True
    params = {p.parameter_number: copy.add_instruction(HloInstruction(module.fresh_name(p.name), "parameter",
                                                                      p.shape, parameter_number=p.parameter_number))
              for p in comp.parameters}
    copy.root = inline_computation(module, copy, comp, [params[k] for k in range(len(params))])
    return copy


def fuse_producer(module: HloModule, fusion: HloInstruction, producer: HloInstruction) -> None:
    """Compute `producer` inside `fusion` instead of reading it; its operands become inputs.

    When the producer has other users it stays where it is for them (it is duplicated).
    """
    comp: HloComputation = fusion.attrs["calls"]
    parent = fusion.parent
    assert parent is not None, f"{fusion.describe()} is in no computation"
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
