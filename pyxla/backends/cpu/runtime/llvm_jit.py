"""LLVM through llvmlite: the host target, the optimisation pipeline and the JIT engine.

One `LlvmJit` per process holds the target machine for the host CPU (its name and
features, optimisation level 3). `compile(ir_text)` parses, verifies and optimises a module
with LLVM's default O3 pipeline (loop and SLP vectorisers on), adds it to the MCJIT engine
and returns the optimised module; `address(name)` gives a function's address.
`emit_object(ir_text)` makes relocatable code instead (a large module as parts compiled on
several threads: split_compile.py), and `load_object` loads it into an engine of its own.

`compile_helper` loads the runtime's own native helpers (the worker pool, the call shim):
the same for every program, so their machine code is kept in the on-disk cache
(pyxla/runtime/disk_cache.py) and a process loads it rather than compiling it again.
"""
from __future__ import annotations

import re
import struct
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

from ....runtime import disk_cache
from ....runtime.disk_cache import source_fingerprint
from . import helper_registry, split_compile

_lock = threading.Lock()
_EXTERNAL_DEFINE = re.compile(r'^define (?!internal )[^@\n]*@("[^"]+"|[\w.$-]+)\(', re.MULTILINE)
_initialised = False


def _initialise() -> None:
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            # Loop strength reduction rewrites the address arithmetic of loops for the
            # addressing modes; on kernels with many pointers per loop (a convolution tile
            # reads 8 pixels and 2 kernel rows) its search took 40% of all LLVM time (CNN
            # block: machine code 73 -> 21 ms, first call 153 -> 115 ms), and without it no
            # benchmark kernel ran slower (measured side by side). The option is LLVM's own,
            # so it holds for every module this process's LLVM compiles.
            llvm.set_option("pyxla", "--disable-lsr")
            _initialised = True


@dataclass
class CompiledIr:
    optimised_ir: str
    assembly: str | None
    addresses: dict[str, int]    # of the functions asked for by name
    stage_seconds: dict[str, float]


