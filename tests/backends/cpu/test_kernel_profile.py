"""PYXLA_PROFILE: per-kernel counters emitted into the program (runtime/kernel_profile.py). The
program must compute what it computes without them, and every count must match the calls
that ran."""
import os
import subprocess
import sys

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu.runtime import kernel_profile
from pyxla.hlo import parse_module

# A dot, a fusion after it, and a loop whose body runs a kernel `trips` times per call.
MODULE = """
HloModule profiled

body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  half = f32[] constant(0.5)
  halves = f32[64] broadcast(half), dimensions={}
  i1 = s32[] add(i, one)
  v1 = f32[64] multiply(v, halves)
  ROOT next = (s32[], f32[64]) tuple(i1, v1)
}

cond {
  cs = (s32[], f32[64]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(5)
  ROOT more = pred[] compare(ci, n), direction=LT
}

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT xy = f32[] add(x, y)
}

ENTRY e {
  a = f32[32,48] parameter(0)
  b = f32[48,64] parameter(1)
  d = f32[32,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[32,64] tanh(d)
  zero = f32[] constant(0)
  row = f32[64] reduce(t, zero), dimensions={0}, to_apply=sum
  start = s32[] constant(0)
  init = (s32[], f32[64]) tuple(start, row)
  loop = (s32[], f32[64]) while(init), condition=cond, body=body
  ROOT out = f32[64] get-tuple-element(loop), index=1
}

"""
TRIPS = 5


def reference(a, b):
    return np.tanh(a.astype(np.float64) @ b.astype(np.float64)).sum(0) * 0.5 ** TRIPS


def compile_profiled(monkeypatch, enabled=True):
    monkeypatch.setenv(kernel_profile.ENVIRONMENT_VARIABLE, "1" if enabled else "0")
    return get_backend("cpu").compile(parse_module(MODULE))


def test_counts_match_the_calls_and_results_are_unchanged(monkeypatch, rng):
    exe = compile_profiled(monkeypatch)
    calls = 3
    for _ in range(calls):
        a = rng.standard_normal((32, 48)).astype(np.float32)
        b = rng.standard_normal((48, 64)).astype(np.float32)
        np.testing.assert_allclose(exe.run_flat([a, b])[0], reference(a, b), rtol=2e-5, atol=2e-5)
    rows = exe.profile.rows()
    whole = next(r for r in rows if r["name"] == kernel_profile.WHOLE_CALL)
    kernels = [r for r in rows if r is not whole]
    assert whole["calls"] == calls and whole["seconds"] > 0
    assert kernels, "no kernel was timed"
    # every kernel ran once per call, once per trip of the loop (body) or per test of it (condition)
    assert {r["calls"] for r in kernels} <= {calls, calls * TRIPS, calls * (TRIPS + 1)}
    assert any(r["calls"] == calls * TRIPS for r in kernels), "the loop body's kernel was not counted per trip"
    assert all(0 < r["seconds"] <= whole["seconds"] for r in kernels)
    dot = next(r for r in kernels if r["flops"] >= 2 * 32 * 48 * 64 * calls)
    assert dot["flops"] % (2 * 32 * 48 * 64) == 0


def test_reset_and_report(monkeypatch, rng):
    exe = compile_profiled(monkeypatch)
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    exe.run_flat([a, b])
    text = kernel_profile.report()
    assert "pyxla profile of profiled" in text and "GFLOP/s" in text
    exe.profile.reset()
    assert all(r["calls"] == 0 for r in exe.profile.rows())
    exe.run_flat([a, b])
    assert next(r for r in exe.profile.rows() if r["name"] == kernel_profile.WHOLE_CALL)["calls"] == 1


@pytest.mark.parametrize("value", ["0", ""])
def test_off_unless_asked(monkeypatch, value, rng):
    monkeypatch.setenv(kernel_profile.ENVIRONMENT_VARIABLE, value)
    exe = get_backend("cpu").compile(parse_module(MODULE))
    assert exe.profile is None
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    np.testing.assert_allclose(exe.run_flat([a, b])[0], reference(a, b), rtol=2e-5, atol=2e-5)


DROPPED_EXECUTABLES = """
import gc
import numpy as np
import pyxla

x = np.arange(4096, dtype=np.float32)
for scale in (2.0, 3.0, 4.0):
    f = pyxla.jit(lambda a, s=scale: np.float32(s) * pyxla.numpy.tanh(a) + a)
    f(x)
    del f                 # the executable, and the engine holding its counters, dropped
    gc.collect()
print("done")
"""


def test_report_at_exit_reads_counters_of_dropped_executables(tmp_path):
    """The report printed at exit reads every profiled program's counters; an executable
    dropped before (its machine code freed with it) must not take them along."""
    env = {**os.environ, "PYXLA_PROFILE": "1", "PYXLA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", DROPPED_EXECUTABLES], capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "done" in run.stdout
    assert run.stderr.count("pyxla profile of") == 3, run.stderr[-2000:]
