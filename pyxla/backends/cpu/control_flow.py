"""Control flow and tuple values on the CPU backend: while, conditional and call run their
computations as native code inside the calling function (so an execution stays one foreign
call), and a tuple value is the list of its arrays.

Values. A value is a list of leaves, one per array, in the flattened order of its shape
(nested tuples depth first). A leaf lives in one of three places: a parameter of the
computation (memory its caller owns), a constant (a global), or a buffer of the
computation's buffer assignment at a byte offset: a tuple-valued result (a while's loop
state, a conditional, a multi-output fusion) packs its arrays one after another in its one
buffer, at `tuple_element_offsets`. `tuple`, `get-tuple-element`, `bitcast` and
`opt-barrier` only regroup leaves: they emit no code.

Memory of called computations. Every computation that a while, conditional or call runs
has its own buffer assignment (`assign_buffers(module, comp)`, over its own schedule) and
its own region of the arena, after the entry computation's temps:

    arena = [entry temps | region of C1 | region of C2 | ... | kernel scratch]
    region = [its temps, as its assignment placed them | its output buffers | staging]

Regions of different computations are disjoint, and one region per computation is enough:
no computation can be running twice at once (the call graph is acyclic), and every caller
copies a callee's results out of the callee's region into its own buffer before it runs
anything else, so a computation called from two places never finds its memory in use.

while: the loop state lives in the while's own buffer W. The initial value is copied in;
the condition and the body read their parameter straight from W; after each body run its
results are copied into W. The body's kernels write W only where buffer assignment put an
update of a carried array in the state itself (`Buffer.in_parameter`: nothing reads that
element of the parameter afterwards). On the copy back, an element passed through
unchanged or updated in place is not copied, and an element that is
another element of the parameter (a permutation of the state) is first copied to staging
memory, so no element is overwritten before it is read.
conditional: the selector picks a block (pred: true runs branch 0; s32: a switch whose
default, for any index out of range, is the last branch); each branch runs its computation
on its operand and copies its result into the conditional's buffer.
call: the computation runs on the operands; its result is copied into the call's buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import llvmlite.ir as ir

from ...fusion.buffer_assignment import ALIGNMENT, Buffer, BufferAssignment, assign_buffers
from ...hlo.computation import HloComputation
from ...hlo.cost_analysis import byte_size
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops.control import branch_computations
from ...hlo.shape import ArrayShape, Shape, TupleShape
from ..llvm.elemental import Unsupported
from ..llvm.indices import linear_index
from ..llvm.ir_types import I1, I8, I32, I64, PTR, i64, storage_type
from ..llvm.loops import for_range

# Instructions that only regroup the leaves of other values.
VIEWS = frozenset({"tuple", "get-tuple-element", "bitcast", "opt-barrier", "parameter", "constant"})


# --- values as leaves ------------------------------------------------------------------------

def tuple_element_offsets(shape: TupleShape) -> list[int]:
    """Byte offsets of a tuple's elements in a buffer holding the whole tuple (packed)."""
    offsets, at = [], 0
    for e in shape.elements:
        offsets.append(at)
        at += byte_size(e)
    return offsets


def array_leaves(shape: Shape) -> list[tuple[ArrayShape, int]]:
    """(array shape, byte offset) of every array in a buffer holding a value of `shape`."""
    if isinstance(shape, ArrayShape):
        return [(shape, 0)]
    if not isinstance(shape, TupleShape):
        return []   # a token holds no data
    out = []
    for element, at in zip(shape.elements, tuple_element_offsets(shape)):
        out.extend((s, at + offset) for s, offset in array_leaves(element))
    return out


@dataclass(frozen=True)
class Leaf:
    """One array of a value and where its bytes are, in the computation that has the value."""
    kind: str                # "parameter", "constant" or "buffer"
    owner: object            # parameter number, the constant, or the instruction owning the buffer
    position: int            # the leaf's number within the parameter, or byte offset in the buffer
    shape: ArrayShape


