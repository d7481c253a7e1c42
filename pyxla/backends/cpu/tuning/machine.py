"""The identity of this machine, which a tuning database belongs to: a winner measured on one
CPU says nothing about another, so the database's key and contents name the CPU model, the
features LLVM compiles for, the cores this process may use and the cache sizes."""
from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from ..runtime.llvm_jit import host_jit
from ..runtime.parallel import thread_count

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@cache
def cache_sizes() -> dict[str, int]:
    """Bytes of each data or unified cache of the first core, by name ("L1", "L2", "L3");
    empty where the system does not say (the cost model then keeps its measured tables)."""
    sizes: dict[str, int] = {}
    try:
        for index in sorted(SYSFS_CACHE.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            sizes[f"L{level}"] = _size((index / "size").read_text().strip())
    except (OSError, ValueError):
        return {}
    return sizes


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def identity() -> dict:
    """What the tuning database of this machine is keyed by (all JSON values)."""
    jit = host_jit()
    return {"cpu_model": cpu_model(), "llvm_cpu": jit.cpu, "features": jit.features,
            "vector_bytes": jit.vector_bytes, "threads": thread_count(), "cores": os.cpu_count() or 1,
            "caches": cache_sizes()}
