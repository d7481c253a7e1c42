"""The process's worker pool as Python holds it: how many threads kernels are split over,
and the one started pool. parallel.py emits the pool's code (and the kernels' calls into it)
and starts it from there; a process loading cached code without LLVM starts it from the
cached object (cached_executable.py). Whichever starts it first, both use that one pool.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from dataclasses import dataclass

MAX_THREADS = 256

# the pool's entry points (parallel.py's module defines them)
PARALLEL_FOR = "pyxla_parallel_for"
YIELD_CORES = "pyxla_pool_yield_cores"
START = "pyxla_pool_start"
STOP = "pyxla_pool_stop"
RESET = "pyxla_pool_reset"
SHARE_OPENMP = "pyxla_pool_share_openmp"
POOL_FUNCTIONS = (PARALLEL_FOR, YIELD_CORES, START, STOP, RESET, SHARE_OPENMP)


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
    _share_openmp: object
    openmp: int = 0            # the GOMP_parallel jobs go to, 0 when the pool's own threads run them
    forked: bool = False       # a forked child's pool, which never hands jobs to OpenMP

    def restart_after_fork(self) -> None:
        self._reset()          # (which forgets OpenMP too: its threads are not in the child)
        self.openmp, self.forked = 0, True
        self._start(self.threads - 1)

    def share_openmp(self, gomp_parallel: int) -> None:
        """Hand jobs to the OpenMP runtime whose GOMP_parallel is at this address (0: back to
        the pool's own threads)."""
        self._share_openmp(gomp_parallel, self.threads)
        self.openmp = gomp_parallel

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
            share = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_int32)(addresses[SHARE_OPENMP])
            started = start_fn(threads - 1)
            pool = WorkerPool(started + 1, addresses[PARALLEL_FOR], addresses[YIELD_CORES], stop, start_fn, reset,
                              share)
            share_loaded_openmp(pool)
            atexit.register(pool.stop)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=pool.restart_after_fork)
            _pool = pool
    return _pool


def share_loaded_openmp(pool: WorkerPool | None = None) -> bool:
    """Hand the pool's jobs to the GNU OpenMP runtime when another library (torch) has loaded
    one into this process, unless PYXLA_SHARE_OPENMP=0; whether jobs go to OpenMP now.

    Why: that library's OpenMP workers busy-wait for milliseconds after each of its parallel
    regions, taking cores from the pool's threads (a torch training step's eager loss ops
    between pyxla's forward and backward graphs); a job handed to OpenMP runs on those very
    workers, which are awake already. Called when the pool starts and when an executable
    runs after modules were imported (torch may come after the pool started). Never in a
    forked child: GNU OpenMP's threads do not survive a fork, and its runtime does not
    notice."""
    pool = pool or _pool
    if pool is None or pool.openmp or pool.forked:
        return bool(pool and pool.openmp)
    if os.environ.get("PYXLA_SHARE_OPENMP", "").strip() == "0":
        return False
    from .openmp import loaded_gomp_parallel
    address = loaded_gomp_parallel()
    if address:
        pool.share_openmp(address)
    return bool(address)


modules_seen = 0   # len(sys.modules) when look_for_openmp last looked


def look_for_openmp() -> None:
    """share_loaded_openmp, for an executable's call that saw modules imported since the
    last look (a cheap sign that a library, torch, may have loaded OpenMP)."""
    global modules_seen
    modules_seen = len(sys.modules)
    share_loaded_openmp()

