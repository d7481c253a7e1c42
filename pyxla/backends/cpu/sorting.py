"""Sorting on the CPU backend: sort (any comparator, any number of operands), topk, and the
TopK custom-call of XLA CPU's optimized HLO.

One engine does all three. Each row along the sort dimension is sorted as a permutation of
its positions (i32 indices in scratch memory): insertion sort of short runs, then bottom-up
merges of runs into a second index array, back and forth. Both put an element after every
equal element before it, so the sort is stable, which satisfies is_stable=true and gives the
evaluator's order otherwise too (its merge sort is stable). The comparator is compiled as
scalar IR where it is asked (`less(i, j)` on two positions of the row), so NaN, -0, total
order and multi-key ties are whatever the comparator computation says. The outputs are then
gathered through the permutation.

The kernels read their operands while writing their outputs: they must not share memory
(buffer assignment writes only elementwise results in place over an operand).

Also here: small IR building blocks the sort, window and convolution kernels share (loops
whose bounds are known only at run time, short-circuit conditions, scratch memory).
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape, TupleShape
from .codegen import KERNELS, tuple_element_offsets
from .elemental import Unsupported, _total_order_key, alloca_in_entry
from .ir_types import I1, I8, I32, I64, PTR, i64
from .loops import for_range

INSERTION_RUN = 16          # rows are insertion-sorted in runs of this length before merging
STACK_SCRATCH_BYTES = 1 << 16   # larger scratch comes from malloc, not the stack


# --- IR building blocks ---------------------------------------------------------------------
#
# The loops here carry control flow (comparisons that decide what moves where), so they are
# marked not to be unrolled: unrolled copies of a comparator only grow the code (and LLVM's
# compile time, many-fold) without making a branchy loop faster.

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


def _no_unroll(b: ir.IRBuilder, back_edge: ir.Instruction) -> None:
    module = b.module
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    back_edge.set_metadata("llvm.loop", _LoopId(module, [disable]))


def counted_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, body: Callable[[ir.Value], None],
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
    _no_unroll(b, b.branch(header))
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
    _no_unroll(b, b.branch(header))
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


def minimum(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


class Scratch:
    """Temporary memory for one kernel call: on the stack when small, else malloc'd and
    freed by `release()` at the end of the kernel."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module, nbytes: int):
        self.b = b
        self.module = module
        self.on_heap = nbytes > STACK_SCRATCH_BYTES
        if self.on_heap:
            self.pointer = b.call(_libc(module, "malloc", PTR, [I64]), [i64(max(nbytes, 1))])
        else:
            slot = alloca_in_entry(b, ir.ArrayType(I8, max(nbytes, 1)))
            slot.align = 64
            slot.type = PTR   # used through typed geps, like the kernels' (opaque) pointer arguments
            self.pointer = slot

    def release(self) -> None:
        if self.on_heap:
            self.b.call(_libc(self.module, "free", ir.VoidType(), [PTR]), [self.pointer])


