"""Window ops on the CPU backend: reduce-window (an elemental rule, so XLA's
`wrapped_reduce-window` fusions and our own loop fusions compute it inline) and
select-and-scatter (a kernel: its scatter writes wherever the windows select).

Window arithmetic (shared with convolution): output position o and window offset k see
position o * stride + k * rhs_dilate - pad_low of the base-dilated input; it holds an
input element when it is a multiple of lhs_dilate inside the input, and is padding or a
dilation hole otherwise. Like XLA's CPU loops, a window folds its elements that exist into
the init value and skips the rest (with an identity init value, as reducers have, this is
the same as folding init values for the padding).
"""
from __future__ import annotations

import itertools

import llvmlite.ir as ir
import numpy as np

from ....hlo.attributes import WindowDim
from ....hlo.instruction import uniform_value
from ....hlo.shape import TupleShape
from ...llvm.indices import linear_index
from ...llvm.ir_types import I1, I64, alloca_in_entry, compute_type, etype, i64, storage_type
from ...llvm.loops import counted_loop, for_range, short_circuit, stepped_loop
from ...llvm.windows import clamped_windows, fold_tree, when, window_source
from ..codegen import KERNELS, kernel_root, output_pointers
from ..runtime.llvm_jit import host_jit
from .scan import emit_scan, scan_dimension
from .select_scatter import emit_disjoint

VECTOR_ROW_BYTES = 32  # a pool row's vectors (8 f32): rows of 12 to 56 outputs gain more than wider ones would
MIN_INTERIOR = 8   # positions a row's unchecked loop needs at least to be worth its own loop


