"""The worker pool handing its jobs to a GNU OpenMP runtime already in the process
(runtime/openmp.py, pool_threads.share_loaded_openmp, parallel.py's `openmp_team`): every
task runs once, on as many team threads as the pool has, with the caller's MXCSR; results
are bit for bit those of the pool's own threads; torch's libgomp is found and used when
torch is loaded, not with PYXLA_SHARE_OPENMP=0, and never in a forked child."""
import ctypes
import os
import queue
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import nn
from pyxla.backends.cpu import codegen

from .differential import assert_concurrent_calls_correct, assert_subnormal_products_flushed

TEAM_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
GOMP_PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)


@pytest.fixture
def stand_in_openmp(pool, monkeypatch):
    """A GOMP_parallel of Python threads: runs the team function on `num_threads` threads
    started before any kernel ran (so with the default MXCSR, as OpenMP's own are), released
    together and not on the caller (so every task runs on a thread that is not the caller's),
    recording each call and whether each thread kept subnormals after it."""
    monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
    monkeypatch.setattr(codegen, "TASK_MIN_WORK", 16)
    calls, jobs, done, kept = [], [queue.Queue() for _ in range(pool.threads)], queue.Queue(), []

    def member(inbox):
        while (job := inbox.get()) is not None:
            job[0](job[1])
            done.put(np.float32(1e-20) * np.float32(1e-20) != 0)   # its own MXCSR back: no flushing
    members = [threading.Thread(target=member, args=(inbox,), daemon=True) for inbox in jobs]
    for thread in members:
        thread.start()

    inside, overlaps = [0], []

    def gomp_parallel(fn, data, num_threads, flags):
        calls.append((num_threads, flags))
        inside[0] += 1
        overlaps.append(inside[0])
        team = TEAM_FUNCTION(fn)
        for inbox in jobs[:num_threads]:
            inbox.put((team, data))
        kept.extend(done.get() for _ in range(min(num_threads, len(jobs))))
        inside[0] -= 1

    callback = GOMP_PARALLEL(gomp_parallel)
    pool.share_openmp(ctypes.cast(callback, ctypes.c_void_p).value)
    yield calls
    assert kept and all(kept)
    assert max(overlaps) == 1   # one caller at a time hands its job to OpenMP
    pool.share_openmp(0)
    for inbox in jobs:
        inbox.put(None)
    for thread in members:
        thread.join()


def _layer(x, w, b):
    h = nn.gelu(x @ w + b, approximate=True)
    return h, nn.softmax(h, axis=-1), pnp.sum(h * h)


def test_jobs_run_on_the_openmp_team_bit_for_bit(rng, pool, stand_in_openmp, monkeypatch):
    """A GEMM with its epilogue, a row softmax and a sum split in parts: the same bits on the
    team as on the pool's own threads, and the team called with the pool's thread count."""
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    x = rng.standard_normal((256, 384)).astype(np.float32)
    w = (rng.standard_normal((384, 512)) / 20).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    f = pyxla.jit(_layer, backend="cpu")
    on_team = [np.asarray(r) for r in f(x, w, b)]
    assert stand_in_openmp and all(call == (pool.threads, 0) for call in stand_in_openmp)
    pool.share_openmp(0)
    calls = len(stand_in_openmp)
    own = [np.asarray(r) for r in f(x, w, b)]
    assert len(stand_in_openmp) == calls
    for got, want in zip(on_team, own):
        np.testing.assert_array_equal(got, want)
    h = x.astype(np.float64) @ w + b
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(on_team[0], h, rtol=1e-4, atol=1e-4)


def test_team_threads_take_the_callers_mxcsr(rng, stand_in_openmp):
    """The team's threads are OpenMP's (here Python's, which do not flush subnormals): a
    product that underflows is still flushed to zero in every chunk, as a serial run does,
    and each thread gets its own MXCSR back afterwards (the fixture checks)."""
    assert_subnormal_products_flushed(rng)
    assert stand_in_openmp


def test_one_caller_at_a_time_uses_openmp(rng, stand_in_openmp):
    """Python threads calling at once: one hands its job to OpenMP (OpenMP would give each
    calling thread a team of its own), the others run their tasks serially; all correct."""
    assert_concurrent_calls_correct(rng, 200_003)
    assert stand_in_openmp


def _run(script: str, **env) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


SCRIPT = """
    import multiprocessing, numpy as np, pyxla, pyxla.numpy as pnp
    from pyxla.backends.cpu.runtime import openmp, pool_threads
    rng = np.random.default_rng({seed})
    x = rng.standard_normal((512, 512)).astype(np.float32)
    f = pyxla.jit(lambda a: pnp.tanh(a @ a) + pnp.sum(a), backend="cpu")
    before = np.asarray(f(x))   # the pool started before torch (and its libgomp) came
    pool = pool_threads.current()
    print("before torch", pool.openmp, openmp.loaded_gomp_parallel())
    import torch
    torch.ones(4) + 1
    got = np.asarray(f(x))
    print("threads", pool.threads, "openmp", pool.openmp == openmp.loaded_gomp_parallel() != 0)
    print("same bits as before", np.array_equal(got, before))
    pool.share_openmp(0)
    print("same bits", np.array_equal(np.asarray(f(x)), got))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, np.tanh(x64 @ x64) + x64.sum(), rtol=1e-4, atol=1e-3)
    pool_threads.share_loaded_openmp()

    def child(queue):
        queue.put((pool_threads.share_loaded_openmp(), np.array_equal(np.asarray(f(x)), got)))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print("child (openmp, same bits)", queue.get(timeout=120))
    process.join(timeout=60)
"""


def test_torchs_libgomp_runs_the_jobs(rng):
    pytest.importorskip("torch")
    out = _run(SCRIPT.format(seed=int(rng.integers(2 ** 31))), PYXLA_NUM_THREADS="2")
    assert "before torch 0 0" in out
    assert "threads 2 openmp True" in out
    assert "same bits as before True" in out and "same bits True" in out
    assert "child (openmp, same bits) (False, True)" in out


def test_sharing_turned_off_by_the_environment(rng):
    pytest.importorskip("torch")
    out = _run(SCRIPT.format(seed=int(rng.integers(2 ** 31))), PYXLA_NUM_THREADS="2", PYXLA_SHARE_OPENMP="0")
    assert "threads 2 openmp False" in out and "same bits True" in out and "same bits as before True" in out
