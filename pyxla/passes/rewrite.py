"""The rewrite driver: runs tables of local rewrite rules over every computation.

A rule looks at one instruction and returns the instruction that should replace it (an
existing one, or a new one made with `ctx.add`), or None to leave it. Rules are filed by
opcode in a `RuleTable`:

    rules = RuleTable("algebraic")

    @rules.rule("add")
    def add_zero(instr, ctx):
        ...

The driver visits instructions operands-first and repeats a computation until no rule fires
(bounded), so rules may rely on their operands being simplified already.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape, Shape

Rule = Callable[[HloInstruction, "RewriteContext"], "HloInstruction | None"]


class RuleTable:
    def __init__(self, name: str):
        self.name = name
        self.by_opcode: dict[str, list[Rule]] = defaultdict(list)
        self.all_rules: list[Rule] = []

    def rule(self, *opcodes: str) -> Callable[[Rule], Rule]:
        def register(fn: Rule) -> Rule:
            for opcode in opcodes:
                self.by_opcode[opcode].append(fn)
            self.all_rules.append(fn)
            return fn
        return register

    def __len__(self) -> int:
        return len(self.all_rules)


class RewriteContext:
    """What a rule may do besides looking: add instructions to the computation."""

    def __init__(self, module: HloModule, computation: HloComputation):
        self.module = module
        self.computation = computation

    def add(self, opcode: str, operands: list[HloInstruction], shape: Shape, attrs: dict | None = None,
            literal: Any = None, like: HloInstruction | None = None) -> HloInstruction:
        """A new instruction; `like` lends its metadata so errors still point at the source."""
        attrs = dict(attrs or {})
        if like is not None and "metadata" in like.attrs and "metadata" not in attrs:
            attrs["metadata"] = like.attrs["metadata"]
        instr = HloInstruction(self.module.fresh_name(opcode), opcode, shape, operands, attrs, literal=literal)
        return self.computation.add_instruction(instr)

    def constant(self, value: Any, shape: ArrayShape, like: HloInstruction | None = None) -> HloInstruction:
        import numpy as np
        arr = np.asarray(value).astype(shape.dtype.np_dtype).reshape(shape.dims)
        return self.add("constant", [], shape, literal=arr, like=like)


def apply_rules(module: HloModule, table: RuleTable, max_sweeps: int = 20) -> bool:
    changed = False
    for comp in list(module.computations):   # rules may add computations (reducers)
        ctx = RewriteContext(module, comp)
        for _ in range(max_sweeps):
            fired = False
            for instr in comp.post_order():
                if instr.parent is not comp:
                    continue   # removed by an earlier rewrite in this sweep
                for rule in table.by_opcode.get(instr.opcode, ()):
                    new = rule(instr, ctx)
                    if new is not None and new is not instr:
                        comp.replace_instruction(instr, new)
                        fired = True
                        break
            if not fired:
                break
            changed = True
        comp.sort_topologically()
    return changed
