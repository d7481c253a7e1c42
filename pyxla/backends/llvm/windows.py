"""Window arithmetic and reduce-window as an elemental rule, for every LLVM target.

Output position o and window offset k see position o * stride + k * rhs_dilate - pad_low of
the base-dilated input; it holds an input element when it is a multiple of lhs_dilate inside
the input, and is padding or a dilation hole otherwise. Like XLA's CPU loops, a window folds
its elements that exist into the init value and skips the rest (with an identity init
value, as reducers have, this is the same as folding init values for the padding). The
convolution's elemental rule (convolution.py) walks its windows with window_source too.
"""
from __future__ import annotations

import itertools
from math import prod

import llvmlite.ir as ir

from ...hlo.attributes import WindowDim
from .elemental import RULES, ElementalEmitter, convert
from .ir_types import alloca_in_entry, etype, i64
from .loops import for_range

MAX_TREE_WINDOW = 64   # window elements of a clamped max or min folded as a tree (beyond: a loop)


def window_source(b: ir.IRBuilder, outputs: tuple, offsets: tuple, window, sizes: tuple,
                  inside: frozenset = frozenset()) -> tuple[ir.Value | None, tuple]:
    """(whether an input element exists, its index clamped into the input) for output
    positions `outputs` at window offsets `offsets`, one entry per windowed dimension.
    Only the checks a dimension's padding and dilation make necessary are emitted; None
    when there are none (every position holds an element). Dimensions in `inside` are known
    to have their windows inside the input (no base dilation): no checks along them."""
    valid = None
    index = []
    for d, (o, k, w, size) in enumerate(zip(outputs, offsets, window, sizes)):
        checked = d not in inside
        at = o if w.stride == 1 else b.mul(o, i64(w.stride))
        if w.rhs_dilate != 1:
            k = b.mul(k, i64(w.rhs_dilate))
        at = b.add(at, k)
        if w.pad_low:
            at = b.sub(at, i64(w.pad_low))
        if w.pad_low > 0 and checked:
            valid = _and(b, valid, b.icmp_signed(">=", at, i64(0)))
        if w.lhs_dilate != 1:
            valid = _and(b, valid, b.icmp_signed("==", b.srem(at, i64(w.lhs_dilate)), i64(0)))
            at = b.sdiv(at, i64(w.lhs_dilate))
        if (w.pad_high > 0 or w.lhs_dilate != 1) and checked:
            valid = _and(b, valid, b.icmp_signed("<", at, i64(size)))
        if (w.pad_low > 0 or w.pad_high > 0 or w.lhs_dilate != 1) and checked:
            at = _clamp(b, at, size)
        index.append(at)
    return valid, tuple(index)


def _and(b: ir.IRBuilder, valid: ir.Value | None, condition: ir.Value) -> ir.Value:
    return condition if valid is None else b.and_(valid, condition)


def when(b: ir.IRBuilder, condition: ir.Value | None, emit) -> None:
    """emit() under `condition` (always when None)."""
    if condition is None:
        emit()
    else:
        with b.if_then(condition):
            emit()


def _clamp(b: ir.IRBuilder, i: ir.Value, n: int) -> ir.Value:
    """i forced into [0, n-1], so a load whose value is discarded stays in bounds."""
    if n <= 1:
        return i64(0)
    low = b.select(b.icmp_signed("<", i, i64(0)), i64(0), i)
    return b.select(b.icmp_signed(">", low, i64(n - 1)), i64(n - 1), low)


# --- reduce-window ------------------------------------------------------------------------------

def _reduce_window(e: ElementalEmitter, instr, index):
    """One output element: the reducer folded over the window's elements, in row-major order
    of the window offsets. A variadic reduce-window gives a list, one value per output."""
    b = e.b
    n = len(instr.operands) // 2
    inputs, inits = instr.operands[:n], instr.operands[n:]
    window: tuple[WindowDim, ...] = tuple(instr.attrs["window"])
    comp = instr.attrs["to_apply"]
    element_types = [p.shape.dtype for p in sorted(comp.parameters, key=lambda p: p.parameter_number)][n:]
    accs = []
    for init in inits:
        value = e.value(init, ())
        acc = alloca_in_entry(b, value.type)
        b.store(value, acc)
        accs.append(acc)
    sizes = inputs[0].shape.dims
    clamp = clamped_windows(instr)

    def body(offsets):
        valid, source = window_source(b, index, offsets, window, sizes, e.window_inside.get(id(instr), frozenset()))
        if clamp:
            valid = None
        elements = [convert(e, e.value(x, source), etype(x), t) if etype(x) != t else e.value(x, source)
                    for x, t in zip(inputs, element_types)]
        current = [b.load(acc) for acc in accs]
        results = e.scalar_computation(comp, current + elements)
        for acc, old, new in zip(accs, current, results):
            b.store(new if valid is None else b.select(valid, new, old), acc)

    if clamp and all(sizes) and prod(w.size for w in window) <= MAX_TREE_WINDOW:
        # A max or min is associative and commutative, so the window folds as a tree: a
        # chain of dependent NaN- and sign-aware maxima over the window took ~10 cycles per
        # element (3x3 max pool over 576 x 14 x 14: 697 -> 430 us; in vectors, _VectorRow, 201 us)
        e.push_scope()
        elements = [e.value(inputs[0], window_source(b, index, tuple(i64(k) for k in at), window, sizes)[1])
                    for at in itertools.product(*(range(w.size) for w in window))]
        elements.append(b.load(accs[0]))
        result = fold_tree(elements, lambda x, y: e.scalar_computation(comp, [x, y])[0])
        e.pop_scope()
        return result
    if all(sizes):   # an empty input leaves every window to padding: the init values
        e.push_scope()
        for_range(b, [w.size for w in window], body)
        e.pop_scope()
    results = [b.load(acc) for acc in accs]
    return results[0] if n == 1 else results


def fold_tree(values: list, combine):
    """values combined pairwise, level by level (for an associative, commutative reducer:
    the dependent chain is log2 of the window, not the window)."""
    while len(values) > 1:
        pairs = [combine(u, v) for u, v in zip(values[::2], values[1::2])]
        values = pairs + values[len(pairs) * 2:]
    return values[0]


def clamped_windows(instr) -> bool:
    """Whether a window may read its padding as the nearest element inside the input: a
    max or min (a repeated element changes neither) of one input, without base dilation, each
    window of each dimension holding at least one element. Then no window element needs a
    check or select, and max pooling is straight-line code (ResNet-50's 3x3 stride-2 pool
    over 64x112x112: 5.2 -> 2.3 ms on one thread)."""
    root = instr.attrs["to_apply"].root
    if len(instr.operands) != 2 or root.opcode not in ("maximum", "minimum") or \
            [op.opcode for op in root.operands] != ["parameter", "parameter"] or root.operands[0] is root.operands[1]:
        return False
    for w, n, out in zip(instr.attrs["window"], instr.operands[0].shape.dims, instr.shape.dims):
        if w.lhs_dilate != 1 or w.rhs_dilate != 1:
            return False
        first_reach, last_reach = -w.pad_low, (out - 1) * w.stride - w.pad_low
        span = w.size - 1
        # the windows at both ends hold an element (those between them then do too)
        if out and (first_reach + span < 0 or last_reach >= n or n == 0):
            return False
    return True


RULES["reduce-window"] = _reduce_window
