"""Kernels for the ops that do not write element by element, in simple correct forms, as a
lone instruction or the root of a fusion (operands read through the elemental emitter):

  - sort: a bitonic network in shared memory, a block per row (bitonic.py); rows too long
    for shared memory take one thread per row (grid-stride over rows), which copies the row
    to the outputs and sorts it there by insertion under the comparator (stable);
  - top-k (`topk`, XLA's TopK custom-call): one thread per row keeps the k best so far in
    the outputs, in order, inserting each element after those it does not beat (ties keep
    the lower index first);
  - dynamic-update-slice: a grid-stride copy of the operand, then a grid-stride write of
    the update at its clamped starts (a second launch: the copy is done everywhere first);
  - scatter: a grid-stride copy of the inputs, then one thread applying the update windows
    in order (XLA's order: batch positions row-major, then window elements), skipping a
    window that would reach outside, combining with `to_apply`;
  - select-and-scatter: a grid-stride fill with the init value, then one thread visiting
    the source positions in order, selecting each window's element as XLA does and
    combining the source value into it with `scatter`.
Semantics are the evaluator's (pyxla/hlo/ops), which are XLA's.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.ops.indexing import scatter_dims, scatter_operand_groups
from ...hlo.shape import ArrayShape, default_layout
from ..llvm.elemental import total_order_key
from ..llvm.indexing import at_window, batch_starts, clamped_starts, join_index
from ..llvm.indices import delinearize
from ..llvm.ir_types import I1, I32, etype, i64
from ..llvm.loops import counted_loop, for_range, short_circuit, variable, while_loop
from . import bitonic
from .kernels import KernelArgs, KernelSpec, elementwise_launch, global_thread, grid_loop
from .simt import Launch, Phase, PhaseContext

SERIAL_THREADS = 1


def launches(spec: KernelSpec) -> list[Launch] | None:
    root = spec.root
    op = root.opcode
    if op == "sort":
        return [bitonic.launch(spec) or _row_launch(spec, _sort_row)]
    if op == "topk" or (op == "custom-call" and root.attrs.get("custom_call_target") == "TopK"):
        return [_row_launch(spec, _top_k_row)]
    if op == "dynamic-update-slice":
        return _dynamic_update_slice(spec)
    if op == "scatter":
        return _scatter(spec)
    if op == "select-and-scatter":
        return _select_and_scatter(spec)
    return None


def _single_thread(spec: KernelSpec, name: str, emit) -> Launch:
    def phase(ctx: PhaseContext) -> None:
        b = ctx.b
        with b.if_then(b.icmp_unsigned("==", b.add(ctx.tid, ctx.block), i64(0))):
            emit(KernelArgs(spec, ctx))
    return Launch(name, 1, SERIAL_THREADS, [Phase(phase)])


# --- rows: sort and top-k -------------------------------------------------------------------------

def _row_launch(spec: KernelSpec, per_row) -> Launch:
    """A grid-stride loop over the rows along the root's dimension, per_row(args, row index
    with the row's position None, dim) for each."""
    root = spec.root
    shape: ArrayShape = root.operands[0].shape
    dim = root.attrs["dimensions"][0] if root.opcode == "sort" else shape.rank - 1
    others = tuple(n for d, n in enumerate(shape.dims) if d != dim)
    rows = 1
    for n in others:
        rows *= n

    def emit(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        first, stride = global_thread(ctx)

        def body(r):
            rest = list(delinearize(b, r, others, default_layout(len(others)))) if others else []
            row = tuple(rest[:dim]) + (None,) + tuple(rest[dim:])
            per_row(spec, args, row, dim)

        grid_loop(b, first, stride, rows, body)

    blocks = max(1, min(4096, -(-rows // 128)))
    return Launch(spec.name, blocks, 128, [Phase(emit)], sim_blocks=min(blocks, 2))


def _at(row: tuple, j: ir.Value) -> tuple:
    return tuple(j if i is None else i for i in row)


def _sort_row(spec: KernelSpec, args: KernelArgs, row: tuple, dim: int) -> None:
    root = spec.root
    b = args.b
    n = root.operands[0].shape.dims[dim]
    comparator = root.attrs["to_apply"]
    outs = list(zip(args.out_ptrs, spec.outputs))
    e = args.elemental()

    def copy(j):
        e.push_scope()
        for op, (ptr, shape) in zip(root.operands, outs):
            args.store(ptr, shape, _at(row, j), e.value(op, _at(row, j)))
        e.pop_scope()

    for_range(b, [n], lambda index: copy(index[0]))

    def insert(i):
        j = variable(b, i)

        def keeps_going():
            jv = b.load(j)

            def before():
                e.push_scope()
                here = [args.load(p, s, _at(row, jv)) for p, s in outs]
                prev = [args.load(p, s, _at(row, b.sub(jv, i64(1)))) for p, s in outs]
                (less,) = e.scalar_computation(comparator, [v for pair in zip(here, prev) for v in pair])
                e.pop_scope()
                return less

            return short_circuit(b, b.icmp_signed(">", jv, i64(0)), before)

        def swap():
            jv = b.load(j)
            here, prev = _at(row, jv), _at(row, b.sub(jv, i64(1)))
            for p, s in outs:
                x, y = args.load(p, s, here), args.load(p, s, prev)
                args.store(p, s, here, y)
                args.store(p, s, prev, x)
            b.store(b.sub(jv, i64(1)), j)

        while_loop(b, keeps_going, swap)

    if n > 1:
        counted_loop(b, i64(1), i64(n), insert, unrolled=False)


def _top_k_row(spec: KernelSpec, args: KernelArgs, row: tuple, dim: int) -> None:
    root = spec.root
    b = args.b
    x = root.operands[0]
    n = x.shape.dims[dim]
    (vptr, vshape), (iptr, ishape) = zip(args.out_ptrs, spec.outputs)
    k = vshape.dims[-1]
    e = args.elemental()
    t = etype(x)
    if root.opcode == "topk":
        largest = root.attrs.get("largest", True)

        def beats(v, j, w, wj):   # total order: NaN above +inf, -0 below +0
            kv, kw = total_order_key(b, v, t), total_order_key(b, w, t)
            return b.icmp_signed(">" if largest else "<", kv, kw) if t.is_float else \
                (b.icmp_signed if t.is_signed else b.icmp_unsigned)(">" if largest else "<", v, w)
    else:
        (comparator,) = root.attrs["called_computations"]
        with_indices = len(comparator.parameters) == 4

        def beats(v, j, w, wj):
            values = [v, w, j, wj] if with_indices else [v, w]
            return e.scalar_computation(comparator, values)[0]

    count = variable(b, i64(0))

    def consider(index):
        e.push_scope()
        j = index[0]
        v = e.value(x, _at(row, j))
        j32 = b.trunc(j, I32)
        # the slot it goes to: after every kept element it does not beat
        slot = variable(b, b.load(count))

        def moving():
            s = b.load(slot)

            def beats_previous():
                at = _at(row, b.sub(s, i64(1)))
                return beats(v, j32, args.load(vptr, vshape, at), args.load(iptr, ishape, at))

            return short_circuit(b, b.icmp_signed(">", s, i64(0)), beats_previous)

        def shift():
            s = b.load(slot)
            src = _at(row, b.sub(s, i64(1)))
            with b.if_then(b.icmp_signed("<", s, i64(k))):
                args.store(vptr, vshape, _at(row, s), args.load(vptr, vshape, src))
                args.store(iptr, ishape, _at(row, s), args.load(iptr, ishape, src))
            b.store(b.sub(s, i64(1)), slot)

        while_loop(b, moving, shift)
        s = b.load(slot)
        with b.if_then(b.icmp_signed("<", s, i64(k))):
            args.store(vptr, vshape, _at(row, s), v)
            args.store(iptr, ishape, _at(row, s), j32)
        c = b.load(count)
        b.store(b.select(b.icmp_signed("<", c, i64(k)), b.add(c, i64(1)), c), count)
        e.pop_scope()

    for_range(b, [n], consider)


# --- dynamic-update-slice, scatter, select-and-scatter ------------------------------------------------

def _dynamic_update_slice(spec: KernelSpec) -> list[Launch]:
    root = spec.root
    operand, update, *start_values = root.operands
    shape: ArrayShape = spec.outputs[0]

    def write_update(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        e = args.elemental()
        starts = clamped_starts(e, start_values, shape.dims, update.shape.dims)
        first, stride = global_thread(ctx)

        def body(p):
            e.push_scope()
            index = delinearize(b, p, update.shape.dims, default_layout(update.shape.rank)) if update.shape.rank else ()
            target = tuple(b.add(s, i) for s, i in zip(starts, index))
            args.store(args.out_ptrs[0], shape, target, e.value(update, index))
            e.pop_scope()

        grid_loop(b, first, stride, update.shape.size, body)

    copy = elementwise_launch(spec, f"{spec.name}_copy", roots=[operand], outputs=[0])
    blocks = max(1, min(4096, -(-update.shape.size // 256)))
    return [copy, Launch(spec.name, blocks, 256, [Phase(write_update)], sim_blocks=min(blocks, 2))]


def _scatter(spec: KernelSpec) -> list[Launch]:
    root = spec.root
    inputs, indices, updates = scatter_operand_groups(root.operands)
    dn = scatter_dims(root.attrs)
    combiner = root.attrs["to_apply"]
    shapes = spec.outputs
    dims = shapes[0].dims
    rank = len(dims)
    window_operand_dims = dn.window_operand_dims(rank)
    window_sizes = tuple(updates[0].shape.dims[d] for d in dn.window_dims)
    window = dn.scatter_window(rank, updates[0].shape.dims)

    def apply(args: KernelArgs) -> None:
        b, e = args.b, args.elemental()
        if any(n < w for n, w in zip(dims, window)):   # an empty operand: no window fits
            return

        def per_window(batch):
            e.push_scope()
            starts = batch_starts(e, indices, dn, rank, batch)
            fits = ir.Constant(I1, 1)
            for od in dn.index_map:   # a window with any element outside is skipped whole
                fits = b.and_(fits, b.and_(b.icmp_signed(">=", starts[od], i64(0)),
                                           b.icmp_signed("<=", starts[od], i64(dims[od] - window[od]))))
            with b.if_then(fits):
                def per_element(w):
                    e.push_scope()
                    target = at_window(b, starts, w, window_operand_dims)
                    current = [args.load(p, s, target) for p, s in zip(args.out_ptrs, shapes)]
                    new = [e.value(u, join_index(batch, w, dn.window_dims)) for u in updates]
                    for p, s, v in zip(args.out_ptrs, shapes, e.scalar_computation(combiner, current + new)):
                        args.store(p, s, target, v)
                    e.pop_scope()

                for_range(b, window_sizes, per_element)
            e.pop_scope()

        for_range(b, dn.batch_shape(indices.shape.dims), per_window)

    copy = elementwise_launch(spec, f"{spec.name}_copy", roots=list(inputs), outputs=list(range(len(inputs))))
    return [copy, _single_thread(spec, spec.name, apply)]


def _select_and_scatter(spec: KernelSpec) -> list[Launch]:
    root = spec.root
    x, source, init = root.operands
    windows = tuple(root.attrs["window"])
    shape: ArrayShape = spec.outputs[0]
    select, scatter = root.attrs["select"], root.attrs["scatter"]

    def fill(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        e = args.elemental()
        value = e.value(init, ())
        first, stride = global_thread(ctx)
        grid_loop(b, first, stride, shape.size,
                  lambda p: args.store(args.out_ptrs[0], shape,
                                       delinearize(b, p, shape.dims, default_layout(shape.rank)), value))

    def apply(args: KernelArgs) -> None:
        b, e = args.b, args.elemental()
        if x.shape.size == 0:
            return

        def per_position(s):
            e.push_scope()
            have = variable(b, ir.Constant(I1, 0))
            chosen = variable(b, i64(0))
            chosen_value = variable(b, e.value(init, ()))   # a placeholder of the value's type

            def per_offset(offset):
                e.push_scope()
                valid = ir.Constant(I1, 1)
                index = []
                for d, (si, oi, w) in enumerate(zip(s, offset, windows)):
                    padded = b.sub(b.add(b.mul(si, i64(w.stride)), b.mul(oi, i64(w.rhs_dilate))), i64(w.pad_low))
                    at = b.sdiv(padded, i64(w.lhs_dilate)) if w.lhs_dilate != 1 else padded
                    ok = b.and_(b.icmp_signed(">=", padded, i64(0)), b.icmp_signed("<", at, i64(x.shape.dims[d])))
                    if w.lhs_dilate != 1:
                        ok = b.and_(ok, b.icmp_signed("==", b.srem(padded, i64(w.lhs_dilate)), i64(0)))
                    valid = b.and_(valid, ok)
                    index.append(at)
                with b.if_then(valid):
                    value = e.value(x, tuple(index))
                    (keep,) = e.scalar_computation(select, [b.load(chosen_value), value])
                    take = b.or_(b.not_(b.load(have)), b.not_(keep))
                    with b.if_then(take):
                        b.store(ir.Constant(I1, 1), have)
                        b.store(value, chosen_value)
                        flat = i64(0)
                        for d, i in enumerate(index):
                            flat = b.add(b.mul(flat, i64(x.shape.dims[d])), i)
                        b.store(flat, chosen)
                e.pop_scope()

            for_range(b, [w.size for w in windows], per_offset)
            with b.if_then(b.load(have)):
                target = delinearize(b, b.load(chosen), shape.dims, default_layout(shape.rank))
                current = args.load(args.out_ptrs[0], shape, target)
                (combined,) = e.scalar_computation(scatter, [current, e.value(source, s)])
                args.store(args.out_ptrs[0], shape, target, combined)
            e.pop_scope()

        for_range(b, source.shape.dims, per_position)

    blocks = max(1, min(4096, -(-shape.size // 256)))
    return [Launch(f"{spec.name}_fill", blocks, 256, [Phase(fill)], sim_blocks=min(blocks, 2)),
            _single_thread(spec, spec.name, apply)]