class LlvmJit:
    def __init__(self):
        _initialise()
        target = llvm.Target.from_default_triple()
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        self.target_machine = target.create_target_machine(cpu=self.cpu, features=self.features, opt=3,
                                                           codemodel="jitdefault")
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.target_machine)
        # LLVM vectorises 256 bits wide by default even where AVX-512 exists (older cores lost
        # clock speed on 512-bit work); on this generation full-width vectors halve the time
        # of compute-bound loops such as exp or tanh (measured: 1.7 -> 0.86 ms on 1M f32 exp).
        wide = "+avx512f" in self.features.split(",")
        self.function_attributes = '"prefer-vector-width"="512"' if wide else ""
        # The vector width of hand-tiled kernels (GEMM, convolution): 64-byte registers double
        # what each fused multiply-add does.
        self.vector_bytes = 64 if wide else 32

    def pipeline_options(self, speed_level: int = 3) -> llvm.PipelineTuningOptions:
        """LLVM's O3 pipeline with the loop and SLP vectorisers and loop unrolling on; a lower
        `speed_level` (code whose speed does not matter, such as gpu-sim's emulation) runs
        that level's pipeline without them."""
        pto = llvm.PipelineTuningOptions(speed_level=speed_level)
        pto.loop_vectorization = speed_level >= 2
        pto.slp_vectorization = speed_level >= 2
        pto.loop_unrolling = speed_level >= 2
        return pto

    def optimise(self, module: llvm.ModuleRef, speed_level: int = 3) -> None:
        pb = llvm.create_pass_builder(self.target_machine, self.pipeline_options(speed_level))
        pm = pb.getModulePassManager()
        pm.run(module, pb)

    def with_host_attributes(self, ir_text: str) -> str:
        """`ir_text` with the host's function attributes on every function it defines."""
        if not self.function_attributes:
            return ir_text
        tagged = re.sub(r"^(define [^\n]*?)\s*\{$", r"\1 #4242 {", ir_text, flags=re.MULTILINE)
        return f"{tagged}\nattributes #4242 = {{ {self.function_attributes} }}\n"

    def _optimised(self, ir_text: str, speed_level: int) -> llvm.ModuleRef:
        module = llvm.parse_assembly(self.with_host_attributes(ir_text))
        module.verify()
        self.optimise(module, speed_level)
        return module

    def compile(self, ir_text: str, want_assembly: bool = False, functions: tuple[str, ...] = (),
                speed_level: int = 3) -> CompiledIr:
        """Optimise (pipeline_options(speed_level)) and load a module; the addresses of
        `functions` are resolved under the engine's lock, so a module another thread adds at
        the same time cannot shadow them."""
        start = time.perf_counter()
        module = self._optimised(ir_text, speed_level)
        optimised = str(module) if want_assembly else ""
        # The assembly is printed from a copy: LLVM's code generator rewrites the IR it is
        # given (CodeGenPrepare), and the engine compiling that rewritten module again made
        # wrong code (DenseNet-121 crashed under PYXLA_DUMP).
        assembly = self.target_machine.emit_assembly(llvm.parse_assembly(optimised)) if want_assembly else None
        optimised_at = time.perf_counter()
        with _lock:
            self.engine.add_module(module)
            self.engine.finalize_object()
            addresses = {name: self.engine.get_function_address(name) for name in functions}
        seconds = {"LLVM optimisation": optimised_at - start, "machine code": time.perf_counter() - optimised_at}
        return CompiledIr(optimised, assembly, addresses, seconds)

    def object_machine(self) -> llvm.TargetMachine:
        """A target machine like the shared one, for one engine (an engine owns its machine
        and disposes of it with itself) or one compiling thread."""
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, codemodel="jitdefault")

    def emit_object(self, ir_text: str, want_assembly: bool = False) -> tuple[bytes, str, str | None, dict]:
        """Optimise `ir_text` and make it relocatable object code for this host: (the code,
        the optimised IR and the assembly when asked for, the seconds of each stage). A large
        module (codegen's, with one entry function) is cut into parts compiled on several
        threads (split_compile.py), and the code is their objects packed together, which
        load_object takes as it takes one object. Stages are timed by the wall clock, and by
        CPU time under "<stage> cpu"."""
        threads = split_compile.compile_threads()
        entries = _EXTERNAL_DEFINE.findall(ir_text) if threads > 1 and not want_assembly else []
        parts = split_compile.split_module(ir_text, entries[0].strip('"'), threads * split_compile.PARTS_PER_THREAD) \
            if len(entries) == 1 else [ir_text]
        if len(parts) > 1:
            start = time.perf_counter()
            objects, seconds = split_compile.compile_parts(self, parts, threads)
            seconds["LLVM optimisation + machine code"] = time.perf_counter() - start
            return split_compile.pack_objects(objects), "", None, seconds
        start, cpu = time.perf_counter(), time.process_time()
        # A context of its own, dropped with the module: LLVM's global context keeps every
        # type and constant it has seen for the life of the process.
        context = llvm.create_context()
        module = llvm.parse_assembly(self.with_host_attributes(ir_text), context=context)
        module.verify()
        self.optimise(module)
        optimised = str(module) if want_assembly else ""
        assembly = self.target_machine.emit_assembly(llvm.parse_assembly(optimised)) if want_assembly else None
        optimised_at, optimised_cpu = time.perf_counter(), time.process_time()
        obj = self.object_machine().emit_object(module)
        module.close()
        del context
        return obj, optimised, assembly, {"LLVM optimisation": optimised_at - start,
                                          "machine code": time.perf_counter() - optimised_at,
                                          "LLVM optimisation cpu": optimised_cpu - cpu,
                                          "machine code cpu": time.process_time() - optimised_cpu}

    def load_object(self, obj: bytes, functions: tuple[str, ...], symbols: dict[str, int] | None = None) -> LoadedCode:
        """Load a relocatable object into an engine of its own and give the addresses of
        `functions`; its undefined `symbols` resolve to the addresses given. The machine code
        lives as long as the returned LoadedCode. Raises RuntimeError when a function is
        missing."""
        for name, address in (symbols or {}).items():
            llvm.add_symbol(name, address)
        try:
            objects = split_compile.unpack_objects(obj)
        except (ValueError, struct.error) as e:
            raise RuntimeError(f"the object code is damaged ({e})") from None
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.object_machine())
        for part in objects:   # calls between parts are linked in the engine
            engine.add_object_file(llvm.ObjectFileRef.from_data(part))
        engine.finalize_object()
        addresses = {fn: engine.get_function_address(fn) for fn in functions}
        missing = [fn for fn, address in addresses.items() if not address]
        if missing:
            engine.close()
            raise RuntimeError(f"the object code lacks {', '.join(missing)}")
        return LoadedCode(engine, addresses)

    def compile_helper(self, name: str, ir_text: str | Callable[[], str], functions: tuple[str, ...],
                       recipe: tuple | None = None) -> dict[str, int]:
        """Load a runtime helper module and give the addresses of `functions`. Its object code
        comes from the on-disk cache when this host compiled the same IR with the same LLVM
        before; otherwise it is compiled here and kept there. The key holds the IR text and
        everything else that decides the machine code (LLVM and llvmlite versions, target
        triple, CPU name and features, the host function attributes). With `recipe` (what
        decides the IR besides pyxla's source: the helper's parameters) the key holds the
        recipe and source_fingerprint() instead of the text, and `ir_text`, then a function,
        runs only when the cache has no entry: a process that finds the helper builds no IR
        (the GEMM kernel's takes about 0.2 s). A helper stays loaded for the life of the
        process."""
        made = ("recipe", repr(recipe), source_fingerprint()) if recipe is not None else (str(ir_text),)
        key = disk_cache.make_key(OBJECT_FORMAT, *made, llvmlite.__version__,
                                  ".".join(map(str, llvm.llvm_version_info)),
                                  llvm.get_process_triple(), self.cpu, self.features, self.function_attributes)
        obj = disk_cache.load(name, key)
        if obj is not None:
            try:
                loaded = self.load_object(obj, functions)
            except RuntimeError as e:
                disk_cache.discard(name, key, f"unusable ({e})")
                obj = None
        if obj is None:
            obj = self.emit_object(ir_text() if callable(ir_text) else ir_text)[0]
            disk_cache.store(name, key, obj)
            loaded = self.load_object(obj, functions)
        helper_registry.record(name, key, loaded.addresses, loaded)
        return loaded.addresses


_live_engines = [0]


class LoadedCode:
    """Machine code loaded into an engine of its own, freed when this object is dropped."""

    def __init__(self, engine: llvm.ExecutionEngine, addresses: dict[str, int]):
        self.engine = engine
        self.addresses = addresses
        _live_engines[0] += 1
        # Not at exit: weakref runs pending finalizers from its own atexit hook, before hooks
        # registered earlier, such as the PYXLA_PROFILE report that reads counters in this
        # code; the process's end frees the memory anyway.
        weakref.finalize(self, _engine_gone, engine).atexit = False


def _engine_gone(engine: llvm.ExecutionEngine) -> None:
    _live_engines[0] -= 1
    engine.close()


def live_engines() -> int:
    """How many engines (helpers' and executables') hold machine code in this process now."""
    return _live_engines[0]


OBJECT_FORMAT = "helper-object-2"   # changed whenever the way helpers are compiled changes (2: no LSR)


_jit: LlvmJit | None = None


def host_jit() -> LlvmJit:
    """The process's JIT for the host CPU (created on first use)."""
    global _jit
    if _jit is None:
        jit = LlvmJit()   # outside the lock: it initialises LLVM, which takes the lock
        with _lock:
            if _jit is None:
                _jit = jit
    return _jit
