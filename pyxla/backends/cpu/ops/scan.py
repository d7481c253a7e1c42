"""A reduce-window that is a running reduction (cumsum, cumprod, cummax, cummin: lax's
cumulative ops and ONNX's CumSum lower to one) as a scan: each element is the previous
result combined with one input element, n steps along the scanned dimension instead of a
window of n per element (cumsum over 1024 x 1024 along a row: 426 ms as windows, NumPy 4 ms).

The form: one input, one dimension whose window is the whole dimension with n - 1 padding
on one side (low: a forward scan, element i folds 0..i; high: a reverse one, i folds
i..n-1), every other dimension a window of 1, no strides, dilations or other padding, and
an add, multiply, maximum or minimum of the two parameters as the reducer.

Order of the sums. A window folds its elements into the init value in ascending order,
((init + x0) + x1) + ... + xi, which is exactly what the forward scan computes, so its
results are bit-identical to the windows'. The reverse scan folds from the end,
((init + x[n-1]) + x[n-2]) + ... + xi: the same elements, for an add or multiply rounded in
another order (the window's order would need the whole window again per element).

Loops: the dimensions before the scanned one are the outer loops (split across threads),
then the scan's steps in order, then the dimensions after it, innermost, where LLVM
vectorises (a column scan runs a row of the result at a time, each element from the one
above it in the output).
"""
from __future__ import annotations

from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape
from ...llvm.ir_types import alloca_in_entry, i64
from ...llvm.loops import counted_loop, for_range

REDUCERS = frozenset({"add", "multiply", "maximum", "minimum"})


def scan_dimension(instr: HloInstruction) -> tuple[int, bool] | None:
    """(the scanned dimension, whether the scan runs from the end) when the reduce-window
    `instr` is a running reduction, else None."""
    if len(instr.operands) != 2 or not isinstance(instr.shape, ArrayShape) or \
            not instr.shape.is_row_major or not instr.operands[0].shape.is_row_major:
        return None
    root = instr.attrs["to_apply"].root
    if root.opcode not in REDUCERS or [op.opcode for op in root.operands] != ["parameter", "parameter"] or \
            root.operands[0] is root.operands[1]:
        return None
    found = None
    for d, (w, n) in enumerate(zip(instr.attrs["window"], instr.operands[0].shape.dims)):
        if w.stride != 1 or w.lhs_dilate != 1 or w.rhs_dilate != 1 or w.reversal:
            return None
        if w.size == 1 and w.pad_low == 0 and w.pad_high == 0:
            continue
        if found is not None or n < 2 or w.size != n or sorted((w.pad_low, w.pad_high)) != [0, n - 1]:
            return None
        found = (d, w.pad_high == n - 1)
    return found


def emit_scan(ke, root: HloInstruction, d: int, reverse: bool) -> None:
    b = ke.b
    shape: ArrayShape = root.shape
    dims = shape.dims
    n = dims[d]
    outer, inner = dims[:d], dims[d + 1:]
    comp = root.attrs["to_apply"]
    x = root.operands[0]

    def position(t):   # the scan's step t: i = t forward, n - 1 - t in reverse
        return b.sub(i64(n - 1), t) if reverse else t

    def combine(index, previous) -> None:
        """Result element `index`: the previous result combined with the input's element."""
        ke.e.push_scope()
        ke.store(ke.out_ptr, shape, index, ke.e.scalar_computation(comp, [previous, ke.e.value(x, index)])[0])
        ke.e.pop_scope()

    def line(o):
        ke.e.push_scope()
        init = ke.e.value(root.operands[1], ())
        ke.e.pop_scope()
        if not inner:   # a scan along the minor dimension: its running value in a register
            running = alloca_in_entry(b, init.type)
            b.store(init, running)

            def scalar(t):
                index = (*o, position(t))
                combine(index, b.load(running))
                b.store(ke.load(ke.out_ptr, shape, index), running)   # as stored: rounded to its type
            counted_loop(b, i64(0), i64(n), scalar)
            return
        # a row of the result at a time, each element from the one before it along d
        for_range(b, inner, lambda inn: combine((*o, position(i64(0)), *inn), init))

        def later(t):
            i = position(t)
            before = b.add(i, i64(1)) if reverse else b.sub(i, i64(1))
            for_range(b, inner, lambda inn: combine((*o, i, *inn), ke.load(ke.out_ptr, shape, (*o, before, *inn))))
        counted_loop(b, i64(1), i64(n), later)

    ke.loop_nest(list(outer), line, shape.size * ke.element_cost())
