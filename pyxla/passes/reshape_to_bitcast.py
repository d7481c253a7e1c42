"""Reshape to bitcast: a reshape that leaves every element at its byte offset becomes a bitcast.

Once layouts are final (after fusion), a reshape between two arrays whose elements lie in
the same order in memory moves nothing: the result is the operand's bytes seen with
another shape. As a `bitcast` it is a view (no kernel, no buffer of its own), so a loop
that updates one row of a matrix seen as a vector through reshapes (`x.at[i].set(row)`)
writes in place instead of copying the whole matrix twice per step.

Reshapes inside fused computations stay: there they are index arithmetic already.
"""
from __future__ import annotations

from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from .hlo_pass import hlo_pass


def memory_order(shape: ArrayShape) -> tuple[int, ...]:
    """The dimensions of `shape` from major to minor in memory, size-1 dimensions left out
    (they do not move an element's offset)."""
    return tuple(d for d in reversed(shape.minor_to_major) if shape.dims[d] != 1)


def is_bitcast(operand: ArrayShape, result: ArrayShape) -> bool:
    """Whether reshaping `operand` to `result` keeps every element's byte offset: both lay
    out their (non-trivial) dimensions in logical order, major first, so both store the
    elements in row-major order of the same logical sequence."""
    def row_major(shape: ArrayShape) -> bool:
        order = memory_order(shape)
        return list(order) == sorted(order)
    return operand.dtype == result.dtype and row_major(operand) and row_major(result)


@hlo_pass("reshape-to-bitcast")
def reshape_to_bitcast(module: HloModule) -> bool:
    """Turn each reshape outside fused computations that moves no bytes into a bitcast."""
    fused = {id(i.attrs["calls"]) for c in module.computations for i in c.instructions if i.opcode == "fusion"}
    changed = False
    for comp in module.computations:
        if id(comp) in fused:
            continue
        for instr in comp.instructions:
            if (instr.opcode == "reshape" and isinstance(instr.shape, ArrayShape)
                    and is_bitcast(instr.operands[0].array_shape, instr.array_shape)):
                instr.opcode = "bitcast"
                changed = True
    return changed
