"""The GPU backend's check on a machine with an NVIDIA GPU, in one run of a few minutes:

    python -m tests.backends.gpu.device_check [--quick] [--no-corpus] [--no-workloads]
                                              [--budget SECONDS]

1. The conformance corpus (both levels of every case) through `--backend gpu`, every
   instruction a kernel (placement "device"): each case compiled to PTX, loaded by the
   driver, run, and compared with XLA's outputs; a refused
   case is counted with the op it names. Prints every failure and the counts.
2. Device arrays and the arena (`check_device_arrays`, which gpu-sim's tests also run): a
   chain of three jitted calls on device_put arrays (results consumed on other executables'
   streams through events) against NumPy in float64, with no host copy between them; an
   executable called again allocating only its parameters and outputs; a loop whose state
   passes through the arena.
3. A few benchmark workloads (benchmarks/workloads.py) through pyxla's `gpu` backend and
   JAX's jit on the same GPU, each checked against the float64 reference and timed (median
   of repetitions after a warm-up): pyxla with NumPy arrays in and out (host copies
   included), pyxla on device arrays (inputs put once, results waited for), and JAX on
   device arrays. Prints a table.

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
                                    lambda text, inputs: backend.compile(parse_module(text), placement="device")
                                    .run_flat(inputs))
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


def check_device_arrays(backend: str = "gpu") -> list[str]:
    """Problems (empty when none) with device arrays and the arena on `backend`."""
    import pyxla
    import pyxla.numpy as pnp
    from pyxla.backends.gpu import DeviceArray, memory_for

    problems = []
    rng = np.random.default_rng(7)
    f = pyxla.jit(lambda x, w: pnp.tanh(x @ w), backend=backend)
    g = pyxla.jit(lambda h: h * 2.0 - pnp.sum(h, axis=1, keepdims=True), backend=backend)
    k = pyxla.jit(lambda h, w: pnp.exp(h @ w.T) + 1.0, backend=backend)
    x = rng.standard_normal((130, 257)).astype(np.float32)
    w = (rng.standard_normal((257, 65)) * 0.1).astype(np.float32)
    k(g(f(x, w)), w)   # compile the three
    memory = memory_for(backend)
    before = memory.counts()
    dx, dw = pyxla.device_put(x, device=backend), pyxla.device_put(w, device=backend)
    out = k(g(f(dx, dw)), dw)
    middle = memory.counts()
    if not isinstance(out, DeviceArray):
        problems.append(f"a jitted call returned {type(out).__name__}, not a DeviceArray")
    if (middle["uploads"] - before["uploads"], middle["downloads"] - before["downloads"]) != (2, 0):
        problems.append(f"the chain copied between host and device: {before} -> {middle}")
    h = np.tanh(x.astype(np.float64) @ w.astype(np.float64))
    h = h * 2.0 - h.sum(axis=1, keepdims=True)
    want = np.exp(h @ w.astype(np.float64).T) + 1.0
    if not np.allclose(np.asarray(out), want, rtol=2e-4, atol=1e-5):
        problems.append("the chain's result differs from NumPy's")

    def mlp(x, w1, w2):
        return pnp.sum(pnp.tanh(pnp.tanh(x @ w1) @ w2), axis=1)
    m = pyxla.jit(mlp, backend=backend)
    w1 = (rng.standard_normal((257, 300)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((300, 40)) * 0.1).astype(np.float32)
    m(x, w1, w2)
    for _ in range(2):
        x = rng.standard_normal((130, 257)).astype(np.float32)
        before = memory.counts()
        got = np.asarray(m(x, w1, w2))
        allocated = memory.counts()["allocations"] - before["allocations"]
        if allocated > 4:   # three parameters and one output
            problems.append(f"a call allocated {allocated} buffers (parameters and outputs: 4)")
        x64 = x.astype(np.float64)
        if not np.allclose(got, np.tanh(np.tanh(x64 @ w1) @ w2).sum(axis=1), rtol=1e-4, atol=1e-4):
            problems.append("the MLP's result differs from NumPy's")

    def loop(x):
        return pyxla.lax.fori_loop(0, 5, lambda i, v: pnp.sin(v) * 1.5 + pnp.exp(x) * 0.1, pnp.exp(x))
    lp = pyxla.jit(loop, backend=backend)
    x = rng.standard_normal(1000).astype(np.float32)
    v = np.exp(x.astype(np.float64))
    for _ in range(5):
        v = np.sin(v) * 1.5 + np.exp(x.astype(np.float64)) * 0.1
    if not np.allclose(np.asarray(lp(pyxla.device_put(x, device=backend))), v, rtol=1e-4, atol=1e-5):
        problems.append("the loop's result differs from NumPy's")
    return problems


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


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def time_workloads(scale: float, deadline: float) -> list[tuple[str, str, str, str, str]]:
    """Rows (workload, pyxla gpu ms with host copies, on device arrays, JAX ms, correct)
    for the workloads that fit the time."""
    import pyxla
    from benchmarks.frameworks import jax_impl, pyxla_impl
    from benchmarks.workloads import BY_NAME

    rows = []
    rng = np.random.default_rng(0)
    for name in WORKLOADS:
        if time.perf_counter() > deadline:
            rows.append((name, "skipped (time)", "", "", ""))
            continue
        w = BY_NAME[name]
        ins = w.make_inputs(rng, scale)
        want = w.reference(*[a.astype(np.float64) for a in ins])
        try:
            f = pyxla.jit(pyxla_impl.FUNCTIONS[name], backend="gpu")
            ok = _matches(f(*ins), want, w.rtol)
            ours = f"{_median_ms(lambda: [np.asarray(o) for o in _outputs(f(*ins))]):.3f}"
            on_device = [pyxla.device_put(a, device="gpu") for a in ins]
            resident = f"{_median_ms(lambda: [o.block_until_ready() for o in _outputs(f(*on_device))]):.3f}"
        except Exception as e:   # reported in the table; the other workloads still run
            ours, resident, ok = f"error: {type(e).__name__}: {str(e)[:60]}", "", False
        try:
            theirs = f"{_median_ms(jax_impl.BUILDERS[name](ins)):.3f}"
        except Exception as e:
            theirs = f"error: {type(e).__name__}: {str(e)[:60]}"
        rows.append((name, ours, resident, theirs, "yes" if ok else "NO"))
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
    problems = check_device_arrays("gpu")
    for p in problems:
        print(f"FAILED device arrays: {p}")
    print(f"device arrays and arena: {'ok' if not problems else f'{len(problems)} problems'}")
    status = status or (1 if problems else 0)
    if not args.no_workloads:
        rows = time_workloads(0.25 if args.quick else 1.0, start + args.budget)
        print("| workload | pyxla gpu (ms, with host copies) | pyxla gpu (ms, device arrays) "
              "| JAX (ms, device arrays) | pyxla correct |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        if any(r[4] == "NO" for r in rows):
            status = 1
    print(f"total {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
