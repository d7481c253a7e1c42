"""PyTorch models through torch.compile: backend="pyxla" beside "inductor" and eager, on the
CPU: an MLP, a CNN, a transformer encoder layer (inference) and one training step of the
CNN. Each model in one process per backend; first call (compile + run) and steady state.

    python -m benchmarks.torch_models [--backends eager inductor pyxla] [--out results/torch-models.json]
                                      [--threads N] [--omp-passive]

--threads fixes the threads of every backend (torch.set_num_threads and PYXLA_NUM_THREADS);
by default each uses every core. --omp-passive runs every backend's process with
OMP_WAIT_POLICY=PASSIVE: torch's OpenMP threads then sleep after each eager op instead of
spinning for milliseconds, which in a training step (the loss and its gradient run eagerly
between the compiled graphs) takes a core from pyxla's kernels (docs/torch.md). On a
machine other processes also load, one thread each keeps the comparison about the kernels:
OpenMP's spinning workers (eager, inductor) lose far more than pyxla's pool when a core is
taken from them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BACKENDS = ("eager", "inductor", "pyxla")
MODELS = ("mlp", "cnn", "transformer_layer", "cnn_train_step")


def build(name: str):
    """(model, inputs, training) with fixed seeds: every backend gets the same weights and data."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                             nn.Linear(1024, 10)), (torch.randn(128, 512),), False
    if name in ("cnn", "cnn_train_step"):
        model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
        return model, (torch.randn(32, 3, 32, 32),), name == "cnn_train_step"
    if name == "transformer_layer":
        return (nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True),
                (torch.randn(8, 128, 256),), False)
    raise KeyError(name)


def runner(name: str, backend: str):
    import torch
    import torch.nn.functional as F
    model, inputs, training = build(name)
    fn = model if backend == "eager" else torch.compile(model, backend=backend)
    if not training:
        model.eval()

        def run():
            with torch.no_grad():
                return fn(*inputs).numpy()
        return run
    model.train()
    labels = torch.randint(0, 10, (inputs[0].shape[0],), generator=torch.Generator().manual_seed(1))

    def step():
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(fn(*inputs), labels)
        loss.backward()
        return np.array([loss.item(), *(float(p.grad.abs().sum()) for p in model.parameters())])
    return step


def measure_one(name: str, backend: str, budget: float, threads: int | None = None) -> dict:
    import torch
    torch.set_num_threads(threads or os.cpu_count() or 1)
    start = time.perf_counter()
    run = runner(name, backend)
    out = run()
    first = time.perf_counter() - start
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 200):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return {"first_call_s": first, "median_s": float(np.median(times)), "repeats": len(times),
            "output": np.asarray(out, np.float64).ravel()[:4096].tolist()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS))
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--budget", type=float, default=3.0)
    parser.add_argument("--out", default="benchmarks/results/torch-models.json")
    parser.add_argument("--threads", type=int, default=None, help="threads of every backend (default: all cores)")
    parser.add_argument("--omp-passive", action="store_true",
                        help="OMP_WAIT_POLICY=PASSIVE in every backend's process")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)   # MODEL BACKEND, in a child process
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(measure_one(*ns.one, ns.budget, ns.threads)))
        return
    env = dict(os.environ)
    if ns.threads:
        env["PYXLA_NUM_THREADS"] = str(ns.threads)   # read when the child compiles
    if ns.omp_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"   # read when the child loads torch's libgomp
    results = {}
    for model in ns.models:
        for backend in ns.backends:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.torch_models", "--one", model, backend,
                                   "--budget", str(ns.budget)] + (["--threads", str(ns.threads)] if ns.threads else []),
                                  capture_output=True, text=True, env=env)
            try:
                results[(model, backend)] = json.loads(proc.stdout.strip().splitlines()[-1])
            except (json.JSONDecodeError, IndexError):
                results[(model, backend)] = {"error": proc.stderr.strip()[-300:]}
    print(f"OMP_WAIT_POLICY: {env.get('OMP_WAIT_POLICY', 'unset')}")
    print(table(results, ns.models, ns.backends))
    os.makedirs(os.path.dirname(ns.out) or ".", exist_ok=True)
    with open(ns.out, "w") as f:
        json.dump({**{f"{m}/{b}": {k: v for k, v in r.items() if k != "output"} for (m, b), r in results.items()},
                   "omp_wait_policy": env.get("OMP_WAIT_POLICY", "unset")}, f, indent=1)


def table(results: dict, models, backends) -> str:
    versus = "inductor" in backends and "pyxla" in backends
    lines = ["| model | " + " | ".join(f"{b} first call | {b} steady" for b in backends)
             + (" | pyxla / inductor" if versus else "") + " | pyxla vs eager |",
             "|---|" + "---|---|" * len(backends) + ("---|" if versus else "") + "---|"]
    for m in models:
        cells = []
        for b in backends:
            r = results[(m, b)]
            if "error" in r:
                cells += ["error", "error"]
            else:
                cells += [f"{r['first_call_s']:.2f} s", f"{r['median_s'] * 1e3:.2f} ms"]
        agree = "-"
        if "pyxla" in backends and "eager" in backends and "output" in results[(m, "pyxla")] \
                and "output" in results[(m, "eager")]:
            a, b = np.array(results[(m, "pyxla")]["output"]), np.array(results[(m, "eager")]["output"])
            agree = f"max diff / max value {np.max(np.abs(a - b)) / np.max(np.abs(b)):.1e}"
        if versus:
            p, i = results[(m, "pyxla")], results[(m, "inductor")]
            cells.append(f"{p['median_s'] / i['median_s']:.2f}" if "error" not in p and "error" not in i else "-")
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {agree} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
