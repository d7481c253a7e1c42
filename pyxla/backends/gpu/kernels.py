"""Kernels for the GPU backend: one KernelSpec per instruction that computes, made of one or
more SIMT launches (simt.py).

A kernel's arguments are the buffers it touches, XLA's GPU convention: its outputs first,
then its operands' buffers, then the array constants its fused computation reads, then
scratch buffers of its own (a two-stage reduction's partial results). Every launch of a
kernel takes the same arguments.

The form of a kernel follows the op it computes (the root of its fusion):
  - reductions (reductions.py): a row reduction per block with warp shuffles and shared
    memory; column reductions as a shared-memory tree over a tile of columns; small
    outputs of long reductions in two stages;
  - dot (gemm.py): a GEMM over shared-memory tiles;
  - transpose (transpose.py): through shared-memory tiles, both sides coalesced;
  - sort (bitonic.py): a bitonic network in shared memory per row;
  - top-k, scatter, dynamic-update-slice, select-and-scatter (serial.py): simple correct
    forms (one thread per row, or one thread in order where XLA's semantics order the
    writes), after a grid-stride copy or fill of the output;
  - rng-bit-generator (rng.py): a grid-stride loop over cipher blocks;
  - everything else is elementwise: a grid-stride loop over the output positions, each
    element computed by the shared elemental emitter (llvm/elemental.py) at its logical
    index, so a fusion never writes an intermediate.
Control flow (while, conditional, call) runs on the host (program.py), its computations'
kernels on the device.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape, TupleShape, default_layout
from ..llvm.elemental import ElementalEmitter, Unsupported
from ..llvm.indices import delinearize, load_element, store_element
from ..llvm.ir_types import I64, i64, scalar_constant
from .simt import Launch, Phase, PhaseContext, emit_host_launch, emit_phases, emit_ptx_kernel

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535          # for grid-stride kernels: the loop covers what more blocks would
SIM_MAX_BLOCKS = 4          # gpu-sim runs every thread in turn: a few blocks still cross the strides

# Values that need no kernel: they name a buffer another value already has (an opt-barrier
# and a Sharding annotation pass their operand through; buffers are never written twice).
ALIASES = frozenset({"bitcast", "get-tuple-element", "tuple", "opt-barrier"})
# Values the host provides.
HOST_VALUES = frozenset({"parameter", "constant"})
# Run by the host, their computations' kernels on the device.
HOST_CONTROL = frozenset({"while", "conditional", "call"})
# Ops with no kernel yet.
REFUSED = frozenset({"rng", "after-all", "infeed", "outfeed", "send", "recv", "all-reduce", "fft",
                     "cholesky", "triangular-solve", "while", "conditional", "call"})
IDENTITY_CUSTOM_CALLS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})


class GpuUnsupported(NotImplementedError):
    """The GPU backend cannot compile this instruction yet."""


@dataclass
class KernelSpec:
    """One kernel: `instr` computed into `outputs` (its array results: one, or a multi-output
    fusion's several) from `operands` (values whose buffers it reads) and `constants` (array
    constants of its fused computation), by `launches` in order, with `scratch` buffers
    (bytes each) of its own."""
    name: str
    instr: HloInstruction
    outputs: list[ArrayShape]
    operands: list[HloInstruction]
    constants: list[HloInstruction]
    launches: list[Launch] = field(default_factory=list)
    scratch: list[int] = field(default_factory=list)

    @property
    def elements(self) -> int:
        """The most output elements of any output."""
        return max(s.size for s in self.outputs)

    @property
    def fused(self) -> HloInstruction | None:
        return self.instr if self.instr.opcode == "fusion" else None

    @property
    def root(self) -> HloInstruction:
        """The op the kernel computes: the instruction, or its fusion's root."""
        return self.instr.attrs["calls"].root if self.instr.opcode == "fusion" else self.instr

    def roots(self) -> list[HloInstruction]:
        """The values the outputs hold: the root, or a tuple root's elements."""
        if self.instr.opcode != "fusion":
            return [self.instr]
        return self.root.outputs

    @property
    def arguments(self) -> int:
        return len(self.outputs) + len(self.operands) + len(self.constants) + len(self.scratch)


