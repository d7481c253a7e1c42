"""Transposes through shared-memory tiles: the kernel of a transpose, or of a copy that
changes the layout, or of a fusion whose root is one of those, when the output's minor
dimension is not the one the input is read along.

Of the output's dimensions, `a` is the output's minor one (in its layout) and `c` the one
that comes from the input's minor dimension. A block moves a 32 x 32 tile of the (c, a)
plane (the other dimensions from the block number) with 256 threads: first thread
(lane, warp) computes the elements at c = lane and a = warp + 8r (consecutive threads read
consecutive input elements) into shared memory, then after a barrier it writes those at
a = lane and c = warp + 8r (consecutive threads write consecutive output elements). The
element is the root's value through the elemental emitter, so fused elementwise work
around the transpose is done as the tile is read.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from ...hlo.shape import ArrayShape, default_layout
from ..llvm.indices import delinearize
from ..llvm.ir_types import compute_type, i64
from .kernels import KernelArgs, KernelSpec
from .simt import SLOT_BYTES, WARP, Barrier, Launch, Phase, PhaseContext, load_raw, store_raw

TILE = 32
GROUPS = 8
PITCH = TILE + 1    # padded rows: a column of the tile spreads over the banks


def _planes(spec: KernelSpec) -> tuple[int, int] | None:
    """(c, a) as above, or None when tiling does not apply."""
    root = spec.root
    if len(spec.outputs) != 1 or root.opcode not in ("transpose", "copy"):
        return None
    out: ArrayShape = spec.outputs[0]
    operand: ArrayShape = root.operands[0].shape
    if out.rank < 2:
        return None
    perm = tuple(root.attrs["dimensions"]) if root.opcode == "transpose" else tuple(range(out.rank))
    a = out.minor_to_major[0]
    c = perm.index(operand.minor_to_major[0])
    if a == c or out.dims[a] < 2 or out.dims[c] < 2:
        return None
    return c, a


def launches(spec: KernelSpec) -> list[Launch] | None:
    planes = _planes(spec)
    if planes is None:
        return None
    c, a = planes
    out: ArrayShape = spec.outputs[0]
    others = [d for d in range(out.rank) if d not in (c, a)]
    other_dims = tuple(out.dims[d] for d in others)
    tiles_c, tiles_a = -(-out.dims[c] // TILE), -(-out.dims[a] // TILE)
    ty = compute_type(out.dtype)
    root = spec.root

    def place(ctx: PhaseContext):
        b = ctx.b
        per = i64(tiles_c * tiles_a)
        rest = list(delinearize(b, b.udiv(ctx.block, per), other_dims, default_layout(len(other_dims)))) \
            if other_dims else []
        tile = b.urem(ctx.block, per)
        c0 = b.mul(b.udiv(tile, i64(tiles_a)), i64(TILE))
        a0 = b.mul(b.urem(tile, i64(tiles_a)), i64(TILE))
        return rest, c0, a0

    def index_of(rest: list, ci: ir.Value, ai: ir.Value) -> tuple:
        index: list = [None] * out.rank
        for d, i in zip(others, rest):
            index[d] = i
        index[c], index[a] = ci, ai
        return tuple(index)

    def slot(ctx: PhaseContext, row, column) -> ir.Value:
        b = ctx.b
        return ctx.shared_at(b.mul(b.add(b.mul(row, i64(PITCH)), column), i64(SLOT_BYTES)))

    def read(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        rest, c0, a0 = place(ctx)
        ci = b.add(c0, ctx.lane)
        for r in range(TILE // GROUPS):
            row = b.add(ctx.warp, i64(GROUPS * r))
            ai = b.add(a0, row)
            inside = b.and_(b.icmp_unsigned("<", ci, i64(out.dims[c])), b.icmp_unsigned("<", ai, i64(out.dims[a])))
            with b.if_then(inside):
                e.push_scope()
                store_raw(b, slot(ctx, row, ctx.lane), e.value(root, index_of(rest, ci, ai)))
                e.pop_scope()

    def write(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        rest, c0, a0 = place(ctx)
        ai = b.add(a0, ctx.lane)
        for r in range(TILE // GROUPS):
            row = b.add(ctx.warp, i64(GROUPS * r))
            ci = b.add(c0, row)
            inside = b.and_(b.icmp_unsigned("<", ci, i64(out.dims[c])), b.icmp_unsigned("<", ai, i64(out.dims[a])))
            with b.if_then(inside):
                args.store(args.out_ptrs[0], out, index_of(rest, ci, ai), load_raw(b, slot(ctx, ctx.lane, row), ty))

    blocks = math.prod(other_dims) * tiles_c * tiles_a
    return [Launch(spec.name, blocks, WARP * GROUPS, [Phase(read), Barrier(), Phase(write)],
                   shared_bytes=TILE * PITCH * SLOT_BYTES)]
