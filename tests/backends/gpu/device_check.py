"""The GPU backend's check on a machine with an NVIDIA GPU, in one run of a few minutes:

    python -m tests.backends.gpu.device_check [--quick] [--no-corpus] [--no-workloads]
                                              [--budget SECONDS]

1. The conformance corpus (both levels of every case) through `--backend gpu`: each case
   compiled to PTX, loaded by the driver, run, and compared with XLA's outputs; a refused
   case is counted with the op it names. Prints every failure and the counts.
2. A few benchmark workloads (benchmarks/workloads.py) through pyxla's `gpu` backend and
   JAX's jit on the same GPU, each checked against the float64 reference and timed (median
   of repetitions after a warm-up; pyxla's time includes copying NumPy arrays to the device
   and back, JAX's is on device arrays). Prints a table.

Without a CUDA driver (or without cuda-bindings) it stops at once with a message saying
what is missing and exits with status 2. `--budget` (default 480 s) bounds the whole run:
what does not fit is reported as skipped.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

WORKLOADS = ("sum_fma", "gelu", "softmax", "layer_norm", "mlp", "attention")
NO_DEVICE = 2


def open_device():
    """The CUDA device, or a GpuError saying what is missing."""
    from pyxla.backends.gpu.device import device
    return device()


def check_corpus(deadline: float) -> tuple[int, int, int, list[str]]:
    """(passed, failed, refused, messages) of the corpus through the gpu backend."""
    from pyxla.backends import get_backend
    from pyxla.backends.gpu import GpuUnsupported
    from pyxla.conformance import corpus_case_dirs, load_case, run_case
    from pyxla.hlo import parse_module

    backend = get_backend("gpu")
    passed = failed = refused = 0
    messages = []
    for case_dir in corpus_case_dirs():
        case = load_case(case_dir)
        for level in ("module", "optimized"):
            if time.perf_counter() > deadline:
                messages.append(f"out of time before {case.name} ({level})")
                return passed, failed, refused, messages
            try:
                problems = run_case(case, level,
                                    lambda text, inputs: backend.compile(parse_module(text)).run_flat(inputs))
            except GpuUnsupported as e:
                refused += 1
                messages.append(f"refused {case.name} ({level}): {e}")
                continue
            except Exception as e:   # a failure on the device is reported, and the run goes on
                failed += 1
                messages.append(f"FAILED {case.name} ({level}): {type(e).__name__}: {e}")
                continue
            if problems:
                failed += 1
                messages.append(f"FAILED {case.name} ({level}): " + "; ".join(problems))
            else:
                passed += 1
    return passed, failed, refused, messages


def _median_ms(run, repetitions: int = 5) -> float:
    run()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _matches(got, want, rtol: float) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return all(np.allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=rtol) for g, w in zip(got, want))


def time_workloads(scale: float, deadline: float) -> list[tuple[str, str, str, str]]:
    """Rows (workload, pyxla gpu ms, JAX ms, correct) for the workloads that fit the time."""
    import pyxla
    from benchmarks.frameworks import jax_impl, pyxla_impl
    from benchmarks.workloads import BY_NAME

    rows = []
    rng = np.random.default_rng(0)
    for name in WORKLOADS:
        if time.perf_counter() > deadline:
            rows.append((name, "skipped (time)", "", ""))
            continue
        w = BY_NAME[name]
        ins = w.make_inputs(rng, scale)
        want = w.reference(*[a.astype(np.float64) for a in ins])
        try:
            f = pyxla.jit(pyxla_impl.FUNCTIONS[name], backend="gpu")
            ok = _matches(f(*ins), want, w.rtol)
            ours = f"{_median_ms(lambda: f(*ins)):.3f}"
        except Exception as e:   # reported in the table; the other workloads still run
            ours, ok = f"error: {type(e).__name__}: {str(e)[:60]}", False
        try:
            theirs = f"{_median_ms(jax_impl.BUILDERS[name](ins)):.3f}"
        except Exception as e:
            theirs = f"error: {type(e).__name__}: {str(e)[:60]}"
        rows.append((name, ours, theirs, "yes" if ok else "NO"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="workloads at a quarter of their size")
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--no-workloads", action="store_true")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    from pyxla.backends.gpu.device import GpuError
    try:
        dev = open_device()
    except GpuError as e:
        print(f"device_check: no usable GPU: {e}", file=sys.stderr)
        return NO_DEVICE
    print(f"device: {dev.name}")
    status = 0
    if not args.no_corpus:
        passed, failed, refused, messages = check_corpus(start + 0.6 * args.budget)
        for m in messages:
            print(m)
        print(f"corpus through gpu: {passed} passed, {failed} failed, {refused} refused "
              f"({time.perf_counter() - start:.1f} s)")
        status = 1 if failed else 0
    if not args.no_workloads:
        rows = time_workloads(0.25 if args.quick else 1.0, start + args.budget)
        print("| workload | pyxla gpu (ms, with host copies) | JAX (ms, device arrays) | pyxla correct |")
        print("|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        if any(r[3] == "NO" for r in rows):
            status = 1
    print(f"total {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
