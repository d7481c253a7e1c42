"""Select-and-scatter over disjoint windows (every stride at least its window: the max-pool
gradient) in one pass over the source, the route `windows.emit_select_and_scatter` takes
first; overlapping windows, other selects and scatters, and fused operands keep its general
loops.

Disjoint windows give each operand position at most one window, so its output is init, or
scatter(init, source) at the position its window selected: no read-modify-write of the
output, and windows are independent (cut across the pool's threads). Per window the select
runs over the window's positions in row-major order, keeping the running choice and its
offset exactly as the general loops do (the first position the comparator keeps wins), then
every position of the window is written once. When the operand's minor dimension is outside
the window (NHWC pooling: the features), a window is `lanes` of them at once, compares and
selects lane by lane. When the windows cover the operand (stride == size, no uncovered
border), the output needs no init fill first, so each output element is written once.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import llvmlite.ir as ir

from ....hlo.attributes import WindowDim
from ...llvm.elemental import COMPARE_FLOAT
from ...llvm.indices import linear_index
from ...llvm.ir_types import I1, alloca_in_entry, i64, storage_type
from ...llvm.loops import counted_loop, for_span, stepped_loop
from ...llvm.windows import when, window_source
from ..codegen import kernel_root
from ..runtime.llvm_jit import host_jit


@dataclass(frozen=True)
class DisjointPlan:
    direction: str          # the select's comparison, (chosen, candidate) in that order
    window: tuple[WindowDim, ...]
    covered: bool           # the windows cover every operand position: no init fill
    minor: int | None       # the dimension taken `lanes` at a time, or None (one position at a time)
    lanes: int


def _direction(select) -> str | None:
    """The comparison a select computation makes of (chosen, candidate): a plain compare of its
    two parameters (either order); None for anything else (a total order, a computed select)."""
    root = select.root
    if root.opcode != "compare" or root.attrs.get("type") == "TOTALORDER" or \
            [op.opcode for op in root.operands] != ["parameter", "parameter"]:
        return None
    order = [op.parameter_number for op in root.operands]
    if order == [0, 1]:
        return root.attrs["direction"]
    if order == [1, 0]:   # candidate DIR chosen, read as chosen DIR' candidate
        return {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT", "EQ": "EQ", "NE": "NE"}[root.attrs["direction"]]
    return None


def _is_add(scatter) -> bool:
    root = scatter.root
    return root.opcode == "add" and [op.opcode for op in root.operands] == ["parameter", "parameter"] and \
        root.operands[0] is not root.operands[1]


def disjoint_plan(ke) -> DisjointPlan | None:
    """The plan for a standalone f32/f64 select-and-scatter whose windows do not overlap, with
    a compare select and an add scatter; None when the general loops must run it."""
    root = kernel_root(ke)
    if root is not ke.instr:
        return None
    operand, source, _ = root.operands
    t = operand.shape.dtype
    window: tuple[WindowDim, ...] = tuple(root.attrs["window"])
    if t.name not in ("f32", "f64") or source.shape.dtype != t or ke.instr.shape.dtype != t or \
            not operand.shape.rank or source.shape.size == 0 or operand.shape.size == 0:
        return None
    if any(w.lhs_dilate != 1 or w.rhs_dilate != 1 or w.stride < w.size for w in window):
        return None
    direction = _direction(root.attrs["select"])
    if direction is None or not _is_add(root.attrs["scatter"]):
        return None
    covered = all(w.stride == w.size and w.pad_low >= 0 and m * w.stride - w.pad_low >= n
                  for w, n, m in zip(window, operand.shape.dims, source.shape.dims))
    d = operand.shape.minor_to_major[0]
    w = window[d]
    minor, lanes = None, 1
    if source.shape.minor_to_major[0] == d and ke.instr.shape.minor_to_major[0] == d and \
            w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0:
        minor = d
        lanes = host_jit().vector_bytes // t.bytes
        while lanes > 1 and lanes > operand.shape.dims[d]:
            lanes //= 2   # a few features: half vectors rather than all of them scalar
    return DisjointPlan(direction, window, covered, minor, lanes)


class _Windows:
    """The emitter of one plan: windows of `lanes` positions along the minor dimension (or
    single positions) selected and scattered."""

    def __init__(self, ke, plan: DisjointPlan):
        self.ke, self.plan, self.b = ke, plan, ke.b
        root = kernel_root(ke)
        self.operand, self.source, self.init = root.operands
        self.out_shape = ke.instr.shape
        self.st = storage_type(self.operand.shape.dtype)
        self.bits = 8 * self.operand.shape.dtype.bytes

    def _type(self, lanes: int, ty: ir.Type) -> ir.Type:
        return ty if lanes == 1 else ir.VectorType(ty, lanes)

    def _splat(self, value: ir.Value, lanes: int) -> ir.Value:
        if lanes == 1:
            return value
        b = self.b
        vector = ir.VectorType(value.type, lanes)
        one = b.insert_element(ir.Constant(vector, ir.Undefined), value, i64(0))
        return b.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), lanes), None))

    def _access(self, ptr, shape, index, lanes: int, value: ir.Value | None = None):
        """Load (or store `value`) `lanes` consecutive elements along the minor dimension."""
        b = self.b
        at = b.gep(ptr, [linear_index(b, index, shape.dims, shape.minor_to_major)], source_etype=self.st)
        if value is None:
            op = b.load(at, typ=self._type(lanes, self.st))
        else:
            op = b.store(value, at)
        op.align = self.operand.shape.dtype.bytes
        return op

    def _keep(self, chosen: ir.Value, x: ir.Value) -> ir.Value:
        """The select computation's result, lane by lane (as the elemental compare makes it)."""
        d = self.plan.direction
        if d == "NE":
            return self.b.fcmp_unordered("!=", chosen, x)
        return self.b.fcmp_ordered(COMPARE_FLOAT[d], chosen, x)

    def window(self, index: tuple, lanes: int, init: ir.Value) -> None:
        """Select and scatter the window(s) of source position `index` (its minor entry the
        first of `lanes` windows side by side)."""
        b, plan = self.b, self.plan
        value_t, offset_t = self._type(lanes, self.st), self._type(lanes, ir.IntType(self.bits))
        best, chosen = alloca_in_entry(b, value_t), alloca_in_entry(b, offset_t)
        have = alloca_in_entry(b, I1)
        b.store(ir.Constant(I1, 0), have)
        have_known = False   # some earlier position exists in every window: the choice is set
        operand_ptr = self.ke.operand_pointer(self.operand)
        positions = []
        for k, offsets in enumerate(itertools.product(*(range(w.size) for w in plan.window))):
            valid, at = window_source(b, index, tuple(i64(o) for o in offsets), plan.window,
                                      self.operand.shape.dims)
            positions.append((valid, at))

            def consider(k=k, at=at, known=have_known):
                x = self._access(operand_ptr, self.operand.shape, at, lanes)
                here = ir.Constant(offset_t, k) if lanes == 1 else ir.Constant(offset_t, [k] * lanes)
                if known:
                    keep = self._keep(b.load(best), x)
                else:
                    keep = b.and_(self._splat(b.load(have), lanes), self._keep(b.load(best), x))
                b.store(b.select(keep, b.load(best), x), best)
                b.store(b.select(keep, b.load(chosen), here), chosen)
                b.store(ir.Constant(I1, 1), have)

            when(b, valid, consider)
            have_known = have_known or valid is None
        # a position that exists means its window chose one: `chosen` is set wherever it is read
        g = self._access(self.ke.operand_pointer(self.source), self.source.shape, index, lanes)
        scattered = b.fadd(init, g)
        picked = b.load(chosen)
        for k, (valid, at) in enumerate(positions):
            def write(k=k, at=at):
                here = ir.Constant(offset_t, k) if lanes == 1 else ir.Constant(offset_t, [k] * lanes)
                self._access(self.ke.out_ptr, self.out_shape, at, lanes,
                             b.select(b.icmp_unsigned("==", picked, here), scattered, init))
            when(b, valid, write)

    def run(self, outer: list[int], k_begin_end) -> None:
        """The windows of the source positions in `outer` (the source's dimensions, the minor
        one left out when it is taken in vectors) within the flat span k_begin_end."""
        b, e, plan = self.b, self.ke.e, self.plan
        e.push_scope()
        init = e.value(self.init, ())
        e.pop_scope()
        k, begin, end = k_begin_end
        minor_size = self.source.shape.dims[plan.minor] if plan.minor is not None else 0

        def position(prefix):
            if plan.minor is None:
                return self.window(tuple(prefix), 1, init)
            full = lambda c: tuple(prefix[:plan.minor]) + (c,) + tuple(prefix[plan.minor:])   # noqa: E731
            vectors = minor_size // plan.lanes * plan.lanes
            if vectors:
                wide = self._splat(init, plan.lanes)
                stepped_loop(b, i64(0), i64(vectors), lambda c: self.window(full(c), plan.lanes, wide),
                             step=plan.lanes)
            if vectors < minor_size:   # the features past the last whole vector
                counted_loop(b, i64(vectors), i64(minor_size), lambda c: self.window(full(c), 1, init))

        if outer:
            for_span(b, outer, k, begin, end, position)
        else:   # a rank-1 operand taken in vectors: one row of windows
            position(())


def emit_disjoint(ke) -> bool:
    """Emit the select-and-scatter kernel as disjoint windows; False when it does not fit."""
    plan = disjoint_plan(ke)
    if plan is None:
        return False
    emitter = _Windows(ke, plan)
    e, out_shape = ke.e, emitter.out_shape
    if not plan.covered:   # positions no window reaches keep the init value
        def fill(index):
            e.push_scope()
            ke.store(ke.out_ptr, out_shape, index, e.value(emitter.init, ()))
            e.pop_scope()
        ke.loop_nest(out_shape.dims, fill, out_shape.size)
    dims = emitter.source.shape.dims
    outer = [n for d, n in enumerate(dims) if d != plan.minor]
    split = ke.split(outer, emitter.operand.shape.size + emitter.source.shape.size) if outer else None
    if split is None:
        emitter.run(outer, (len(outer), i64(0), i64(_flat(outer))))
        return True
    k, n_tasks = split
    ke.parallel_chunks(outer, k, n_tasks, lambda t, begin, end: emitter.run(outer, (k, begin, end)))
    return True


def _flat(extents) -> int:
    n = 1
    for x in extents:
        n *= x
    return n
