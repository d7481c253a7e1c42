"""SIMT kernels for the GPU backend: one LLVM function per ENTRY instruction that computes,
its elements spread over threads by a grid-stride loop.

A kernel's arguments are the buffers it touches, XLA's GPU convention: its outputs first,
then its operands' buffers, then the array constants its fused computation reads. Every
output element is computed by the shared elemental emitter (llvm/elemental.py) at its
logical index, so a fusion never writes an intermediate, and a reduction or a dot inside a
kernel is a loop over the reduced elements of one output element, run by one thread.

The kernel's work is a body function that target wrappers call:

    void <name>.body(i64 first, i64 stride, ptr arg0, ptr arg1, ...)

visits the flat output positions first, first + stride, ... below the element count. The
NVPTX wrapper (`ptx_kernel void <name>(ptr ...)`) passes the thread's global index and the
grid's thread count; the host wrapper of gpu-sim (`void <name>(ptr args, i64 threads)`) runs
every thread of the grid in turn. Both come from one body, so the index arithmetic gpu-sim
runs on the CPU is the one the GPU runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape, TupleShape, default_layout
from ..llvm.elemental import ElementalEmitter, Unsupported
from ..llvm.indices import delinearize, load_element, store_element
from ..llvm.ir_types import I32, I64, PTR, VOID, i64, scalar_constant

# Values that need no kernel: they name a buffer another value already has.
ALIASES = frozenset({"bitcast", "get-tuple-element", "tuple"})
# Values the host provides.
HOST_VALUES = frozenset({"parameter", "constant"})
# Ops that do not write element by element (sort, scatter) or need the host (control flow): refused
# until the GPU backend has kernels for them.
NOT_ELEMENTAL = frozenset({"while", "conditional", "call", "custom-call", "sort", "topk", "scatter",
                           "dynamic-update-slice", "rng-bit-generator", "rng", "select-and-scatter",
                           "opt-barrier", "after-all", "infeed", "outfeed",
                           "send", "recv", "all-reduce", "fft", "cholesky", "triangular-solve"})


class GpuUnsupported(NotImplementedError):
    """The GPU backend cannot compile this instruction yet."""


@dataclass
class KernelSpec:
    """One launch: `instr` computed into `outputs` (its array results: one, or a multi-output
    fusion's several) from `operands` (ENTRY values whose buffers it reads) and `constants`
    (array constants of its fused computation)."""
    name: str
    instr: HloInstruction
    outputs: list[ArrayShape]
    operands: list[HloInstruction]
    constants: list[HloInstruction]

    @property
    def elements(self) -> int:
        """The most output elements of any output: the grid's work."""
        return max(s.size for s in self.outputs)


def _refuse(instr: HloInstruction, why: str) -> GpuUnsupported:
    return GpuUnsupported(f"the GPU backend cannot emit {instr.opcode} yet ({why}; {instr.describe()})")


def _array_outputs(instr: HloInstruction) -> list[ArrayShape]:
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        return [shape]
    if isinstance(shape, TupleShape) and all(isinstance(s, ArrayShape) for s in shape.elements):
        return list(shape.elements)
    raise _refuse(instr, "a nested tuple result")


def plan_kernels(entry, prefix: str = "k") -> list[KernelSpec]:
    """The launches of the ENTRY computation, in schedule order; a GpuUnsupported naming
    the first instruction the backend cannot run. Kernel names start with `prefix` (unique
    among the modules one process loads)."""
    specs = []
    for instr in entry.instructions:
        if instr.opcode in ALIASES or instr.opcode in HOST_VALUES:
            continue
        body = instr.attrs["calls"].instructions if instr.opcode == "fusion" else [instr]
        for inner in body:
            if inner.opcode in NOT_ELEMENTAL or inner.opcode == "fusion":
                raise _refuse(inner, "it is not an elementwise, reduction or dot kernel")
        for op in instr.operands:
            if not isinstance(op.shape, ArrayShape):
                raise _refuse(instr, f"it reads the tuple {op.describe()}")
        constants = [i for i in body if i.opcode == "constant" and i.shape.size > 1] \
            if instr.opcode == "fusion" else []
        specs.append(KernelSpec(f"{prefix}_{len(specs)}_{instr.name}".replace(".", "_").replace("-", "_"), instr,
                                _array_outputs(instr), list(dict.fromkeys(instr.operands)), constants))
    return specs


class _KernelBody:
    """The body function of one kernel, emitted into `module`."""

    def __init__(self, module: ir.Module, spec: KernelSpec):
        self.spec = spec
        n_args = len(spec.outputs) + len(spec.operands) + len(spec.constants)
        fnty = ir.FunctionType(VOID, [I64, I64] + [PTR] * n_args)
        self.fn = ir.Function(module, fnty, name=f"{spec.name}.body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        first, stride, *args = self.fn.args
        self.first, self.stride = first, stride
        k = len(spec.outputs)
        self.out_ptrs = args[:k]
        self.operand_ptrs = dict(zip((id(o) for o in spec.operands), args[k:k + len(spec.operands)]))
        self.constant_ptrs = dict(zip((id(c) for c in spec.constants), args[k + len(spec.operands):]))
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))

    def load(self, ptr: ir.Value, shape: ArrayShape, index: tuple) -> ir.Value:
        return load_element(self.b, ptr, shape, index)

    def store(self, ptr: ir.Value, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
        store_element(self.b, ptr, shape, index, value)

    def _read_parameter(self, fused, param: HloInstruction, index: tuple) -> ir.Value:
        operand = fused.operands[param.parameter_number]
        return self.load(self.operand_ptrs[id(operand)], operand.shape, index)

    def _read_constant(self, const: HloInstruction, index: tuple) -> ir.Value:
        scalar = scalar_constant(const)
        if scalar is not None:
            return scalar
        return self.load(self.constant_ptrs[id(const)], const.shape, index)

    def emit(self) -> None:
        """One grid loop per root: a root's outputs (several for a variadic reduce, whose
        values come together) are stored at each of its positions."""
        spec, instr = self.spec, self.spec.instr
        fused = instr if instr.opcode == "fusion" else None
        outputs = iter(zip(self.out_ptrs, spec.outputs))
        for root in self._roots():
            mine = [next(outputs) for _ in range(len(root.shape.elements) if isinstance(root.shape, TupleShape) else 1)]

            def body(index, root=root, mine=mine):
                value = self._elemental(fused).value(root, index)
                for (ptr, shape), v in zip(mine, value if isinstance(value, list) else [value]):
                    self.store(ptr, shape, index, v)

            self._grid_loop(mine[0][1], body)
        self.b.ret_void()

    def _roots(self) -> list[HloInstruction]:
        instr = self.spec.instr
        if instr.opcode != "fusion":
            if isinstance(instr.shape, TupleShape) and instr.opcode != "reduce":
                raise _refuse(instr, "a tuple-shaped result outside a fusion")
            return [instr]
        root = instr.attrs["calls"].root
        return list(root.operands) if root.opcode == "tuple" else [root]

    def _elemental(self, fused: HloInstruction | None) -> ElementalEmitter:
        e = ElementalEmitter(self.b, self.fn.module,
                             lambda p, index: self._read_parameter(fused, p, index),
                             self._read_constant)
        if fused is None:   # an unfused instruction reads its operands' buffers
            for op in self.spec.operands:
                ptr = self.operand_ptrs[id(op)]
                e.buffer_reads[id(op)] = lambda index, ptr=ptr, op=op: self.load(ptr, op.shape, index)
        return e

    def _grid_loop(self, shape: ArrayShape, body) -> None:
        """for (p = first; p < size; p += stride) body(the logical index of p)."""
        b, size = self.b, shape.size
        if size == 0:
            return
        pre = b.block
        loop = b.append_basic_block("grid.body")
        done = b.append_basic_block("grid.done")
        b.cbranch(b.icmp_unsigned("<", self.first, i64(size)), loop, done)
        b.position_at_end(loop)
        p = b.phi(I64, name="p")
        p.add_incoming(self.first, pre)
        index = delinearize(b, p, shape.dims, default_layout(shape.rank)) if shape.rank else ()
        body(index)
        nxt = b.add(p, self.stride)
        p.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_unsigned("<", nxt, i64(size)), loop, done)
        b.position_at_end(done)