def refuse(instr: HloInstruction, why: str) -> GpuUnsupported:
    return GpuUnsupported(f"the GPU backend cannot emit {instr.opcode} yet ({why}; {instr.describe()})")


def array_outputs(instr: HloInstruction) -> list[ArrayShape]:
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        return [shape]
    if isinstance(shape, TupleShape) and all(isinstance(s, ArrayShape) for s in shape.elements):
        return list(shape.elements)
    raise refuse(instr, "a nested tuple result")


def is_identity_custom_call(instr: HloInstruction) -> bool:
    return instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") in IDENTITY_CUSTOM_CALLS


def plan_kernel(instr: HloInstruction, name: str) -> KernelSpec:
    """The kernel computing `instr` (a GpuUnsupported naming what it cannot emit)."""
    body = instr.attrs["calls"].instructions if instr.opcode == "fusion" else [instr]
    for inner in body:
        if inner.opcode in REFUSED or inner.opcode == "fusion":
            raise refuse(inner, "it is not an op the GPU backend has a kernel for")
        if inner.opcode == "custom-call" and inner.attrs.get("custom_call_target") != "TopK":
            raise refuse(inner, f"custom-call target {inner.attrs.get('custom_call_target')!r}")
    for op in instr.operands:
        if not isinstance(op.shape, ArrayShape):
            raise refuse(instr, f"it reads the tuple {op.describe()}")
    constants = [i for i in body if i.opcode == "constant" and i.shape.size > 1] if instr.opcode == "fusion" else []
    spec = KernelSpec(name.replace(".", "_").replace("-", "_"), instr, array_outputs(instr),
                      list(dict.fromkeys(instr.operands)), constants)
    if isinstance(instr.shape, TupleShape) and instr.opcode not in ("fusion", "reduce", "sort", "topk",
                                                                     "custom-call", "scatter",
                                                                     "rng-bit-generator"):
        raise refuse(instr, "a tuple-shaped result outside a fusion")
    _choose_launches(spec)
    return spec


def _choose_launches(spec: KernelSpec) -> None:
    from . import gemm, reductions, rng, serial, transpose
    for kind in (serial.launches, rng.launches, reductions.launches, gemm.launches, transpose.launches):
        launches = kind(spec)
        if launches is not None:
            spec.launches = launches
            return
    spec.launches = [elementwise_launch(spec, spec.name)]


