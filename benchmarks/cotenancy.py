"""Co-tenancy: pyxla in one process with other libraries' thread pools.

    python -m benchmarks.cotenancy [--rounds 5] [--calls 15] [--models squeezenet]
                                   [--peers numpy torch onnxruntime] [--scale 1.0]
                                   [--idle-peers] [--out benchmarks/results]

People mix libraries in one process: a NumPy matrix product, a torch operation or an
onnxruntime session run, then a pyxla call. Each of those libraries keeps its worker threads
spinning for a while after its call returns (OpenBLAS until its thread timeout, about 2^28
time-stamp ticks; torch's GNU OpenMP for GOMP_SPINCOUNT; onnxruntime's intra-op pool while
`allow_spinning` is on), and on a machine with few cores those threads take cores from
pyxla's kernels. This runs, in ONE process, the jitted MLP of benchmarks/workloads.py and
ONNX light models through pyxla.onnx, each timed

    alone        back to back, no other library called in between
    numpy        each call right after a NumPy float32 matrix product (OpenBLAS's threads)
    torch        each call right after a torch matrix product (MKL on torch's OpenMP threads)
    onnxruntime  each call right after an onnxruntime InferenceSession run of the same model
                 (of SqueezeNet for the MLP) with default options

in several rounds, the scenarios interleaved within a round and the peers' threads left to
go to sleep between scenarios (SETTLE_S). For each round the median call of a scenario over
the median alone call of the same round; the report gives the median of those ratios over
the rounds and their range. Where the time goes, from /proc/self/task/*/schedstat during
each timed pyxla call: the cores the other libraries' threads kept busy, the cores pyxla's
own threads got, and how many of pyxla's threads were runnable but waiting for a core (the
time the others took from them; on a busy machine other processes take some too). And for
each peer, and for pyxla's pool after the MLP, with nothing else of the process running:
the cores its threads keep busy in windows after its call returns (how long they spin).
The kernel updates a running thread's run time at scheduler ticks (milliseconds), so the
shares are rough for short calls. Once torch has loaded GNU OpenMP, pyxla's pool hands its
jobs to OpenMP's threads (docs/cpu-backend.md, threading): in the torch scenario and after
it, the "peer" cores are then partly torch's workers running pyxla's tasks.

The peers are the user's: nothing pyxla does changes their settings. `--idle-peers` runs
the same scenarios as a user who configured the peers not to spin would (OpenBLAS's
OPENBLAS_THREAD_TIMEOUT=4, OMP_WAIT_POLICY=PASSIVE for torch's OpenMP, onnxruntime's
`session.intra_op.allow_spinning` = 0): what is left is what sharing the process costs
pyxla itself. Results: cotenancy.json, cotenancy-idle-peers.json under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

PEERS = ("numpy", "torch", "onnxruntime")
SETTLE_S = 0.4        # OpenBLAS's threads spin ~0.1 s after a call, onnxruntime's up to ~0.2 s
PEER_SHAPE = (256, 1024, 1024)   # the peers' matrix product: m, k, n (float32, ~0.5 GFLOP)


# --- threads and their CPU time ----------------------------------------------------------------

def thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _schedstat(tid: int) -> tuple[int, int]:
    """(nanoseconds on a CPU, nanoseconds runnable but waiting for one) of thread `tid`."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


def cpu_ns(tids) -> tuple[int, int]:
    """Nanoseconds the threads `tids` have run, and waited to run while runnable (both 0
    where /proc is missing)."""
    stats = [_schedstat(t) for t in tids]
    return sum(r for r, _ in stats), sum(w for _, w in stats)


# --- workloads and peers -------------------------------------------------------------------------

