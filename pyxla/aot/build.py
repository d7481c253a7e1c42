"""An HLO module to a relocatable object file: the CPU backend's codegen for the AOT target.

The module goes through the same steps as `CpuBackend.compile` (verification, the CPU
lowering, the compiler driver, `ModuleCodegen`), with emission switched to the AOT target
(backends/cpu/runtime/native_target.py): kernels call the runtime's helpers (worker pool,
GEMM, GEMV) by symbol, every dot takes pyxla's own kernels (no BLAS), and the helpers'
modules are linked into the one LLVM module with the C interface (wrapper.py). Every
definition but the interface's symbols is made internal, so two objects link into one
program side by side. LLVM's O3 pipeline runs for the chosen CPU and
`TargetMachine.emit_object` writes the object (position independent, for --shared).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import llvmlite.binding as llvm

from ..backends.cpu.codegen import ModuleCodegen
from ..backends.cpu.runtime.executable import to_physical
from ..backends.cpu.runtime.llvm_jit import host_jit
from ..backends.cpu.runtime.native_target import AotEmission, ahead_of_time
from ..backends.cpu.runtime.parallel import PARALLEL_FOR, thread_count
from ..compiler import compile_module
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from ..hlo.verifier import verify_module
from .soft_half import SOFT_HALF_IR
from .wrapper import Interface, ResultSource, interface_ir

try:   # the CPU backend's own rewrites before the driver, where this version has them
    from ..backends.cpu.hlo_lowering import lower_for_cpu
except ImportError:   # pragma: no cover
    lower_for_cpu = None


@dataclass
class ObjectCode:
    name: str
    object: bytes
    arg_shapes: list[ArrayShape]       # in parameter order, as the object reads them
    result_shapes: list[ArrayShape]    # flattened depth first, as the object writes them
    arg_sizes: list[int]
    result_sizes: list[int]
    temp_size: int
    threads: int                       # the thread count kernels were cut for
    pooled: bool                       # whether the object starts a worker pool
    cpu: str
    features: str


def target_machine(cpu: str | None, features: str | None) -> tuple[llvm.TargetMachine, str, str]:
    """The machine to compile for: the host by default; `generic` is baseline x86-64."""
    jit = host_jit()   # initialises LLVM (and its process-wide options) as the JIT does
    if cpu in (None, "", "host", "native"):
        cpu, default_features = jit.cpu, jit.features
    elif cpu == "generic":
        cpu, default_features = "x86-64" if llvm.get_process_triple().startswith("x86_64") else "generic", ""
    else:
        default_features = ""
    features = default_features if features is None else features
    target = llvm.Target.from_triple(llvm.get_process_triple())
    machine = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")
    return machine, cpu, features


def emit_object(module: HloModule, name: str, cpu: str | None = None, features: str | None = None,
                threads: int | None = None) -> ObjectCode:
    """The object code of `module` with the C interface NAME_*. Raises NotImplementedError
    (the backend's refusal) or ValueError before anything is produced."""
    verify_module(module)
    for p in module.entry.parameters:
        if not isinstance(p.shape, ArrayShape):
            raise NotImplementedError(f"the CPU backend cannot take a tuple-shaped ENTRY parameter yet "
                                      f"({p.describe()})")
    machine, cpu, features = target_machine(cpu, features)
    copy = module.clone()
    if lower_for_cpu is not None:
        lower_for_cpu(copy)
    compiled = compile_module(copy)
    threads = thread_count() if threads is None else max(1, threads)
    emission = AotEmission(threads)
    with ahead_of_time(emission):
        codegen = ModuleCodegen(compiled.module, compiled.buffers, {})
        codegen.entry_name = f"{name}.entry"
        ir_text = codegen.emit()
    entry = compiled.module.entry
    params = sorted(entry.parameters, key=lambda p: p.parameter_number)
    face = Interface(name, codegen.entry_name, [p.shape.byte_size for p in params],
                     _result_sources(codegen), [buf.size for buf in codegen.output_buffers],
                     codegen.arena_size, PARALLEL_FOR in emission.helpers)
    wrapper_text, temp_size = interface_ir(face, codegen.ir.triple)
    linked = llvm.parse_assembly(ir_text)
    helpers = dict.fromkeys(h() for h in emission.helpers.values())   # (a module may define several)
    if "+f16c" not in features.split(","):   # LLVM would call libgcc's conversions
        helpers[SOFT_HALF_IR] = None
    for text in [*helpers, wrapper_text]:
        linked.link_in(llvm.parse_assembly(text))
    exported = {f"{name}_run", f"{name}_set_num_threads", f"{name}_arg_sizes", f"{name}_result_sizes",
                f"{name}_temp_size"}
    final = llvm.parse_assembly(_with_attributes(str(linked), features))
    for value in list(final.functions) + list(final.global_variables):
        if not value.is_declaration and value.name not in exported and not value.name.startswith("llvm."):
            value.linkage = "internal"
    final.triple = machine.triple
    final.data_layout = str(machine.target_data)
    final.verify()
    _optimise(final, machine)
    return ObjectCode(name, machine.emit_object(final), [p.shape for p in params],
                      [slot.shape for slot in codegen.outputs], face.arg_sizes,
                      [r.size for r in face.results], temp_size, threads, face.pooled, cpu, features)


def _result_sources(codegen: ModuleCodegen) -> list[ResultSource]:
    uses: dict[int, int] = {}
    for slot in codegen.outputs:
        if slot.kind == "buffer":
            uses[slot.index] = uses.get(slot.index, 0) + 1
    sources = []
    for slot in codegen.outputs:
        size = slot.shape.byte_size
        if slot.kind == "buffer":
            whole = slot.offset == 0 and uses[slot.index] == 1 and codegen.output_buffers[slot.index].size == size
            sources.append(ResultSource("direct" if whole else "buffer", slot.index, slot.offset, size))
        elif slot.kind == "parameter":
            sources.append(ResultSource("parameter", slot.index, 0, size))
        else:
            data = to_physical(slot.literal.astype(slot.shape.dtype.np_dtype), slot.shape).tobytes()
            sources.append(ResultSource("constant", 0, 0, size, data))
    return sources


def _with_attributes(ir_text: str, features: str) -> str:
    """Every defined function asks for 512-bit vectors where the target has AVX-512, as the
    JIT's do on such a host (llvm_jit.LlvmJit.with_host_attributes)."""
    if "+avx512f" not in features.split(","):
        return ir_text
    tagged = re.sub(r"^(define [^\n]*?)\s*\{$", r"\1 #4242 {", ir_text, flags=re.MULTILINE)
    return f'{tagged}\nattributes #4242 = {{ "prefer-vector-width"="512" }}\n'


def _optimise(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """LLVM's O3 pipeline with the loop and SLP vectorisers, as the JIT runs it."""
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(module, pb)
