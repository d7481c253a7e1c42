"""The persistent executable cache: a compiled module's machine code kept on disk
(pyxla/runtime/disk_cache.py, kind "executable"), so a process that compiles a module this
host compiled before skips LLVM's optimisation and code generation and loads the object.

The key hashes everything the machine code depends on: the optimised, scheduled module's
text (after the compiler driver: passes, fusion, schedule), the donated and constant
parameters, the tuned parameters its kernels use (tuning/selection.py), the backend's
options (the threads kernels are cut for, the vector width and function attributes,
PYXLA_WINOGRAD), the target (triple, CPU name, features), and the
versions of pyxla (its number and a hash of its source), llvmlite and LLVM.

An entry's payload is JSON metadata (its length first, 8 bytes) followed by a relocatable
object (`TargetMachine.emit_object`). Nothing in the object is an address of the process
that wrote it: the JIT's code calls the runtime's helpers (the worker pool, GEMM, GEMV)
by address, and before the object is made each such `inttoptr` constant is replaced
by a symbol `__pyxla_bound.<helper>` (the helper's AOT symbol, native_target.py), which a
loading process binds to its own helper's address (`llvm.add_symbol`). Constants are globals
of the module, so they live in the object; buffers come in through the entry's arguments.
Where an address in the IR is not a known helper's the code is compiled as usual and not
kept. The metadata holds the entry's name, the arena size, the output plan, the bound
symbols and the cache entries of those helpers and of the call shim (so that a process
without LLVM can load them all: cached_executable.py); the output plan and parameter forms
are recomputed from the module on load (cheap, no code is emitted) and checked against the
metadata.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

import llvmlite
import llvmlite.binding as llvm

from ....runtime import disk_cache
from ....runtime.disk_cache import source_fingerprint
from . import helper_registry
from .cached_executable import (
    BOUND,
    FORMAT,
    KIND,
    NativeCode,
    entry_parts,
    np_bytes,
    np_name,
    shape_json,
)
from .call_shim import SHIM_NAME, load_shim
from .llvm_jit import LlvmJit
from .native_target import EMITTED_ADDRESSES
from .parallel import PARALLEL_FOR, YIELD_CORES, thread_count, worker_pool

_ADDRESS = re.compile(r"inttoptr (\()?i64 (\d+) to ptr(?(1)\))")   # an instruction, or a constant expression


def compile_entry(jit: LlvmJit, codegen, module_text: str, options: tuple, stage_seconds: dict,
                  use_cache: bool = True, want_assembly: bool = False) -> NativeCode:
    """The native code of `codegen`'s module: from the cache when `use_cache` and an entry
    for this key exists, else emitted, compiled, kept there (when `use_cache`) and loaded.
    `module_text` is the optimised module's text and `options` what else decided the code."""
    from ..tuning import selection as tuning  # (not needed to load cached code)
    tuned = tuning.parameters_for_compile(codegen.hlo, bool(codegen.parameter_forms))   # tuning/selection.py
    key = executable_key(jit, module_text, options + (tuned.fingerprint,)) if use_cache else None
    if key is not None:
        start = time.perf_counter()
        found = _load(jit, codegen, key)
        if found is not None:
            stage_seconds["executable cache load"] = time.perf_counter() - start
            found.key = key
            return found
    start = time.perf_counter()
    with tuning.pinned(tuned):
        ir_text = codegen.emit()
    stage_seconds["LLVM IR emission"] = time.perf_counter() - start
    bound = symbolic(ir_text) if key is not None else None
    if bound is not None:
        ir_text, symbols = bound
    obj, optimised, assembly, seconds = jit.emit_object(ir_text, want_assembly)
    stage_seconds.update(seconds)
    names = (codegen.entry_name, *((codegen.profile.counters_name, codegen.profile.clock_name)
                                   if codegen.profile else ()))
    if bound is None:
        return NativeCode(jit.load_object(obj, names), codegen.entry_name, codegen.arena_size, False,
                          optimised, assembly)
    bindings = {BOUND + s: resolve(s) for s in symbols}
    meta = {"format": FORMAT, "entry": codegen.entry_name, "arena_size": codegen.arena_size,
            "outputs": _output_plan(codegen), "symbols": symbols}
    load_shim()
    helpers = helper_registry.entries_for([*symbols, SHIM_NAME])
    if helpers is not None:   # (so a process without LLVM can load them: cached_executable.py)
        meta["helpers"] = helpers
    header = json.dumps(meta, sort_keys=True).encode()
    kept = disk_cache.store(KIND, key, len(header).to_bytes(8, "little") + header + obj)
    loaded = jit.load_object(obj, names, bindings)
    return NativeCode(loaded, codegen.entry_name, codegen.arena_size, False, optimised, assembly,
                      key if kept else None)


