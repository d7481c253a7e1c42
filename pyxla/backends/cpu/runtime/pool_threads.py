"""The process's worker pool as Python holds it: how many threads kernels are split over,
and the one started pool. parallel.py emits the pool's code (and the kernels' calls into it)
and starts it from there; a process loading cached code without LLVM starts it from the
cached object (cached_executable.py). Whichever starts it first, both use that one pool.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading
from dataclasses import dataclass

MAX_THREADS = 256

# the pool's entry points (parallel.py's module defines them)
PARALLEL_FOR = "pyxla_parallel_for"
YIELD_CORES = "pyxla_pool_yield_cores"
START = "pyxla_pool_start"
STOP = "pyxla_pool_stop"
RESET = "pyxla_pool_reset"
POOL_FUNCTIONS = (PARALLEL_FOR, YIELD_CORES, START, STOP, RESET)


def thread_count() -> int:
    """The number of threads kernels are split over: PYXLA_NUM_THREADS, or the cores this
    process may run on."""
    setting = os.environ.get("PYXLA_NUM_THREADS", "").strip()
    if setting:
        try:
            n = int(setting)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"PYXLA_NUM_THREADS must be a positive integer, got {setting!r}")
        return min(n, MAX_THREADS)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


@dataclass
class WorkerPool:
    threads: int               # the caller and the workers
    parallel_for: int          # addresses of the entry points
    yield_cores: int
    _stop: object
    _start: object
    _reset: object

    def restart_after_fork(self) -> None:
        self._reset()
        self._start(self.threads - 1)

    def stop(self) -> None:
        self._stop()


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def current() -> WorkerPool | None:
    """The pool, if one was started in this process."""
    return _pool


def start(addresses: dict[str, int], threads: int) -> WorkerPool:
    """Start the pool whose code is loaded at `addresses` (POOL_FUNCTIONS) with `threads`
    threads; the pool already started, if another caller was first."""
    global _pool
    with _pool_lock:
        if _pool is None:
            start_fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(addresses[START])
            stop = ctypes.CFUNCTYPE(None)(addresses[STOP])
            reset = ctypes.CFUNCTYPE(None)(addresses[RESET])
            started = start_fn(threads - 1)
            pool = WorkerPool(started + 1, addresses[PARALLEL_FOR], addresses[YIELD_CORES], stop, start_fn, reset)
            atexit.register(pool.stop)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=pool.restart_after_fork)
            _pool = pool
    return _pool
