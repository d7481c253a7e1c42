"""Run every workload on ONE framework, in this process, and write a JSON of the timings.

    python -m benchmarks.runner --framework pyxla --out results/pyxla.json [--scale 1.0]

For each workload: the first call (trace + compile + run) and then steady-state calls until
a time budget or repeat count is reached; the median and the interquartile spread are
reported, with the largest error against the float64 NumPy reference (a workload returning
several arrays, such as a loss and its gradients, has each checked). A framework that
cannot run a workload records why, and the suite goes on; one without a builder for a
workload records it as unsupported.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import time
import traceback

import numpy as np

from .workloads import WORKLOADS


def blas_info() -> list[dict]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"note": "threadpoolctl is not installed"}]
    return [{k: v for k, v in info.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for info in threadpool_info()]


def _parts(out) -> list[np.ndarray]:
    """A result as a list of arrays: a tuple or list gives one per element."""
    return [np.asarray(o) for o in out] if isinstance(out, (tuple, list)) else [np.asarray(out)]


def check(out, want, rtol: float) -> tuple[float, bool]:
    """The largest absolute error over every part, and whether every part is within `rtol`
    (atol: rtol times that part's largest magnitude)."""
    outs, wants = _parts(out), _parts(want)
    if len(outs) != len(wants):
        return float("inf"), False
    error, correct = 0.0, True
    for o, w in zip(outs, wants):
        if o.shape != w.shape:
            return float("inf"), False
        if w.size:
            error = max(error, float(np.max(np.abs(o.astype(np.float64) - w))))
            correct = correct and bool(np.allclose(o, w, rtol=rtol, atol=rtol * np.abs(w).max()))
    return error, correct


def measure(run, min_repeats: int, budget: float) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < min_repeats or (time.perf_counter() < deadline and len(times) < 1000):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def run_framework(name: str, scale: float, budget: float, only: list[str] | None) -> dict:
    module = importlib.import_module(f"benchmarks.frameworks.{name}_impl")
    results = {"framework": name, "scale": scale, "results": {}}
    try:
        results["version"] = module.version()
    except Exception as e:
        results["version"] = None
        results["unavailable"] = f"{type(e).__name__}: {e}"
        return results
    for w in WORKLOADS:
        if only and w.name not in only:
            continue
        if w.name not in module.BUILDERS:
            results["results"][w.name] = {"unsupported": f"{name} has no {w.name} workload"}
            continue
        rng = np.random.default_rng(20261122)   # the same inputs in every framework's process
        inputs = w.make_inputs(rng, scale)
        entry: dict = {}
        try:
            start = time.perf_counter()
            run = module.BUILDERS[w.name](inputs)
            out = _parts(run())
            entry["first_call_s"] = time.perf_counter() - start
            want = w.reference(*(a.astype(np.float64) for a in inputs))
            entry["max_abs_error"], entry["correct"] = check(out, want, w.rtol)
            times = measure(run, 5 if w.name != "dispatch" else 200, budget)
            entry["median_s"] = float(np.median(times))
            q1, q3 = np.percentile(times, [25, 75])
            entry["iqr_s"] = float(q3 - q1)
            entry["repeats"] = len(times)
            if w.min_bytes:
                entry["gb_per_s"] = w.min_bytes(inputs) / entry["median_s"] / 1e9
            if w.flops:
                entry["gflops"] = w.flops(inputs) / entry["median_s"] / 1e9
        except Exception as e:
            entry = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                     "trace": traceback.format_exc(limit=3)}
        results["results"][w.name] = entry
    results["blas"] = blas_info()
    results["load_average"] = os.getloadavg()
    results["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of steady-state calls per workload")
    parser.add_argument("--only", nargs="*")
    ns = parser.parse_args(argv)
    result = run_framework(ns.framework, ns.scale, ns.budget, ns.only)
    with open(ns.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
