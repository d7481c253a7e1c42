"""Constant folding: compute at compile time what depends only on constants.

The evaluator does the arithmetic, so folded values are exactly what the program would
compute. Restraint, as XLA shows it: broadcast and iota are never folded (a literal of the
full size would cost memory and compile time for an op that is free in a fused kernel);
results over MAX_FOLDED_ELEMENTS elements, ops with side effects or randomness, loops and
tuple-valued results are left alone.
"""
from __future__ import annotations

import numpy as np

from ..hlo.evaluator import EvalContext
from ..hlo.module import HloModule
from ..hlo.ops import has_side_effects, op_def
from ..hlo.shape import ArrayShape
from .hlo_pass import hlo_pass

MAX_FOLDED_ELEMENTS = 1 << 16
NEVER_FOLDED = frozenset({"parameter", "constant", "broadcast", "iota", "while", "conditional", "call",
                          "custom-call", "rng-bit-generator", "rng", "opt-barrier", "after-all",
                          "tuple", "get-tuple-element"})


def _foldable(instr) -> bool:
    if instr.opcode in NEVER_FOLDED or has_side_effects(instr):
        return False
    if not isinstance(instr.shape, ArrayShape) or instr.shape.size > MAX_FOLDED_ELEMENTS:
        return False
    return bool(instr.operands) and all(o.opcode == "constant" and isinstance(o.shape, ArrayShape)
                                        for o in instr.operands)


@hlo_pass("constant-folding")
def constant_folding(module: HloModule) -> bool:
    """Replace instructions whose operands are all constants by the constant they compute."""
    changed = False
    ctx = EvalContext(module)
    for comp in module.computations:
        for instr in comp.post_order():
            if instr.parent is not comp or not _foldable(instr):
                continue
            value = op_def(instr.opcode).evaluate(instr, [o.literal for o in instr.operands], ctx)
            value = np.asarray(value, dtype=instr.array_shape.dtype.np_dtype).reshape(instr.array_shape.dims)
            folded = comp.add_instruction(
                type(instr)(module.fresh_name("constant"), "constant", instr.shape,
                            attrs={k: v for k, v in instr.attrs.items() if k == "metadata"},
                            literal=value))
            comp.replace_instruction(instr, folded)
            changed = True
        if changed:
            comp.sort_topologically()
    return changed
