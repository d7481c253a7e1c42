"""Dots as a tiled GEMM through shared memory (the kernel of a dot, or of a fusion whose root
is one or elementwise work on one, such as a bias and an activation, computed as the
outputs are written; no cuBLAS needed).

The dot is seen as batches of an M x K by K x N product: M flattens the left side's free
dimensions, N the right side's, K the contracting pairs. A block computes a 32 x 32 tile of
one batch's output with 256 threads: thread (tx, ty) = (lane, warp) owns the outputs of
rows ty, ty + 8, ty + 16, ty + 24 and column tx, its four sums in locals. For each
32-wide step along K the block loads a 32 x 32 tile of each side into shared memory
(thread (tx, ty) the elements at column tx of rows ty + 8r: consecutive threads, a row's
consecutive elements; positions past the edges load zeros), a barrier, then every thread
adds its four rows' products over the tile, a barrier. Operands are read through the
elemental emitter, so a fused producer (a transpose, a convert) is computed as it loads.
Products and sums are in the result's type, as the elemental dot does (pred: or of ands).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from ...hlo.ops.registry import op_def
from ...hlo.shape import ArrayShape, default_layout
from ..llvm.elemental import convert
from ..llvm.indices import delinearize
from ..llvm.ir_types import compute_type, etype, i64
from ..llvm.loops import for_range
from .kernels import KernelArgs, KernelSpec
from .simt import SLOT_BYTES, WARP, Barrier, Launch, Loop, Phase, PhaseContext, load_raw, store_raw

TILE = 32
GROUPS = 8                 # warps per block; each thread has TILE // GROUPS rows
ROWS = TILE // GROUPS
PITCH = TILE + 1           # a shared tile's row, padded so a column's reads hit different banks


class _Dot:
    def __init__(self, spec: KernelSpec, dot):
        self.spec, self.dot = spec, dot
        self.lhs, self.rhs = dot.operands
        a = dot.attrs
        self.lb, self.rb = tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ()))
        self.lc, self.rc = tuple(a.get("lhs_contracting_dims", ())), tuple(a.get("rhs_contracting_dims", ()))
        self.lfree = [d for d in range(self.lhs.shape.rank) if d not in self.lb and d not in self.lc]
        self.rfree = [d for d in range(self.rhs.shape.rank) if d not in self.rb and d not in self.rc]
        ldims, rdims = self.lhs.shape.dims, self.rhs.shape.dims
        self.batch_dims = tuple(ldims[d] for d in self.lb)
        self.m_dims = tuple(ldims[d] for d in self.lfree)
        self.n_dims = tuple(rdims[d] for d in self.rfree)
        self.k_dims = tuple(ldims[d] for d in self.lc)
        self.B, self.M = math.prod(self.batch_dims), math.prod(self.m_dims)
        self.N, self.K = math.prod(self.n_dims), math.prod(self.k_dims)
        self.out_t = etype(dot)
        self.ty = compute_type(self.out_t)
        self.tiles_m, self.tiles_n = -(-self.M // TILE), -(-self.N // TILE)

    def _split(self, b, flat, dims):
        return list(delinearize(b, flat, dims, default_layout(len(dims)))) if dims else []

    def lhs_index(self, b, batch: list, m, k) -> tuple:
        index = [None] * self.lhs.shape.rank
        for d, i in zip(self.lb, batch):
            index[d] = i
        for d, i in zip(self.lfree, self._split(b, m, self.m_dims)):
            index[d] = i
        for d, i in zip(self.lc, self._split(b, k, self.k_dims)):
            index[d] = i
        return tuple(index)

    def rhs_index(self, b, batch: list, k, n) -> tuple:
        index = [None] * self.rhs.shape.rank
        for d, i in zip(self.rb, batch):
            index[d] = i
        for d, i in zip(self.rc, self._split(b, k, self.k_dims)):
            index[d] = i
        for d, i in zip(self.rfree, self._split(b, n, self.n_dims)):
            index[d] = i
        return tuple(index)

    def out_index(self, b, batch: list, m, n) -> tuple:
        return tuple(batch + self._split(b, m, self.m_dims) + self._split(b, n, self.n_dims))

    def zero(self) -> ir.Constant:
        return ir.Constant(self.ty, 0.0 if self.out_t.is_float else 0)

    def multiply_add(self, b, acc, x, y):
        if self.out_t.is_pred:   # i1 add is XOR: XLA's pred dot is an OR of ANDs
            return b.or_(acc, b.and_(x, y))
        if self.out_t.is_float:
            return b.fadd(acc, b.fmul(x, y))
        return b.add(acc, b.mul(x, y))


def _the_dot(spec: KernelSpec):
    """The dot the kernel's output is, or is elementwise work on (at the same index: a bias,
    an activation); None otherwise."""
    if len(spec.outputs) != 1:
        return None
    out = spec.outputs[0]
    dots: list = []
    has_dot: dict[int, bool] = {}

    def contains(x) -> bool:
        if spec.fused is None and x is not spec.root:
            return False   # an unfused instruction's operands are buffers, a dot among them computed already
        if id(x) not in has_dot:
            has_dot[id(x)] = x.opcode == "dot" or any(contains(o) for o in x.operands)
        return has_dot[id(x)]

    def fits(x) -> bool:
        if x.opcode == "dot":
            dots.append(x)
            return x.shape.dims == out.dims
        if not contains(x):
            return True
        return op_def(x.opcode).fusion_kind == "elementwise" and isinstance(x.shape, ArrayShape) \
            and x.shape.dims == out.dims and all(fits(o) for o in x.operands)

    root = spec.root
    if root.opcode == "tuple" or not fits(root) or len({id(x) for x in dots}) != 1:
        return None
    return dots[0]


def launches(spec: KernelSpec) -> list[Launch] | None:
    dot = _the_dot(spec)
    if dot is None:
        return None
    d = _Dot(spec, dot)
    if d.M * d.N * d.B == 0:
        return None
    return [_gemm_launch(d, spec.name)]


def _gemm_launch(d: _Dot, name: str) -> Launch:
    spec = d.spec
    tile_bytes = TILE * PITCH * SLOT_BYTES
    steps_k = -(-d.K // TILE)

    def place(ctx: PhaseContext):
        """(batch index, first row, first column) of this block's tile."""
        b = ctx.b
        per_batch = i64(d.tiles_m * d.tiles_n)
        batch = d._split(b, b.udiv(ctx.block, per_batch), d.batch_dims)
        rest = b.urem(ctx.block, per_batch)
        m0 = b.mul(b.udiv(rest, i64(d.tiles_n)), i64(TILE))
        n0 = b.mul(b.urem(rest, i64(d.tiles_n)), i64(TILE))
        return batch, m0, n0

    def tile_slot(ctx: PhaseContext, which: int, row, column) -> ir.Value:
        b = ctx.b
        at = b.add(b.mul(row, i64(PITCH)), column)
        return ctx.shared_at(b.add(i64(which * tile_bytes), b.mul(at, i64(SLOT_BYTES))))

    def clear(ctx: PhaseContext) -> None:
        for r in range(ROWS):
            ctx.store_slot(r, d.zero())

    def load(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        batch, m0, n0 = place(ctx)
        k0 = b.mul(ctx.iteration, i64(TILE))
        tx, ty = ctx.lane, ctx.warp
        for r in range(ROWS):
            row = b.add(ty, i64(GROUPS * r))
            for which, (outer, inner, outer_n, inner_n) in enumerate(
                    [(b.add(m0, row), b.add(k0, tx), d.M, d.K), (b.add(k0, row), b.add(n0, tx), d.K, d.N)]):
                inside = b.and_(b.icmp_unsigned("<", outer, i64(outer_n)), b.icmp_unsigned("<", inner, i64(inner_n)))
                slot = tile_slot(ctx, which, row, tx)
                store_raw(b, slot, d.zero())
                with b.if_then(inside):
                    e.push_scope()
                    if which == 0:
                        value = convert(e, e.value(d.lhs, d.lhs_index(b, batch, outer, inner)), etype(d.lhs), d.out_t)
                    else:
                        value = convert(e, e.value(d.rhs, d.rhs_index(b, batch, outer, inner)), etype(d.rhs), d.out_t)
                    store_raw(b, slot, value)
                    e.pop_scope()

    def multiply(ctx: PhaseContext) -> None:
        b = ctx.b
        tx, ty = ctx.lane, ctx.warp
        accs = [b.alloca(d.ty) for _ in range(ROWS)]
        for r, acc in enumerate(accs):
            b.store(ctx.load_slot(r, d.ty), acc)

        def step(index):
            kk = index[0]
            y = load_raw(b, tile_slot(ctx, 1, kk, tx), d.ty)
            for r, acc in enumerate(accs):
                x = load_raw(b, tile_slot(ctx, 0, b.add(ty, i64(GROUPS * r)), kk), d.ty)
                b.store(d.multiply_add(b, b.load(acc), x, y), acc)

        for_range(b, [TILE], step)
        for r, acc in enumerate(accs):
            ctx.store_slot(r, b.load(acc))

    def write(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        batch, m0, n0 = place(ctx)
        n = b.add(n0, ctx.lane)
        for r in range(ROWS):
            m = b.add(m0, b.add(ctx.warp, i64(GROUPS * r)))
            inside = b.and_(b.icmp_unsigned("<", m, i64(d.M)), b.icmp_unsigned("<", n, i64(d.N)))
            with b.if_then(inside):
                e = args.elemental()   # the root at the output's index, the dot read as the sum
                e.buffer_reads[id(d.dot)] = lambda index, r=r: ctx.load_slot(r, d.ty)
                index = d.out_index(b, batch, m, n)
                args.store(args.out_ptrs[0], spec.outputs[0], index, e.value(spec.root, index))

    steps: list = [Phase(clear)]
    if steps_k:
        steps.append(Loop(steps_k, [Phase(load), Barrier(), Phase(multiply), Barrier()]))
    steps.append(Phase(write))
    return Launch(name, d.B * d.tiles_m * d.tiles_n, WARP * GROUPS, steps, shared_bytes=2 * tile_bytes,
                  local_slots=ROWS)
