"""Backends turn a verified HloModule into an executable.

Every backend has `compile(module) -> Executable`; an executable is called with the ENTRY
parameters in parameter-number order and returns the ROOT value (an array, or a tuple).
`run_flat` returns the result flattened into a list of arrays (tuples depth first).
"""
from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..compiler import CompiledModule
    from ..hlo.module import HloModule


class Executable(Protocol):
    """A compiled program: `run_flat` checks the arguments (the ENTRY parameters in
    parameter-number order) and returns the ROOT value flattened into arrays."""

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]: ...

    def prepare_argument(self, number: int, array: np.ndarray) -> Any: ...

    def run_unchecked(self, arrays: Sequence[Any]) -> list[np.ndarray]: ...


class Backend(Protocol):
    """What jit and the command line compile with. `compiled` is the compiler driver's
    result when the caller ran it already; `constant_parameters` are parameters whose
    argument is the same array on every call (a model's weights)."""
    name: str

    def prepare(self, module: HloModule) -> None:
        """Rewrite `module` in place, before the compiler driver, into what this backend
        emits (the CPU backend expands opcodes defined by an expansion). A caller that runs
        the driver itself (jit) calls this first."""

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = ()) -> Executable: ...

# name -> (module, the name of the backend object in it)
_BACKEND_MODULES = {
    "interpreter": ("pyxla.backends.interpreter", "BACKEND"),
    "cpu": ("pyxla.backends.cpu", "BACKEND"),
    "gpu": ("pyxla.backends.gpu", "BACKEND"),
    "gpu-sim": ("pyxla.backends.gpu", "SIM_BACKEND"),
}


def available_backends() -> list[str]:
    return sorted(_BACKEND_MODULES)


def get_backend(name: str) -> Backend:
    try:
        module, attribute = _BACKEND_MODULES[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; available: {', '.join(available_backends())}") from None
    return getattr(import_module(module), attribute)
