"""LLVM IR for a compiled module: one kernel function per instruction that computes, and
one entry function that runs the ENTRY computation's instructions in schedule order on the
planned buffers.

    void entry(ptr params, ptr outputs, ptr arena)

`params` and `outputs` are arrays of buffer pointers; temporaries live in `arena` at the
offsets buffer assignment chose; constants are globals. The entry function sets the FTZ and
DAZ bits of MXCSR for its duration, as XLA's CPU runtime does, so f32/f64 arithmetic
flushes subnormals exactly like the evaluator.

Control flow (while, conditional, call) is emitted inside the entry function, as loops and
branches around the kernel calls of the computations it runs (control_flow.py), so an
execution stays one foreign call. Each called computation has its own buffer assignment in
its own region of the arena, after the entry computation's temps; the last part of the
arena is scratch memory that a kernel may use while it runs (kernels run one at a time):

    arena = [entry temps | region of each called computation | kernel scratch]

A value is a list of array leaves (control_flow.Leaf); tuples, get-tuple-element, bitcast
and opt-barrier only regroup leaves, so tuple values pass anywhere, and a kernel gets one
pointer per operand (an array, or a tuple packed in one buffer).

Kernels by kind:
  loop          fusion kLoop, or a lone elementwise / data-movement op: one loop nest over
                the output, each element from the elemental emitter
  reduction     fusion kInput, or a lone reduce: an outer loop over rows; per row every
                reduction runs once, then the row's outputs are written. When reductions or
                outputs do not share the rows, each reduction is first computed whole into
                kernel scratch, then every output by its own loop nest reading them
  gemm          dot of f32/f64 in canonical form: pyxla's own GEMM, in blocks on the pool
                when large (dot/tasks.py), or, when m or n is 1, the
                matrix-vector kernels (dot/gemv.py); for fusion kOutput the epilogue in
                place over the result, per block where it can be
A fusion of a padded module with `bounded_rows` computes only the indices of one output
dimension below a size read at run time; its loops stop there (bounded_loops.py).

Across threads. A loop nest (a loop kernel, the rows of a reduction kernel, an epilogue)
whose estimated work is at least PARALLEL_MIN_WORK is split across the worker pool
(runtime/parallel.py): its outermost dimensions, as one flat range, are cut into contiguous chunks,
a few per thread, and the body for one chunk is outlined into a task function. A reduction
with few results but long rows (a sum of a whole vector) is split along its reduced
dimensions instead: each task reduces its part into a partial result in kernel scratch, and
the partials are combined in order afterwards (a reduction's order is unspecified in HLO;
this needs the init value to be the reducer's identity, which it is for sums, products,
max and min as front ends emit them; the rounding of a split float sum then depends on the
number of threads, as XLA's does). Work is estimated as elements visited times a cost
per element (EXPENSIVE_OPS count more), so a short transcendental loop splits where a
short copy does not.
"""
from __future__ import annotations

import gc
import re
from functools import cache

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from ...fusion.attention import is_attention_fusion
from ...fusion.buffer_assignment import Buffer, BufferAssignment
from ...hlo.computation import HloComputation
from ...hlo.cost_analysis import byte_size
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops.registry import EXPENSIVE_OPS, op_def
from ...hlo.shape import ArrayShape, TupleShape, default_layout
from ...hlo.types import integer_limits
from ..llvm.elemental import RULES, ElementalEmitter, Unsupported, emit_reduction_loop, register_rules
from ..llvm.indices import delinearize, linear_index, load_element, store_element
from ..llvm.ir_types import (
    I8,
    I32,
    PTR,
    VOID,
    compute_type,
    etype,
    i64,
    scalar_constant,
)
from ..llvm.loops import for_range, for_span
from ..llvm.transpose_loops import blocked_loop_nest, crossed_dimensions
from .bounded_loops import bounded_loop_nest, read_row_bound
from .control_flow import (
    CONTROL_FLOW,
    VIEWS,
    Frame,
    Leaf,
    align,
    copy_array,
    plan_memory,
    tuple_element_offsets,
    value_leaves,
)
from .dot.gemv import emit_gemv
from .dot.plan import epilogue_in_place, plan_gemm
from .dot.tasks import emit_dot_tasks, packed_weights
from .ops.attention import emit_attention
from .ops.column_reduce import column_reductions, emit_column_reduction
from .ops.concat_rows import concatenate_of, emit_concatenated_rows
from .runtime import kernel_profile
from .runtime.executable import OutputSlot
from .runtime.parallel import emit_parallel_tasks, worker_pool

# Kernels for ops that are not elementwise loops (sort, scatter, ...): opcode ->
# emit(kernel_emitter). Files in this package that add one register it here.
KERNELS: dict = {}
# Kernels for an output fusion (kOutput) around an op other than a GEMM dot (a convolution's
# epilogue): opcode of the fused op -> emit(kernel_emitter).
OUTPUT_FUSION_KERNELS: dict = {}
MXCSR_FTZ_DAZ = 0x8040

