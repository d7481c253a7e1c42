"""Loop nests in LLVM IR: row-major over a shape, innermost dimension fastest, so that
consecutive iterations touch consecutive memory and LLVM vectorises the inner loop.

`for_span` runs a contiguous part of such a nest (a task's share of a kernel split across
threads, runtime/parallel.py): the iterations whose flat index over the outermost k dimensions lies
in [begin, end), with the inner dimensions whole.

Unrolling is LLVM's choice only for short nests. LLVM fully unrolls a loop with a constant
trip count whenever the copies look cheap, and it does so before it vectorises: a row of 64
becomes 64 scalar copies that the vectoriser no longer sees as a loop, and an outer loop of
8 becomes 8 copies of its inner loop, each vectorised and compiled again (one transpose in
the attention benchmark took 150 ms of LLVM time that way, 25 ms without). Unrolling pays
for window and tap loops of a few iterations; a loop whose iterations, those of the loops
inside it included, number UNROLL_NEST_LIMIT or more is marked not to be unrolled. The
vectoriser still interleaves the vector body of such a loop. A single row longer than
FULL_UNROLL_ROW_LIMIT is too long to be unrolled fully, and is left to the unroller, which
then unrolls only its vectorised loop: more partial sums in a reduction, faster and
rounding less."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import llvmlite.ir as ir

from ...hlo.shape import default_layout
from .indices import delinearize
from .ir_types import I1, I64, alloca_in_entry, i64

UNROLL_NEST_LIMIT = 16
FULL_UNROLL_ROW_LIMIT = 256


class _LoopId(ir.values.MDValue):
    """A distinct, self-referencing loop metadata node: `!n = distinct !{!n, properties...}`."""

    def __init__(self, module: ir.Module, properties: list):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = (self, *properties)

    def descr(self, buf):
        buf.append("distinct ")
        super().descr(buf)

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def no_unroll(b: ir.IRBuilder, back_edge: ir.Instruction) -> None:
    """Mark the loop whose back edge is `back_edge` not to be unrolled."""
    module = b.module
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    back_edge.set_metadata("llvm.loop", _LoopId(module, [disable]))


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
        prefix = list(delinearize(b, r, tuple(outer), default_layout(len(outer))))
        counted_loop(b, low, high, lambda j: _nest(b, inner, prefix + [j], body))

    counted_loop(b, b.udiv(begin, i64(split)), b.udiv(b.add(end, i64(split - 1)), i64(split)), row)


def counted_loop(b: ir.IRBuilder, begin: ir.Value, end: ir.Value, body: Callable[[ir.Value], None],
                 unrolled: bool = True) -> None:
    """for (i = begin; i < end; ++i) body(i), with bounds known at run time; `unrolled`
    False marks the loop not to be unrolled (its vector body is still interleaved)."""
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
    back_edge = b.cbranch(b.icmp_unsigned("<", nxt, end), loop, exit_block)
    if not unrolled:
        no_unroll(b, back_edge)
    b.position_at_end(exit_block)


def _may_unroll(extents: list[int]) -> bool:
    """Whether LLVM may unroll the loop over extents[0] (the loops inside it follow)."""
    iterations = math.prod(extents)
    is_row = all(n == 1 for n in extents[1:])
    return iterations < UNROLL_NEST_LIMIT or (is_row and iterations > FULL_UNROLL_ROW_LIMIT)


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
    back_edge = b.cbranch(b.icmp_unsigned("<", nxt, i64(n)), header, exit_block)
    if not _may_unroll(extents):
        no_unroll(b, back_edge)
    b.position_at_end(exit_block)


def stepped_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, body: Callable[[ir.Value], None],
                 step: ir.Value | int = 1) -> None:
    """for (i = start; i < stop; i += step) body(i), with bounds known at run time (i64)."""
    step = i64(step) if isinstance(step, int) else step
    pre = b.block
    header = b.append_basic_block("dloop.header")
    body_block = b.append_basic_block("dloop.body")
    exit_block = b.append_basic_block("dloop.exit")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name="j")
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body_block, exit_block)
    b.position_at_end(body_block)
    body(i)
    i.add_incoming(b.add(i, step), b.block)
    no_unroll(b, b.branch(header))
    b.position_at_end(exit_block)


def while_loop(b: ir.IRBuilder, condition: Callable[[], ir.Value], body: Callable[[], None]) -> None:
    """while (condition()) body(); state lives in stack variables (`variable`)."""
    header = b.append_basic_block("while.header")
    body_block = b.append_basic_block("while.body")
    exit_block = b.append_basic_block("while.exit")
    b.branch(header)
    b.position_at_end(header)
    b.cbranch(condition(), body_block, exit_block)
    b.position_at_end(body_block)
    body()
    no_unroll(b, b.branch(header))
    b.position_at_end(exit_block)


def variable(b: ir.IRBuilder, initial: ir.Value) -> ir.Value:
    """A mutable stack slot holding `initial` (mem2reg makes it a register)."""
    slot = alloca_in_entry(b, initial.type)
    b.store(initial, slot)
    return slot


def short_circuit(b: ir.IRBuilder, first: ir.Value, then: Callable[[], ir.Value], is_and: bool = True) -> ir.Value:
    """`first && then()` (or `first || then()`): then() is only evaluated when it decides."""
    before = b.block
    rhs_block = b.append_basic_block("sc.rhs")
    done = b.append_basic_block("sc.done")
    if is_and:
        b.cbranch(first, rhs_block, done)
    else:
        b.cbranch(first, done, rhs_block)
    b.position_at_end(rhs_block)
    second = then()
    rhs_end = b.block
    b.branch(done)
    b.position_at_end(done)
    result = b.phi(I1)
    result.add_incoming(ir.Constant(I1, 0 if is_and else 1), before)
    result.add_incoming(second, rhs_end)
    return result
