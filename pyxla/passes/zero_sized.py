"""Zero-sized array elimination: a value with no elements is a constant, whatever computed it."""
from __future__ import annotations

import numpy as np

from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import has_side_effects
from ..hlo.shape import ArrayShape
from .hlo_pass import hlo_pass


@hlo_pass("zero-sized-elimination")
def zero_sized_elimination(module: HloModule) -> bool:
    """Replace every instruction whose array result has no elements by an empty constant."""
    changed = False
    for comp in module.computations:
        for instr in comp.post_order():
            if (isinstance(instr.shape, ArrayShape) and instr.shape.size == 0
                    and instr.opcode not in ("constant", "parameter") and not has_side_effects(instr)):
                empty = np.zeros(instr.shape.dims, instr.shape.dtype.np_dtype)
                const = HloInstruction(module.fresh_name("constant"), "constant", instr.shape,
                                       attrs={k: v for k, v in instr.attrs.items() if k == "metadata"}, literal=empty)
                comp.replace_instruction(instr, comp.add_instruction(const))
                changed = True
        if changed:
            comp.sort_topologically()
    return changed