def _interior(instr, least: int = MIN_INTERIOR) -> tuple[int, int] | None:
    """(lo, hi): the output positions along the last dimension whose windows lie inside the
    input, when that dimension is minor-most in input and output (so a row of them is a
    loop LLVM vectorises, its loads at a constant stride) and there are enough of them.
    Rows inside the input from end to end are emitted this way too: as one loop nest over
    every dimension, LLVM left SqueezeNet's 3x3 stride-2 pools unvectorised."""
    rank = instr.shape.rank
    w = instr.attrs["window"][-1] if rank else None
    if w is None or w.lhs_dilate != 1 or w.rhs_dilate < 1 or \
            instr.shape.minor_to_major[0] != rank - 1 or instr.operands[0].shape.minor_to_major[0] != rank - 1:
        return None
    n, out = instr.operands[0].shape.dims[-1], instr.shape.dims[-1]
    span = (w.size - 1) * w.rhs_dilate
    lo = -(-max(w.pad_low, 0) // w.stride)
    hi = min(out, (n - 1 - span + w.pad_low) // w.stride + 1)
    return (lo, hi) if hi - lo >= max(1, least) else None



def _emit_rows(ke, root, interior: tuple[int, int]) -> None:
    """A single-output reduce-window row by row: along the last dimension, the positions
    before and after `interior` with their window checks, those inside without (ResNet-50's
    3x3 stride-2 max pool over 64x112x112 on one thread: 2.3 -> 0.39 ms, the interior vectorised)."""
    b = ke.b
    shape = root.shape
    lo, hi = interior

    def positions(prefix, begin: int, end: int, inside: frozenset) -> None:
        def one(i):
            ke.e.window_inside[id(root)] = inside
            ke.store_root(root, shape, tuple(prefix) + (i,))
            ke.e.window_inside.pop(id(root))
        if end > begin:
            counted_loop(b, i64(begin), i64(end), one)

    vector = _vector_row(ke, root, hi - lo)
    middle = lo if vector is None else lo + vector.count(lo, hi) * vector.lanes

    def row(prefix):
        positions(prefix, 0, lo, frozenset())
        if middle > lo:
            stepped_loop(b, i64(lo), i64(middle), lambda x: vector.emit(prefix, x), step=vector.lanes)
        positions(prefix, middle, hi, frozenset({shape.rank - 1}))
        positions(prefix, hi, shape.dims[-1], frozenset())

    ke.loop_nest(shape.dims[:-1], row, shape.size * ke.element_cost())


class _VectorRow:
    """`lanes` consecutive outputs of a row of a clamped max or min pool (see
    llvm/windows.py's clamped_windows) inside the input along the last dimension: per window offset one
    vector of the input row (every stride-th element: `stride` vectors loaded and their
    lanes picked), folded as a tree with the vector llvm.maximum / llvm.minimum. LLVM left
    such rows scalar (a row of 12 is shorter than its 16-lane vectors, and fully unrolled
    first), each output a dependent chain of NaN- and sign-aware scalar maxima."""

    def __init__(self, ke, root, lanes: int):
        self.ke, self.root, self.lanes = ke, root, lanes
        self.x = root.operands[0]
        self.st = storage_type(self.x.shape.dtype)
        self.vector = ir.VectorType(self.st, lanes)
        op = root.attrs["to_apply"].root.opcode
        self.maximum = op == "maximum"
        name = f"llvm.{op}.v{lanes}{'f32' if self.x.shape.dtype.name == 'f32' else 'f64'}"
        module = ke.b.module
        self.combine = module.globals.get(name) or ir.Function(module, ir.FunctionType(self.vector, [self.vector] * 2),
                                                                 name=name)

    def count(self, lo: int, hi: int) -> int:
        """Vectors of outputs from lo within the interior [lo, hi) whose loads (`stride`
        whole vectors for a strided row) stay inside the input's row."""
        last, n = self.root.attrs["window"][-1], self.x.shape.dims[-1]
        final = (n - self.lanes * last.stride - (last.size - 1) + last.pad_low) // last.stride   # last start
        return max(0, min((hi - lo) // self.lanes, (final - lo) // self.lanes + 1))

    def emit(self, prefix, x) -> None:
        ke, b, root = self.ke, self.ke.b, self.root
        window = tuple(root.attrs["window"])
        sizes = self.x.shape.dims
        source = ke.operand_pointer(self.x)
        last = window[-1]
        values = []
        if not self._init_is_identity():
            ke.e.push_scope()
            init = ke.e.value(root.operands[1], ())
            ke.e.pop_scope()
            values.append(b.shuffle_vector(b.insert_element(ir.Constant(self.vector, ir.Undefined), init, i64(0)),
                                           ir.Constant(self.vector, ir.Undefined),
                                           ir.Constant(ir.VectorType(ir.IntType(32), self.lanes), None)))
        for offsets in itertools.product(*(range(w.size) for w in window)):
            outer = tuple(i64(k) for k in offsets[:-1])
            _, at = window_source(b, tuple(prefix), outer, window[:-1], sizes[:-1])
            column = b.add(b.mul(x, i64(last.stride)), i64(offsets[-1] * last.rhs_dilate - last.pad_low))
            start = linear_index(b, (*at, column), self.x.shape.dims, self.x.shape.minor_to_major)
            pointer = b.gep(source, [start], source_etype=self.st)
            wide = ir.VectorType(self.st, self.lanes * last.stride)
            loaded = b.load(pointer, typ=wide if last.stride > 1 else self.vector)
            loaded.align = self.x.shape.dtype.bytes
            if last.stride > 1:
                picks = ir.Constant(ir.VectorType(ir.IntType(32), self.lanes),
                                    [k * last.stride for k in range(self.lanes)])
                loaded = b.shuffle_vector(loaded, ir.Constant(wide, ir.Undefined), picks)
            values.append(loaded)
        result = self._fold(values)
        out = linear_index(b, (*prefix, x), root.shape.dims, root.shape.minor_to_major)
        b.store(result, b.gep(ke.out_ptr, [out], source_etype=self.st)).align = self.x.shape.dtype.bytes

    def _init_is_identity(self) -> bool:
        """Whether the init value changes no maximum (-inf) or minimum (+inf): then it is
        left out of the fold (a clamped window holds an element)."""
        v = uniform_value(self.root.operands[1])
        return v is not None and float(v) == (-np.inf if self.maximum else np.inf)

    def _fold(self, values: list) -> ir.Value:
        """The window's values folded by the exact maximum or minimum (NaN when any is NaN,
        -0 below +0), which x86 builds of six instructions where the plain compare-and-select
        is one: the plain fold is kept unless a lane met a NaN or came out as the zero that
        may be of the wrong sign (-0 for a maximum, +0 for a minimum), and only then the
        exact fold is computed (3x3 stride-2 max pools over 192 x 56 x 56 features last:
        73 -> 53 us)."""
        b = self.ke.b
        if len(values) == 1:
            return values[0]
        plain = fold_tree(values, lambda u, v: b.select(b.fcmp_ordered(">" if self.maximum else "<", u, v), u, v))
        pairs = list(zip(values[::2], values[1::2])) + ([(values[-1], values[-1])] if len(values) % 2 else [])
        special = fold_tree([b.fcmp_unordered("uno", u, v) for u, v in pairs], b.or_)
        width = 8 * self.x.shape.dtype.bytes
        as_integers = ir.VectorType(ir.IntType(width), self.lanes)
        zero = (1 << (width - 1)) if self.maximum else 0   # the bits of -0 or +0
        special = b.or_(special, b.icmp_unsigned("==", b.bitcast(plain, as_integers),
                                                 ir.Constant(as_integers, [zero] * self.lanes)))
        any_special = b.call(_reduce_or(b.module, self.lanes), [special])
        before = b.block
        with b.if_then(any_special):
            exact = fold_tree(values, lambda u, v: b.call(self.combine, [u, v]))
            exact_end = b.block
        result = b.phi(self.vector)
        result.add_incoming(plain, before)
        result.add_incoming(exact, exact_end)
        return result


def _reduce_or(module: ir.Module, lanes: int) -> ir.Function:
    """llvm.vector.reduce.or over `lanes` booleans: whether any is set."""
    name = f"llvm.vector.reduce.or.v{lanes}i1"
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(I1, [ir.VectorType(I1, lanes)]), name=name)


def _vector_row(ke, root, interior: int) -> _VectorRow | None:
    """The vector row of a standalone clamped max or min pool over f32 or f64 read from its
    buffer, with a stride of 1, or up to 4 for rows shorter than the host's vectors: vectors
    of VECTOR_ROW_BYTES, halved while longer than the interior (rows of 7); else None. A row
    whose window spans one element, the features of an NHWC pool, takes vectors of the
    host's width where they divide the row (3x3 stride-2 max pools, 64 x 111 x 111 features
    last: 95 -> 76 us, 128 x 55 x 55: 54 -> 43 us; over 24 features, vectors of 16 left 8
    to the scalar loop: ShuffleNet 2.83 -> 2.95 ms)."""
    if kernel_root(ke) is not ke.instr or not clamped_windows(root) or \
            root.shape.dtype.name not in ("f32", "f64") or root.operands[0].shape.dtype != root.shape.dtype:
        return None
    last = root.attrs["window"][-1]
    if last.stride > 4 or last.rhs_dilate != 1:
        return None
    if last.stride > 1 and interior >= host_jit().vector_bytes // root.shape.dtype.bytes:
        return None   # LLVM vectorises these rows itself, and faster (64x112x112 stride 2: 226 against 303 us)
    narrow = VECTOR_ROW_BYTES // root.shape.dtype.bytes
    lanes = host_jit().vector_bytes // root.shape.dtype.bytes if last.size == 1 else narrow
    while lanes > 1 and (interior < lanes or (lanes > narrow and interior % lanes)):
        lanes //= 2
    return _VectorRow(ke, root, lanes)


def emit_reduce_window(ke) -> None:
    """A running reduction is a scan (ops/scan.py); a variadic reduce-window writes each of
    its results; a single one is a loop kernel, row by row when its rows have an interior."""
    root = kernel_root(ke)
    scan = scan_dimension(root)
    if scan is not None:
        return emit_scan(ke, root, *scan)
    if not isinstance(root.shape, TupleShape):
        interior = _interior(root, VECTOR_ROW_BYTES // 2 // root.shape.dtype.bytes if clamped_windows(root)
                             else MIN_INTERIOR)
        return ke.emit_loop(root) if interior is None else _emit_rows(ke, root, interior)
    shapes = root.shape.elements
    pointers = output_pointers(ke)

    def body(index):
        ke.e.push_scope()
        for ptr, shape, value in zip(pointers, shapes, ke.e.value(root, index)):
            ke.store(ptr, shape, index, value)
        ke.e.pop_scope()

    for_range(ke.b, shapes[0].dims, body)


# --- select-and-scatter ----------------------------------------------------------------------------

def emit_select_and_scatter(ke) -> None:
    """The output starts as the init value; then for each source element in row-major order,
    its window selects one operand element (the first that exists, replaced by each later one
    the select computation does not keep over it) and the source value is scattered onto it.
    Disjoint windows (max-pool gradients) take select_scatter.py's single pass instead; these
    loops are the route for everything else (overlapping windows, any select and scatter)."""
    if emit_disjoint(ke):
        return
    root = kernel_root(ke)
    operand, source, init = root.operands
    window: tuple[WindowDim, ...] = tuple(root.attrs["window"])
    select, scatter = root.attrs["select"], root.attrs["scatter"]
    e, b = ke.e, ke.b
    out_shape = ke.instr.shape
    out = ke.out_ptr
    t = etype(operand)

    init_value = e.value(init, ())
    for_range(b, out_shape.dims, lambda index: ke.store(out, out_shape, index, init_value))
    chosen_value = alloca_in_entry(b, compute_type(t))
    chosen_index = [alloca_in_entry(b, I64) for _ in window]
    have_choice = alloca_in_entry(b, I1)

    def per_source(source_index):
        b.store(ir.Constant(I1, 0), have_choice)

        def per_offset(offsets):
            valid, at = window_source(b, source_index, offsets, window, operand.shape.dims)

            def consider():
                e.push_scope()
                x = e.value(operand, at)
                keep = short_circuit(b, b.load(have_choice),
                                     lambda: e.scalar_computation(select, [b.load(chosen_value), x])[0])
                with b.if_then(b.not_(keep)):
                    b.store(x, chosen_value)
                    for slot, i in zip(chosen_index, at):
                        b.store(i, slot)
                    b.store(ir.Constant(I1, 1), have_choice)
                e.pop_scope()

            when(b, valid, consider)

        for_range(b, [w.size for w in window], per_offset)
        with b.if_then(b.load(have_choice)):
            e.push_scope()
            target = tuple(b.load(slot) for slot in chosen_index)
            current = ke.load(out, out_shape, target)
            (combined,) = e.scalar_computation(scatter, [current, e.value(source, source_index)])
            ke.store(out, out_shape, target, combined)
            e.pop_scope()

    for_range(b, source.shape.dims, per_source)


KERNELS["reduce-window"] = emit_reduce_window
KERNELS["select-and-scatter"] = emit_select_and_scatter