def mlp_workload(scale: float = 1.0):
    """(name, call, correct) for the jitted MLP of the benchmark suite, warmed up; correct:
    whether its result matches the float64 reference (a wrong result has no speed)."""
    from .frameworks.pyxla_impl import BUILDERS
    from .runner import check
    from .workloads import BY_NAME
    workload = BY_NAME["mlp"]
    ins = workload.make_inputs(np.random.default_rng(20261122), scale)
    run = BUILDERS["mlp"](ins)
    _, correct = check(run(), workload.reference(*(a.astype(np.float64) for a in ins)), workload.rtol)
    return "mlp", run, correct


def onnx_workload(name: str):
    """(name, call, correct, model bytes, feeds) for an ONNX light model through pyxla.onnx,
    warmed up; correct: whether its outputs match the model's reference outputs."""
    import pyxla.onnx

    from .onnx_models import ATOL, RTOL, model_case
    model_bytes, feeds, want = model_case(name)
    model = pyxla.onnx.load(model_bytes)
    got = list(model(feeds).values())
    correct = len(got) == len(want) and all(g.shape == w.shape and np.allclose(g, w, rtol=RTOL, atol=ATOL)
                                            for g, w in zip(got, want))
    return name, lambda: model(feeds), correct, model_bytes, feeds


# The settings with which each peer's threads sleep as soon as its call ends (read when the
# library loads, so set before the process starts): OpenBLAS's spin of 2^4 time-stamp ticks,
# GNU OpenMP's passive wait; onnxruntime's is a session option (make_peer).
IDLE_PEERS_ENVIRONMENT = {"OPENBLAS_THREAD_TIMEOUT": "4", "OMP_WAIT_POLICY": "PASSIVE"}


def idle_peers() -> bool:
    """Whether this process runs the peers with spinning turned off (IDLE_PEERS_ENVIRONMENT)."""
    return all(os.environ.get(k) == v for k, v in IDLE_PEERS_ENVIRONMENT.items())


def make_peer(peer: str, model_bytes: bytes, feeds: dict):
    """A call of the peer library, warmed up: its default settings, or where this process
    has IDLE_PEERS_ENVIRONMENT, the settings that make its threads sleep after a call."""
    rng = np.random.default_rng(7)
    m, k, n = PEER_SHAPE
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    if peer == "numpy":
        def call():
            a @ b
    elif peer == "torch":
        import torch
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def call():
            ta @ tb
    elif peer == "onnxruntime":
        import onnxruntime as ort
        options = ort.SessionOptions()
        if idle_peers():
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])

        def call():
            session.run(None, feeds)
    else:
        raise ValueError(f"unknown peer library {peer!r}; known: {', '.join(PEERS)}")
    for _ in range(3):
        call()
    return call


# --- the measurement -------------------------------------------------------------------------------

def time_calls(run, before, calls: int, own: set[int]) -> dict:
    """`calls` timed calls of `run`, each right after `before()` (None: back to back): the
    times, and the cores the other libraries' threads and pyxla's own kept busy during them."""
    times, foreign_busy, own_busy, own_waiting = [], [], [], []
    for _ in range(calls):
        if before is not None:
            before()
        foreign = thread_ids() - own
        (f0, _), (o0, w0) = cpu_ns(foreign), cpu_ns(own)
        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
        (f1, _), (o1, w1) = cpu_ns(foreign), cpu_ns(own)
        times.append(elapsed)
        foreign_busy.append((f1 - f0) / 1e9 / elapsed)
        own_busy.append((o1 - o0) / 1e9 / elapsed)
        own_waiting.append((w1 - w0) / 1e9 / elapsed)
    return {"median_s": float(np.median(times)), "times_s": times,
            "foreign_cores": float(np.median(foreign_busy)), "own_cores": float(np.median(own_busy)),
            "own_waiting": float(np.median(own_waiting))}


