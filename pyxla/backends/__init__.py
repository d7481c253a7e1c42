"""Backends turn a verified HloModule into an executable.

Every backend has `compile(module) -> Executable`; an executable is called with the ENTRY
parameters in parameter-number order and returns the ROOT value (an array, or a tuple).
`run_flat` returns the result flattened into a list of arrays (tuples depth first).
"""
from __future__ import annotations

from importlib import import_module

# name -> module that defines `BACKEND`
_BACKEND_MODULES = {
    "interpreter": "pyxla.backends.interpreter",
    "cpu": "pyxla.backends.cpu",
}


def available_backends() -> list[str]:
    return sorted(_BACKEND_MODULES)


def get_backend(name: str):
    try:
        module = _BACKEND_MODULES[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; available: {', '.join(available_backends())}") from None
    return import_module(module).BACKEND
