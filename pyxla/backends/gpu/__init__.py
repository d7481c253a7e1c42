"""The GPU backend: the optimised, fused module's kernels in SIMT form, compiled to PTX by
LLVM's NVPTX target and run through the CUDA driver (`gpu`), or compiled for the host and
run block by block, a block's threads as loops split at each barrier and shuffle, on the
CPU (`gpu-sim`, simt.py and sim.py).

compile(module) runs the compiler driver (passes, fusion, schedule), plans the program of
each computation (program.py: kernels, host values, aliases, and control flow the host
drives) and each kernel's launches (kernels.py: reductions, GEMM, transposes, sort and the
other ops that do not write element by element, and elementwise grid-stride loops), and
emits them with the elemental emitter both LLVM targets share. A call (executable.py)
takes device arrays as they are and copies host arrays in, walks the ENTRY computation in
schedule order launching kernels on one stream of the executable's, on buffers in one arena
per executable laid out from buffer assignment (arena.py; while loops and conditionals read
a scalar back to decide), and returns the results as device arrays (arrays.py), which
convert to NumPy on demand. An op with no kernel is
refused with GpuUnsupported (a NotImplementedError) naming it. PYXLA_GPU_ARCH chooses the
architecture (sm_90 by default).
"""
from __future__ import annotations

import itertools
import os
import platform
import re
from pathlib import Path

import llvmlite.ir as ir

from ...compiler import CompiledModule, compile_module
from ...fusion.policy import FusionPolicy
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape
from ...hlo.verifier import verify_module
from .arena import plan_arena, programs
from .arrays import DeviceArray, device_put, logical, physical
from .executable import DeviceKernelSet, GpuExecutable, SimKernelSet
from .kernels import GpuUnsupported, KernelSpec, emit_kernels
from .memory import memory_for
from .placement import place_programs, placement_mode
from .program import Program, plan_program
from .simt import flush_subnormals, restore_mxcsr

_module_numbers = itertools.count()

__all__ = ["DeviceArray", "GpuBackend", "GpuExecutable", "GpuUnsupported", "device_put", "kernel_ir", "logical",
           "memory_for", "physical"]


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



class GpuBackend:
    """`gpu` (the CUDA driver) or `gpu-sim` (the same kernels on the host)."""

    def __init__(self, name: str):
        self.name = name

    def prepare(self, module: HloModule) -> None:
        """Nothing is rewritten: an opcode the kernels cannot emit is refused by compile."""

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = (), placement: str | None = None) -> GpuExecutable:
        """`placement`: "auto", "device" or "host" (placement.py; the default depends on the
        backend and PYXLA_GPU_PLACEMENT)."""
        mode = placement_mode(placement, self.name)
        verify_module(module)
        if compiled is None:
            # the GEMM kernel (gemm.py) writes a dot's own dims: no epilogue reshaped around it
            compiled = compile_module(module.clone(), donated=donated,
                                      policy=FusionPolicy(dot_epilogue_reshaped_rows=False))
        if any(p.shape is not None and not isinstance(p.shape, ArrayShape) for p in compiled.module.entry.parameters):
            raise GpuUnsupported("the GPU backend cannot take tuple-shaped ENTRY parameters yet")
        ir_text, specs, program = _kernel_module(compiled, "host" if self.name == "gpu-sim" else "ptx")
        arena = plan_arena(compiled.module, program, compiled.buffers)
        placed = place_programs(program, mode)
        dump = os.environ.get("PYXLA_DUMP")
        if dump:
            folder = Path(dump) / compiled.module.name
            folder.mkdir(parents=True, exist_ok=True)
            text = "\n\n".join(placed[id(p)].to_text(p.computation) for p in programs(program))
            (folder / "gpu-placement.txt").write_text(text + "\n")
        kernels = (SimKernelSet if self.name == "gpu-sim" else DeviceKernelSet)(ir_text, specs)
        return GpuExecutable(compiled.module, program, specs, memory_for(self.name), kernels, arena, placed)


BACKEND = GpuBackend("gpu")
SIM_BACKEND = GpuBackend("gpu-sim")
