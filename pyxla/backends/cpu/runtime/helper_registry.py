"""The runtime's helpers loaded in this process (the worker pool, the GEMM and GEMV kernels,
the call shim): each function's address, and the on-disk cache entry its code came from.

LlvmJit.compile_helper records every helper it loads. The executable cache writes, beside
an executable's code, the entries of the helpers that code calls, so a later process can
load them straight from the cache without LLVM (cached_executable.py); what it loads so is
recorded here too, and whichever loads a helper first, the other finds it.
"""
from __future__ import annotations

ADDRESSES: dict[str, int] = {}                      # function -> its address in this process
ENTRIES: dict[str, tuple[str, str, tuple[str, ...]]] = {}   # function -> (kind, key, the entry's functions)
_kept: list = []                                     # the loaded code, alive for the process's life


def record(kind: str, key: str, addresses: dict[str, int], code) -> None:
    """Helper code of cache entry (kind, key), loaded: `addresses` by function."""
    functions = tuple(addresses)
    for name, address in addresses.items():
        ADDRESSES.setdefault(name, address)
        ENTRIES.setdefault(name, (kind, key, functions))
    _kept.append(code)


def entries_for(functions) -> dict[str, list] | None:
    """{function: [kind, key, [the entry's functions]]} for `functions`; None when one of
    them was not loaded from a cache entry in this process."""
    out = {}
    for name in functions:
        entry = ENTRIES.get(name)
        if entry is None:
            return None
        out[name] = [entry[0], entry[1], list(entry[2])]
    return out