def _libc(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn


def physical_stride(shape: ArrayShape, dim: int) -> int:
    """Elements between neighbours along `dim` in the shape's layout."""
    stride = 1
    for d in shape.minor_to_major:
        if d == dim:
            return stride
        stride *= shape.dims[d]
    raise ValueError(f"dimension {dim} is not in the layout of {shape.to_text(False)}")


def output_pointers(ke) -> list[ir.Value]:
    """The kernel's output buffer, or one pointer per element of a tuple-valued output."""
    shape = ke.instr.shape
    if not isinstance(shape, TupleShape):
        return [ke.out_ptr]
    return [ke.b.gep(ke.out_ptr, [i64(at)], source_etype=I8) if at else ke.out_ptr
            for at in tuple_element_offsets(shape)]


def kernel_root(ke) -> HloInstruction:
    """The op a kernel computes: the instruction itself, or the root of its fusion."""
    return ke.fused.root if ke.fused is not None else ke.instr


# --- the engine -------------------------------------------------------------------------------

# less(i, j) -> i1: whether the element at row position i (i64) sorts strictly before the one at j
Less = Callable[[ir.Value, ir.Value], ir.Value]


def emit_row_sorts(ke, rows: tuple, n: int, less_for_row: Callable[[tuple], Less],
                   write_row: Callable[[tuple, Callable[[ir.Value], ir.Value]], None]) -> None:
    """For every row index over `rows`: the stable permutation of its n positions under
    less_for_row(row), then write_row(row, position_of) where position_of(j) is the i64 row
    position of the j-th element in sorted order."""
    b = ke.b
    if n == 0 or any(d == 0 for d in rows):
        return
    scratch = Scratch(b, ke.codegen.ir, 2 * 4 * n)
    first = scratch.pointer
    second = b.gep(first, [i64(4 * n)], source_etype=I8)

    def row_body(row):
        ke.e.push_scope()
        less = less_for_row(row)
        for_range(b, [n], lambda j: b.store(b.trunc(j[0], I32), b.gep(first, [j[0]], source_etype=I32)))
        _insertion_sort_runs(b, first, n, less)
        order = _merge_passes(b, first, second, n, less)
        write_row(row, lambda j: _position(b, order, j))
        ke.e.pop_scope()

    for_range(b, rows, row_body)
    scratch.release()


def _position(b: ir.IRBuilder, order: ir.Value, j: ir.Value) -> ir.Value:
    return b.zext(b.load(b.gep(order, [j], source_etype=I32), typ=I32), I64)


def _insertion_sort_runs(b: ir.IRBuilder, order: ir.Value, n: int, less: Less) -> None:
    """Sort order[s : s + INSERTION_RUN] for every run start s; an element moves left only
    past elements it sorts strictly before (stable)."""
    if n < 2:
        return

    def run(start):
        end = minimum(b, b.add(start, i64(INSERTION_RUN)), i64(n))

        def insert(i):
            moving = b.load(b.gep(order, [i], source_etype=I32), typ=I32)
            moving_at = b.zext(moving, I64)
            hole = variable(b, i)

            def keeps_moving():
                j = b.load(hole)
                return short_circuit(b, b.icmp_signed(">", j, start),
                                     lambda: less(moving_at, _position(b, order, b.sub(j, i64(1)))))

            def shift():
                j = b.load(hole)
                previous = b.load(b.gep(order, [b.sub(j, i64(1))], source_etype=I32), typ=I32)
                b.store(previous, b.gep(order, [j], source_etype=I32))
                b.store(b.sub(j, i64(1)), hole)

            while_loop(b, keeps_moving, shift)
            b.store(moving, b.gep(order, [b.load(hole)], source_etype=I32))

        counted_loop(b, b.add(start, i64(1)), end, insert)

    counted_loop(b, i64(0), i64(n), run, INSERTION_RUN)


def _merge_passes(b: ir.IRBuilder, first: ir.Value, second: ir.Value, n: int, less: Less) -> ir.Value:
    """Merge sorted runs pairwise, doubling their width, between the two index arrays;
    returns the array that holds the final order."""
    if n <= INSERTION_RUN:
        return first
    source = variable(b, first)
    target = variable(b, second)
    width = variable(b, i64(INSERTION_RUN))

    def merge_level():
        src, dst, w = b.load(source), b.load(target), b.load(width)

        def merge_pair(lo):
            mid = minimum(b, b.add(lo, w), i64(n))
            hi = minimum(b, b.add(mid, w), i64(n))
            left = variable(b, lo)
            right = variable(b, mid)

            def take(k):
                i, j = b.load(left), b.load(right)
                from_right = short_circuit(b, b.icmp_signed("<", j, hi), lambda: short_circuit(
                    b, b.icmp_signed(">=", i, mid),
                    lambda: less(_position(b, src, j), _position(b, src, i)), is_and=False))
                chosen = b.select(from_right, j, minimum(b, i, i64(n - 1)))
                value = b.load(b.gep(src, [chosen], source_etype=I32), typ=I32)
                b.store(value, b.gep(dst, [k], source_etype=I32))
                b.store(b.add(j, b.zext(from_right, I64)), right)
                b.store(b.add(i, b.zext(b.not_(from_right), I64)), left)

            counted_loop(b, lo, hi, take)

        counted_loop(b, i64(0), i64(n), merge_pair, b.mul(w, i64(2)))
        b.store(dst, source)
        b.store(src, target)
        b.store(b.mul(w, i64(2)), width)

    while_loop(b, lambda: b.icmp_signed("<", b.load(width), i64(n)), merge_level)
    return b.load(source)


def _with_position(row: tuple, dim: int, j: ir.Value) -> tuple:
    """A row index (its entry at `dim` ignored) completed with position j along dim."""
    return row[:dim] + (j,) + row[dim + 1:]


def _other_dims(shape: ArrayShape, dim: int) -> tuple:
    """Row extents: the shape with the sort dimension as a unit dimension (for_range gives it 0)."""
    return tuple(1 if d == dim else n for d, n in enumerate(shape.dims))


def _store(ke, ptr: ir.Value, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
    ke._store(ptr, shape, index, value)


def _array_shapes(shape) -> list[ArrayShape]:
    return list(shape.elements) if isinstance(shape, TupleShape) else [shape]


# --- sort -------------------------------------------------------------------------------------

def emit_sort(ke) -> None:
    root = kernel_root(ke)
    (dim,) = root.attrs["dimensions"]
    comparator = root.attrs["to_apply"]
    operands = root.operands
    shape: ArrayShape = operands[0].shape
    e, b = ke.e, ke.b

    def values_at(row, position):
        index = _with_position(row, dim, position)
        return [e.value(op, index) for op in operands]

    def less_for_row(row):
        def less(i, j):
            e.push_scope()   # values loaded for one comparison are not visible to the next
            lhs, rhs = values_at(row, i), values_at(row, j)
            (result,) = e.scalar_computation(comparator, [v for pair in zip(lhs, rhs) for v in pair])
            e.pop_scope()
            return result
        return less

    outputs = list(zip(output_pointers(ke), _array_shapes(ke.instr.shape), operands))

    def write_row(row, position_of):
        def gather(j):
            e.push_scope()
            source = position_of(j[0])
            for ptr, out_shape, op in outputs:
                index = _with_position(row, dim, j[0])
                _store(ke, ptr, out_shape, index, e.value(op, _with_position(row, dim, source)))
            e.pop_scope()
        for_range(b, [shape.dims[dim]], gather)

    emit_row_sorts(ke, _other_dims(shape, dim), shape.dims[dim], less_for_row, write_row)


# --- topk and the TopK custom-call --------------------------------------------------------------

def _emit_first_k(ke, operand: HloInstruction, less_of_values: Callable) -> None:
    """Outputs (values, s32 indices) of the first k elements of each row (last dimension) in
    the order less_of_values(value_i, index_i, value_j, index_j) -> i1 gives; k is the
    outputs' last dimension. Stable: ties keep the lower index first."""
    e, b = ke.e, ke.b
    shape: ArrayShape = operand.shape
    dim = shape.rank - 1
    values_shape, indices_shape = ke.instr.shape.elements
    k = values_shape.dims[-1]
    values_ptr, indices_ptr = output_pointers(ke)

    def less_for_row(row):
        def less(i, j):
            e.push_scope()
            x = e.value(operand, _with_position(row, dim, i))
            y = e.value(operand, _with_position(row, dim, j))
            result = less_of_values(x, b.trunc(i, I32), y, b.trunc(j, I32))
            e.pop_scope()
            return result
        return less

    def write_row(row, position_of):
        def take(j):
            e.push_scope()
            source = position_of(j[0])
            index = _with_position(row, dim, j[0])
            _store(ke, values_ptr, values_shape, index, e.value(operand, _with_position(row, dim, source)))
            _store(ke, indices_ptr, indices_shape, index, b.trunc(source, I32))
            e.pop_scope()
        for_range(b, [k], take)

    emit_row_sorts(ke, _other_dims(shape, dim), shape.dims[dim], less_for_row, write_row)


def emit_topk(ke) -> None:
    """topk(x), k, largest: XLA's comparator is IEEE total order on the values (NaN above
    +inf, -0 below +0), descending when largest."""
    root = kernel_root(ke)
    (operand,) = root.operands
    t = operand.shape.dtype
    b = ke.b
    direction = ">" if root.attrs.get("largest", True) else "<"

    def less(x, _i, y, _j):
        if t.is_float:
            return b.icmp_signed(direction, _total_order_key(b, x, t), _total_order_key(b, y, t))
        if t.is_signed:
            return b.icmp_signed(direction, x, y)
        return b.icmp_unsigned(direction, x, y)

    _emit_first_k(ke, operand, less)


def emit_topk_custom_call(ke) -> None:
    """XLA CPU's TopK custom-call: the order its comparator computation gives, which takes
    (value_lhs, value_rhs) or (value_lhs, value_rhs, index_lhs, index_rhs)."""
    root = kernel_root(ke)
    (operand,) = root.operands
    (comparator,) = root.attrs["called_computations"]
    takes_indices = len(comparator.parameters) == 4

    def less(x, i, y, j):
        args = [x, y, i, j] if takes_indices else [x, y]
        (result,) = ke.e.scalar_computation(comparator, args)
        return result

    _emit_first_k(ke, operand, less)


CUSTOM_CALL_KERNELS = {"TopK": emit_topk_custom_call}


def _custom_call_dispatch(previous):
    """KERNELS["custom-call"]: by target; targets not here go to whatever was registered before."""
    def emit(ke):
        target = kernel_root(ke).attrs.get("custom_call_target")
        kernel = CUSTOM_CALL_KERNELS.get(target)
        if kernel is not None:
            return kernel(ke)
        if previous is not None:
            return previous(ke)
        raise Unsupported(f"the CPU backend cannot compile custom-call {target!r} yet: {ke.instr.describe()}")
    return emit


KERNELS["sort"] = emit_sort
KERNELS["topk"] = emit_topk
KERNELS["custom-call"] = _custom_call_dispatch(KERNELS.get("custom-call"))
