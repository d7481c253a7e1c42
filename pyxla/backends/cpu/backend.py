"""The CPU backend object (`get_backend("cpu")`): compile(module) to a CpuExecutable; see
the package's doc."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

from ...compiler import CompiledModule, compile_module
from ...fusion.attention import enable_attention_fusion
from ...hlo.module import HloModule
from ...hlo.printer import print_module
from ...hlo.verifier import verify_module
from .codegen import ModuleCodegen, register_kernels
from .hlo_lowering import lower_for_cpu
from .runtime import kernel_profile
from .runtime.executable import CpuExecutable
from .runtime.executable_cache import compile_entry
from .runtime.llvm_jit import host_jit
from .runtime.parameter_forms import choose_parameter_forms

_module_numbers = itertools.count()
# Every kernel and route registered before anything is compiled: the parameter forms are
# chosen (choose_parameter_forms) before the code is emitted, from the same routes.
register_kernels()


class CpuBackend:
    name = "cpu"

    def prepare(self, module: HloModule) -> None:
        """Opcodes with an expansion expanded, tokens as empty tuples, mixed-type dots
        upcast (hlo_lowering.py)."""
        lower_for_cpu(module)
        enable_attention_fusion(module)   # ops/attention.py computes attention fusions

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = ()) -> CpuExecutable:
        """Native code for `module`. `compiled` is the compiler driver's result when the caller
        (jit) ran it already; otherwise this runs it on a copy of the module. The caller passes
        the same array for each of `constant_parameters` on every call, so the executable may
        take them in a form of its own (runtime/parameter_forms.py)."""
        verify_module(module)
        if compiled is None:
            copy = module.clone()
            self.prepare(copy)
            compiled = compile_module(copy, donated=donated)
        module, buffers = compiled.module, compiled.buffers
        forms = choose_parameter_forms(module, frozenset(constant_parameters))
        codegen = ModuleCodegen(module, buffers, forms)
        codegen.entry_name = f"entry_{next(_module_numbers)}"   # unique among the process's JIT modules
        jit = host_jit()
        dump = os.environ.get("PYXLA_DUMP")
        # the executable cache (runtime/executable_cache.py), unless the IR and assembly are
        # to be dumped or kernels profiled: those need the code emitted here
        use_cache = not dump and not kernel_profile.enabled()
        text = print_module(module, print_metadata=False) if use_cache else ""
        options = (tuple(donated), tuple(sorted(constant_parameters)), sorted(map(str, forms.items())))
        native = compile_entry(jit, codegen, text, options, compiled.stage_seconds, use_cache, bool(dump))
        if dump:
            folder = Path(dump) / module.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "llvm-ir.ll").write_text(str(codegen.ir))
            (folder / "llvm-ir.optimized.ll").write_text(native.optimised_ir)
            (folder / "assembly.s").write_text(native.assembly or "")
        sizes = [b.size for b in codegen.output_buffers]
        executable = CpuExecutable(module, native.loaded.addresses[native.entry], codegen.outputs, sizes,
                                   native.arena_size, native.loaded, forms)
        executable.cache_key = native.key   # (the ONNX load index names the code by it)
        profile = codegen.profile
        if profile:
            profile.attach(*(native.loaded.addresses[name] for name in (profile.counters_name, profile.clock_name)),
                           native.loaded)
            executable.profile = profile
        return executable


BACKEND = CpuBackend()