# Splitting across threads: work units are elements visited times the cost of an element.
PARALLEL_MIN_WORK = 1 << 17       # below this a loop nest stays on the calling thread
TASK_MIN_WORK = 1 << 15           # and no task gets less than this
TASKS_PER_THREAD = 4              # chunks per thread, so a late or slowed thread costs little
# Elementwise ops whose elements cost EXPENSIVE_COST (the registry's expensive ones).
EXPENSIVE_OPS = frozenset(op for op in EXPENSIVE_OPS if op_def(op).fusion_kind == "elementwise")
EXPENSIVE_COST = 8
ROW_BUFFER_BYTES = 1 << 16        # rows up to this size keep costly shared values on the stack
SPLITTABLE_REDUCERS = ("add", "multiply", "maximum", "minimum", "and", "or")
# Dots of at least this many multiply-adds run as blocks on the pool, each with pyxla's own
# GEMM (dot/tasks.py says why); smaller ones, and all when kernels run on one thread, run it on
# the calling thread.
OWN_GEMM_MIN_WORK = 1 << 20
# Blocks per thread of such a dot: each block packs its own rows of A and columns of B, so
# fewer blocks repack less (MLP 16.3 -> 15.9 ms, attention 21.6 -> 21.1 ms at 2 instead of 4,
# one process, two runs; 1 gained another 2% but leaves a slowed thread no one to share with).
GEMM_TASKS_PER_THREAD = 2
# Dots with m or n of 1 (matrix-vector: fully connected layers at batch 1) are bound by memory
# and take the matrix-vector kernels, never the GEMM or BLAS (dot/gemv.py says why); on the
# pool from this many multiply-adds (measured, kernel alone: 1x512x512 f32 7-10 us on the pool,
# 13 on one thread; 1x256x256 3 us either way).
GEMV_PARALLEL_MIN_WORK = 1 << 18


@cache
def register_kernels() -> None:
    """Import the modules that register kernels in KERNELS and OUTPUT_FUSION_KERNELS, and
    the elemental emitter's rules (done once, when the first module is emitted: they import
    this module, and a process that only loads cached code needs none of them)."""
    from .conv import depthwise, planes, pointwise, tiles, weight_gradient, winograd  # noqa: F401
    from .ops import indexing, rng, sorting, windows  # noqa: F401
    register_rules()


