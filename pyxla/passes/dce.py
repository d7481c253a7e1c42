"""Dead code elimination: drop instructions nothing needs, and computations nothing calls."""
from __future__ import annotations

from ..hlo.computation import HloComputation
from ..hlo.module import HloModule
from ..hlo.ops import has_side_effects
from .hlo_pass import hlo_pass


def remove_dead_instructions(comp: HloComputation) -> bool:
    """Drop instructions of `comp` that do not reach ROOT and have no side effects."""
    live: set[int] = set()
    assert comp.root is not None, f"computation {comp.name} has no ROOT"
    stack = [comp.root] + [i for i in comp.instructions if has_side_effects(i) or i.opcode == "parameter"]
    while stack:
        instr = stack.pop()
        if id(instr) in live:
            continue
        live.add(id(instr))
        stack.extend(instr.operands)
    dead = [i for i in comp.instructions if id(i) not in live]
    for instr in dead:
        for op in instr.operands:
            if instr in op.users:
                op.users.remove(instr)
        instr.users.clear()
        instr.parent = None
    if dead:
        comp.instructions = [i for i in comp.instructions if id(i) in live]
    return bool(dead)


@hlo_pass("dce")
def dead_code_elimination(module: HloModule) -> bool:
    """Remove instructions that do not reach ROOT and have no side effects; remove uncalled computations."""
    changed = False
    for comp in module.computations:
        changed |= remove_dead_instructions(comp)
    reachable = {id(c) for c in module.reachable_computations()}
    kept = [c for c in module.computations if id(c) in reachable]
    if len(kept) != len(module.computations):
        module.computations = kept
        changed = True
    return changed
