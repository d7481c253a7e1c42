"""Reductions in SIMT form: the kernel of a reduce, or of a fusion whose roots are reduces of
one operand shape over the same dimensions (a variadic reduce's several values included),
or elementwise work on their results (a mean's division, a variance from two sums): the
reduces are computed across threads, then the thread writing an output computes the
elementwise work at its index from their values.

Row reductions (the operand's minor dimension is reduced): a block per output element. Its
threads stride over the reduced elements (consecutive threads, consecutive elements, in the
operand's layout), each folding its own; the 32 values of a warp fold into lane 0 by warp
shuffles down (16, 8, 4, 2, 1), lane 0 of each warp puts its value in shared memory, and
after a barrier warp 0 folds those the same way; thread 0 writes the result. A block has
as many warps as the row needs, up to 8.

Column reductions (the minor dimension is kept): a block per tile of 32 consecutive output
elements, 8 warps; lane l of warp g folds the elements of column l whose reduced position is
g, g + 8, ... (a warp reads 32 consecutive elements); the 8 partial values of each column
meet in shared memory and fold as a tree (4, 2, 1, a barrier after each step).

Two stages where the output is small and the reductions long (a full reduction is a row
reduction with one output): stage 1 cuts each output's reduced elements into chunks, one
block per (output, chunk), writing partial values to a scratch buffer; stage 2 reduces the
partials per output the same way. The reducer is applied as a tree, which HLO allows (the
order of a reduction is unspecified); integer results are exact.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction
from ...hlo.ops.registry import op_def
from ...hlo.shape import ArrayShape, TupleShape, default_layout
from ..llvm.indices import delinearize
from ..llvm.ir_types import I8, compute_type, i64
from ..llvm.loops import stepped_loop
from .kernels import KernelArgs, KernelSpec
from .simt import SLOT_BYTES, WARP, Barrier, Launch, Phase, PhaseContext, load_raw, store_raw, warp_tree, words_of

MAX_THREADS = 256
COLUMN_GROUPS = 8
SPLIT_BELOW_BLOCKS = 512      # fewer output blocks than this (an H100 has 132 SMs) ...
SPLIT_FROM_ELEMENTS = 8192    # ... and reductions this long: two stages
CHUNK = 4096                  # reduced elements per stage-1 block
MAX_CHUNKS = 1024
MAX_SHARED_BYTES = 48 * 1024  # static shared memory a block may have; beyond it (many fused
                              # reductions' values) the kernel stays elementwise


class _Plan:
    """The reduces of a kernel, their shape facts and their values' slots; the kernel's
    outputs are the reduces or elementwise work on their results."""

    def __init__(self, spec: KernelSpec, reduces: list[HloInstruction]):
        self.spec, self.reduces = spec, reduces
        first = reduces[0]
        self.operand: ArrayShape = first.operands[0].shape
        self.reduced = sorted(first.attrs["dimensions"])
        self.kept = [d for d in range(self.operand.rank) if d not in self.reduced]
        # reduced dimensions major to minor in the operand's layout: consecutive k, consecutive bytes
        self.reduced_order = [d for d in reversed(self.operand.minor_to_major) if d in self.reduced]
        self.K = math.prod(self.operand.dims[d] for d in self.reduced)
        self.out: ArrayShape = spec.outputs[0]
        self.O = self.out.size
        self.counts = [len(r.operands) // 2 for r in reduces]
        self.types = [compute_type(s.dtype) for r in reduces for s in _array_shapes(r)]
        self.V = len(self.types)
        self.row = self.operand.minor_to_major[0] in self.reduced if self.operand.rank else True

    # slots: acc v at v, the shuffled-in value at V + v
    def acc(self, v: int) -> int:
        return v

    def other(self, v: int) -> int:
        return self.V + v

    def inits(self, args: KernelArgs, e) -> list[ir.Value]:
        return [e.value(r.operands[n + i], ()) for r, n in zip(self.reduces, self.counts) for i in range(n)]

    def combine(self, e, current: list[ir.Value], incoming: list[ir.Value]) -> list[ir.Value]:
        out, at = [], 0
        for r, n in zip(self.reduces, self.counts):
            out += e.scalar_computation(r.attrs["to_apply"], current[at:at + n] + incoming[at:at + n])
            at += n
        return out

    def elements(self, e, o: ir.Value, k: ir.Value) -> list[ir.Value]:
        """The operands' elements at output position o (flat in the output's layout) and
        reduced position k (flat over the reduced dimensions in the operand's layout)."""
        b = e.b
        kept_index = delinearize(b, o, self.out.dims, self.out.minor_to_major) if self.out.rank else ()
        red_dims = tuple(self.operand.dims[d] for d in self.reduced_order)
        red_index = delinearize(b, k, red_dims, default_layout(len(red_dims))) if red_dims else ()
        full = [None] * self.operand.rank
        for d, i in zip(self.kept, kept_index):
            full[d] = i
        for d, i in zip(self.reduced_order, red_index):
            full[d] = i
        return [e.value(r.operands[i], tuple(full)) for r, n in zip(self.reduces, self.counts) for i in range(n)]

    def store_result(self, args: KernelArgs, o: ir.Value, values: list[ir.Value]) -> None:
        """The outputs at position o: the reduces' values, or the elementwise work on them
        (the reduces read as these values, everything else computed at o's index)."""
        b = args.b
        e = args.elemental()
        at = 0
        for r, n in zip(self.reduces, self.counts):
            mine = values[at:at + n]
            at += n
            e.buffer_reads[id(r)] = (lambda index, mine=mine: mine) if isinstance(r.shape, TupleShape) \
                else (lambda index, mine=mine: mine[0])
        index = delinearize(b, o, self.out.dims, self.out.minor_to_major) if self.out.rank else ()
        outputs = iter(zip(args.out_ptrs, self.spec.outputs))
        for root in self.spec.roots():
            value = e.value(root, index)
            for v in (value if isinstance(value, list) else [value]):
                ptr, shape = next(outputs)
                args.store(ptr, shape, index, v)


def _array_shapes(instr: HloInstruction) -> list[ArrayShape]:
    return list(instr.shape.elements) if isinstance(instr.shape, TupleShape) else [instr.shape]


def _reduces(spec: KernelSpec) -> list[HloInstruction] | None:
    """The reduces the kernel's outputs are made of, or None when they are not all reduces
    of one shape over the same dimensions, each output the reduces' values or elementwise
    work on them (at the output's index) and on things without a reduce in them."""
    roots = spec.roots()
    out = spec.outputs[0]
    if any(s.dims != out.dims or s.minor_to_major != out.minor_to_major for s in spec.outputs):
        return None
    reduces: list[HloInstruction] = []
    has_reduce: dict[int, bool] = {}

    def contains(x: HloInstruction) -> bool:
        if id(x) not in has_reduce:
            has_reduce[id(x)] = x.opcode == "reduce" or any(contains(o) for o in x.operands)
        return has_reduce[id(x)]

    def fits(x: HloInstruction) -> bool:
        if x.opcode == "reduce":
            if not any(r is x for r in reduces):
                reduces.append(x)
            return all(s.dims == out.dims for s in _array_shapes(x))
        if not contains(x):
            return True
        if x.opcode == "get-tuple-element":
            return x.operands[0].opcode == "reduce" and fits(x.operands[0])
        return op_def(x.opcode).fusion_kind == "elementwise" and isinstance(x.shape, ArrayShape) \
            and x.shape.dims == out.dims and all(fits(o) for o in x.operands)

    if not all(fits(r) for r in roots) or not reduces:
        return None
    first = reduces[0]
    for r in reduces:
        if r.operands[0].shape.dims != first.operands[0].shape.dims or \
                sorted(r.attrs["dimensions"]) != sorted(first.attrs["dimensions"]):
            return None
    return reduces


def launches(spec: KernelSpec) -> list[Launch] | None:
    reduces = _reduces(spec)
    if reduces is None:
        return None
    plan = _Plan(spec, reduces)
    if plan.O == 0 or plan.K == 0:
        return None   # no work, or only the init values: the elementwise kernel writes them
    if plan.row:
        blocks = plan.O
    else:
        blocks = -(-plan.O // WARP)
    chunks = 1
    if blocks < SPLIT_BELOW_BLOCKS and plan.K >= SPLIT_FROM_ELEMENTS:
        chunks = min(MAX_CHUNKS, -(-plan.K // CHUNK))
    if chunks == 1:
        launch = _launch(plan, spec.name, _Source(plan), None, 1)
        return [launch] if launch.shared_bytes <= MAX_SHARED_BYTES else None
    spec.scratch = [plan.O * chunks * SLOT_BYTES for _ in range(plan.V)]
    stage1 = _launch(plan, f"{spec.name}_partial", _Source(plan), chunks, chunks)
    stage2 = _launch(plan, spec.name, _PartialSource(plan, chunks), None, 1)
    if max(stage1.shared_bytes, stage2.shared_bytes) > MAX_SHARED_BYTES:
        spec.scratch = []
        return None
    return [stage1, stage2]


class _Source:
    """Stage 1 (or the only stage): the operands' elements."""

    def __init__(self, plan: _Plan):
        self.plan, self.K = plan, plan.K

    def read(self, args: KernelArgs, e, o, k) -> list[ir.Value]:
        return self.plan.elements(e, o, k)


class _PartialSource:
    """Stage 2: stage 1's partial values, value v of output o and chunk k at o * chunks + k."""

    def __init__(self, plan: _Plan, chunks: int):
        self.plan, self.K, self.chunks = plan, chunks, chunks

    def read(self, args: KernelArgs, e, o, k) -> list[ir.Value]:
        b = args.b
        at = b.add(b.mul(o, i64(self.chunks)), k)
        return [load_raw(b, b.gep(args.scratch_ptrs[v], [b.mul(at, i64(SLOT_BYTES))], source_etype=I8), ty)
                for v, ty in enumerate(self.plan.types)]


def _chunk_bounds(b: ir.IRBuilder, K: int, chunks: int | None, chunk: ir.Value | None):
    if chunks is None:
        return i64(0), i64(K)
    size = -(-K // chunks)
    begin = b.mul(chunk, i64(size))
    end = b.add(begin, i64(size))
    end = b.select(b.icmp_unsigned("<", end, i64(K)), end, i64(K))
    return begin, end


def _write(plan: _Plan, args: KernelArgs, o: ir.Value, chunk: ir.Value | None, chunks: int | None, values) -> None:
    """The result of output o: to the outputs, or (stage 1) to the partials."""
    b = args.b
    if chunks is None:
        plan.store_result(args, o, values)
        return
    at = b.add(b.mul(o, i64(chunks)), chunk)
    for v, value in enumerate(values):
        store_raw(b, b.gep(args.scratch_ptrs[v], [b.mul(at, i64(SLOT_BYTES))], source_etype=I8), value)


def _launch(plan: _Plan, name: str, source, chunks: int | None, split: int) -> Launch:
    return (_row_launch if plan.row else _column_launch)(plan, name, source, chunks, split)


def _fold(plan: _Plan, args: KernelArgs, e, o, begin, end, step, source) -> list[ir.Value]:
    """The fold of positions begin, begin + step, ... below end of output o, from the inits."""
    b = args.b
    inits = plan.inits(args, e)
    slots = [b.alloca(v.type) for v in inits]
    for s, v in zip(slots, inits):
        b.store(v, s)

    def body(k):
        e.push_scope()
        current = [b.load(s) for s in slots]
        for s, v in zip(slots, plan.combine(e, current, source.read(args, e, o, k))):
            b.store(v, s)
        e.pop_scope()

    stepped_loop(b, begin, end, body, step)
    return [b.load(s) for s in slots]


def _row_launch(plan: _Plan, name: str, source, chunks: int | None, split: int) -> Launch:
    per_block = -(-source.K // split)
    threads = min(MAX_THREADS, max(WARP, -(-per_block // WARP) * WARP))
    warps = threads // WARP
    V = plan.V
    words = [words_of(t) for t in plan.types]
    spec = plan.spec

    def position(ctx: PhaseContext):
        """(output position, chunk) of this block."""
        b = ctx.b
        if chunks is None:
            return ctx.block, None
        return b.udiv(ctx.block, i64(chunks)), b.urem(ctx.block, i64(chunks))

    def fold_own(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        o, chunk = position(ctx)
        begin, end = _chunk_bounds(b, source.K, chunks, chunk)
        values = _fold(plan, args, e, o, b.add(begin, ctx.tid), end, ctx.ntid, source)
        for v, value in enumerate(values):
            ctx.store_slot(plan.acc(v), value)

    def combine(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        current = [ctx.load_slot(plan.acc(v), t) for v, t in enumerate(plan.types)]
        incoming = [ctx.load_slot(plan.other(v), t) for v, t in enumerate(plan.types)]
        for v, value in enumerate(plan.combine(e, current, incoming)):
            ctx.store_slot(plan.acc(v), value)

    def to_shared(ctx: PhaseContext) -> None:
        b = ctx.b
        with b.if_then(b.icmp_unsigned("==", ctx.lane, i64(0))):
            for v, t in enumerate(plan.types):
                at = b.add(i64(v * warps * SLOT_BYTES), b.mul(ctx.warp, i64(SLOT_BYTES)))
                store_raw(b, ctx.shared_at(at), ctx.load_slot(plan.acc(v), t))

    def from_shared(ctx: PhaseContext) -> None:
        """Warp 0's lanes take the warps' values (the inits past the last warp)."""
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        inits = plan.inits(args, e)
        with b.if_then(b.icmp_unsigned("==", ctx.warp, i64(0))):
            lane = ctx.lane
            inside = b.icmp_unsigned("<", lane, i64(warps))
            safe = b.select(inside, lane, i64(0))
            for v, t in enumerate(plan.types):
                at = b.add(i64(v * warps * SLOT_BYTES), b.mul(safe, i64(SLOT_BYTES)))
                ctx.store_slot(plan.acc(v), b.select(inside, load_raw(b, ctx.shared_at(at), t), inits[v]))

    def write(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        o, chunk = position(ctx)
        with b.if_then(b.icmp_unsigned("==", ctx.tid, i64(0))):
            _write(plan, args, o, chunk, chunks, [ctx.load_slot(plan.acc(v), t) for v, t in enumerate(plan.types)])

    accs = [plan.acc(v) for v in range(V)]
    others = [plan.other(v) for v in range(V)]
    steps: list = [Phase(fold_own)] + warp_tree(accs, others, words, combine)
    if warps > 1:
        steps += [Phase(to_shared), Barrier(), Phase(from_shared)] + warp_tree(accs, others, words, combine)
    steps.append(Phase(write))
    return Launch(name, plan.O * split, threads, steps, shared_bytes=V * warps * SLOT_BYTES, local_slots=2 * V)


def _column_launch(plan: _Plan, name: str, source, chunks: int | None, split: int) -> Launch:
    groups = COLUMN_GROUPS
    tiles = -(-plan.O // WARP)
    spec = plan.spec
    row_bytes = WARP * SLOT_BYTES
    value_bytes = groups * row_bytes

    def position(ctx: PhaseContext):
        """(this thread's output position, chunk): block = tile * chunks + chunk."""
        b = ctx.b
        tile, chunk = (ctx.block, None) if chunks is None else (b.udiv(ctx.block, i64(chunks)),
                                                                 b.urem(ctx.block, i64(chunks)))
        return b.add(b.mul(tile, i64(WARP)), ctx.lane), chunk

    def shared_slot(ctx: PhaseContext, v: int, group: ir.Value) -> ir.Value:
        b = ctx.b
        return ctx.shared_at(b.add(i64(v * value_bytes), b.add(b.mul(group, i64(row_bytes)),
                                                                b.mul(ctx.lane, i64(SLOT_BYTES)))))

    def fold_own(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        o, chunk = position(ctx)
        begin, end = _chunk_bounds(b, source.K, chunks, chunk)
        # past the last column the loop runs no iteration and leaves the inits
        end = b.select(b.icmp_unsigned("<", o, i64(plan.O)), end, i64(0))
        values = _fold(plan, args, e, o, b.add(begin, ctx.warp), end, i64(groups), source)
        for v, value in enumerate(values):
            store_raw(b, shared_slot(ctx, v, ctx.warp), value)

    def tree_step(half: int):
        def emit(ctx: PhaseContext) -> None:
            args = KernelArgs(spec, ctx)
            e = args.elemental()
            b = ctx.b
            g = ctx.warp
            with b.if_then(b.icmp_unsigned("<", g, i64(half))):
                mine = [load_raw(b, shared_slot(ctx, v, g), t) for v, t in enumerate(plan.types)]
                theirs = [load_raw(b, shared_slot(ctx, v, b.add(g, i64(half))), t) for v, t in enumerate(plan.types)]
                for v, value in enumerate(plan.combine(e, mine, theirs)):
                    store_raw(b, shared_slot(ctx, v, g), value)
        return emit

    def write(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        o, chunk = position(ctx)
        mine = b.and_(b.icmp_unsigned("==", ctx.warp, i64(0)), b.icmp_unsigned("<", o, i64(plan.O)))
        with b.if_then(mine):
            _write(plan, args, o, chunk, chunks,
                   [load_raw(b, shared_slot(ctx, v, i64(0)), t) for v, t in enumerate(plan.types)])

    steps: list = [Phase(fold_own), Barrier()]
    half = groups // 2
    while half:
        steps += [Phase(tree_step(half)), Barrier()]
        half //= 2
    steps.append(Phase(write))
    return Launch(name, tiles * split, WARP * groups, steps, shared_bytes=plan.V * value_bytes, local_slots=1)
