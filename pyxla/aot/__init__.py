"""Ahead-of-time compilation: a program to an object file and a C header (docs/aot.md).

    import pyxla.aot
    pyxla.aot.compile(jitted_fn, x, w, name="mlp", out_dir="build")   # build/mlp.h, build/mlp.o
    pyxla.aot.compile(module, name="mlp", out_dir="build", shared=True)   # also build/libmlp.so

The object runs the CPU backend's code for the program through `NAME_run` (header.py says
the contract) and needs only libc, libm and pthreads: `cc main.c mlp.o -lm -lpthread`.
Everything is checked (the name, the folder, whether the backend compiles the module)
before anything is written.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import PyxlaError
from ..hlo.module import HloModule
from .build import ObjectCode, emit_object
from .header import header_text

C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert
_Thread_local bool true false alignas alignof class namespace template typename this new delete operator""".split())


class AotError(PyxlaError):
    """An AOT build that cannot start (a bad name or output folder) or link."""


@dataclass
class AotResult:
    header: Path
    object: Path
    shared: Path | None
    code: ObjectCode


def check_name(name: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in C_KEYWORDS:
        raise AotError(f"--name {name!r} is not a C identifier (letters, digits and _, not starting with a digit, "
                       f"not a C keyword)")
    if name.startswith("__") or name.startswith("pyxla_"):
        raise AotError(f"--name {name!r} is reserved (names starting with __ or pyxla_)")


def check_out_dir(out_dir) -> Path:
    """The output folder, which must be writable (or creatable under a writable parent)."""
    path = Path(out_dir)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise AotError(f"-o {out_dir}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise AotError(f"-o {out_dir}: {probe} is not writable")
    return path


def to_module(fn_or_module, example_args) -> HloModule:
    """An HLO module from a module, HLO/StableHLO text, a jitted function or a function
    (traced with the example arguments)."""
    if isinstance(fn_or_module, HloModule):
        return fn_or_module
    if isinstance(fn_or_module, str):
        from ..hlo.stablehlo import parse_program
        return parse_program(fn_or_module)
    if hasattr(fn_or_module, "lower"):
        return fn_or_module.lower(*example_args).module
    if callable(fn_or_module):
        from ..frontend.jit import jit
        return jit(fn_or_module).lower(*example_args).module
    raise AotError(f"cannot compile a {type(fn_or_module).__name__}: give an HloModule, HLO text or a function")


def compile(fn_or_module, *example_args, name: str, out_dir, shared: bool = False,
            target_cpu: str | None = None, features: str | None = None, threads: int | None = None,
            source: str = "") -> AotResult:
    """Write out_dir/NAME.h and out_dir/NAME.o (and out_dir/libNAME.so when `shared`, linked
    with cc). target_cpu: an LLVM CPU name, `generic` (baseline x86-64) or None (the host);
    features: LLVM's feature string (default: the CPU's); threads: the thread count kernels
    are cut for (default: this machine's; the object's pool may run another)."""
    check_name(name)
    folder = check_out_dir(out_dir)
    cc = None
    if shared:
        cc = os.environ.get("CC") or shutil.which("cc")
        if not cc:
            raise AotError("--shared links with cc, which is not on PATH (set CC)")
    module = to_module(fn_or_module, example_args)
    code = emit_object(module, name, target_cpu, features, threads)
    folder.mkdir(parents=True, exist_ok=True)
    header = folder / f"{name}.h"
    obj = folder / f"{name}.o"
    header.write_text(header_text(code, source or module.name))
    obj.write_bytes(code.object)
    library = None
    if shared:
        library = folder / f"lib{name}.so"
        done = subprocess.run([cc, "-shared", "-o", str(library), str(obj), "-lm", "-lpthread"],
                              capture_output=True, text=True)
        if done.returncode:
            raise AotError(f"linking {library} failed: {done.stderr.strip()}")
    return AotResult(header, obj, library, code)
