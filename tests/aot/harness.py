"""Building and running AOT objects from the tests: a C driver (driver.c) linked with cc
against the object, run in a subprocess with no Python in it, arrays passed as raw files
in the parameters' and results' layouts."""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import pyxla.aot
from pyxla.backends.cpu.runtime.executable import from_physical, to_physical
from pyxla.hlo import parse_module

CC = shutil.which("cc")
CXX = shutil.which("c++")
NM = shutil.which("nm")
needs_cc = pytest.mark.skipif(CC is None or NM is None,
                              reason="cc and nm are not on PATH: the AOT tests link and inspect C programs")
DRIVER = Path(__file__).with_name("driver.c")


@dataclass
class Program:
    """An AOT build as its header describes it."""
    name: str
    header: Path
    object: Path
    arg_shapes: list
    result_shapes: list

    @classmethod
    def read(cls, folder: Path, name: str) -> Program:
        header = folder / f"{name}.h"
        text = header.read_text()
        shapes = {kind: [_shape(m) for m in re.findall(rf"^ \*   {kind} \d+: (\S+)", text, re.MULTILINE)]
                  for kind in ("arg", "result")}
        counts = [int(re.search(rf"#define {name}_NUM_{what}\s+(\d+)", text).group(1)) for what in ("ARGS", "RESULTS")]
        assert counts == [len(shapes["arg"]), len(shapes["result"])], "the header's counts and shapes disagree"
        return cls(name, header, folder / f"{name}.o", shapes["arg"], shapes["result"])


def _shape(text: str):
    return parse_module(f"HloModule m\nENTRY e {{\n  ROOT p = {text} parameter(0)\n}}\n").entry.root.shape


def build(program, folder: Path, *example_args, name: str = "prog", **options) -> Program:
    pyxla.aot.compile(program, *example_args, name=name, out_dir=folder, **options)
    return Program.read(folder, name)


@functools.cache
def _driver_object(name: str) -> Path:
    """driver.c compiled once per program name in this process."""
    folder = Path(tempfile.mkdtemp(prefix="pyxla-aot-driver-"))
    obj = folder / f"driver_{name}.o"
    done = subprocess.run([CC, "-c", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", f"-DPROG={name}", str(DRIVER),
                           "-o", str(obj)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return obj


def link_driver(prog: Program) -> Path:
    exe = prog.object.parent / f"{prog.name}_driver"
    done = subprocess.run([CC, str(_driver_object(prog.name)), str(prog.object), "-lm", "-lpthread", "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return exe


def write_inputs(folder: Path, prog: Program, arrays) -> None:
    assert len(arrays) == len(prog.arg_shapes)
    for i, (a, shape) in enumerate(zip(arrays, prog.arg_shapes)):
        raw = to_physical(np.asarray(a).astype(shape.dtype.np_dtype, copy=False), shape).tobytes()
        assert len(raw) == shape.byte_size
        (folder / f"arg{i}.bin").write_bytes(raw)


def read_results(folder: Path, prog: Program) -> list[np.ndarray]:
    out = []
    for j, shape in enumerate(prog.result_shapes):
        raw = np.frombuffer((folder / f"result{j}.bin").read_bytes(), np.uint8).copy()
        out.append(from_physical(raw, shape))
    return out


def run_driver(exe: Path, folder: Path, mode: str = "run", *extra: str, timeout: float = 120) -> str:
    prog = Program.read(folder, exe.name.removesuffix("_driver"))
    counts = [str(len(prog.arg_shapes)), str(len(prog.result_shapes))]
    done = subprocess.run([str(exe), mode, str(folder), *counts, *extra], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{exe.name} {mode}: exit {done.returncode}: {done.stderr}"
    return done.stdout


def run_program(program, folder: Path, arrays, *example_args, **options):
    """Compile, link, run once from C; (results, the program, the driver)."""
    prog = build(program, folder, *example_args, **options)
    exe = link_driver(prog)
    write_inputs(folder, prog, arrays)
    run_driver(exe, folder)
    return read_results(folder, prog), prog, exe


@functools.cache
def system_symbols() -> frozenset[str]:
    """The dynamic symbols that libc, libm and libpthread define on this machine."""
    names: set[str] = set()
    for lib in ("libc.so.6", "libm.so.6", "libpthread.so.0"):
        path = subprocess.run([CC, f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
        if not Path(path).is_file():
            continue
        listing = subprocess.run([NM, "-D", "--defined-only", path], capture_output=True, text=True).stdout
        names.update(re.sub(r"@.*", "", line.split()[-1]) for line in listing.splitlines() if line.strip())
    assert "memcpy" in names and "pthread_create" in names, "libc's symbols were not found"
    return frozenset(names)


def undefined_symbols(obj: Path) -> set[str]:
    listing = subprocess.run([NM, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


def foreign_symbols(obj: Path) -> set[str]:
    """Undefined symbols of `obj` that libc, libm and pthreads do not define."""
    return undefined_symbols(obj) - system_symbols()