def _output_plan(codegen) -> list:
    sizes = [b.size for b in codegen.output_buffers]
    return [[slot.kind, slot.index, slot.offset] for slot in codegen.outputs] + [sizes]


def _load(jit: LlvmJit, codegen, key: str) -> NativeCode | None:
    return load_native(jit, key, _output_plan(codegen))


def load_native(jit: LlvmJit, key: str, output_plan: list) -> NativeCode | None:
    """The native code kept under `key`, whose output plan must be `output_plan`; None when
    there is no such entry or it is unusable (then deleted, with a CacheWarning)."""
    payload = disk_cache.load(KIND, key)
    if payload is None:
        return None
    try:
        meta, obj = entry_parts(payload, output_plan)
        symbols = {BOUND + s: resolve(s) for s in meta["symbols"]}
        loaded = jit.load_object(obj, (meta["entry"],), symbols)
        return NativeCode(loaded, meta["entry"], int(meta["arena_size"]), True, key=key)
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        disk_cache.discard(KIND, key, f"unusable ({e})")
        return None


def symbolic(ir_text: str) -> tuple[str, list[str]] | None:
    """`ir_text` with every helper address replaced by its bound symbol, and the symbols; None
    when an address is not a known helper's."""
    addresses = {int(a) for _, a in _ADDRESS.findall(ir_text)}
    names = {a: EMITTED_ADDRESSES.get(a) for a in addresses}
    if None in names.values():
        names.update({a: s for a, s in _other_helpers().items() if a in addresses})
    if None in names.values():
        return None

    def named(m: re.Match) -> str:
        symbol = f'ptr @"{BOUND}{names[int(m.group(2))]}"'
        return f"bitcast ({symbol} to ptr)" if m.group(1) else f"bitcast {symbol} to ptr"
    text = _ADDRESS.sub(named, ir_text)
    symbols = sorted(set(names.values()))
    return text + "".join(f'\ndeclare void @"{BOUND}{s}"()' for s in symbols) + "\n", symbols


def _other_helpers() -> dict[int, str]:
    """Addresses of helpers that codegen calls without native_function: the pool's entry
    points."""
    pool = worker_pool()
    return {} if pool is None else {pool.parallel_for: PARALLEL_FOR, pool.yield_cores: YIELD_CORES}


_GEMV = re.compile(r"pyxla_gemv_(rows|dots)_(f32|f64)_(\d+)$")


def resolve(symbol: str) -> int:
    """This process's address of the helper named `symbol` (loading it when needed); a
    ValueError for an unknown one."""
    from ..dot import gemm, gemv
    pool = worker_pool() if symbol in (PARALLEL_FOR, YIELD_CORES) else None
    if pool is not None:
        return pool.parallel_for if symbol == PARALLEL_FOR else pool.yield_cores
    address = gemm.address_of_symbol(symbol)   # (any blocking a tuning database chose)
    if address is not None:
        return address
    match = _GEMV.match(symbol)
    if match and int(match.group(3)) == 8 * _jit_vector_bytes():
        return gemv.gemv_address(match.group(2), match.group(1) == "dots")
    raise ValueError(f"no helper {symbol} in this process")


def _jit_vector_bytes() -> int:
    from .llvm_jit import host_jit
    return host_jit().vector_bytes


def executable_key(jit: LlvmJit, module_text: str, options: tuple) -> str | None:
    """The cache key of a module's native code, or None when the cache is off."""
    if disk_cache.cache_directory() is None or " at 0x" in repr(options):   # (an option printed by identity)
        return None
    return disk_cache.make_key(
        FORMAT, module_text, repr(options), str(thread_count()), str(jit.vector_bytes), jit.function_attributes,
        os.environ.get("PYXLA_WINOGRAD", ""), llvm.get_process_triple(), jit.cpu, jit.features,
        llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)),
        str(getattr(sys.modules.get("pyxla"), "__version__", "")), source_fingerprint())


# --- an executable without its module (the ONNX load index) --------------------------------------

def describe_executable(executable) -> dict | None:
    """What `executable_from_description` needs to make `executable` again in another process
    without its module: its entry's key in this cache, its output plan, the parameters' and
    outputs' shapes and which parameters are taken in a form of their own. None when its
    code is not in the cache or a shape cannot be written down."""
    key = getattr(executable, "cache_key", None)
    if key is None:
        return None
    try:
        slots = [[s.kind, s.index, s.offset, shape_json(s.shape),
                  None if s.literal is None else [np_name(s.literal), np_bytes(s.literal)]]
                 for s in executable.outputs]
        return {"key": key, "plan": [[s.kind, s.index, s.offset] for s in executable.outputs]
                + [list(executable.output_sizes)],
                "parameters": [shape_json(shape) for shape in executable.parameter_shapes],
                "root": shape_json(executable.root_shape), "slots": slots,
                "forms": sorted(executable.parameter_forms)}
    except TypeError:
        return None
