"""Sibling (multi-output) fusion: reductions that read the same input over the same rows
become one kernel with several outputs, so the input is read from memory once.

Two candidates merge when they are reduce fusions (or plain reduces) in the same
computation, share an operand, reduce operands of the same dimensions over the same
dimensions, and neither depends on the other. The merged fusion returns a tuple; each
former result is a get-tuple-element of it.
"""
from __future__ import annotations

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import TupleShape
from ..passes.call_inliner import inline_computation
from ..passes.hlo_pass import HloPass
from .fusion_builder import make_fusion, prepare_fusions


def _reduce_signature(instr: HloInstruction) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(operand dims, reduced dims) of the reduction(s) an instruction ends in, or None."""
    if instr.opcode == "reduce" and len(instr.operands) == 2:
        return instr.operands[0].array_shape.dims, tuple(sorted(instr.attrs["dimensions"]))
    if instr.opcode == "fusion" and instr.attrs.get("kind") == "kInput":
        sigs = {_reduce_signature(r) for r in instr.attrs["calls"].root.outputs}
        if len(sigs) == 1 and None not in sigs:
            return sigs.pop()
    return None


def _depends_on(a: HloInstruction, b: HloInstruction) -> bool:
    """Whether `a` reads `b`, directly or through other instructions."""
    stack, seen = list(a.operands), set()
    while stack:
        x = stack.pop()
        if x is b:
            return True
        if id(x) not in seen:
            seen.add(id(x))
            stack.extend(x.operands)
    return False


def _outputs(fusion: HloInstruction) -> list[HloInstruction]:
    return fusion.attrs["calls"].root.outputs


def merge_siblings(module: HloModule, a: HloInstruction, b: HloInstruction) -> HloInstruction:
    """One fusion computing the outputs of fusions `a` and `b`."""
    comp = a.parent
    assert comp is not None, f"{a.describe()} is in no computation"
    operands: list[HloInstruction] = list(dict.fromkeys(a.operands + b.operands))
    fused = HloComputation(module.fresh_name("fused_computation"))
    fused.is_fusion_computation = True
    params = [fused.add_instruction(HloInstruction(module.fresh_name("param"), "parameter", op.shape,
                                                   parameter_number=i)) for i, op in enumerate(operands)]
    roots = []
    for f in (a, b):
        bound = [params[operands.index(op)] for op in f.operands]
        root = inline_computation(module, fused, f.attrs["calls"], bound)
        roots.extend(root.outputs)
    shape = TupleShape(tuple(r.shape for r in roots))
    fused.root = fused.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", shape, roots))
    merged = comp.add_instruction(HloInstruction(module.fresh_name("fusion"), "fusion", shape, operands,
                                                 {"kind": "kInput", "calls": fused}))
    index = 0
    for f in (a, b):
        n = len(_outputs(f))
        if n == 1:
            element = comp.add_instruction(HloInstruction(module.fresh_name("get-tuple-element"), "get-tuple-element",
                                                          f.shape, [merged], {"index": index}))
            comp.replace_instruction(f, element)
        else:   # f was already multi-output: renumber its readers
            for user in list(f.users):
                user.attrs["index"] += index
                user.replace_operand(f, merged)
            comp.remove_instruction(f)
        module.computations.remove(f.attrs["calls"])
        index += n
    module.computations.insert(module.computations.index(comp), fused)
    comp.sort_topologically()
    return merged


def _run(module: HloModule) -> bool:
    changed = prepare_fusions(module)      # merging removes the siblings' computations
    for comp in list(module.computations):
        if comp.is_fusion_computation:
            continue
        merged_any = True
        while merged_any:
            merged_any = False
            candidates = [i for i in comp.post_order() if _reduce_signature(i) is not None]
            for i, a in enumerate(candidates):
                for b in candidates[i + 1:]:
                    if (_reduce_signature(a) == _reduce_signature(b) and set(a.operands) & set(b.operands)
                            and not _depends_on(a, b) and not _depends_on(b, a)):
                        a = a if a.opcode == "fusion" else make_fusion(module, a)
                        b = b if b.opcode == "fusion" else make_fusion(module, b)
                        merge_siblings(module, a, b)
                        merged_any = changed = True
                        break
                if merged_any:
                    break
    return changed


multi_output_fusion = HloPass("multi-output-fusion", _run,
                              "Merge sibling reductions over the same input into one multi-output kernel.")
