"""The GNU OpenMP runtime (libgomp) another library loaded into this process, if any: torch's
wheels bring one. pool_threads.share_loaded_openmp hands the worker pool's jobs to it."""
from __future__ import annotations

import ctypes
import os


def loaded_libgomp_paths() -> list[str]:
    """The files of every libgomp mapped into this process (none on systems without /proc)."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(None, 5) for line in maps if "libgomp" in line]
    except OSError:
        return []
    return sorted({f[5].strip() for f in fields if len(f) == 6 and "libgomp" in os.path.basename(f[5])})


def loaded_gomp_parallel() -> int:
    """The address of GOMP_parallel in a libgomp this process has already loaded; 0 when none
    (nothing is loaded to find out: RTLD_NOLOAD)."""
    for path in loaded_libgomp_paths():
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            return ctypes.cast(library.GOMP_parallel, ctypes.c_void_p).value or 0
        except (OSError, AttributeError):
            continue
    return 0
