"""Sorting on the CPU backend: sort (any comparator, any number of operands), topk, and the
TopK custom-call of XLA CPU's optimized HLO.

One engine does all three (and for a top k of a long row, a one-pass selection,
emit_ranked_rows). Each row along the sort dimension is copied into scratch memory
as columns (the operands, and for topk the s32 indices), sorted there, and written out:
insertion sort of short runs, then bottom-up merges of runs into a second copy of the
columns, back and forth, every column of an element moving with it (so comparisons read
neighbouring memory, not a permutation's scattered positions). A merge step compares both
heads and picks by selects, without branches (sorting 1024 x 1024 f32 rows: 80 -> 60 ms;
NumPy's vectorised quicksort takes 4.6: a radix sort of total-order keys would be the next
step for comparators that are plain key orders). Both steps put an element
after every element before it that it does not sort strictly before, so the sort is
stable, which satisfies is_stable=true and gives the evaluator's order otherwise too (its
merge sort is stable; for a comparator that is not a strict weak order, which order comes
out is implementation-defined). The comparator is compiled as scalar IR where it is asked,
so NaN, -0, total order and multi-key ties are whatever the comparator computation says.
A row is read whole before it is written, so an output may even share its operand's memory.

Also here: small IR building blocks the sort, window and convolution kernels share (loops
whose bounds are known only at run time, short-circuit conditions).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import llvmlite.ir as ir

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, TupleShape
from ....hlo.types import S32, ElementType
from ...llvm.elemental import Unsupported, total_order_key
from ...llvm.ir_types import I8, I32, I64, i64, smin, storage_type, to_compute, to_storage
from ...llvm.loops import for_range, short_circuit, stepped_loop, variable, while_loop
from ..codegen import KERNELS, kernel_root, output_pointers

INSERTION_RUN = 16          # rows are insertion-sorted in runs of this length before merging


# --- IR building blocks ---------------------------------------------------------------------
#
# The loops here carry control flow (comparisons that decide what moves where), so they are
# marked not to be unrolled: unrolled copies of a comparator only grow the code (and LLVM's
# compile time, many-fold) without making a branchy loop faster.

# --- the engine -------------------------------------------------------------------------------

# less(lhs, rhs) -> i1: whether the element with column values lhs sorts strictly before rhs's
Less = Callable[[list, list], ir.Value]


class RowColumns:
    """Two scratch copies (A and B) of one row's columns, each column an array of n elements
    in its storage type. An element's values move together from one copy to the other, so
    comparisons read neighbouring memory however far the sort has permuted the row."""

    def __init__(self, b: ir.IRBuilder, types: list[ElementType], n: int, memory: ir.Value):
        self.b = b
        self.types = types
        self.offsets = []
        at = 0
        for t in types:
            self.offsets.append(at)
            at += _column_bytes(t, n)
        self.first = memory
        self.second = b.gep(memory, [i64(at)], source_etype=I8)

    @staticmethod
    def bytes(types: list[ElementType], n: int) -> int:
        """Scratch bytes for both copies."""
        return 2 * sum(_column_bytes(t, n) for t in types)

    def _slot(self, copy: ir.Value, column: int, j: ir.Value) -> ir.Value:
        b, t = self.b, self.types[column]
        base = b.gep(copy, [i64(self.offsets[column])], source_etype=I8) if self.offsets[column] else copy
        return b.gep(base, [j], source_etype=storage_type(t))

    def raw(self, copy: ir.Value, j: ir.Value) -> list[ir.Value]:
        return [self.b.load(self._slot(copy, c, j), typ=storage_type(t)) for c, t in enumerate(self.types)]

    def values(self, copy: ir.Value, j: ir.Value) -> list[ir.Value]:
        return [to_compute(self.b, v, t) for v, t in zip(self.raw(copy, j), self.types)]

    def put_raw(self, copy: ir.Value, j: ir.Value, raw: list[ir.Value]) -> None:
        for c, v in enumerate(raw):
            self.b.store(v, self._slot(copy, c, j))

    def put(self, copy: ir.Value, j: ir.Value, values: list[ir.Value]) -> None:
        self.put_raw(copy, j, [to_storage(self.b, v, t) for v, t in zip(values, self.types)])


def _column_bytes(t: ElementType, n: int) -> int:
    return -(-n * t.bytes // 8) * 8   # 8-byte aligned, so every column is aligned for its type


def emit_row_sorts(ke, rows: tuple, n: int, types: list[ElementType],
                   fill: Callable[[tuple, ir.Value], list], less: Less,
                   write_row: Callable[[tuple, Callable[[ir.Value], list]], None]) -> None:
    """For every row index over `rows`: columns of `types` filled with fill(row, j) for
    positions j < n, sorted stably by `less`, then write_row(row, sorted_values) where
    sorted_values(j) gives the column values of the j-th element in sorted order."""
    b = ke.b
    if n == 0 or any(d == 0 for d in rows):
        return
    columns = RowColumns(b, types, n, ke.reserve_scratch(RowColumns.bytes(types, n)))

    def row_body(row):
        ke.e.push_scope()

        def fill_one(j):
            ke.e.push_scope()
            columns.put(columns.first, j[0], fill(row, j[0]))
            ke.e.pop_scope()

        for_range(b, [n], fill_one)
        _insertion_sort_runs(b, columns, n, less)
        final = _merge_passes(b, columns, n, less)
        write_row(row, lambda j: columns.values(final, j))
        ke.e.pop_scope()

    for_range(b, rows, row_body)


def _insertion_sort_runs(b: ir.IRBuilder, columns: RowColumns, n: int, less: Less) -> None:
    """Sort copy A in runs of INSERTION_RUN; an element moves left only past elements it
    sorts strictly before (stable)."""
    if n < 2:
        return
    row = columns.first

    def run(start):
        end = smin(b, b.add(start, i64(INSERTION_RUN)), i64(n))

        def insert(i):
            moving = columns.raw(row, i)
            moving_values = [to_compute(b, v, t) for v, t in zip(moving, columns.types)]
            columns.put_raw(row, _open_hole(b, columns, row, i, start, moving_values, less), moving)

        stepped_loop(b, b.add(start, i64(1)), end, insert)

    stepped_loop(b, i64(0), i64(n), run, INSERTION_RUN)


def _open_hole(b: ir.IRBuilder, columns: RowColumns, copy: ir.Value, hole: ir.Value, lowest: ir.Value,
               values: list, less: Less) -> ir.Value:
    """Move the elements before position `hole` (down to `lowest`) that `values` sorts
    strictly before one place up, and give the position they leave free: where an element
    of `values` goes so that the elements stay sorted and equal ones keep their order."""
    at = variable(b, hole)

    def moves():
        j = b.load(at)
        return short_circuit(b, b.icmp_signed(">", j, lowest),
                             lambda: less(values, columns.values(copy, b.sub(j, i64(1)))))

    def shift():
        j = b.load(at)
        columns.put_raw(copy, j, columns.raw(copy, b.sub(j, i64(1))))
        b.store(b.sub(j, i64(1)), at)

    while_loop(b, moves, shift)
    return b.load(at)


def _merge_passes(b: ir.IRBuilder, columns: RowColumns, n: int, less: Less) -> ir.Value:
    """Merge sorted runs pairwise, doubling their width, from one copy into the other and
    back; returns the copy that holds the sorted row. A right-run element goes first only
    when it sorts strictly before the left-run element (stable)."""
    if n <= INSERTION_RUN:
        return columns.first
    source = variable(b, columns.first)
    target = variable(b, columns.second)
    width = variable(b, i64(INSERTION_RUN))

    def merge_level():
        src, dst, w = b.load(source), b.load(target), b.load(width)

        def merge_pair(lo):
            mid = smin(b, b.add(lo, w), i64(n))
            hi = smin(b, b.add(mid, w), i64(n))
            left = variable(b, lo)
            right = variable(b, mid)

            def take(k):
                # without branches: both heads compared whether or not a run is used up (the
                # indices clamped into the row), the choice by selects, which data-dependent
                # branches would mispredict about half the time on random keys
                i, j = b.load(left), b.load(right)
                i_at, j_at = smin(b, i, i64(n - 1)), smin(b, j, i64(n - 1))
                before = less(columns.values(src, j_at), columns.values(src, i_at))
                from_right = b.and_(b.icmp_signed("<", j, hi), b.or_(b.icmp_signed(">=", i, mid), before))
                chosen = b.select(from_right, j_at, i_at)
                columns.put_raw(dst, k, columns.raw(src, chosen))
                b.store(b.add(j, b.zext(from_right, I64)), right)
                b.store(b.add(i, b.zext(b.not_(from_right), I64)), left)

            stepped_loop(b, lo, hi, take)

        stepped_loop(b, i64(0), i64(n), merge_pair, b.mul(w, i64(2)))
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

    def less(lhs, rhs):
        (result,) = e.scalar_computation(comparator, [v for pair in zip(lhs, rhs) for v in pair])
        return result

    def fill(row, j):
        return [e.value(op, _with_position(row, dim, j)) for op in operands]

    outputs = list(zip(output_pointers(ke), _array_shapes(ke.instr.shape)))

    def write_row(row, sorted_values):
        def write(j):
            index = _with_position(row, dim, j[0])
            for (ptr, out_shape), value in zip(outputs, sorted_values(j[0])):
                ke.store(ptr, out_shape, index, value)
        for_range(b, [shape.dims[dim]], write)

    emit_row_sorts(ke, _other_dims(shape, dim), shape.dims[dim], [op.shape.dtype for op in operands],
                   fill, less, write_row)


# --- topk and the TopK custom-call --------------------------------------------------------------

def selects(n: int, k: int) -> bool:
    """Whether a row's first k of n are better selected (emit_ranked_rows) than sorted whole:
    on random values about k ln(n / k) elements enter, each shifting up to k, against the
    sort's n log2(n) steps (measured: top 50 of 50257, 1.5 against 36 ms; top 512 of 4096,
    9 against 4 ms)."""
    return 0 < k < n and k * k * math.log(n / k) <= n * math.log2(n) / 4


def emit_ranked_rows(ke, rows: tuple, n: int, k: int, types: list[ElementType],
                     fill: Callable[[tuple, ir.Value], list], less: Less,
                     write_row: Callable[[tuple, Callable[[ir.Value], list]], None]) -> None:
    """As emit_row_sorts, but only the first k of each row's n elements in sorted order
    (write_row reads positions below k): one pass over the row keeps the k first seen so far
    in order, and an element enters only when it sorts strictly before the k-th, so ties
    keep the lower position, as the stable sort's first k do. On random values almost every
    element is rejected by that one comparison (top 50 of 50257 logits, 8 rows: 34 ms
    sorting every row whole)."""
    b = ke.b
    if n == 0 or k == 0 or any(d == 0 for d in rows):
        return
    kept = RowColumns(b, types, k, ke.reserve_scratch(RowColumns.bytes(types, k)))
    buffer = kept.first

    def row_body(row):
        count = variable(b, i64(0))

        def consider(j):
            ke.e.push_scope()
            incoming = fill(row, j)
            held = b.load(count)   # (the k-th is compared only when all k are held)
            enters = short_circuit(b, b.icmp_signed("<", held, i64(k)),
                                   lambda: less(incoming, kept.values(buffer, i64(k - 1))), is_and=False)
            with b.if_then(enters):   # (a full buffer drops its last)
                kept.put(buffer, _open_hole(b, kept, buffer, smin(b, held, i64(k - 1)), i64(0), incoming, less),
                         incoming)
                b.store(smin(b, b.add(held, i64(1)), i64(k)), count)
            ke.e.pop_scope()

        stepped_loop(b, i64(0), i64(n), consider)
        write_row(row, lambda j: kept.values(buffer, j))

    for_range(b, rows, row_body)


def _emit_first_k(ke, operand: HloInstruction, less: Less) -> None:
    """Outputs (values, s32 indices) of the first k elements of each row (last dimension) in
    the order less([value, index], [value, index]) gives; k is the outputs' last dimension.
    Stable: ties keep the lower index first. A few of a long row are selected in one pass
    (emit_ranked_rows), else the row is sorted whole."""
    e, b = ke.e, ke.b
    shape: ArrayShape = operand.shape
    dim = shape.rank - 1
    values_shape, indices_shape = ke.instr.shape.elements
    pointers = output_pointers(ke)

    def fill(row, j):
        return [e.value(operand, _with_position(row, dim, j)), b.trunc(j, I32)]

    def write_row(row, sorted_values):
        def write(j):
            index = _with_position(row, dim, j[0])
            for ptr, out_shape, value in zip(pointers, (values_shape, indices_shape), sorted_values(j[0])):
                ke.store(ptr, out_shape, index, value)
        for_range(b, [values_shape.dims[-1]], write)

    n, k = shape.dims[dim], values_shape.dims[-1]
    if selects(n, k):
        emit_ranked_rows(ke, _other_dims(shape, dim), n, k, [shape.dtype, S32], fill, less, write_row)
    else:
        emit_row_sorts(ke, _other_dims(shape, dim), n, [shape.dtype, S32], fill, less, write_row)


def emit_topk(ke) -> None:
    """topk(x), k, largest: XLA's comparator is IEEE total order on the values (NaN above
    +inf, -0 below +0), descending when largest."""
    root = kernel_root(ke)
    (operand,) = root.operands
    t = operand.shape.dtype
    b = ke.b
    direction = ">" if root.attrs.get("largest", True) else "<"

    def less(lhs, rhs):
        x, y = lhs[0], rhs[0]
        if t.is_float:
            return b.icmp_signed(direction, total_order_key(b, x, t), total_order_key(b, y, t))
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

    def less(lhs, rhs):
        args = [lhs[0], rhs[0], lhs[1], rhs[1]] if takes_indices else [lhs[0], rhs[0]]
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