class KernelArgs:
    """A phase's view of its kernel's arguments: output, operand, constant and scratch
    pointers, and elemental emitters reading them."""

    def __init__(self, spec: KernelSpec, ctx: PhaseContext):
        self.spec, self.ctx, self.b = spec, ctx, ctx.b
        args = list(ctx.args)
        k, n, c = len(spec.outputs), len(spec.operands), len(spec.constants)
        self.out_ptrs = args[:k]
        self.operand_ptrs = dict(zip((id(o) for o in spec.operands), args[k:k + n]))
        self.constant_ptrs = dict(zip((id(x) for x in spec.constants), args[k + n:k + n + c]))
        self.scratch_ptrs = args[k + n + c:]

    def load(self, ptr: ir.Value, shape: ArrayShape, index: tuple) -> ir.Value:
        return load_element(self.b, ptr, shape, index)

    def store(self, ptr: ir.Value, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
        store_element(self.b, ptr, shape, index, value)

    def operand_pointer(self, value: HloInstruction) -> ir.Value | None:
        """The buffer `value` (a fused parameter or an operand) is read from, if it is one."""
        fused = self.spec.fused
        if fused is not None and value.opcode == "parameter":
            value = fused.operands[value.parameter_number]
        return self.operand_ptrs.get(id(value))

    def elemental(self) -> ElementalEmitter:
        fused = self.spec.fused

        def read_parameter(param, index):
            operand = fused.operands[param.parameter_number]
            return self.load(self.operand_ptrs[id(operand)], operand.shape, index)

        def read_constant(const, index):
            scalar = scalar_constant(const)
            if scalar is not None:
                return scalar
            return self.load(self.constant_ptrs[id(const)], const.shape, index)

        e = ElementalEmitter(self.b, self.b.module, read_parameter, read_constant)
        if fused is None:   # an unfused instruction reads its operands' buffers
            for op in self.spec.operands:
                ptr = self.operand_ptrs[id(op)]
                e.buffer_reads[id(op)] = lambda index, ptr=ptr, op=op: self.load(ptr, op.shape, index)
        return e


def grid_loop(b: ir.IRBuilder, first: ir.Value, stride: ir.Value, count: int, body) -> None:
    """for (p = first; p < count; p += stride) body(p)."""
    if count == 0:
        return
    pre = b.block
    loop = b.append_basic_block("grid.body")
    done = b.append_basic_block("grid.done")
    b.cbranch(b.icmp_unsigned("<", first, i64(count)), loop, done)
    b.position_at_end(loop)
    p = b.phi(I64, name="p")
    p.add_incoming(first, pre)
    body(p)
    nxt = b.add(p, stride)
    p.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<", nxt, i64(count)), loop, done)
    b.position_at_end(done)


def global_thread(ctx: PhaseContext) -> tuple[ir.Value, ir.Value]:
    """(this thread's index in the grid, the grid's thread count)."""
    b = ctx.b
    return b.add(b.mul(ctx.block, ctx.ntid), ctx.tid), b.mul(ctx.nblocks, ctx.ntid)


def elementwise_launch(spec: KernelSpec, name: str, roots: list | None = None, outputs: list | None = None) -> Launch:
    """One grid-stride loop per root: a root's outputs (several for a variadic reduce, whose
    values come together) stored at each of its positions."""
    roots = spec.roots() if roots is None else roots
    out_numbers = list(range(len(spec.outputs))) if outputs is None else outputs

    def emit(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        b = ctx.b
        first, stride = global_thread(ctx)
        numbers = iter(out_numbers)
        for root in roots:
            mine = [next(numbers) for _ in range(len(root.shape.elements) if isinstance(root.shape, TupleShape) else 1)]
            shape = spec.outputs[mine[0]]

            def body(p, root=root, mine=mine, shape=shape):
                index = delinearize(b, p, shape.dims, default_layout(shape.rank)) if shape.rank else ()
                value = args.elemental().value(root, index)
                for k, v in zip(mine, value if isinstance(value, list) else [value]):
                    args.store(args.out_ptrs[k], spec.outputs[k], index, v)

            grid_loop(b, first, stride, shape.size, body)

    elements = max([spec.outputs[k].size for k in out_numbers] or [1])
    blocks = max(1, min(MAX_BLOCKS, -(-elements // THREADS_PER_BLOCK)))
    return Launch(name, blocks, THREADS_PER_BLOCK, [Phase(emit)], sim_blocks=min(blocks, SIM_MAX_BLOCKS))


def emit_kernels(module: ir.Module, specs: list[KernelSpec], target: str, host_prologue=None,
                 host_epilogue=None) -> None:
    """Every launch's phase functions and its wrapper for `target` ('ptx' or 'host');
    Unsupported from the elemental emitter becomes GpuUnsupported naming the instruction."""
    for spec in specs:
        for launch in spec.launches:
            try:
                emit_phases(module, launch, spec.arguments, spec)
            except Unsupported as e:
                raise GpuUnsupported(str(e).replace("the CPU backend", "the GPU backend")) from None
            if target == "ptx":
                emit_ptx_kernel(module, launch, spec.arguments)
            else:
                emit_host_launch(module, launch, spec.arguments, host_prologue, host_epilogue)