def measure(workloads, peers: dict, rounds: int, calls: int, own: set[int]) -> dict:
    """Per workload and scenario: every round's median, the ratio to that round's alone
    median, and the threads' CPU shares."""
    results: dict = {}
    for name, run in workloads:
        by_scenario: dict = {s: [] for s in ("alone", *peers)}
        for r in range(rounds):
            order = list(by_scenario)
            if r % 2:   # alone first, then last: drift within a round does not favour one side
                order = order[1:] + order[:1]
            for scenario in order:
                time.sleep(SETTLE_S)
                by_scenario[scenario].append(time_calls(run, peers.get(scenario), calls, own))
        alone = [e["median_s"] for e in by_scenario["alone"]]
        entry = {}
        for scenario, per_round in by_scenario.items():
            ratios = [e["median_s"] / a for e, a in zip(per_round, alone)]
            entry[scenario] = {
                "median_s": float(np.median([e["median_s"] for e in per_round])),
                "ratio": float(np.median(ratios)), "ratio_min": float(min(ratios)), "ratio_max": float(max(ratios)),
                "foreign_cores": float(np.median([e["foreign_cores"] for e in per_round])),
                "own_cores": float(np.median([e["own_cores"] for e in per_round])),
                "own_waiting": float(np.median([e["own_waiting"] for e in per_round])),
                "round_medians_s": [e["median_s"] for e in per_round]}
        results[name] = entry
        print(format_lines({name: entry})[-1], flush=True)
    return results


SPIN_WINDOWS_S = (0.005, 0.02, 0.05, 0.1, 0.2, 0.4)


def set_settle(seconds: float) -> None:
    """The pause before each scenario and spin measurement, and the spin windows scaled with
    it (a quick check of the harness shortens both)."""
    global SETTLE_S, SPIN_WINDOWS_S
    scale = seconds / SETTLE_S
    SETTLE_S, SPIN_WINDOWS_S = seconds, tuple(w * scale for w in SPIN_WINDOWS_S)


def spin_after(call, own: set[int], repeats: int = 3) -> list[float]:
    """How long a library's threads keep cores busy after its call returns, nothing else of
    this process running (the caller sleeps): the cores they kept busy in each window
    (SPIN_WINDOWS_S, seconds after the call), the median over `repeats` calls."""
    rows = []
    for _ in range(repeats):
        time.sleep(SETTLE_S)
        call()
        foreign = thread_ids() - own
        t_prev, busy_prev = time.perf_counter(), cpu_ns(foreign)[0]
        start, row = t_prev, []
        for end in SPIN_WINDOWS_S:
            time.sleep(max(0.0, start + end - time.perf_counter()))
            t, busy = time.perf_counter(), cpu_ns(foreign)[0]
            row.append((busy - busy_prev) / 1e9 / (t - t_prev))
            t_prev, busy_prev = t, busy
        rows.append(row)
    return [float(v) for v in np.median(np.array(rows), axis=0)]


def spin_lines(spins: dict) -> list[str]:
    """A markdown table of spin_after's windows per library."""
    if not spins:
        return []
    edges = (0.0, *SPIN_WINDOWS_S)
    lines = ["| cores busy after the call | " + " | ".join(f"{a * 1e3:g}-{b * 1e3:g} ms"
                                                       for a, b in zip(edges, edges[1:])) + " |",
             "|---|" + "---|" * len(SPIN_WINDOWS_S)]
    lines += [f"| {peer} | " + " | ".join(f"{v:.2f}" for v in row) + " |" for peer, row in spins.items()]
    return lines


