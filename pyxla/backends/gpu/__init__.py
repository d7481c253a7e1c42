"""The GPU backend: the optimised, fused module's kernels in SIMT form, compiled to PTX by
LLVM's NVPTX target and run through the CUDA driver (`gpu`), or compiled for the host and
run block by block, a block's threads as loops split at each barrier and shuffle, on the
CPU (`gpu-sim`, simt.py and sim.py).

compile(module) runs the compiler driver (passes, fusion, schedule), plans the program of
each computation (program.py: kernels, host values, aliases, and control flow the host
drives) and each kernel's launches (kernels.py: reductions, GEMM, transposes, sort and the
other ops that do not write element by element, and elementwise grid-stride loops), and
emits them with the elemental emitter both LLVM targets share. A call copies the
parameters to the device, walks the ENTRY computation in schedule order launching kernels
on their operands' buffers (while loops and conditionals read a scalar back to decide),
and copies the results back; buffers are allocated per call. An op with no kernel is
refused with GpuUnsupported (a NotImplementedError) naming it. PYXLA_GPU_ARCH chooses the
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
    emit_kernels,
    is_identity_custom_call,
)
from .program import Program, plan_program
from .simt import Launch, flush_subnormals, restore_mxcsr

_module_numbers = itertools.count()

__all__ = ["GpuBackend", "GpuUnsupported", "kernel_ir", "physical", "logical"]


def kernel_ir(compiled: CompiledModule, target: str) -> tuple[str, list[KernelSpec]]:
    """The LLVM IR of every kernel of a compiled module with `target`'s wrappers ('ptx' or
    'host'), and the kernels (those of the computations control flow runs included)."""
    text, specs, _ = _kernel_module(compiled, target)
    return text, specs


def _kernel_module(compiled: CompiledModule, target: str) -> tuple[str, list[KernelSpec], Program]:
    number = next(_module_numbers)
    specs: list[KernelSpec] = []
    program = plan_program(compiled.module.entry, f"gpu{number}", specs)
    module = ir.Module(name=f"{compiled.module.name}.gpu{number}")
    if target == "ptx":
        emit_kernels(module, specs, "ptx")
        return _flushing_subnormals(str(module)), specs, program
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    emit_kernels(module, specs, "host", flush_subnormals if x86 else None, restore_mxcsr if x86 else None)
    return str(module), specs, program


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
        self.kernels = SimKernels(ir_text, [launch.name for s in specs for launch in s.launches])

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(max(1, nbytes), np.uint8)

    def upload(self, array: np.ndarray) -> np.ndarray:
        out = self.alloc(array.nbytes)
        out[:array.nbytes] = np.frombuffer(array.tobytes(), np.uint8)
        return out

    def download(self, buffer: np.ndarray, nbytes: int) -> np.ndarray:
        return buffer[:nbytes].copy()

    def launch(self, spec: KernelSpec, launch: Launch, buffers: list) -> None:
        self.kernels.launch(launch, buffers)

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
        self.functions = {launch.name: self.device.function(module, launch.name)
                          for s in specs for launch in s.launches}

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

    def launch(self, spec: KernelSpec, launch: Launch, buffers: list) -> None:
        self.device.launch(self.functions[launch.name], launch.name, (launch.blocks, launch.threads), buffers)

    def release(self, buffers: list) -> None:
        self.device.synchronize()
        for pointer in buffers:
            self.device.free(pointer)


class GpuExecutable:
    """A compiled module on the GPU (or gpu-sim): the host's walk over its ENTRY computation
    (and the computations its control flow runs)."""

    def __init__(self, module: HloModule, program: Program, specs: list[KernelSpec], memory: Any):
        self.module = module
        self.program = program
        self.memory = memory
        # constants live on the device for the executable's life: the computations', and the
        # array constants kernels read from memory (a fusion's scalars are IR constants)
        constants = [i for c in module.computations for i in c.instructions
                     if i.opcode == "constant" and isinstance(i.shape, ArrayShape)]
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
        owned: list = []
        try:
            parameters = []
            for p in entry.parameters:
                buffer = memory.upload(physical(arrays[p.parameter_number], p.shape))
                owned.append(buffer)
                parameters.append(buffer)
            result = self._run(self.program, parameters, owned)
            return [logical(memory.download(buffer, shape.byte_size), shape)
                    for buffer, shape in _leaves(result, entry.root.shape)]
        finally:
            memory.release(owned)

    def _run(self, program: Program, parameters: list, owned: list) -> Any:
        """The value (a buffer, or nested lists of them for a tuple) of `program`'s root."""
        values: dict[int, Any] = {}
        for instr in program.computation.instructions:
            values[id(instr)] = self._value(program, instr, parameters, values, owned)
        return values[id(program.computation.root)]

    def _value(self, program: Program, instr, parameters: list, values: dict, owned: list) -> Any:
        memory, op = self.memory, instr.opcode
        if op == "parameter":
            return parameters[instr.parameter_number]
        if op == "constant":
            if not isinstance(instr.shape, ArrayShape):
                raise GpuUnsupported(f"the GPU backend cannot hold the tuple constant {instr.describe()} yet")
            return self.constants[id(instr)]
        if op in ALIASES or is_identity_custom_call(instr):
            if op == "tuple":
                return [values[id(o)] for o in instr.operands]
            if op == "get-tuple-element":
                return values[id(instr.operands[0])][instr.attrs["index"]]
            return values[id(instr.operands[0])]   # shares its operand's bytes
        if op == "while":
            condition, body = program.called[id(instr)]
            state = values[id(instr.operands[0])]
            while self._read_scalar(self._run(condition, [state], owned), np.bool_):
                state = self._run(body, [state], owned)
            return state
        if op == "conditional":
            branches = program.called[id(instr)]
            selector = instr.operands[0]
            if "branch_computations" in instr.attrs:
                index = int(self._read_scalar(values[id(selector)], np.int32))
                index = index if 0 <= index < len(branches) else len(branches) - 1
            else:
                index = 0 if self._read_scalar(values[id(selector)], np.bool_) else 1
            return self._run(branches[index], [values[id(instr.operands[1 + index])]], owned)
        if op == "call":
            (callee,) = program.called[id(instr)]
            return self._run(callee, [values[id(o)] for o in instr.operands], owned)
        spec = program.kernels[id(instr)]
        outputs = [memory.alloc(s.byte_size) for s in spec.outputs]
        scratch = [memory.alloc(n) for n in spec.scratch]
        owned.extend(outputs + scratch)
        buffers = outputs + [values[id(o)] for o in spec.operands] + [self.constants[id(c)] for c in spec.constants]
        for launch in spec.launches:
            memory.launch(spec, launch, buffers + scratch)
        return outputs[0] if isinstance(instr.shape, ArrayShape) else outputs

    def _read_scalar(self, buffer: Any, dtype) -> Any:
        return np.frombuffer(self.memory.download(buffer, np.dtype(dtype).itemsize).tobytes(), dtype)[0]


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
        ir_text, specs, program = _kernel_module(compiled, "host" if self.name == "gpu-sim" else "ptx")
        memory = (_SimMemory if self.name == "gpu-sim" else _DeviceMemory)(ir_text, specs)
        return GpuExecutable(compiled.module, program, specs, memory)


BACKEND = GpuBackend("gpu")
SIM_BACKEND = GpuBackend("gpu-sim")