def value_leaves(value: HloInstruction) -> list[Leaf]:
    """The arrays of `value`, following views to the memory they read."""
    op = value.opcode
    if op == "parameter":
        return [Leaf("parameter", value.parameter_number, k, s) for k, (s, _) in enumerate(array_leaves(value.shape))]
    if op == "constant":
        if not isinstance(value.shape, ArrayShape):
            raise Unsupported(f"the CPU backend cannot compile a tuple-valued constant yet ({value.describe()})")
        return [Leaf("constant", value, 0, value.shape)]
    if op == "tuple":
        return [leaf for operand in value.operands for leaf in value_leaves(operand)]
    if op == "get-tuple-element":
        source = value.operands[0]
        elements = source.shape.elements
        index = value.attrs["index"]
        start = sum(len(array_leaves(e)) for e in elements[:index])
        return value_leaves(source)[start:start + len(array_leaves(elements[index]))]
    if op == "opt-barrier":
        return value_leaves(value.operands[0])
    if op == "bitcast" and isinstance(value.shape, ArrayShape):
        (leaf,) = value_leaves(value.operands[0])
        return [replace(leaf, shape=value.shape)]   # the same bytes, seen as another shape
    return [Leaf("buffer", value, offset, s) for s, offset in array_leaves(value.shape)]


# --- memory of computations --------------------------------------------------------------------

@dataclass
class ComputationMemory:
    """Where a computation's buffers are: its assignment, with temps at `base` in the arena.
    Output buffers of a called computation are in its region (`output_offsets`); the entry
    computation's are the caller's output buffers. `staging` holds, for a while body, the
    arena offset where each state element that is a permutation of the parameter waits."""
    computation: HloComputation
    buffers: BufferAssignment
    base: int = 0
    output_offsets: dict[int, int] = field(default_factory=dict)   # id(Buffer) -> arena offset
    staging: dict[int, int] = field(default_factory=dict)          # root leaf number -> arena offset
    _buffer_of: dict[int, Buffer] = field(init=False, repr=False)

    def __post_init__(self):
        self._buffer_of = {id(v): buf for buf in self.buffers.buffers for v in buf.values}

    def buffer_of(self, instr: HloInstruction) -> Buffer:
        buf = self._buffer_of.get(id(instr))
        if buf is None:
            raise Unsupported(f"the CPU backend found no buffer for {instr.describe()}")
        return buf


@dataclass
class MemoryPlan:
    """The memory of every computation the entry function runs, by id of the computation."""
    computations: dict[int, ComputationMemory]
    end: int                 # the first arena byte after every region (kernel scratch starts here)

    def of(self, comp: HloComputation) -> ComputationMemory:
        return self.computations[id(comp)]


def called_computations(instr: HloInstruction) -> list[HloComputation]:
    """The computations a control-flow instruction runs."""
    if instr.opcode == "while":
        return [instr.attrs["condition"], instr.attrs["body"]]
    if instr.opcode == "conditional":
        return branch_computations(instr.attrs)
    if instr.opcode == "call":
        return [instr.attrs["to_apply"]]
    return []


def plan_memory(module: HloModule, entry_buffers: BufferAssignment) -> MemoryPlan:
    """The entry computation's assignment at offset 0, then a region for each called computation."""
    order: list[HloComputation] = []
    bodies: set[int] = set()
    pending = [module.entry]
    while pending:
        for instr in pending.pop().instructions:
            for comp in called_computations(instr):
                if all(comp is not known for known in order):
                    order.append(comp)
                    pending.append(comp)
            if instr.opcode == "while":
                bodies.add(id(instr.attrs["body"]))
    plan = {id(module.entry): ComputationMemory(module.entry, entry_buffers)}
    end = align(entry_buffers.arena_size)
    for comp in order:
        memory = ComputationMemory(comp, assign_buffers(module, comp), base=end)
        end = align(end + memory.buffers.arena_size)
        for buf in memory.buffers.buffers:
            if buf.kind == "output":
                memory.output_offsets[id(buf)] = end
                end = align(end + buf.size)
        if id(comp) in bodies:
            for i, leaf in permuted_state_leaves(comp):
                memory.staging[i] = end
                end = align(end + byte_size(leaf.shape))
        plan[id(comp)] = memory
    return MemoryPlan(plan, end)


def permuted_state_leaves(body: HloComputation) -> list[tuple[int, Leaf]]:
    """The results of a while body that are another element of its parameter."""
    return [(i, leaf) for i, leaf in enumerate(value_leaves(body.root))
            if leaf.kind == "parameter" and leaf.position != i]


