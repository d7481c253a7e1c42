"""Loop nests in LLVM IR: row-major over a shape, innermost dimension fastest, so that
consecutive iterations touch consecutive memory and LLVM vectorises the inner loop.

`for_span` runs a contiguous part of such a nest (a task's share of a kernel split across
threads, parallel.py): the iterations whose flat index over the outermost k dimensions lies
in [begin, end), with the inner dimensions whole."""
from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

from .elemental import delinearize
from .ir_types import I64, i64


def for_range(b: ir.IRBuilder, extents: Sequence[int], body: Callable[[tuple], None]) -> None:
    """Emit loops over `extents` (outermost first) and call body(index) in the innermost."""
    if any(n == 0 for n in extents):
        return
    _nest(b, list(extents), [], body)


def for_span(b: ir.IRBuilder, extents: Sequence[int], k: int, begin: ir.Value, end: ir.Value,
             body: Callable[[tuple], None]) -> None:
    """body(index) for the indices of `extents` whose flat (row-major) index over the first
    `k` dimensions is in [begin, end) (i64 values), in order. The k-th dimension is the loop
    whose bounds vary: the dimensions before it advance once per pass over it."""
    if any(n == 0 for n in extents):
        return
    outer, split, inner = list(extents[:k - 1]), extents[k - 1], list(extents[k:])
    if not outer:
        counted_loop(b, begin, end, lambda j: _nest(b, inner, [j], body))
        return

    def row(r):
        start = b.mul(r, i64(split))
        low = b.select(b.icmp_unsigned(">", begin, start), b.sub(begin, start), i64(0))
        high = b.select(b.icmp_unsigned("<", b.sub(end, start), i64(split)), b.sub(end, start), i64(split))
        prefix = list(delinearize(b, r, tuple(outer), tuple(range(len(outer) - 1, -1, -1))))
        counted_loop(b, low, high, lambda j: _nest(b, inner, prefix + [j], body))

    counted_loop(b, b.udiv(begin, i64(split)), b.udiv(b.add(end, i64(split - 1)), i64(split)), row)


def counted_loop(b: ir.IRBuilder, begin: ir.Value, end: ir.Value, body: Callable[[ir.Value], None]) -> None:
    """for (i = begin; i < end; ++i) body(i), with bounds known at run time."""
    pre = b.block
    loop = b.append_basic_block("span.body")
    exit_block = b.append_basic_block("span.exit")
    b.cbranch(b.icmp_unsigned("<", begin, end), loop, exit_block)
    b.position_at_end(loop)
    i = b.phi(I64, name="i")
    i.add_incoming(begin, pre)
    body(i)
    nxt = b.add(i, i64(1), name="i.next")
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<", nxt, end), loop, exit_block)
    b.position_at_end(exit_block)


def _nest(b: ir.IRBuilder, extents: list[int], index: list, body) -> None:
    if not extents:
        body(tuple(index))
        return
    n = extents[0]
    if n == 1:   # no loop for a unit dimension
        _nest(b, extents[1:], index + [i64(0)], body)
        return
    pre = b.block
    header = b.append_basic_block("loop.header")
    latch_target = b.append_basic_block("loop.body")
    exit_block = b.append_basic_block("loop.exit")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name="i")
    i.add_incoming(i64(0), pre)
    b.branch(latch_target)
    b.position_at_end(latch_target)
    _nest(b, extents[1:], index + [i], body)
    nxt = b.add(i, i64(1), name="i.next")
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<", nxt, i64(n)), header, exit_block)
    b.position_at_end(exit_block)
