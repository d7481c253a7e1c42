"""The GPU backend: the optimised, fused module's kernels in SIMT form, compiled to PTX by
LLVM's NVPTX target and run through the CUDA driver (`gpu`), or compiled for the host and
run over their launch grid on the CPU (`gpu-sim`).

compile(module) runs the compiler driver (passes, fusion, schedule), plans one kernel per
ENTRY instruction that computes (kernels.py) and emits them with the elemental emitter both
LLVM targets share. The host walks the ENTRY computation in schedule order: parameters are
copied to the device, each kernel is launched on its operands' buffers, aliases (bitcast,
tuple, get-tuple-element) name buffers they share, and the results are copied back.

This is the backend's first form: every kernel is elementwise over its outputs (a
reduction, a dot or a convolution is a loop inside one thread's element), buffers are
allocated per call, and control flow, sort, scatter and the other ops that do not write
element by element are refused with GpuUnsupported (a NotImplementedError) naming the op. PYXLA_GPU_ARCH chooses the
architecture (sm_90 by default).
"""
from __future__ import annotations

import itertools
import platform
import re
from collections.abc import Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from ...compiler import CompiledModule, compile_module
from ...hlo.evaluator import check_arguments
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape, TupleShape
from ...hlo.verifier import verify_module
from .kernels import (
    ALIASES,
    GpuUnsupported,
    KernelSpec,
    emit_bodies,
    emit_host_wrappers,
    emit_ptx_wrappers,
    grid,
    plan_kernels,
)

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535          # the grid-stride loop covers what more blocks would
SIM_MAX_BLOCKS = 4          # gpu-sim runs every thread in turn: a few blocks still cross the strides

_module_numbers = itertools.count()

__all__ = ["GpuBackend", "GpuUnsupported", "kernel_ir", "physical", "logical"]


def kernel_ir(compiled: CompiledModule, target: str) -> tuple[str, list[KernelSpec]]:
    """The LLVM IR of every kernel of a compiled module with `target`'s wrappers ('ptx' or
    'host'), and the kernels in launch order."""
    entry = compiled.module.entry
    number = next(_module_numbers)
    specs = plan_kernels(entry, f"gpu{number}")
    module = ir.Module(name=f"{compiled.module.name}.gpu{number}")
    emit_bodies(module, specs)
    if target == "ptx":
        emit_ptx_wrappers(module, specs)
        return _flushing_subnormals(str(module)), specs
    emit_host_wrappers(module, specs, x86=platform.machine().lower() in ("x86_64", "amd64", "i686", "i386"))
    return str(module), specs


def _flushing_subnormals(ir_text: str) -> str:
    """Every function of `ir_text` with f32 subnormals flushed (inputs and results), so the
    NVPTX back end emits .ftz arithmetic: the evaluator's and XLA CPU's semantics."""
    tagged = re.sub(r"^(define [^\n]*?)\s*\{$", r"\1 #4243 {", ir_text, flags=re.MULTILINE)
    return f'{tagged}\nattributes #4243 = {{ "denormal-fp-math-f32"="preserve-sign,preserve-sign" }}\n'



