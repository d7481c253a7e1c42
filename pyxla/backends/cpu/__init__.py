"""The native CPU backend: LLVM IR through llvmlite, JIT-compiled for the host.

compile(module) runs the compiler driver (passes, fusion, schedule, buffer assignment),
emits one LLVM module (codegen.py), optimises it at O3 with the vectorisers and returns an
executable whose call is one foreign call. An instruction it cannot emit is refused at
compile time with NotImplementedError naming the opcode and its source location.
With PYXLA_DUMP=DIR the LLVM IR before and after optimisation and the assembly are written
next to the module dumps.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from ...compiler import CompiledModule, compile_module
from ...hlo.module import HloModule
from ...hlo.verifier import verify_module
from .codegen import ModuleCodegen

# Importing these registers their kernels and elemental rules with codegen.
from .conv import depthwise, planes, pointwise, tiles, winograd  # noqa: F401
from .ops import indexing, rng, sorting, windows  # noqa: F401
from .runtime.executable import CpuExecutable
from .runtime.llvm_jit import host_jit
from .runtime.parameter_forms import choose_parameter_forms

_module_numbers = itertools.count()


class CpuBackend:
    name = "cpu"

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = ()) -> CpuExecutable:
        """Native code for `module`. `compiled` is the compiler driver's result when the caller
        (jit) ran it already; otherwise this runs it on a copy of the module. The caller passes
        the same array for each of `constant_parameters` on every call, so the executable may
        take them in a form of its own (runtime/parameter_forms.py)."""
        verify_module(module)
        if compiled is None:
            compiled = compile_module(module.clone(), donated=donated)
        module, buffers = compiled.module, compiled.buffers
        start = time.perf_counter()
        forms = choose_parameter_forms(module, frozenset(constant_parameters))
        codegen = ModuleCodegen(module, buffers, forms)
        codegen.entry_name = f"entry_{next(_module_numbers)}"   # unique among the process's JIT modules
        ir_text = codegen.emit()
        compiled.stage_seconds["LLVM IR emission"] = time.perf_counter() - start
        jit = host_jit()
        dump = os.environ.get("PYXLA_DUMP")
        profile = codegen.profile
        symbols = (profile.counters_name, profile.clock_name) if profile else ()
        result = jit.compile(ir_text, want_assembly=bool(dump), functions=(codegen.entry_name, *symbols))
        compiled.stage_seconds.update(result.stage_seconds)
        if dump:
            folder = Path(dump) / module.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "llvm-ir.ll").write_text(ir_text)
            (folder / "llvm-ir.optimized.ll").write_text(result.optimised_ir)
            (folder / "assembly.s").write_text(result.assembly or "")
        sizes = [b.size for b in codegen.output_buffers]
        executable = CpuExecutable(module, result.addresses[codegen.entry_name], codegen.outputs, sizes,
                                   codegen.arena_size, jit, forms)
        if profile:
            profile.attach(*(result.addresses[name] for name in symbols))
            executable.profile = profile
        return executable


BACKEND = CpuBackend()
