"""A loop kernel that concatenates buffers along an outer dimension and applies elementwise
ops to the result (DenseNet's batch norm and ReLU over the features of every earlier
layer, Inception's over its branches), row by row.

The elemental concatenate (elemental.py) computes every operand's value at every element
and selects one: with 30 operands, 30 loads and selects per element, and no vector loop.
Here a row is the run of elements that follows one index of the concatenated dimension
(the spatial dimensions after an NCHW feature): its operand, and where the row starts in
it, are chosen once per row from the operands' buffers, and the row's elementwise ops are a
plain loop over that buffer, which LLVM vectorises (DenseNet-121, whose every dense layer
begins with such a kernel: 42.3 -> 38.7 ms per image, with the concatenates already
flattened by the algebraic simplifier).

Taken when every operand of the concatenate is a buffer (a fusion parameter) and every
array the kernel reads or writes is in the default layout, the result is elementwise from
the concatenate, and the concatenated dimension is not the minor-most.
"""
from __future__ import annotations

from math import prod

from ...fusion.buffer_assignment import elementwise_reach
from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape
from .elemental import etype, linear_index
from .ir_types import I8, i64
from .loops import for_range


def _default_layout(shape) -> bool:
    return tuple(shape.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


def concatenate_of(ke, root: HloInstruction) -> HloInstruction | None:
    """The concatenate this kernel's rows can be taken from, or None."""
    if ke.fused is None:
        return None
    concats = [i for i in ke.fused.instructions if i.opcode == "concatenate"]
    if len(concats) != 1:
        return None
    concat = concats[0]
    (axis,) = concat.attrs["dimensions"]
    shape = ke.instr.shape
    reach = elementwise_reach(concat)
    if axis == concat.shape.rank - 1 or concat.shape.dims != shape.dims or not _default_layout(shape) \
            or reach is None or (root is not concat and id(root) not in reach):
        return None
    if any(op.opcode != "parameter" for op in concat.operands):
        return None
    if not all(_default_layout(op.shape) for op in ke.instr.operands):
        return None
    return concat


def emit_concatenated_rows(ke, root: HloInstruction, concat: HloInstruction) -> None:
    b = ke.b
    shape = ke.instr.shape
    (axis,) = concat.attrs["dimensions"]
    outer, inner = shape.dims[:axis], shape.dims[axis + 1:]
    row = prod(inner)
    size = etype(concat).bytes
    row_shape = ArrayShape(concat.shape.dtype, tuple(inner))
    parts = []   # (first index along the axis, extent, buffer)
    offset = 0
    for op in concat.operands:
        if op.shape.dims[axis]:
            parts.append((offset, op.shape.dims[axis], ke._operand_pointer(op)))
        offset += op.shape.dims[axis]

    def rows(prefix):
        at = prefix[axis]
        outer_flat = linear_index(b, prefix[:axis], outer, tuple(range(axis - 1, -1, -1))) if outer else i64(0)
        start = None
        for first, extent, ptr in parts:   # the row's buffer and its start there, chosen once per row
            local = b.add(b.mul(outer_flat, i64(extent)), b.sub(at, i64(first)))
            here = b.gep(ptr, [b.mul(local, i64(row * size))], source_etype=I8)
            start = here if start is None else b.select(b.icmp_signed(">=", at, i64(first)), here, start)

        def element(index):
            ke.e.buffer_reads[id(concat)] = lambda _index: ke._load(start, row_shape, tuple(index))
            ke._store_root(root, shape, tuple(prefix) + tuple(index))
            del ke.e.buffer_reads[id(concat)]

        for_range(b, list(inner), element)

    ke._loop_nest(list(shape.dims[:axis + 1]), rows, shape.size * ke._element_cost())