def emit_bodies(module: ir.Module, specs: list[KernelSpec]) -> None:
    """Every kernel's body function; Unsupported from the elemental emitter becomes
    GpuUnsupported naming the instruction."""
    for spec in specs:
        try:
            _KernelBody(module, spec).emit()
        except Unsupported as e:
            raise GpuUnsupported(str(e).replace("the CPU backend", "the GPU backend")) from None


def arguments(spec: KernelSpec) -> int:
    return len(spec.outputs) + len(spec.operands) + len(spec.constants)


# --- target wrappers ------------------------------------------------------------------------

def _sreg(module: ir.Module, b: ir.IRBuilder, name: str) -> ir.Value:
    fn = module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(I32, []), name=f"llvm.nvvm.read.ptx.sreg.{name}")
    return b.zext(b.call(fn, []), I64)


def emit_ptx_wrappers(module: ir.Module, specs: list[KernelSpec]) -> None:
    """`ptx_kernel void <name>(ptr ...)`: the body over this thread's positions."""
    for spec in specs:
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * arguments(spec)), name=spec.name)
        fn.calling_convention = "ptx_kernel"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tid, ctaid = _sreg(module, b, "tid.x"), _sreg(module, b, "ctaid.x")
        ntid, nctaid = _sreg(module, b, "ntid.x"), _sreg(module, b, "nctaid.x")
        first = b.add(b.mul(ctaid, ntid), tid)
        b.call(module.globals[f"{spec.name}.body"], [first, b.mul(nctaid, ntid), *fn.args])
        b.ret_void()