class ModuleCodegen:
    """The LLVM module of one HLO module. `buffers` is the buffer assignment of the computation
    whose kernels are being emitted (the entry's outside of emission); `arena_size` is known
    after emit()."""
    entry_name = "entry"   # the native entry function's symbol; the backend makes it unique

    def __init__(self, module: HloModule, buffers: BufferAssignment, parameter_forms: dict | None = None):
        register_kernels()
        self.hlo = module
        # entry parameter number -> the form its argument comes in, when not its layout's
        # (runtime/parameter_forms.py)
        self.parameter_forms = parameter_forms or {}
        self.entry_buffers = buffers
        self.buffers = buffers
        self.ir = ir.Module(name=module.name)
        self.ir.triple = llvm.get_process_triple()
        self.constants: dict[int, ir.GlobalVariable] = {}
        self.kernels: dict[int, ir.Function] = {}
        self._kernels_by_code: dict[str, ir.Function] = {}   # a kernel's code -> the kernel emitted for it
        self.memory = plan_memory(module, buffers)
        self.scratch_size = 0
        self.arena: ir.Value | None = None       # the entry function's arena argument, while emitting
        self.output_buffers: list[Buffer] = []   # in output slot order
        self.outputs: list[OutputSlot] = []
        self._output_bases: dict[int, ir.Value] = {}
        self._copied_outputs: list[tuple[Leaf, int]] = []   # ROOT leaves copied to an output buffer at the end
        self.profile: kernel_profile.KernelProfile | None = None   # PYXLA_PROFILE's counters, when set
        self._plan_outputs()

    @property
    def scratch_offset(self) -> int:
        return self.memory.end

    @property
    def arena_size(self) -> int:
        return self.scratch_offset + self.scratch_size

    # --- outputs ------------------------------------------------------------------------------
    def _plan_outputs(self) -> None:
        """A slot per ROOT leaf: the output buffer holding it, or a parameter or constant that
        passes through whole; a leaf that is neither (a bitcast view of a parameter, say) is
        copied into an output buffer of its own at the end of the entry function."""
        entry = self.hlo.entry
        parameters = {p.parameter_number: p for p in entry.parameters}
        for p in entry.parameters:
            if not isinstance(p.shape, ArrayShape):
                raise Unsupported(f"the CPU backend cannot take a tuple-shaped ENTRY parameter yet ({p.describe()})")
        memory = self.memory.of(entry)
        for leaf in value_leaves(entry.root):
            if leaf.kind == "parameter" and _same_array(leaf.shape, parameters[leaf.owner].shape):
                self.outputs.append(OutputSlot("parameter", leaf.owner, 0, leaf.shape))
            elif leaf.kind == "constant" and _same_array(leaf.shape, leaf.owner.shape):
                self.outputs.append(OutputSlot("constant", 0, 0, leaf.shape, np.asarray(leaf.owner.literal)))
            elif leaf.kind == "buffer" and memory.buffer_of(leaf.owner).kind == "output":
                index = self._output_index(memory.buffer_of(leaf.owner))
                self.outputs.append(OutputSlot("buffer", index, leaf.position, leaf.shape))
            else:
                index = self._output_index(Buffer([], byte_size(leaf.shape), 0, 0, "output"))
                self._copied_outputs.append((leaf, index))
                self.outputs.append(OutputSlot("buffer", index, 0, leaf.shape))

    def _output_index(self, buf: Buffer) -> int:
        """The number of an output buffer, given one when it is new."""
        for i, known in enumerate(self.output_buffers):
            if known is buf:
                return i
        self.output_buffers.append(buf)
        return len(self.output_buffers) - 1

    def output_base(self, buf: Buffer) -> ir.Value:
        return self._output_bases[id(buf)]

    def storage_and_offset(self, instr: HloInstruction) -> tuple[HloInstruction, int]:
        """The instruction behind a value (the owner of its buffer, a parameter or a constant)
        and the value's byte offset in it."""
        if instr.opcode not in VIEWS:
            return instr, 0
        leaf = value_leaves(instr)[0]
        if leaf.kind == "parameter":
            return next(p for p in instr.parent.parameters if p.parameter_number == leaf.owner), 0
        return leaf.owner, leaf.position if leaf.kind == "buffer" else 0

    # --- the entry function ---------------------------------------------------------------------
    def emit(self) -> str:
        """The module's LLVM IR text. Python's cycle collector is paused meanwhile: emission
        allocates hundreds of thousands of IR objects (parents and uses point at each other),
        and each full collection walked the whole growing module again, a quarter to a third
        of emission's time (SqueezeNet and Inception v1: 2.2-2.5 -> 1.5-1.7 s of CPU). The
        cycles left behind are collected afterwards as usual."""
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._emit()
        finally:
            if paused:
                gc.enable()

    def _emit(self) -> str:
        fn = ir.Function(self.ir, ir.FunctionType(VOID, [PTR, PTR, PTR]), name=self.entry_name)
        params, outs, arena = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        saved = self._set_mxcsr(b)
        if kernel_profile.enabled():
            self.profile = kernel_profile.KernelProfile(self.ir, self.entry_name, self.hlo.name)
            whole_call = self.profile.start(b, kernel_profile.Site(kernel_profile.WHOLE_CALL, "entry", ""))
        self.arena = arena
        for i, buf in enumerate(self.output_buffers):
            self._output_bases[id(buf)] = b.load(b.gep(outs, [i64(i)], source_etype=PTR), typ=PTR)
        entry = self.hlo.entry
        parameters = [[b.load(b.gep(params, [i64(p.parameter_number)], source_etype=PTR), typ=PTR)]
                      for p in entry.parameters]
        frame = self.frame(entry, parameters)
        self.emit_computation(b, frame)
        for leaf, index in self._copied_outputs:
            copy_array(b, self.ir, self._output_bases[id(self.output_buffers[index])], leaf.shape,
                       frame.pointer(b, leaf), leaf.shape)
        if self.profile:
            self.profile.stop(b, whole_call)
            self.profile.finish()
        self._restore_mxcsr(b, saved)
        b.ret_void()
        return str(self.ir)

    def frame(self, comp: HloComputation, parameters: list[list[ir.Value]]) -> Frame:
        """A run of `comp` whose parameter n has the leaf pointers parameters[n]."""
        return Frame(self, self.memory.of(comp), parameters)

    def emit_computation(self, b: ir.IRBuilder, frame: Frame) -> None:
        """The instructions of a computation, in schedule order, at the builder's position."""
        for instr in frame.computation.instructions:
            if instr.opcode in VIEWS:
                continue
            inline = CONTROL_FLOW.get(instr.opcode)
            if inline is not None:
                inline(self, b, frame, instr)
                continue
            kernel = self._kernel(instr, frame)
            operands = list(dict.fromkeys(instr.operands))
            args = [frame.kernel_argument(b, instr)] + [frame.kernel_argument(b, op) for op in operands]
            if self.profile:
                started = self.profile.start(b, kernel_profile.Site.of(instr))
            b.call(kernel, args + [frame.arena_at(b, self.scratch_offset)])
            if self.profile:
                self.profile.stop(b, started)

    def constant_global(self, instr: HloInstruction) -> ir.GlobalVariable:
        if id(instr) not in self.constants:
            shape: ArrayShape = instr.shape
            physical = np.ascontiguousarray(np.asarray(instr.literal).transpose(
                tuple(reversed(shape.minor_to_major)))) if shape.rank else np.asarray(instr.literal)
            data = bytearray(physical.astype(shape.dtype.np_dtype).tobytes()) or bytearray(1)
            ty = ir.ArrayType(I8, len(data))
            g = ir.GlobalVariable(self.ir, ty, name=self.ir.get_unique_name(f"constant.{instr.name}"))
            g.global_constant = True
            g.linkage = "internal"
            g.align = 64
            g.initializer = ir.Constant(ty, data)
            self.constants[id(instr)] = g
        return self.constants[id(instr)]

    def _set_mxcsr(self, b: ir.IRBuilder):
        if not self.ir.triple.startswith(("x86_64", "i686", "i386")):
            return None
        stmxcsr = ir.Function(self.ir, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.stmxcsr")
        ldmxcsr = ir.Function(self.ir, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.ldmxcsr")
        saved = b.alloca(I32)
        b.call(stmxcsr, [saved])
        flushed = b.alloca(I32)
        b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FTZ_DAZ)), flushed)
        b.call(ldmxcsr, [flushed])
        return saved, ldmxcsr

    def _restore_mxcsr(self, b: ir.IRBuilder, saved) -> None:
        if saved is not None:
            slot, ldmxcsr = saved
            b.call(ldmxcsr, [slot])

    # --- kernels -------------------------------------------------------------------------------
    def _kernel(self, instr: HloInstruction, frame: Frame) -> ir.Function:
        """The kernel function of `instr`: void kernel(ptr out, ptr operand..., ptr scratch),
        emitted once however many places run its computation."""
        if id(instr) in self.kernels:
            return self.kernels[id(instr)]
        operands = list(dict.fromkeys(instr.operands))
        before = set(self.ir.globals)
        fn = ir.Function(self.ir, ir.FunctionType(VOID, [PTR] * (2 + len(operands))),
                         name=self.ir.get_unique_name(f"kernel.{instr.name}"))
        fn.linkage = "internal"
        # Each kernel optimised on its own: inlined into the entry function (as LLVM does with
        # an internal function called once), all kernels became one function whose
        # optimisation grew faster than its size (AlexNet: 10 s of LLVM -> 1.3 s of CPU time).
        # It also lets the module be cut into parts along its kernels (split_compile.py).
        fn.attributes.add("noinline")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        out_ptr, *operand_ptrs, scratch = fn.args
        pointers = {id(op): arg for op, arg in zip(operands, operand_ptrs)}
        self.buffers = frame.memory.buffers   # kernels that look at buffer assignment see their computation's
        try:
            KernelEmitter(self, b, instr, out_ptr, pointers, scratch).emit()
        finally:
            self.buffers = self.entry_buffers
        b.ret_void()
        fn = self._reuse_identical_kernel(fn, before)
        self.kernels[id(instr)] = fn
        return fn

    def _metadata_by_content(self, text: str) -> str:
        """`text` with each metadata reference (`!7`, numbered in module order) replaced by what
        the node holds, so two kernels whose loops carry equal hints read the same."""
        nodes = {m.name: m for m in self.ir.metadata}

        def content(name: str, seen=()) -> str:
            node = nodes.get(name)
            if node is None or name in seen:
                return "!self"
            parts = [content(op.name, seen + (name,)) if isinstance(op, ir.values.MDValue) else str(op)
                     for op in getattr(node, "operands", ())]
            return "!{" + ", ".join(parts) + "}"

        return re.sub(r"!(\d+)\b", lambda m: content(m.group(1)), text)

    def _reuse_identical_kernel(self, fn: ir.Function, before: set) -> ir.Function:
        """An earlier kernel whose code is the same as `fn`'s (with the functions outlined from
        it, such as its parallel tasks), or `fn`. Models repeat the same layer shapes many times
        (the blocks of a ResNet stage), and LLVM's time grows with the code it is given, so each
        distinct kernel is optimised and compiled once; the duplicate is dropped from the module.
        Kernel code refers to buffers only through its pointer arguments, so equal text is
        equal behaviour."""
        own = [g for name, g in self.ir.globals.items()
               if name not in before and isinstance(g, ir.Function)
               and (name == fn.name or name.startswith(f"{fn.name}."))]
        text = "\n".join(str(g) for g in own).replace(f"@\"{fn.name}", "@\"KERNEL").replace(f"@{fn.name}", "@KERNEL")
        earlier = self._kernels_by_code.setdefault(self._metadata_by_content(text), fn)
        if earlier is not fn:
            for g in own:
                del self.ir.globals[g.name]
        return earlier


