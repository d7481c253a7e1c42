"""Kernel loops bounded at run time along one dimension of the output: a fusion with
`bounded_rows={k, d}` (passes/dynamic_padder/bounded_rows.py) needs only the indices of
dimension d of its outputs below the value of its s32[] operand k; the rest is padding that
no one reads. The count is read once at kernel entry (`read_row_bound`), and the loops over
the output stop there (`bounded_loop_nest`, called by the kernel emitter's loop_nest for loop
kernels, the rows of a reduction and a GEMM's epilogue; pyxla's GEMM bounds the rows of its
blocks itself, dot/tasks.py)."""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.shape import TupleShape, default_layout
from ..llvm.indices import delinearize
from ..llvm.ir_types import I32, i64
from ..llvm.loops import counted_loop, for_range, for_span


def read_row_bound(ke) -> tuple[int, ir.Value] | None:
    """(d, count) for a bounded fusion, count clamped to [0, extent of dimension d]; None
    for any other kernel."""
    bounded = ke.instr.attrs.get("bounded_rows")
    if bounded is None:
        return None
    number, d = bounded
    shape = ke.instr.shape
    extent = (shape.elements[0] if isinstance(shape, TupleShape) else shape).dims[d]
    b = ke.b
    value = b.sext(b.load(ke.pointers[id(ke.instr.operands[number])], typ=I32), ir.IntType(64))
    value = b.select(b.icmp_signed("<", value, i64(0)), i64(0), value)
    return d, b.select(b.icmp_signed("<", value, i64(extent)), value, i64(extent), name="rows.bound")


def bounded_nest(b: ir.IRBuilder, extents, d: int, count: ir.Value, body) -> None:
    """for_range(extents, body) over the indices whose dimension d is below count only."""
    for_range(b, extents[:d], lambda outer: for_span(
        b, extents[d:], 1, i64(0), count, lambda inner: body(tuple(outer) + tuple(inner))))


def bounded_loop_nest(ke, extents, body, split, bound: tuple[int, ir.Value]) -> None:
    """body(index) for the indices of `extents` whose dimension d is below count (bound =
    (d, count)), on the calling thread (split None) or in the chunks of the kernel's split
    (k, n_tasks): of the flat range of the first k dimensions cut at count rows when d is 0;
    of the dimensions before d, each bounded inside, when k <= d; else of (the dimensions
    before d) x (the first count indices of d)."""
    b = ke.b
    d, count = bound
    if split is None:
        return bounded_nest(b, extents, d, count, body)
    k, n_tasks = split
    if d == 0:
        return ke.parallel_chunks(extents, k, n_tasks, lambda t, begin, end: for_span(b, extents, k, begin, end, body),
                                  b.mul(count, i64(_prod(extents[1:k]))))
    if k <= d:
        return ke.parallel_chunks(extents, k, n_tasks, lambda t, begin, end: for_span(
            b, extents[:k], k, begin, end,
            lambda outer: bounded_nest(b, extents[k:], d - k, count, lambda inner: body(outer + inner))))
    outer_extents = tuple(extents[:d])

    def one(f):
        outer = delinearize(b, b.udiv(f, count), outer_extents, default_layout(d))
        for_range(b, extents[d + 1:], lambda inner: body(tuple(outer) + (b.urem(f, count),) + tuple(inner)))

    ke.parallel_chunks(extents, d + 1, n_tasks, lambda t, begin, end: counted_loop(b, begin, end, one),
                       b.mul(count, i64(_prod(outer_extents))))


def _prod(dims) -> int:
    out = 1
    for n in dims:
        out *= n
    return out