def physical(array: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """`array` (logical order) as the bytes of `shape`'s layout."""
    array = np.asarray(array, dtype=shape.dtype.np_dtype)
    order = tuple(reversed(shape.minor_to_major))
    return np.ascontiguousarray(np.transpose(array, order) if shape.rank > 1 else array)


def logical(flat: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """A buffer's bytes in `shape`'s layout as a logical array."""
    order = tuple(reversed(shape.minor_to_major))
    data = flat.view(shape.dtype.np_dtype).reshape([shape.dims[d] for d in order])
    return np.ascontiguousarray(np.transpose(data, np.argsort(order))) if shape.rank > 1 else data.copy()


class _SimMemory:
    """Buffers as NumPy byte arrays; kernels run on the host."""

    def __init__(self, ir_text: str, specs: list[KernelSpec]):
        from .sim import SimKernels
        self.kernels = SimKernels(ir_text, [s.name for s in specs])

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(max(1, nbytes), np.uint8)

    def upload(self, array: np.ndarray) -> np.ndarray:
        out = self.alloc(array.nbytes)
        out[:array.nbytes] = np.frombuffer(array.tobytes(), np.uint8)
        return out

    def download(self, buffer: np.ndarray, nbytes: int) -> np.ndarray:
        return buffer[:nbytes].copy()

    def launch(self, spec: KernelSpec, buffers: list) -> None:
        blocks, threads = grid(spec, THREADS_PER_BLOCK, SIM_MAX_BLOCKS)
        self.kernels.launch(spec.name, blocks * threads, buffers)

    def release(self, buffers: list) -> None:
        pass


class _DeviceMemory:
    """Buffers in the GPU's memory; kernels loaded from PTX."""

    def __init__(self, ir_text: str, specs: list[KernelSpec]):
        from .device import device
        from .ptx import compile_ptx
        self.device = device()
        self.ptx = compile_ptx(ir_text)
        module = self.device.load(self.ptx)
        self.functions = {s.name: self.device.function(module, s.name) for s in specs}

    def alloc(self, nbytes: int) -> int:
        return self.device.alloc(nbytes)

    def upload(self, array: np.ndarray) -> int:
        pointer = self.alloc(array.nbytes)
        self.device.upload(pointer, array)
        return pointer

    def download(self, pointer: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        self.device.download(pointer, out)
        return out

    def launch(self, spec: KernelSpec, buffers: list) -> None:
        self.device.launch(self.functions[spec.name], spec.name, grid(spec, THREADS_PER_BLOCK, MAX_BLOCKS), buffers)

    def release(self, buffers: list) -> None:
        self.device.synchronize()
        for pointer in buffers:
            self.device.free(pointer)


class GpuExecutable:
    """A compiled module on the GPU (or gpu-sim): the host's walk over its ENTRY computation."""

    def __init__(self, module: HloModule, specs: list[KernelSpec], memory: Any):
        self.module = module
        self.specs = {id(s.instr): s for s in specs}
        self.memory = memory
        entry = module.entry
        # constants live on the device for the executable's life: the ENTRY's, and the array
        # constants kernels read from memory (a fusion's scalars are IR constants)
        constants = [i for i in entry.instructions if i.opcode == "constant" and isinstance(i.shape, ArrayShape)]
        constants += [c for s in specs for c in s.constants]
        self.constants = {id(c): memory.upload(physical(np.asarray(c.literal), c.shape)) for c in constants}

    def __call__(self, *args: Any) -> Any:
        outs = self.run_flat(args)
        return outs[0] if isinstance(self.module.entry.root.shape, ArrayShape) else tuple(outs)

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        return self.run_unchecked(check_arguments(self.module.entry, list(args)))

    def prepare_argument(self, number: int, array: np.ndarray) -> np.ndarray:
        return array

    def run_unchecked(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        memory, entry = self.memory, self.module.entry
        values: dict[int, Any] = {}
        owned: list = []
        try:
            for instr in entry.instructions:
                values[id(instr)] = self._value(instr, arrays, values, owned)
            return [logical(memory.download(buffer, shape.byte_size), shape)
                    for buffer, shape in _leaves(values[id(entry.root)], entry.root.shape)]
        finally:
            memory.release(owned)

    def _value(self, instr, arrays, values: dict, owned: list) -> Any:
        memory, op = self.memory, instr.opcode
        if op == "parameter":
            buffer = memory.upload(physical(arrays[instr.parameter_number], instr.shape))
            owned.append(buffer)
            return buffer
        if op == "constant":
            return self.constants[id(instr)]
        if op in ALIASES:
            if op == "tuple":
                return [values[id(o)] for o in instr.operands]
            if op == "get-tuple-element":
                return values[id(instr.operands[0])][instr.attrs["index"]]
            return values[id(instr.operands[0])]   # a bitcast shares its operand's bytes
        spec = self.specs[id(instr)]
        outputs = [memory.alloc(s.byte_size) for s in spec.outputs]
        owned.extend(outputs)
        buffers = outputs + [values[id(o)] for o in spec.operands] + [self.constants[id(c)] for c in spec.constants]
        memory.launch(spec, buffers)
        return outputs[0] if isinstance(instr.shape, ArrayShape) else outputs


def _leaves(value: Any, shape) -> list[tuple[Any, ArrayShape]]:
    if isinstance(shape, TupleShape):
        return [leaf for v, s in zip(value, shape.elements) for leaf in _leaves(v, s)]
    return [(value, shape)]


class GpuBackend:
    """`gpu` (the CUDA driver) or `gpu-sim` (the same kernels on the host)."""

    def __init__(self, name: str):
        self.name = name

    def prepare(self, module: HloModule) -> None:
        """Nothing is rewritten: an opcode the kernels cannot emit is refused by compile."""

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = ()) -> GpuExecutable:
        verify_module(module)
        if compiled is None:
            compiled = compile_module(module.clone(), donated=donated)
        if any(p.shape is not None and not isinstance(p.shape, ArrayShape) for p in compiled.module.entry.parameters):
            raise GpuUnsupported("the GPU backend cannot take tuple-shaped ENTRY parameters yet")
        ir_text, specs = kernel_ir(compiled, "host" if self.name == "gpu-sim" else "ptx")
        memory = (_SimMemory if self.name == "gpu-sim" else _DeviceMemory)(ir_text, specs)
        return GpuExecutable(compiled.module, specs, memory)


BACKEND = GpuBackend("gpu")
SIM_BACKEND = GpuBackend("gpu-sim")
