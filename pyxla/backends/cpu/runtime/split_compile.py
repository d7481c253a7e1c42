"""Compiling one program's LLVM module as several parts at once, one per core.

LLVM's optimisation and code generation take most of a cold first call, and they run on
one core per module. `split_module` cuts the module codegen emitted into parts along its
kernels: each kernel function (with the functions it references: its parallel tasks, a
convolution's tile functions) goes to one part, the entry function to another; kernels
become external symbols so that the entry's part calls them by name. A function two parts
both reference (a tile function shared by several convolutions) and the internal constants
they read are copied into each. The parts compile in threads (`compile_parts`), each in an
LLVM context and target machine of its own, and the relocatable objects are packed into
one blob (`pack_objects`) that the JIT loads into one engine, where the calls between
parts are linked (`LlvmJit.load_object`).

Threads, not processes: llvmlite serialises every call into LLVM behind one process-wide
lock (its `ffi` module), but the two long calls, the pass pipeline and the code generator,
touch only their own context, module and target machine, which LLVM allows on different
threads at once. They are called here through a handle of the same library without that
lock (`_Unlocked`); everything else (parsing, verifying, building the pass pipeline,
freeing) goes through llvmlite as usual. ctypes releases the GIL during a foreign call.

A kernel is optimised on its own wherever it lands (kernels are `noinline`; the entry
function only calls them), and the program computes what the module compiled whole
computes (tested bit for bit); `PYXLA_COMPILE_THREADS=1` compiles it whole.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import time

import llvmlite.binding as llvm

# (several objects in one blob: the format lives with the loader that reads it without LLVM)
from .object_loader import MAGIC, pack_objects, unpack_objects  # noqa: F401

# A module smaller than this (characters of IR) compiles whole: the parts would be
# small, and a kernel's part pays its copies of shared functions and a thread's start.
SPLIT_MIN_CHARS = 60_000
PARTS_PER_THREAD = 2      # so that one long kernel leaves the other threads work to take

_DEFINE = re.compile(r'^define (?:internal )?[^@\n]*@("(?:[^"\\]|\\.)*"|[\w.$-]+)\(')
_GLOBAL = re.compile(r'^@("(?:[^"\\]|\\.)*"|[\w.$-]+) = ')
_REFERENCE = re.compile(r'@("(?:[^"\\]|\\.)*"|[\w.$-]+)')


def compile_threads() -> int:
    """Threads for LLVM: PYXLA_COMPILE_THREADS, else the cores this process may run on."""
    given = os.environ.get("PYXLA_COMPILE_THREADS", "")
    if given:
        try:
            return max(1, int(given))
        except ValueError:
            raise ValueError(f"PYXLA_COMPILE_THREADS must be a whole number, not {given!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # (not on every platform)
        return max(1, os.cpu_count() or 1)


def _name(token: str) -> str:
    return token[1:-1] if token.startswith('"') else token


class _Module:
    """llvmlite's printed module, in pieces: functions by name, globals by name, and the
    lines every part keeps (target, declarations, metadata, attribute groups)."""

    def __init__(self, text: str):
        self.common: list[str] = []
        self.functions: dict[str, list[str]] = {}
        self.globals: dict[str, str] = {}
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            define = _DEFINE.match(line)
            if define:
                body = [line]
                while lines[i] != "}":
                    i += 1
                    body.append(lines[i])
                self.functions[_name(define.group(1))] = body
            elif (found := _GLOBAL.match(line)) is not None:
                self.globals[_name(found.group(1))] = line
            elif line.strip():
                self.common.append(line)
            i += 1
        self.references = {name: {_name(r) for r in _REFERENCE.findall("\n".join(body[1:]))} - {name}
                           for name, body in self.functions.items()}

    def closure(self, root: str, roots: set[str]) -> tuple[list[str], list[str]]:
        """The functions reached from function `root` (itself first) without passing
        through another of `roots`, and the globals they read."""
        functions, globals_, todo = [root], [], [root]
        while todo:
            for ref in sorted(self.references.get(todo.pop(), ())):
                if ref in self.globals and ref not in globals_:
                    globals_.append(ref)
                elif ref in self.functions and ref not in functions and ref not in roots:
                    functions.append(ref)
                    todo.append(ref)
        return functions, globals_


def split_module(text: str, entry: str, parts: int) -> list[str]:
    """`text` (a module codegen emitted, entry function `entry`) as at most `parts` modules
    that together define the same functions; [text] when it is not worth cutting or cannot
    be cut (a global other than a plain internal constant, such as PYXLA_PROFILE's
    counters, must exist once)."""
    if parts < 2 or len(text) < SPLIT_MIN_CHARS:
        return [text]
    module = _Module(text)
    if entry not in module.functions or not all(_copyable(g) for g in module.globals.values()):
        return [text]
    kernels = sorted(module.references[entry] & set(module.functions))
    if len(kernels) < 2:
        return [text]
    roots = {entry, *kernels}
    units = []
    for kernel in kernels:
        functions, globals_ = module.closure(kernel, roots)
        size = sum(len(line) for f in functions for line in module.functions[f])
        units.append((size, kernel, functions, globals_))
    units.sort(key=lambda u: (-u[0], u[1]))
    # the entry's own part, then the kernels by size, each to the smallest part so far
    entry_functions, entry_globals = module.closure(entry, roots)
    bins: list[list] = [[sum(len(line) for line in module.functions[entry]), [entry_functions], entry_globals]]
    bins += [[0, [], []] for _ in range(parts - 1)]
    for size, _, functions, globals_ in units:
        smallest = min(bins, key=lambda b: b[0])
        smallest[0] += size
        smallest[1].append(functions)
        smallest[2].extend(g for g in globals_ if g not in smallest[2])
    exported = set(kernels)
    texts = []
    for _, groups, globals_ in bins:
        if not groups:
            continue
        names = list(dict.fromkeys(f for group in groups for f in group))
        body = []
        for name in names:
            lines = module.functions[name]
            head = lines[0].replace("define internal ", "define ", 1) if name in exported else lines[0]
            body.append("\n".join([head, *lines[1:]]))
        declared = sorted((exported - set(names)) & set().union(*(module.references[n] for n in names)))
        declarations = [_declaration(module.functions[name][0]) for name in declared]
        texts.append("\n".join([*module.common, *(module.globals[g] for g in globals_), *declarations, *body]) + "\n")
    return texts


def _copyable(global_line: str) -> bool:
    """Whether a global may be copied into every part that reads it: an internal constant
    whose value names no other global."""
    value = global_line.partition(" = ")[2]
    return value.startswith(("internal constant ", "internal unnamed_addr constant ")) and \
        "@" not in re.sub(r'c"[^"]*"', "", value)   # (bytes of a string may print as @)


def _declaration(define_line: str) -> str:
    """The declaration of a function from the first line of its definition: its return
    type, name and argument list, without its attributes."""
    start = _DEFINE.match(define_line).end() - 1
    depth = 0
    for i in range(start, len(define_line)):
        depth += {"(": 1, ")": -1}.get(define_line[i], 0)
        if depth == 0:
            head = define_line[:i + 1]
            return "declare " + head[len("define internal "):] if head.startswith("define internal ") \
                else "declare " + head[len("define "):]
    raise ValueError(f"no argument list in {define_line!r}")


# --- compiling parts in threads -----------------------------------------------------------------
class _Unlocked:
    """llvmlite's library through a ctypes handle of its own, for the two calls that only
    touch their own context (see the module's docstring)."""

    def __init__(self):
        lib = ctypes.CDLL(llvm.ffi.lib._name)
        self.run = lib.LLVMPY_RunNewModulePassManager
        self.run.argtypes = [ctypes.c_void_p] * 3
        self.run.restype = None
        self.emit = lib.LLVMPY_TargetMachineEmitToMemory
        self.emit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.emit.restype = llvm.ffi.LLVMMemoryBufferRef

    def emit_object(self, machine: llvm.TargetMachine, module: llvm.ModuleRef) -> bytes:
        """TargetMachine.emit_object without the lock."""
        with llvm.ffi.OutputString() as error:
            buffer = self.emit(machine, module, 1, error)
            if not buffer:
                raise RuntimeError(f"LLVM could not emit an object: {error}")
        lib = llvm.ffi.lib
        try:
            return ctypes.string_at(lib.LLVMPY_GetBufferStart(buffer), lib.LLVMPY_GetBufferSize(buffer))
        finally:
            lib.LLVMPY_DisposeMemoryBuffer(buffer)


_unlocked: list[_Unlocked] = []
_unlocked_lock = threading.Lock()


class _Locked:
    """The same two calls through llvmlite's own API (behind its lock): for an llvmlite whose
    library does not export them under these names, parts then compile one at a time."""

    @staticmethod
    def run(manager, module: llvm.ModuleRef, pb) -> None:
        manager.run(module, pb)

    @staticmethod
    def emit_object(machine: llvm.TargetMachine, module: llvm.ModuleRef) -> bytes:
        return machine.emit_object(module)


def _library() -> _Unlocked | _Locked:
    with _unlocked_lock:
        if not _unlocked:
            try:
                _unlocked.append(_Unlocked())
            except (AttributeError, OSError):
                _unlocked.append(_Locked())   # type: ignore[arg-type]
    return _unlocked[0]


def compile_part(jit, ir_text: str) -> tuple[bytes, float, float]:
    """The object of one part, optimised as LlvmJit.optimise does, and the CPU seconds this
    thread spent optimising and making machine code."""
    start = time.thread_time()
    lib = _library()
    context = llvm.create_context()
    module = llvm.parse_assembly(jit.with_host_attributes(ir_text), context=context)
    module.verify()
    # a target machine of its own: LLVM caches subtargets in it as it compiles
    machine = jit.object_machine()
    pb = llvm.create_pass_builder(machine, jit.pipeline_options())
    lib.run(pb.getModulePassManager(), module, pb)
    optimised = time.thread_time()
    obj = lib.emit_object(machine, module)
    module.close()
    del context
    return obj, optimised - start, time.thread_time() - optimised


def compile_parts(jit, texts: list[str], threads: int) -> tuple[list[bytes], dict[str, float]]:
    """The objects of `texts` compiled on up to `threads` threads, in order, and the CPU
    seconds all threads spent optimising and making machine code."""
    if threads < 2 or len(texts) < 2:
        compiled = [compile_part(jit, t) for t in texts]
    else:
        # (imported here: a process that only loads cached code never compiles)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(threads, len(texts)), thread_name_prefix="pyxla-llvm") as pool:
            compiled = list(pool.map(lambda t: compile_part(jit, t), texts))
    return [obj for obj, _, _ in compiled], {"LLVM optimisation cpu": sum(c[1] for c in compiled),
                                             "machine code cpu": sum(c[2] for c in compiled)}