def align(n: int) -> int:
    """n rounded up to the alignment of buffers in the arena."""
    return -(-n // ALIGNMENT) * ALIGNMENT


# --- frames: a computation running in emitted code ------------------------------------------------

class Frame:
    """One run of a computation inside emitted code: the IR pointers of its values.

    `parameters[n]` are the pointers of parameter n's leaves, valid where the frame's code
    is emitted (the caller computes them before it branches into the computation)."""

    def __init__(self, codegen, memory: ComputationMemory, parameters: list[list[ir.Value]]):
        self.codegen = codegen
        self.memory = memory
        self.computation = memory.computation
        self.parameters = parameters

    def leaves(self, value: HloInstruction) -> list[Leaf]:
        return value_leaves(value)

    def pointer(self, b: ir.IRBuilder, leaf: Leaf) -> ir.Value:
        if leaf.kind == "parameter":
            return self.parameters[leaf.owner][leaf.position]
        if leaf.kind == "constant":
            return self.codegen.constant_global(leaf.owner)
        base = self._base(b, self.memory.buffer_of(leaf.owner))
        return b.gep(base, [i64(leaf.position)], source_etype=I8) if leaf.position else base

    def pointers(self, b: ir.IRBuilder, value: HloInstruction) -> list[ir.Value]:
        return [self.pointer(b, leaf) for leaf in self.leaves(value)]

    def kernel_argument(self, b: ir.IRBuilder, value: HloInstruction) -> ir.Value:
        """The one pointer a kernel gets for a value: an array's, or a tuple's packed buffer."""
        leaves = self.leaves(value)
        if len(leaves) == 1 and isinstance(value.shape, ArrayShape):
            return self.pointer(b, leaves[0])
        if not leaves:
            return ir.Constant(PTR, None)
        first = leaves[0]
        packed = [offset for _, offset in array_leaves(value.shape)]
        if not all(leaf.kind == "buffer" and leaf.owner is first.owner and leaf.position - first.position == at
                   for leaf, at in zip(leaves, packed)):
            raise Unsupported(f"the CPU backend cannot pass a tuple whose elements live in different buffers to a "
                              f"kernel ({value.describe()})")
        return self.pointer(b, first)

    def arena_at(self, b: ir.IRBuilder, offset: int) -> ir.Value:
        arena = self.codegen.arena
        return b.gep(arena, [i64(offset)], source_etype=I8) if offset else arena

    def _base(self, b: ir.IRBuilder, buf: Buffer) -> ir.Value:
        if buf.in_parameter is not None:   # a while body's result updated in the loop state
            return self.parameters[0][buf.in_parameter]
        if buf.kind == "temp":
            return self.arena_at(b, self.memory.base + buf.offset)
        if buf.kind == "output":
            if id(buf) in self.memory.output_offsets:
                return self.arena_at(b, self.memory.output_offsets[id(buf)])
            return self.codegen.output_base(buf)   # the entry's results: the caller's buffers
        raise Unsupported(f"the CPU backend cannot address a {buf.kind} buffer here ({buf.name})")


# --- copying values ------------------------------------------------------------------------------

def memcpy(b: ir.IRBuilder, module: ir.Module, dst: ir.Value, src: ir.Value, nbytes: int) -> None:
    fn = module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    b.call(fn, [dst, src, i64(nbytes), ir.Constant(I1, 0)])


def _physical_order(shape: ArrayShape) -> tuple:
    return tuple(d for d in shape.minor_to_major if shape.dims[d] != 1)


def copy_array(b: ir.IRBuilder, module: ir.Module, dst: ir.Value, dst_shape: ArrayShape,
               src: ir.Value, src_shape: ArrayShape) -> None:
    """An array into memory of the same logical shape: a memcpy when both layouts agree,
    else element by element."""
    if not dst_shape.size:
        return
    if _physical_order(dst_shape) == _physical_order(src_shape):
        memcpy(b, module, dst, src, dst_shape.byte_size)
        return
    st = storage_type(dst_shape.dtype)

    def body(index):
        value = b.load(b.gep(src, [linear_index(b, index, src_shape.dims, src_shape.minor_to_major)],
                             source_etype=st), typ=st)
        b.store(value, b.gep(dst, [linear_index(b, index, dst_shape.dims, dst_shape.minor_to_major)],
                             source_etype=st))

    for_range(b, dst_shape.dims, body)


def copy_leaves(cg, b: ir.IRBuilder, frame: Frame, sources: list[Leaf], dst: list[ir.Value],
                dst_shapes: list[ArrayShape]) -> None:
    for leaf, ptr, shape in zip(sources, dst, dst_shapes):
        copy_array(b, cg.ir, ptr, shape, frame.pointer(b, leaf), leaf.shape)


def _load_pred(b: ir.IRBuilder, ptr: ir.Value) -> ir.Value:
    return b.icmp_unsigned("!=", b.load(ptr, typ=I8), ir.Constant(I8, 0))


# --- the instructions ------------------------------------------------------------------------------

def emit_while(cg, b: ir.IRBuilder, frame: Frame, instr: HloInstruction) -> None:
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    state = frame.leaves(instr)
    shapes = [leaf.shape for leaf in state]
    state_ptrs = [frame.pointer(b, leaf) for leaf in state]
    copy_leaves(cg, b, frame, frame.leaves(instr.operands[0]), state_ptrs, shapes)
    test = b.append_basic_block(f"{instr.name}.condition")
    run = b.append_basic_block(f"{instr.name}.body")
    done = b.append_basic_block(f"{instr.name}.done")
    b.branch(test)

    b.position_at_end(test)
    cond_frame = cg.frame(cond, [state_ptrs])
    cg.emit_computation(b, cond_frame)
    (holds,) = cond_frame.pointers(b, cond.root)
    b.cbranch(_load_pred(b, holds), run, done)

    b.position_at_end(run)
    body_frame = cg.frame(body, [state_ptrs])
    cg.emit_computation(b, body_frame)
    _store_state(cg, b, body_frame, state_ptrs, shapes)
    b.branch(test)
    b.position_at_end(done)


def _store_state(cg, b: ir.IRBuilder, body: Frame, state_ptrs: list[ir.Value], shapes: list[ArrayShape]) -> None:
    """The body's results into the loop state: permuted elements of the parameter through
    staging first (they are read before any element of the state is written)."""
    writes = []
    for i, leaf in enumerate(body.leaves(body.computation.root)):
        if (leaf.kind == "parameter" and leaf.position == i) or (
                leaf.kind == "buffer" and body.memory.buffer_of(leaf.owner).in_parameter == i):
            continue   # passed through or updated in place: already in the state
        source = body.pointer(b, leaf)
        if leaf.kind == "parameter":
            staged = body.arena_at(b, body.memory.staging[i])
            copy_array(b, cg.ir, staged, leaf.shape, source, leaf.shape)
            source = staged
        writes.append((i, source, leaf.shape))
    for i, source, shape in writes:
        copy_array(b, cg.ir, state_ptrs[i], shapes[i], source, shape)


def emit_conditional(cg, b: ir.IRBuilder, frame: Frame, instr: HloInstruction) -> None:
    selector, *operands = instr.operands
    branches = branch_computations(instr.attrs)
    result = frame.leaves(instr)
    result_ptrs = [frame.pointer(b, leaf) for leaf in result]
    selector_ptr = frame.kernel_argument(b, selector)
    blocks = [b.append_basic_block(f"{instr.name}.branch{k}") for k in range(len(branches))]
    done = b.append_basic_block(f"{instr.name}.done")
    if "branch_computations" in instr.attrs:
        switch = b.switch(b.load(selector_ptr, typ=I32), blocks[-1])   # out of range: the last branch
        for k, block in enumerate(blocks[:-1]):
            switch.add_case(ir.Constant(I32, k), block)
    else:
        b.cbranch(_load_pred(b, selector_ptr), blocks[0], blocks[1])
    for comp, operand, block in zip(branches, operands, blocks):
        b.position_at_end(block)
        _run_and_copy_out(cg, b, frame, comp, [operand], result_ptrs, [leaf.shape for leaf in result])
        b.branch(done)
    b.position_at_end(done)


def emit_call(cg, b: ir.IRBuilder, frame: Frame, instr: HloInstruction) -> None:
    result = frame.leaves(instr)
    _run_and_copy_out(cg, b, frame, instr.attrs["to_apply"], instr.operands,
                      [frame.pointer(b, leaf) for leaf in result], [leaf.shape for leaf in result])


def _run_and_copy_out(cg, b: ir.IRBuilder, frame: Frame, comp: HloComputation, operands, dst, dst_shapes) -> None:
    callee = cg.frame(comp, [frame.pointers(b, op) for op in operands])
    cg.emit_computation(b, callee)
    copy_leaves(cg, b, callee, callee.leaves(comp.root), dst, dst_shapes)


# Instructions emitted in the code of the computation that has them, not as kernels.
CONTROL_FLOW = {"while": emit_while, "conditional": emit_conditional, "call": emit_call}
