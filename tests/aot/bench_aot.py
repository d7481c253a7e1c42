"""The benchmarks' MLP and CNN block compiled ahead of time and called from C in a loop,
against the same programs through pyxla.jit, on this machine (not a test: run it).

    .venv/bin/python -m tests.aot.bench_aot [--scale 1.0] [--calls 30]

Prints the median milliseconds per call of each (the best of --rounds alternating runs); the
C side times NAME_run alone (clock_gettime around each call, the caller's temp), the JIT side
the Python call.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import pyxla
from benchmarks.frameworks.pyxla_impl import FUNCTIONS
from benchmarks.workloads import WORKLOADS

from .harness import build, link_driver, run_driver, write_inputs


def jit_ms(fn, args, calls: int) -> float:
    f = pyxla.jit(fn)
    for _ in range(3):
        f(*args)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        f(*args)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="alternate C and JIT this many times; best median")
    parser.add_argument("--only", nargs="*", default=["mlp", "cnn_block"])
    ns = parser.parse_args()
    workloads = {w.name: w for w in WORKLOADS}
    for name in ns.only:
        args = workloads[name].make_inputs(np.random.default_rng(0), ns.scale)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            start = time.perf_counter()
            prog = build(pyxla.jit(FUNCTIONS[name]), folder, *args, name=name)
            built = time.perf_counter() - start
            exe = link_driver(prog)
            write_inputs(folder, prog, args)
            aot, jit = float("inf"), float("inf")
            for _ in range(ns.rounds):   # alternated, so that a spell of load elsewhere hits both
                aot = min(aot, float(run_driver(exe, folder, "bench", str(ns.calls), timeout=600)))
                jit = min(jit, jit_ms(FUNCTIONS[name], args, ns.calls))
        print(f"{name:10s} AOT from C {aot:8.3f} ms   pyxla.jit {jit:8.3f} ms   AOT/JIT {aot / jit:5.2f}   "
              f"(object built in {built:.1f} s)")


if __name__ == "__main__":
    main()
