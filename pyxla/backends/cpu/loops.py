"""Loop nests in LLVM IR: row-major over a shape, innermost dimension fastest, so that
consecutive iterations touch consecutive memory and LLVM vectorises the inner loop."""
from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

from .ir_types import I64, i64


def for_range(b: ir.IRBuilder, extents: Sequence[int], body: Callable[[tuple], None]) -> None:
    """Emit loops over `extents` (outermost first) and call body(index) in the innermost."""
    if any(n == 0 for n in extents):
        return
    _nest(b, list(extents), [], body)


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