def _same_array(a: ArrayShape, b: ArrayShape) -> bool:
    """The same logical array in the same bytes."""
    return a.dtype == b.dtype and a.dims == b.dims and \
        tuple(d for d in a.minor_to_major if a.dims[d] != 1) == tuple(d for d in b.minor_to_major if b.dims[d] != 1)


class KernelEmitter:
    """The body of one kernel function."""

    def __init__(self, codegen: ModuleCodegen, b: ir.IRBuilder, instr: HloInstruction, out_ptr, pointers,
                 scratch=None):
        self.codegen = codegen
        self.b = b
        self.instr = instr
        self.out_ptr = out_ptr
        self.pointers = pointers
        self.scratch = scratch        # the arena's kernel scratch: memory this kernel may use while it runs
        self.scratch_used = 0
        self.row_bound: tuple[int, ir.Value] | None = None   # a bounded fusion's (dimension, count) (emit)
        fused = instr.attrs["calls"] if instr.opcode == "fusion" else None
        self.fused = fused
        self.e = ElementalEmitter(b, codegen.ir, self._read_parameter, self._read_constant)
        if fused is None:   # a lone op: its operands are buffers written by other kernels
            for op in instr.operands:
                self.e.buffer_reads[id(op)] = self._buffer_reader(op)

    # reading buffers
    def load(self, ptr, shape: ArrayShape, index: tuple) -> ir.Value:
        return load_element(self.b, ptr, shape, index)

    def _buffer_reader(self, op: HloInstruction):
        ptr = self.pointers[id(op)]
        return lambda index: self.load(ptr, op.shape, index)

    def _read_parameter(self, param: HloInstruction, index: tuple) -> ir.Value:
        operand = self.instr.operands[param.parameter_number]
        return self.load(self.pointers[id(operand)], operand.shape, index)

    def _read_constant(self, const: HloInstruction, index: tuple) -> ir.Value:
        scalar = scalar_constant(const)
        if scalar is not None:
            return scalar
        return self.load(self.codegen.constant_global(const), const.shape, index)

    def store(self, ptr, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
        store_element(self.b, ptr, shape, index, value)

    def reserve_scratch(self, nbytes: int) -> ir.Value:
        """`nbytes` of kernel scratch for this kernel's own use (64-byte aligned)."""
        at = self.scratch_used
        self.scratch_used = align(at + nbytes)
        self.codegen.scratch_size = max(self.codegen.scratch_size, self.scratch_used)
        return self.b.gep(self.scratch, [i64(at)], source_etype=I8) if at else self.scratch

    # dispatch
    def emit(self) -> None:
        instr = self.instr
        self.row_bound = read_row_bound(self)
        root = self.fused.root if self.fused is not None else instr
        ops = {i.opcode for i in self.fused.instructions} if self.fused is not None else {instr.opcode}
        special = KERNELS.get(root.opcode) or self._output_fusion_kernel()
        if is_attention_fusion(instr):
            special = emit_attention
        if special is not None:
            return special(self)
        if ops & {"dot"} and self._emit_gemm(root):
            return
        if "reduce" in ops:
            return self._emit_rows(root)
        if root.opcode not in RULES or isinstance(root.shape, TupleShape):
            raise Unsupported(f"the CPU backend cannot compile {instr.opcode}"
                              f"{' (' + root.opcode + ')' if root is not instr else ''} yet: {instr.describe()}")
        concat = concatenate_of(self, root)
        if concat is not None:
            return emit_concatenated_rows(self, root, concat)
        self.emit_loop(root)

    def _output_fusion_kernel(self):
        if self.fused is None or self.instr.attrs.get("kind") != "kOutput":
            return None
        return next((OUTPUT_FUSION_KERNELS[i.opcode] for i in self.fused.instructions
                     if i.opcode in OUTPUT_FUSION_KERNELS), None)

    def emit_loop(self, root: HloInstruction) -> None:
        shape: ArrayShape = self.instr.shape
        work = shape.size * self.element_cost()
        store = lambda index: self.store_root(root, shape, index)   # noqa: E731
        crossed = crossed_dimensions(self.fused.instructions if self.fused is not None else [self.instr], shape)
        if crossed is not None:
            return blocked_loop_nest(self, shape.dims, crossed, store, work)
        self.loop_nest(shape.dims, store, work, self.row_bound)

    def _emit_rows(self, root: HloInstruction) -> None:
        """Per row: every reduction once, then the row's outputs; reductions apart when the
        reductions and outputs do not all share the same rows."""
        comp_instrs = self.fused.post_order() if self.fused is not None else [root]
        reduces = [i for i in comp_instrs if i.opcode == "reduce"]
        leaves = list(_output_leaves(root, self.instr.shape, 0))
        rows = _reduce_rows(reduces[0])
        if any(_reduce_rows(r) != rows for r in reduces) or any(shape.dims[:len(rows)] != rows
                                                                for _, shape, _ in leaves):
            return self._emit_reductions_apart(reduces, leaves)
        columns = column_reductions(root, self.instr.shape) if len(reduces) == len(leaves) else None
        if columns is not None:
            return emit_column_reduction(self, [(r, self._out_at(at)) for r, (_, _, at) in zip(columns, leaves)])
        row_work = sum(r.operands[0].shape.size for r in reduces) + sum(s.size for _, s, _ in leaves)
        work = row_work * self.element_cost()
        pool = worker_pool() if work >= PARALLEL_MIN_WORK else None
        if pool is not None and _prod(rows) < 2 * pool.threads and all(_splittable(r) for r in reduces):
            return self._emit_reductions_apart(reduces, leaves)   # few long rows: split along them

        kept = self._row_kept_values(reduces, rows, leaves)

        def row_body(row):
            self.e.push_scope()
            readers = [self._keep_for_row(value, len(rows)) for value in kept]
            for r in reduces:
                self.e.value(r, row)
            for value, read in zip(kept, readers):
                self.e.buffer_reads[id(value)] = read
            for value_of, shape, offset in leaves:
                ptr = self._out_at(offset)

                def body(index, value_of=value_of, shape=shape, ptr=ptr):
                    self.e.push_scope()
                    self.store(ptr, shape, row + index, value_of(self.e, row + index))
                    self.e.pop_scope()

                for_range(self.b, shape.dims[len(rows):], body)
            for value in kept:
                del self.e.buffer_reads[id(value)]
            self.e.pop_scope()

        # the rows are the first dimensions of every output
        bound = self.row_bound if self.row_bound is not None and self.row_bound[0] < len(rows) else None
        self.loop_nest(rows, row_body, work, bound)

    def _row_kept_values(self, reduces, rows, leaves) -> list[HloInstruction]:
        """Values of a row that its reductions compute and its outputs use again, and that
        are costly (a transcendental among them, as exp in softmax): kept in a row buffer
        on the stack while the row runs rather than computed twice. Only values reached from
        reductions and outputs by elementwise ops of the row's own shape qualify, so that
        both read each element at the index they wrote it."""
        if self.fused is None:
            return []
        dims = reduces[0].operands[0].shape.dims
        inner = list(range(len(rows), len(dims)))
        if any(r.operands[0].shape.dims != dims or sorted(r.attrs["dimensions"]) != inner for r in reduces) or \
                any(shape.dims != dims for _, shape, _ in leaves) or \
                _prod(dims[len(rows):]) * 8 > ROW_BUFFER_BYTES:
            return []
        users: dict[int, list] = {}
        for i in self.fused.instructions:
            for op in i.operands:
                users.setdefault(id(op), []).append(i)
        root = self.fused.root
        outputs = set(map(id, root.operands)) if root.opcode == "tuple" else {id(root)}

        def aligned(i) -> bool:   # an elementwise op of the row's shape
            return isinstance(i.shape, ArrayShape) and i.shape.dims == dims and \
                op_def(i.opcode).fusion_kind == "elementwise"

        def reaches(i, seen) -> tuple[bool, bool]:
            """(reaches a reduction, reaches an output); _Unaligned when a path leaves the
            row's elementwise ops."""
            to_reduce, to_output = False, id(i) in outputs
            for u in users.get(id(i), []):
                if u.opcode == "reduce" and u.operands[0] is i:
                    to_reduce = True
                elif u.opcode == "tuple" and u is root:
                    continue
                elif aligned(u) and id(u) not in seen:
                    seen.add(id(u))
                    r, o = reaches(u, seen)
                    to_reduce, to_output = to_reduce or r, to_output or o
                elif not aligned(u):
                    raise _Unaligned
            return to_reduce, to_output

        def costly(i) -> bool:
            return i.opcode in EXPENSIVE_OPS or any(aligned(op) and costly(op) for op in i.operands)

        kept = []
        for i in self.fused.instructions:
            if not aligned(i) or i.shape.dtype.name not in ("f32", "f64") or len(users.get(id(i), [])) < 2 \
                    or not costly(i):
                continue
            try:
                if reaches(i, set()) == (True, True):
                    kept.append(i)
            except _Unaligned:
                continue
        return kept

    def _keep_for_row(self, value: HloInstruction, row_rank: int):
        """A stack buffer for `value` over one row, filled as the reductions compute it;
        returns the reader of the kept values."""
        shape: ArrayShape = value.shape
        inner = shape.dims[row_rank:]
        b = self.b
        here = b.block
        b.position_at_start(b.function.entry_basic_block)   # per function: each task has its own
        ty = compute_type(shape.dtype)
        memory = b.alloca(ty, size=i64(_prod(inner)))
        memory.align = 64
        b.position_at_end(here)

        def at(index):
            offset = linear_index(b, index[row_rank:], inner, default_layout(len(inner))) \
                if inner else i64(0)
            return b.gep(memory, [offset], source_etype=ty)

        def fill(index):
            result = RULES[value.opcode](self.e, value, index)
            b.store(result, at(index))
            return result

        self.e.buffer_reads[id(value)] = fill
        return lambda index: b.load(at(index), typ=ty)

    def _emit_reductions_apart(self, reduces: list[HloInstruction], leaves: list) -> None:
        """Each reduction whole into kernel scratch (in dependency order, so a reduction that
        reads another reads it from there), then each output by its own loop nest: for a
        kernel whose outputs are not laid out by the rows its reductions produce (a bitcast
        of the rows, reductions of different shapes)."""
        cost = self.element_cost()
        for r in reduces:
            shapes = [ArrayShape(s.dtype, s.dims) for s in (r.shape.elements if isinstance(r.shape, TupleShape)
                                                           else (r.shape,))]
            ptrs = [self.reserve_scratch(s.byte_size) for s in shapes]
            work = r.operands[0].shape.size * cost
            if not self._reduce_in_parts(r, shapes[0], ptrs[0], work):

                def body(index, r=r, shapes=shapes, ptrs=ptrs):
                    self.e.push_scope()
                    values = self.e.value(r, index)
                    for ptr, shape, value in zip(ptrs, shapes, values if isinstance(values, list) else [values]):
                        self.store(ptr, shape, index, value)
                    self.e.pop_scope()

                self.loop_nest(shapes[0].dims, body, work)

            variadic = isinstance(r.shape, TupleShape)

            def read(index, shapes=shapes, ptrs=ptrs, variadic=variadic):
                values = [self.load(ptr, shape, index) for ptr, shape in zip(ptrs, shapes)]
                return values if variadic else values[0]

            self.e.buffer_reads[id(r)] = read
        for value_of, shape, offset in leaves:
            ptr = self._out_at(offset)

            def body(index, value_of=value_of, shape=shape, ptr=ptr):
                self.e.push_scope()
                self.store(ptr, shape, index, value_of(self.e, index))
                self.e.pop_scope()

            self.loop_nest(shape.dims, body, shape.size * cost)

    # --- splitting across threads ---------------------------------------------------------------
    def element_cost(self) -> int:
        """The estimated cost of one element of this kernel's loops (its elementwise ops,
        transcendental ones counting EXPENSIVE_COST, a reduce-window its window's elements),
        at least 1."""
        instrs = self.fused.instructions if self.fused is not None else [self.instr]
        cost = sum(EXPENSIVE_COST if i.opcode in EXPENSIVE_OPS else 1 for i in instrs
                   if op_def(i.opcode).fusion_kind == "elementwise")
        cost += sum(_prod(w.size for w in i.attrs["window"]) for i in instrs if i.opcode == "reduce-window")
        return max(1, cost)

    def split(self, extents, work: float):
        """(k, n_tasks): split the flat range of the first k dimensions of `extents` into
        n_tasks chunks; None when the work stays on one thread."""
        pool = worker_pool() if work >= PARALLEL_MIN_WORK else None   # (the pool starts on first use)
        if pool is None:
            return None
        wanted = int(min(pool.threads * TASKS_PER_THREAD, work // TASK_MIN_WORK))
        k, flat = 0, 1
        while k < len(extents) and flat < wanted:
            flat *= extents[k]
            k += 1
        n_tasks = min(wanted, flat)
        return (k, n_tasks) if n_tasks >= 2 else None

    def parallel_chunks(self, extents, k: int, n_tasks: int, body, flat: ir.Value | None = None) -> None:
        """body(task, begin, end) on the pool, for n_tasks balanced contiguous chunks
        [begin, end) of the flat range of the first k dimensions of `extents`, or of
        [0, flat) (an i64 value known at run time)."""
        b = self.b

        def task(t):
            total = i64(_prod(extents[:k])) if flat is None else flat
            begin = b.udiv(b.mul(t, total), i64(n_tasks))
            end = b.udiv(b.mul(b.add(t, i64(1)), total), i64(n_tasks))
            self.e.push_scope()
            body(t, begin, end)
            self.e.pop_scope()

        pool = worker_pool()
        if pool is None and n_tasks == 1:   # one thread: the one task inline (a GEMM's blocks)
            return task(i64(0))
        emit_parallel_tasks(b, pool, n_tasks, task)

    def loop_nest(self, extents, body, work: float, bound: tuple[int, ir.Value] | None = None) -> None:
        """for_range(extents, body), split across the pool's threads when `work` is large;
        with `bound` (d, count: an i64 value), over the indices whose dimension d is below
        count only."""
        b = self.b
        split = self.split(extents, work)
        if bound is None:
            if split is None:
                return for_range(b, extents, body)
            k, n_tasks = split
            return self.parallel_chunks(extents, k, n_tasks,
                                        lambda t, begin, end: for_span(b, extents, k, begin, end, body))
        return bounded_loop_nest(self, extents, body, split, bound)

    def _reduce_in_parts(self, r: HloInstruction, shape: ArrayShape, result, work: float) -> bool:
        """Compute reduction `r` into `result` (laid out as `shape`) by tasks that each reduce
        a part of the reduced dimensions (for every result element) into kernel scratch,
        then combine the parts in task order; False when that is not worth it or not valid."""
        pool = worker_pool() if work >= PARALLEL_MIN_WORK else None
        if pool is None or shape.size >= 2 * pool.threads or not _splittable(r):
            return False
        operand = r.operands[0].shape
        reduced = [operand.dims[d] for d in sorted(r.attrs["dimensions"])]
        split = self.split(reduced, work)
        if split is None:
            return False
        k, n_tasks = split
        b = self.b
        flat = ArrayShape(shape.dtype, (n_tasks, shape.size))
        parts = self.reserve_scratch(flat.byte_size)

        def task(t, begin, end):
            def part(index):
                self.e.push_scope()
                (value,) = emit_reduction_loop(self.e, r, index, span=(k, begin, end))
                self.store(parts, flat, (t, linear_index(b, index, shape.dims, shape.minor_to_major)
                                          if shape.rank else i64(0)), value)
                self.e.pop_scope()
            for_range(b, shape.dims, part)

        self.parallel_chunks(reduced, k, n_tasks, task)

        def combine(index):
            at = linear_index(b, index, shape.dims, shape.minor_to_major) if shape.rank else i64(0)
            total = self.load(parts, flat, (i64(0), at))
            for t in range(1, n_tasks):
                part = self.load(parts, flat, (i64(t), at))
                total = self.e.scalar_computation(r.attrs["to_apply"], [total, part], reassociate=True)[0]
            self.store(result, shape, index, total)

        for_range(b, shape.dims, combine)
        return True

    def _out_at(self, offset: int) -> ir.Value:
        return self.b.gep(self.out_ptr, [i64(offset)], source_etype=I8) if offset else self.out_ptr

    def _emit_gemm(self, root: HloInstruction) -> bool:
        """An f32/f64 canonical dot whose operands are buffers (dot/plan.py): the
        matrix-vector kernels when m or n is 1, else pyxla's GEMM (in blocks on the pool when
        large); False when the dot does not fit (the elemental loops then compute it)."""
        plan = plan_gemm(root, self.fused, self.instr.shape)
        if plan is None:
            return False
        dot, t, nb = plan.dot, etype(plan.dot), len(plan.batch_dims)
        lhs, rhs = dot.operands
        m, n, k, a_t, b_t, batch = plan.m, plan.n, plan.k, plan.a_transposed, plan.b_transposed, plan.batch
        lptr = self.operand_pointer(lhs)
        rptr = self.operand_pointer(rhs)
        b = self.b
        shape = self.instr.shape
        # The epilogue reads the product where it was stored: in place when each element of
        # the result reads its own element of the product only, else from kernel scratch (an
        # element written in place could be read again for another).
        # An epilogue's result may reshape the product's rows (plan_gemm): the same row-major
        # bytes, element (prefix, i, j) of the product at (0.., prefix, i, j) when it puts 1s
        # before the dims, else (row i of the result's leading dims, j).
        lead = (0,) * (shape.rank - dot.shape.rank)
        ones_before = shape.dims == lead + dot.shape.dims

        def at(prefix, i, j) -> tuple:
            if ones_before:
                return lead + tuple(prefix) + (i, j)
            return tuple(delinearize(b, i, shape.dims[:-1], default_layout(shape.rank - 1))) + (j,)
        in_place = plan.epilogue_by_rows and epilogue_in_place(dot, root)
        product_ptr = self.out_ptr if in_place else self.reserve_scratch(dot.shape.byte_size)
        if root is not dot:
            self.e.buffer_reads[id(dot)] = lambda index: self.load(product_ptr, dot.shape, index)

        pool = worker_pool()
        per_product = False   # whether the epilogue ran per block, inside the tasks
        if m == 1 or n == 1:
            per_product = root is not dot and in_place
            tasks = pool.threads * TASKS_PER_THREAD if pool is not None and \
                batch * m * n * k >= GEMV_PARALLEL_MIN_WORK else 1
            # y = x M. m == 1: x is A (a k-vector however A is laid out), M is B. n == 1: x is B,
            # y = A x is x A^T, M is A^T: read by dot products unless A comes as [k, m]
            x, mat, count, transposed = (lptr, rptr, n, b_t) if m == 1 else (rptr, lptr, m, not a_t)

            def epilogue_at(flat):   # the product is row-major: its flat index is the result's
                self.store_root(root, shape, delinearize(b, flat, shape.dims, shape.minor_to_major))

            emit_gemv(self, t.name, product_ptr, x, mat, batch, count, k, transposed, tasks,
                      epilogue_at if per_product else None)
        else:
            # pyxla's GEMM: in blocks on the pool when large, else on the calling thread (never
            # BLAS, whose own threads would ignore PYXLA_NUM_THREADS and keep spinning through
            # the kernels after it)
            pooled = pool is not None and batch * m * n * k >= OWN_GEMM_MIN_WORK
            per_product = root is not dot and in_place and dot.shape.rank == nb + 2

            def epilogue(prefix, i, j):
                self.store_root(root, shape, at(prefix, i, j))

            # a bounded fusion's rows are each product's rows when the result is [batch..., m, n]
            m_bound = self.row_bound[1] if self.row_bound is not None and self.row_bound[0] == nb and \
                shape.rank == nb + 2 else None
            emit_dot_tasks(self, t.name, product_ptr, lptr, rptr, plan.batch_dims, m, n, k, a_t, b_t,
                           pool.threads * GEMM_TASKS_PER_THREAD if pooled else 1, epilogue if per_product else None,
                           m_bound=m_bound, packed_b=packed_weights(self, rhs))
        if root is not dot and not per_product:
            self.emit_loop(root)
        return True

    def store_root(self, root: HloInstruction, shape: ArrayShape, index: tuple) -> None:
        self.e.push_scope()
        self.store(self.out_ptr, shape, index, self.e.value(root, index))
        self.e.pop_scope()

    def operand_pointer(self, value: HloInstruction):
        if value.opcode == "parameter" and self.fused is not None:
            return self.pointers[id(self.instr.operands[value.parameter_number])]
        return self.pointers[id(value)]


class _Unaligned(Exception):
    """A value's users leave the row's elementwise ops."""


def _output_leaves(value: HloInstruction, shape, offset: int):
    """(value_of(emitter, index), array shape, byte offset) for each array a kernel writes:
    a tuple root writes its elements one after another, a variadic reduce its results."""
    if value.opcode == "tuple":
        for operand, element, at in zip(value.operands, shape.elements, tuple_element_offsets(shape)):
            yield from _output_leaves(operand, element, offset + at)
    elif isinstance(shape, TupleShape):
        for k, (element, at) in enumerate(zip(shape.elements, tuple_element_offsets(shape))):
            yield (lambda e, index, k=k: e.value(value, index)[k]), element, offset + at
    else:
        yield (lambda e, index: e.value(value, index)), shape, offset


def _reduce_rows(reduce: HloInstruction) -> tuple:
    """The dimensions of a reduction's result (of each result, for a variadic reduce)."""
    shape = reduce.shape
    return shape.elements[0].dims if isinstance(shape, TupleShape) else shape.dims


def _splittable(r: HloInstruction) -> bool:
    """Whether reduction `r` may be computed as partial reductions combined afterwards: one
    result, a reducer that is one associative op of its two parameters, and an init value
    that is the op's identity (so each part starting from it changes nothing)."""
    root = r.attrs["to_apply"].root
    if len(r.operands) != 2 or root.opcode not in SPLITTABLE_REDUCERS or root.operands[0] is root.operands[1] \
            or [op.opcode for op in root.operands] != ["parameter", "parameter"]:
        return False
    init = r.operands[1]
    while init.opcode in ("broadcast", "reshape", "bitcast"):
        init = init.operands[0]
    identity = _identity(root.opcode, r.shape.dtype)
    return init.opcode == "constant" and identity is not None and \
        np.asarray(init.literal).reshape(-1).astype(np.float64)[0] == identity


def _identity(opcode: str, t):
    """The identity of a reducer op on element type t (None if it has none)."""
    if opcode in ("add", "or"):
        return 0
    if opcode == "multiply":
        return 1
    if t.is_pred:
        return {"and": 1, "maximum": 0, "minimum": 1}[opcode]
    if t.is_float:
        return {"maximum": -np.inf, "minimum": np.inf}.get(opcode)
    least, greatest = integer_limits(t)
    return {"and": -1 if least < 0 else greatest, "maximum": least, "minimum": greatest}[opcode]


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


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
