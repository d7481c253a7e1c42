"""Loop kernels that transpose, in blocks: both the reads and the writes stay in cache.

A loop kernel runs over its output row-major, the output's minor dimension innermost. When
it reads a transpose whose operand's minor dimension is another dimension of the output (an
NHWC result read back as NCHW), consecutive iterations read elements a row of the operand
apart, and each line read serves one element before the loop moves on: by the time the
outer loop comes back for the line's next element it has long left L1 (ResNet's 256 x 56 x
56 written back to NCHW: 2.5 ms, 0.6 GFLOP/s). Here the two dimensions, the output's minor
one and the operand's, are cut into BLOCK x BLOCK squares: a square's BLOCK lines read and
BLOCK lines written are all in L1 while it is done, the inner loop still along the output's
rows (LLVM vectorises it, gathering the reads).
"""
from __future__ import annotations

from collections.abc import Callable
from math import ceil

from ...hlo.shape import ArrayShape, default_layout
from .ir_types import i64
from .loops import counted_loop

BLOCK = 16                 # a square of 16 x 16 f32: 16 lines read and 16 written
MIN_EXTENT = 4             # both dimensions at least this long, or the rows are short anyway


def crossed_dimensions(instructions, shape: ArrayShape) -> tuple[int, int] | None:
    """(d, minor): the output dimension d along which a transpose inside the kernel reads its
    operand's minor dimension, and the output's minor dimension, when they differ; None when
    the kernel reads nothing across its rows (or its layouts are not row-major)."""
    if shape.rank < 2 or shape.minor_to_major != default_layout(shape.rank):
        return None
    minor = shape.rank - 1
    for instr in instructions:
        if instr.opcode != "transpose" or instr.shape.dims != shape.dims:
            continue
        operand = instr.operands[0].shape
        if operand.minor_to_major != default_layout(operand.rank):
            continue
        d = tuple(instr.attrs["dimensions"]).index(operand.rank - 1)
        if d != minor and shape.dims[d] >= MIN_EXTENT and shape.dims[minor] >= MIN_EXTENT:
            return d, minor
    return None


def blocked_loop_nest(ke, extents: tuple[int, ...], crossed: tuple[int, int], body: Callable[[tuple], None],
                      work: float) -> None:
    """body(index) for every index of `extents`, the two `crossed` dimensions in BLOCK x
    BLOCK squares (the outer loops, over the squares, split across threads as any loop nest)."""
    b = ke.b
    d, minor = crossed
    outer = list(extents)
    outer[d], outer[minor] = ceil(extents[d] / BLOCK), ceil(extents[minor] / BLOCK)

    def span(extent: int, start):
        """The square's range along a dimension: a constant BLOCK when the extent is whole
        squares, so LLVM knows the trip count."""
        if extent % BLOCK == 0:
            return i64(BLOCK)
        rest = b.sub(i64(extent), start)
        return b.select(b.icmp_unsigned("<", rest, i64(BLOCK)), rest, i64(BLOCK))

    def square(index):
        first_d, first_minor = b.mul(index[d], i64(BLOCK)), b.mul(index[minor], i64(BLOCK))
        rows, columns = span(extents[d], first_d), span(extents[minor], first_minor)

        def row(i):
            def element(j):
                at = list(index)
                at[d], at[minor] = b.add(first_d, i), b.add(first_minor, j)
                body(tuple(at))
            counted_loop(b, i64(0), columns, element)
        counted_loop(b, i64(0), rows, row)

    ke.loop_nest(tuple(outer), square, work)

