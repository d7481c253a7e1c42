"""Sort as a bitonic network in shared memory: a block per row, for rows whose values (and a
position per element) fit in a block's shared memory once padded to a power of two.

The block loads its row into shared memory, each element with its position, then runs the
network's compare-exchange stages (a barrier after each): thread t handles the elements
t, t + threads, ...; an element i whose partner l = i ^ j lies above it orders the pair,
ascending or descending as bit k of i says. The order is the comparator's, ties broken by
position, so the network sorts stably (as XLA's sort is, whatever its is_stable says) and
gives the same result as insertion; the padding positions order after every element.
Finally the block writes the row to the outputs.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.shape import ArrayShape, default_layout
from ..llvm.indices import delinearize
from ..llvm.ir_types import I64, compute_type, i64
from .kernels import KernelArgs, KernelSpec, grid_loop
from .simt import SLOT_BYTES, Barrier, Launch, Phase, PhaseContext, load_raw, store_raw

MAX_SHARED_BYTES = 48 * 1024
MAX_THREADS = 256


def launch(spec: KernelSpec) -> Launch | None:
    """The bitonic launch of a sort, or None when its rows do not fit shared memory."""
    root = spec.root
    shape: ArrayShape = root.operands[0].shape
    dim = root.attrs["dimensions"][0]
    n = shape.dims[dim]
    if n < 2:
        return None
    padded = 1 << (n - 1).bit_length()
    arrays = len(root.operands) + 1   # the values, and the positions
    if padded * arrays * SLOT_BYTES > MAX_SHARED_BYTES:
        return None
    threads = min(MAX_THREADS, max(32, padded // 2))
    others = tuple(d for i, d in enumerate(shape.dims) if i != dim)
    rows = 1
    for d in others:
        rows *= d
    types = [compute_type(op.shape.dtype) for op in root.operands]
    comparator = root.attrs["to_apply"]

    def row_of(ctx: PhaseContext):
        b = ctx.b
        rest = list(delinearize(b, ctx.block, others, default_layout(len(others)))) if others else []
        return rest[:dim], rest[dim:]

    def at(row, i) -> tuple:
        before, after = row
        return tuple(before) + (i,) + tuple(after)

    def slot(ctx: PhaseContext, array: int, i: ir.Value) -> ir.Value:
        b = ctx.b
        return ctx.shared_at(b.mul(b.add(i64(array * padded), i), i64(SLOT_BYTES)))

    def each(ctx: PhaseContext, count: int, body) -> None:
        grid_loop(ctx.b, ctx.tid, ctx.ntid, count, body)

    def load(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        row = row_of(ctx)

        def body(i):
            store_raw(b, slot(ctx, 0, i), i)
            with b.if_then(b.icmp_unsigned("<", i, i64(n))):
                e.push_scope()
                for k, op in enumerate(root.operands):
                    store_raw(b, slot(ctx, 1 + k, i), e.value(op, at(row, i)))
                e.pop_scope()

        each(ctx, padded, body)

    def before(ctx: PhaseContext, e, x: ir.Value, y: ir.Value) -> ir.Value:
        """Whether the element at slot x goes before the one at slot y."""
        b = ctx.b
        px, py = load_raw(b, slot(ctx, 0, x), I64), load_raw(b, slot(ctx, 0, y), I64)
        vx = [load_raw(b, slot(ctx, 1 + k, x), t) for k, t in enumerate(types)]
        vy = [load_raw(b, slot(ctx, 1 + k, y), t) for k, t in enumerate(types)]
        (less,) = e.scalar_computation(comparator, [v for pair in zip(vx, vy) for v in pair])
        (greater,) = e.scalar_computation(comparator, [v for pair in zip(vy, vx) for v in pair])
        tie_first = b.and_(b.not_(greater), b.icmp_unsigned("<", px, py))
        real_x, pad_y = b.icmp_unsigned("<", px, i64(n)), b.icmp_unsigned(">=", py, i64(n))
        return b.and_(real_x, b.or_(pad_y, b.or_(less, tie_first)))

    def stage(k: int, j: int):
        def emit(ctx: PhaseContext) -> None:
            args = KernelArgs(spec, ctx)
            e = args.elemental()
            b = ctx.b

            def body(i):
                partner = b.xor(i, i64(j))
                with b.if_then(b.icmp_unsigned(">", partner, i)):
                    e.push_scope()
                    ascending = b.icmp_unsigned("==", b.and_(i, i64(k)), i64(0))
                    swap = b.select(ascending, before(ctx, e, partner, i), before(ctx, e, i, partner))
                    with b.if_then(swap):
                        for array, t in enumerate([I64] + types):
                            x, y = slot(ctx, array, i), slot(ctx, array, partner)
                            vx, vy = load_raw(b, x, t), load_raw(b, y, t)
                            store_raw(b, x, vy)
                            store_raw(b, y, vx)
                    e.pop_scope()

            each(ctx, padded, body)
        return emit

    def write(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        row = row_of(ctx)

        def body(i):
            for k, ((ptr, out), t) in enumerate(zip(zip(args.out_ptrs, spec.outputs), types)):
                args.store(ptr, out, at(row, i), load_raw(b, slot(ctx, 1 + k, i), t))

        each(ctx, n, body)

    steps: list = [Phase(load), Barrier()]
    k = 2
    while k <= padded:
        j = k // 2
        while j:
            steps += [Phase(stage(k, j)), Barrier()]
            j //= 2
        k *= 2
    steps.append(Phase(write))
    return Launch(spec.name, rows, threads, steps, shared_bytes=padded * arrays * SLOT_BYTES)