MXCSR_FTZ_DAZ = 0x8040   # x86's flush-to-zero and denormals-are-zero bits


def emit_host_wrappers(module: ir.Module, specs: list[KernelSpec], x86: bool) -> None:
    """`void <name>(ptr args, i64 threads)`: every thread of a grid of `threads`, one after
    another, each over its own positions (gpu-sim). On x86 the wrapper flushes subnormals
    as the GPU kernels do (their f32 arithmetic is .ftz), restoring MXCSR after."""
    for spec in specs:
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64]), name=spec.name)
        argv, threads = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        saved = _flush_subnormals(module, b) if x86 else None
        args = [b.load(b.gep(argv, [i64(i)], source_etype=PTR), typ=PTR) for i in range(arguments(spec))]
        pre = b.block
        loop = b.append_basic_block("threads")
        done = b.append_basic_block("done")
        b.cbranch(b.icmp_unsigned("<", i64(0), threads), loop, done)
        b.position_at_end(loop)
        t = b.phi(I64, name="thread")
        t.add_incoming(i64(0), pre)
        b.call(module.globals[f"{spec.name}.body"], [t, threads, *args])
        nxt = b.add(t, i64(1))
        t.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_unsigned("<", nxt, threads), loop, done)
        b.position_at_end(done)
        if saved is not None:
            b.call(module.globals["llvm.x86.sse.ldmxcsr"], [saved])
        b.ret_void()


def _flush_subnormals(module: ir.Module, b: ir.IRBuilder) -> ir.Value:
    """Set MXCSR's FTZ and DAZ bits; the slot holding the old value."""
    stmxcsr = module.globals.get("llvm.x86.sse.stmxcsr") or \
        ir.Function(module, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.stmxcsr")
    ldmxcsr = module.globals.get("llvm.x86.sse.ldmxcsr") or \
        ir.Function(module, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.ldmxcsr")
    saved = b.alloca(I32)
    b.call(stmxcsr, [saved])
    flushed = b.alloca(I32)
    b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FTZ_DAZ)), flushed)
    b.call(ldmxcsr, [flushed])
    return saved


def grid(spec: KernelSpec, threads_per_block: int, max_blocks: int) -> tuple[int, int]:
    """(blocks, threads per block) for a launch: enough threads for one element each, up to
    `max_blocks` blocks (the grid-stride loop covers the rest)."""
    blocks = max(1, min(max_blocks, -(-spec.elements // threads_per_block)))
    return blocks, threads_per_block
