"""The native CPU backend: LLVM IR through llvmlite, JIT-compiled for the host.

compile(module) runs the compiler driver (passes, fusion, schedule, buffer assignment),
emits one LLVM module (codegen.py), optimises it at O3 with the vectorisers and returns an
executable whose call is one foreign call. An instruction it cannot emit is refused at
compile time with NotImplementedError naming the opcode and its source location.
With PYXLA_DUMP=DIR the LLVM IR before and after optimisation and the assembly are written
next to the module dumps.
"""
from __future__ import annotations

from typing import Any

# The backend object is imported on first use: a process that loads a cached program (the
# ONNX load index, runtime/executable_cache.py) needs the runtime, not the code generator.
_LAZY = {"CpuBackend", "BACKEND"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import backend
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
