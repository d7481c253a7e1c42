"""Column reductions: a reduce over the leading (major) dimensions of a row-major operand,
keeping the minor ones (a bias gradient, the sum over a batch of a [batch, features]
array), f32 or f64, as a loop over the reduced rows with the kept columns innermost.

The row-by-row kernel (codegen's reduction kind) computes one result at a time, walking the
operand a whole row apart per step: for a [256, 1024] sum each element is a strided scalar
load (470 us, 2 GB/s, on the 2-core EPYC). Here every result is an accumulator in the output
buffer: it starts at the init value, and each row of the operand, read contiguously, is
folded into the accumulators in one vectorisable loop. Each result still folds its inputs
in order, first row to last, as one thread would, so the result does not depend on the
number of threads.

A kInput fusion takes this kernel too: its reduced operand (relu-mask * gradient, x * x, the
fused elementwise producers, broadcasts among them) is computed by the elemental emitter per
element inside the column loop, and a tuple root of several such reductions over the same
rows and columns (a sum and a sum of squares) folds each into its own output in the same
pass, their shared producers computed once per element.

Across threads the columns are cut into chunks of whole cache lines (at least a vector):
a chunk that shares a line with its neighbour's makes both tasks read it, and a chunk that
is not whole vectors leaves the vector loop a scalar tail on every row. With fewer columns
than two such units the kernel stays on one thread (splitting the rows would change the
order each result folds its inputs in).
"""
from __future__ import annotations

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape
from ...llvm.ir_types import i64
from ...llvm.loops import for_range, for_span
from ..runtime.llvm_jit import host_jit

# x86's cache line: the unit of memory traffic, so the unit a task's columns come in
CACHE_LINE_BYTES = 64


def _one_column_reduction(r: HloInstruction) -> bool:
    """Whether reduce `r` alone is a column reduction: one f32/f64 result over the leading
    dimensions of a row-major operand of some other shape."""
    if r.opcode != "reduce" or len(r.operands) != 2 or not isinstance(r.shape, ArrayShape):
        return False
    operand: ArrayShape = r.operands[0].shape
    reduced = tuple(sorted(r.attrs["dimensions"]))
    return (r.shape.dtype.name in ("f32", "f64") and operand.is_row_major and r.shape.is_row_major
            and 0 < len(reduced) < operand.rank and reduced == tuple(range(len(reduced))) and operand.size > 0)


def column_reductions(root: HloInstruction, out_shape) -> list[HloInstruction] | None:
    """The column reductions a kernel with this root computes, in the order of its outputs
    (the root itself, or the elements of a tuple root that are all distinct column
    reductions of operands of the same dimensions); None when the kernel is not one."""
    reduces = root.outputs
    if not all(_one_column_reduction(r) for r in reduces) or len({id(r) for r in reduces}) != len(reduces):
        return None
    dims, n = reduces[0].operands[0].shape.dims, len(reduces[0].attrs["dimensions"])
    if any(r.operands[0].shape.dims != dims or len(r.attrs["dimensions"]) != n for r in reduces):
        return None
    shapes = out_shape.elements if root.opcode == "tuple" else (out_shape,)
    return reduces if all(s == r.shape for s, r in zip(shapes, reduces)) else None


def emit_column_reduction(ke, outputs: list) -> None:
    """`outputs`: (reduce, pointer to its result) pairs. The accumulators (the results) set
    to the init values, then every row folded in."""
    e, b = ke.e, ke.b
    operand: ArrayShape = outputs[0][0].operands[0].shape
    n_reduced = len(outputs[0][0].attrs["dimensions"])
    rows, columns = operand.dims[:n_reduced], operand.dims[n_reduced:]

    def over_columns(cols_loop) -> None:
        def start(index):
            e.push_scope()
            for r, ptr in outputs:
                ke.store(ptr, r.shape, index, e.value(r.operands[1], ()))
            e.pop_scope()

        def fold(row):
            def one(index):
                e.push_scope()   # one element's producers, shared by the reductions that read them
                for r, ptr in outputs:
                    value = e.value(r.operands[0], tuple(row) + tuple(index))
                    (acc,) = e.scalar_computation(r.attrs["to_apply"], [ke.load(ptr, r.shape, index), value])
                    ke.store(ptr, r.shape, index, acc)
                e.pop_scope()
            cols_loop(one)

        cols_loop(start)
        for_range(b, rows, fold)

    flat = 1
    for n in columns:
        flat *= n
    unit = max(host_jit().vector_bytes, CACHE_LINE_BYTES) // operand.dtype.bytes   # columns per unit
    units = -(-flat // unit)
    split = ke.split([units], len(outputs) * operand.size * ke.element_cost())
    if split is None:
        over_columns(lambda body: for_range(b, columns, body))
        return
    _, n_tasks = split

    def task(t, begin, end):
        begin, end = b.mul(begin, i64(unit)), b.mul(end, i64(unit))
        end = b.select(b.icmp_unsigned("<", end, i64(flat)), end, i64(flat))   # the last unit may be short
        over_columns(lambda body: for_span(b, columns, len(columns), begin, end, body))

    ke.parallel_chunks([units], 1, n_tasks, task)