def format_lines(results: dict) -> list[str]:
    """A markdown table: per workload the alone time, and per peer the ratio (range); under
    each, the cores the peer's threads and pyxla's kept busy during pyxla's call, and the
    threads of pyxla's that were runnable but waiting for a core (on average)."""
    if not results:
        return []
    peers = [s for s in next(iter(results.values())) if s not in ("alone", "correct")]
    lines = ["| workload | alone | " + " | ".join(f"after {p}" for p in peers) + " |",
             "|---|---|" + "---|" * len(peers)]

    def threads(e):
        return f"peer {e['foreign_cores']:.2f} / pyxla {e['own_cores']:.2f} busy, {e['own_waiting']:.2f} waiting"

    for name, entry in results.items():
        if not entry.get("correct", True):
            name += " (wrong results: not a speed)"
        cells = [f"{entry['alone']['median_s'] * 1e3:.2f} ms ({threads(entry['alone'])})"]
        for p in peers:
            e = entry[p]
            cells.append(f"{e['ratio']:.2f}x ({e['ratio_min']:.2f}-{e['ratio_max']:.2f}; {threads(e)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def run(rounds: int, calls: int, models: list[str], peers: list[str], scale: float = 1.0) -> dict:
    before = thread_ids()   # the interpreter's, and OpenBLAS's (NumPy starts them on import)
    name, call, correct = mlp_workload(scale)
    workloads, checks = [(name, call)], {name: correct}
    model_cases = []
    for model in models:
        name, call, correct, model_bytes, feeds = onnx_workload(model)
        workloads.append((name, call))
        checks[name] = correct
        model_cases.append((name, model_bytes, feeds))
    # pyxla's: the calling thread and those its first calls started (its pool, and the
    # threads of the BLAS it calls for small products, SciPy's)
    own = {threading.get_native_id()} | (thread_ids() - before)
    # every workload runs after the same peer calls; onnxruntime's runs the first model
    peer_model = model_cases[0][1:] if model_cases else \
        onnx_case_bytes("squeezenet") if "onnxruntime" in peers else (b"", {})
    peer_calls = {p: make_peer(p, *peer_model) for p in peers}
    spins = {p: spin_after(call, own) for p, call in peer_calls.items()}
    # and pyxla's own pool after its call, for comparison (SPIN_CYCLES, then asleep)
    spins[f"pyxla ({workloads[0][0]})"] = spin_after(workloads[0][1], {threading.get_native_id()})
    results = measure(workloads, peer_calls, rounds, calls, own)
    for name, correct in checks.items():
        results[name]["correct"] = correct
    try:
        from threadpoolctl import threadpool_info
        libraries = [{k: v for k, v in i.items() if k in ("internal_api", "prefix", "version", "num_threads")}
                     for i in threadpool_info()]
    except ImportError:
        libraries = []
    return {"rounds": rounds, "calls": calls, "scale": scale, "idle_peers": idle_peers(),
            "peer_matmul": PEER_SHAPE, "settle_s": SETTLE_S,
            "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "thread_libraries": libraries, "spin_after": spins, "results": results}


def onnx_case_bytes(name: str):
    from .onnx_models import model_case
    model_bytes, feeds, _ = model_case(name)
    return model_bytes, feeds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=15, help="timed calls per scenario and round")
    parser.add_argument("--models", nargs="*", default=["squeezenet"], help="ONNX light models (pyxla.onnx)")
    parser.add_argument("--peers", nargs="*", default=list(PEERS))
    parser.add_argument("--scale", type=float, default=1.0, help="the MLP's dimensions times this")
    parser.add_argument("--idle-peers", action="store_true",
                        help="the peers configured so that their threads sleep right after a call "
                             "(the process restarts itself with IDLE_PEERS_ENVIRONMENT)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--settle-s", type=float, default=SETTLE_S,
                        help="pause before each scenario and spin measurement (shorter: a quick check only)")
    ns = parser.parse_args(argv)
    set_settle(ns.settle_s)
    if ns.idle_peers and not idle_peers():   # the libraries read these when they load: start afresh
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.cotenancy", *(argv or sys.argv[1:])],
                  {**os.environ, **IDLE_PEERS_ENVIRONMENT})
    result = run(ns.rounds, ns.calls, ns.models, ns.peers, ns.scale)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "cotenancy-idle-peers.json" if ns.idle_peers else "cotenancy.json"
    (out / name).write_text(json.dumps(result, indent=1))
    print("\n".join(format_lines(result["results"]) + [""] + spin_lines(result["spin_after"])))


if __name__ == "__main__":
    main()
