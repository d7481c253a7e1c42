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

import math

import llvmlite.ir as ir

from ...hlo.shape import ArrayShape, default_layout
from ..llvm.indices import delinearize
from ..llvm.ir_types import I64, compute_type, i64
from .kernels import KernelArgs, KernelSpec, grid_loop
from .simt import SLOT_BYTES, Barrier, Launch, Phase, PhaseContext, load_raw, store_raw

MAX_SHARED_BYTES = 48 * 1024
MAX_THREADS = 256


class _Network:
    """The facts of one sort's network and the code of its phases."""

    def __init__(self, spec: KernelSpec, padded: int):
        root = spec.root
        self.spec, self.root, self.padded = spec, root, padded
        shape: ArrayShape = root.operands[0].shape
        self.dim = root.attrs["dimensions"][0]
        self.n = shape.dims[self.dim]
        self.others = tuple(d for i, d in enumerate(shape.dims) if i != self.dim)
        self.types = [compute_type(op.shape.dtype) for op in root.operands]
        self.comparator = root.attrs["to_apply"]

    def row_of(self, ctx: PhaseContext):
        rest = list(delinearize(ctx.b, ctx.block, self.others, default_layout(len(self.others)))) \
            if self.others else []
        return rest[:self.dim], rest[self.dim:]

    @staticmethod
    def at(row, i) -> tuple:
        before, after = row
        return tuple(before) + (i,) + tuple(after)

    def slot(self, ctx: PhaseContext, array: int, i: ir.Value) -> ir.Value:
        """Array 0 holds the positions, array 1 + k operand k's values."""
        b = ctx.b
        return ctx.shared_at(b.mul(b.add(i64(array * self.padded), i), i64(SLOT_BYTES)))

    def load(self, ctx: PhaseContext) -> None:
        args = KernelArgs(self.spec, ctx)
        e = args.elemental()
        b = ctx.b
        row = self.row_of(ctx)

        def body(i):
            store_raw(b, self.slot(ctx, 0, i), i)
            with b.if_then(b.icmp_unsigned("<", i, i64(self.n))):
                e.push_scope()
                for k, op in enumerate(self.root.operands):
                    store_raw(b, self.slot(ctx, 1 + k, i), e.value(op, self.at(row, i)))
                e.pop_scope()

        grid_loop(b, ctx.tid, ctx.ntid, self.padded, body)

    def before(self, ctx: PhaseContext, e, x: ir.Value, y: ir.Value) -> ir.Value:
        """Whether the element at slot x goes before the one at slot y."""
        b = ctx.b
        px, py = load_raw(b, self.slot(ctx, 0, x), I64), load_raw(b, self.slot(ctx, 0, y), I64)
        vx = [load_raw(b, self.slot(ctx, 1 + k, x), t) for k, t in enumerate(self.types)]
        vy = [load_raw(b, self.slot(ctx, 1 + k, y), t) for k, t in enumerate(self.types)]
        (less,) = e.scalar_computation(self.comparator, [v for pair in zip(vx, vy) for v in pair])
        (greater,) = e.scalar_computation(self.comparator, [v for pair in zip(vy, vx) for v in pair])
        tie_first = b.and_(b.not_(greater), b.icmp_unsigned("<", px, py))
        real_x, pad_y = b.icmp_unsigned("<", px, i64(self.n)), b.icmp_unsigned(">=", py, i64(self.n))
        return b.and_(real_x, b.or_(pad_y, b.or_(less, tie_first)))

    def stage(self, k: int, j: int):
        def emit(ctx: PhaseContext) -> None:
            e = KernelArgs(self.spec, ctx).elemental()
            b = ctx.b

            def body(i):
                partner = b.xor(i, i64(j))
                with b.if_then(b.icmp_unsigned(">", partner, i)):
                    e.push_scope()
                    ascending = b.icmp_unsigned("==", b.and_(i, i64(k)), i64(0))
                    swap = b.select(ascending, self.before(ctx, e, partner, i), self.before(ctx, e, i, partner))
                    with b.if_then(swap):
                        for array, t in enumerate([I64] + self.types):
                            x, y = self.slot(ctx, array, i), self.slot(ctx, array, partner)
                            vx, vy = load_raw(b, x, t), load_raw(b, y, t)
                            store_raw(b, x, vy)
                            store_raw(b, y, vx)
                    e.pop_scope()

            grid_loop(b, ctx.tid, ctx.ntid, self.padded, body)
        return emit

    def write(self, ctx: PhaseContext) -> None:
        args = KernelArgs(self.spec, ctx)
        b = ctx.b
        row = self.row_of(ctx)

        def body(i):
            for k, (ptr, out) in enumerate(zip(args.out_ptrs, self.spec.outputs)):
                args.store(ptr, out, self.at(row, i), load_raw(b, self.slot(ctx, 1 + k, i), self.types[k]))

        grid_loop(b, ctx.tid, ctx.ntid, self.n, body)


def launch(spec: KernelSpec) -> Launch | None:
    """The bitonic launch of a sort, or None when its rows do not fit shared memory."""
    root = spec.root
    shape: ArrayShape = root.operands[0].shape
    n = shape.dims[root.attrs["dimensions"][0]]
    if n < 2:
        return None
    padded = 1 << (n - 1).bit_length()
    arrays = len(root.operands) + 1   # the values, and the positions
    if padded * arrays * SLOT_BYTES > MAX_SHARED_BYTES:
        return None
    net = _Network(spec, padded)
    steps: list = [Phase(net.load), Barrier()]
    k = 2
    while k <= padded:
        j = k // 2
        while j:
            steps += [Phase(net.stage(k, j)), Barrier()]
            j //= 2
        k *= 2
    steps.append(Phase(net.write))
    rows = math.prod(net.others)
    threads = min(MAX_THREADS, max(32, padded // 2))
    return Launch(spec.name, rows, threads, steps, shared_bytes=padded * arrays * SLOT_BYTES)
