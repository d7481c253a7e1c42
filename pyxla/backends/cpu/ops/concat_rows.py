"""A loop kernel that concatenates buffers and applies elementwise ops to the result
(DenseNet's batch norm and ReLU over the features of every earlier layer, Inception's over
its branches), row by row, or run by run along the minor-most dimension.

The elemental concatenate (llvm/elemental.py) computes every operand's value at every element
and selects one: with 30 operands, 30 loads and selects per element, and no vector loop.
Here a row is the run of elements that follows one index of the concatenated dimension
(the spatial dimensions after an NCHW feature): its operand, and where the row starts in
it, are chosen once per row from the operands' buffers, and the row's elementwise ops are a
plain loop over that buffer, which LLVM vectorises (DenseNet-121, whose every dense layer
begins with such a kernel: 42.3 -> 38.7 ms per image, with the concatenates already
flattened by the algebraic simplifier).

Concatenated along the minor-most dimension (NHWC features, see passes/convolution_layout.py),
each pixel is a run of every operand's features in turn: of buffers, one loop over the runs
of each stretch of operands with runs of one length, the run's buffer selected among the
stretch's, the run's elements the inner loop of a known length, so the elementwise ops are
compiled once per stretch (a loop per operand doubled the LLVM time of DenseNet-121, whose
kernels concatenate up to 32 buffers; a loop over a table of pointers and lengths, which
LLVM could not tell from the output, ran DenseNet 22.8 -> 26.8 ms); of a few operands
computed in the kernel, a loop per operand.

Taken when every array the kernel reads or writes is in the default layout, the result is
elementwise from the concatenate, and either every operand is a buffer (a fusion
parameter: the row's start is selected among them) or there are at most
MAX_COMPUTED_PARTS operands (Inception's branches, each with its batch norm and ReLU: a
loop of the row's elements for each operand, one of them taken).
"""
from __future__ import annotations

from ....fusion.buffer_assignment import read_elementwise
from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, default_layout
from ...llvm.indices import linear_index
from ...llvm.ir_types import I8, etype, i64
from ...llvm.loops import counted_loop, for_range

MAX_COMPUTED_PARTS = 8   # operands computed in the kernel each get a loop of their own: a few at most


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
    if concat.shape.dims != shape.dims or not shape.is_row_major \
            or not read_elementwise(concat, root):
        return None
    if any(op.opcode != "parameter" for op in concat.operands) and len(concat.operands) > MAX_COMPUTED_PARTS:
        return None
    if not all(op.shape.is_row_major for op in ke.instr.operands):
        return None
    return concat


def emit_concatenated_rows(ke, root: HloInstruction, concat: HloInstruction) -> None:
    b = ke.b
    shape = ke.instr.shape
    (axis,) = concat.attrs["dimensions"]
    outer, inner = shape.dims[:axis], shape.dims[axis + 1:]
    row_shape = ArrayShape(concat.shape.dtype, tuple(inner))
    parts = []   # (first index along the axis, extent, operand)
    offset = 0
    for op in concat.operands:
        if op.shape.dims[axis]:
            parts.append((offset, op.shape.dims[axis], op))
        offset += op.shape.dims[axis]

    def row_of(prefix, read) -> None:
        """The row at `prefix` (its index up to the axis), the concatenate read by read(index)."""
        def element(index):
            ke.e.buffer_reads[id(concat)] = lambda _index: read(tuple(index))
            ke.store_root(root, shape, tuple(prefix) + tuple(index))
            del ke.e.buffer_reads[id(concat)]
        for_range(b, list(inner), element)

    def buffer_rows(prefix):   # every operand a buffer: the row's start chosen by selects
        at = prefix[axis]
        outer_flat = linear_index(b, prefix[:axis], outer, default_layout(axis)) if outer else i64(0)
        start = None
        for first, extent, op in parts:
            local = b.add(b.mul(outer_flat, i64(extent)), b.sub(at, i64(first)))
            here = b.gep(ke.operand_pointer(op), [b.mul(local, i64(row_shape.size * etype(concat).bytes))],
                         source_etype=I8)
            start = here if start is None else b.select(b.icmp_signed(">=", at, i64(first)), here, start)
        row_of(prefix, lambda index: ke.load(start, row_shape, index))

    def computed_rows(prefix):   # a few operands, some computed here: a loop for each
        at = prefix[axis]
        for first, extent, op in parts:
            inside = b.and_(b.icmp_signed(">=", at, i64(first)), b.icmp_signed("<", at, i64(first + extent)))
            with b.if_then(inside):
                local = tuple(prefix[:axis]) + (b.sub(at, i64(first)),)
                row_of(prefix, lambda index, op=op, local=local: ke.e.value(op, local + index))

    def run(prefix, first, j, read) -> None:
        """Element j of a run that starts at feature `first`, the concatenate read by read().
        (The runs' loops are not unrolled: DenseNet-121's 512-feature runs, vectorised and
        then unrolled, were 1-2 thousand lines of IR each; LLVM time 5.6 -> 5.1 s.)"""
        ke.e.buffer_reads[id(concat)] = lambda _index: read()
        ke.store_root(root, shape, tuple(prefix) + (b.add(j, first),))
        del ke.e.buffer_reads[id(concat)]

    def computed_runs(prefix):   # a few operands, some computed here: a loop for each
        for first, extent, op in parts:
            counted_loop(b, i64(0), i64(extent), lambda j, op=op, first=first: run(
                prefix, i64(first), j, lambda: ke.e.value(op, tuple(prefix) + (j,))), unrolled=False)

    def buffer_runs(prefix):
        """Every operand a buffer: per stretch of consecutive runs of one length, a loop over
        its runs, each run's buffer selected among the stretch's."""
        pixel = linear_index(b, prefix, outer, default_layout(axis)) if outer else i64(0)
        for first, extent, ops in _equal_runs(parts):
            def member(i, first=first, extent=extent, ops=ops):
                base = ke.operand_pointer(ops[0])
                for m, op in enumerate(ops[1:], 1):
                    base = b.select(b.icmp_unsigned(">=", i, i64(m)), ke.operand_pointer(op), base)
                start = b.gep(base, [b.mul(pixel, i64(extent * etype(concat).bytes))], source_etype=I8)
                run_shape = ArrayShape(concat.shape.dtype, (extent,))
                counted_loop(b, i64(0), i64(extent), lambda j: run(
                    prefix, b.add(i64(first), b.mul(i, i64(extent))), j, lambda: ke.load(start, run_shape, (j,))),
                    unrolled=False)
            if len(ops) == 1:
                member(i64(0))
            else:
                counted_loop(b, i64(0), i64(len(ops)), member)

    work = shape.size * ke.element_cost()
    if axis == shape.rank - 1:
        runs = buffer_runs if all(op.opcode == "parameter" for _, _, op in parts) else computed_runs
        return ke.loop_nest(list(shape.dims[:axis]), runs, work)
    rows = buffer_rows if all(op.opcode == "parameter" for _, _, op in parts) else computed_rows
    ke.loop_nest(list(shape.dims[:axis + 1]), rows, work)


def _equal_runs(parts) -> list[tuple[int, int, list]]:
    """(first feature, run length, operands) of each stretch of consecutive operands whose
    runs have one length (DenseNet's concatenations: the block's input, then 32 features
    from each layer so far)."""
    groups = []
    for first, extent, op in parts:
        if groups and groups[-1][1] == extent:
            groups[-1][2].append(op)
        else:
            groups.append((first, extent, [op]))
    return groups
