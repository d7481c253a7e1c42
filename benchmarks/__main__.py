"""`make bench`: every framework in its own process, then one report.

    python -m benchmarks [--scale 1.0] [--frameworks numpy pyxla jax ...] [--out benchmarks/results]
                         [--only WORKLOAD ...] [--models MODEL ...]

Then ONNX's light model architectures and two generated transformers (GPT-2-small- and
BERT-base-shaped, benchmarks/transformer_models.py), pyxla beside onnxruntime
(benchmarks/onnx_models.py): all of them unless --only picks workloads; --models picks some
(none: `--models` alone).

Then the co-tenancy scenario (benchmarks/cotenancy.py, in a process of its own): pyxla's jit
MLP and SqueezeNet alone and right after NumPy, torch and onnxruntime calls in the same
process, with the peers' default settings and again with their spinning turned off, unless
--only picks workloads; --cotenancy-rounds 0 skips it.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset in the framework processes (only there):
these machines set them for old OpenBLAS builds, and they make a current OpenBLAS pick
slower kernels; a user's machine does not set them. Each process reports its BLAS kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from .frameworks import FRAMEWORKS
from .onnx_models import MODELS, merge_rounds
from .report import write_report
from .transformer_models import TRANSFORMER_MODELS


def child_environment() -> dict:
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    return env


def _run_process(framework: str, path: Path, env: dict, module: str, *args: str) -> dict:
    """Run one framework in its own process; its JSON, or why it could not run."""
    cmd = [sys.executable, "-m", module, "--framework", framework, "--out", str(path), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not path.exists():
        return {"framework": framework, "unavailable": f"process failed: {proc.stderr.strip()[-500:]}",
                "results": {}}
    return json.loads(path.read_text())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--budget", type=float, default=3.0)
    parser.add_argument("--frameworks", nargs="*", default=list(FRAMEWORKS))
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--models", nargs="*", help="ONNX light models to run (default: all, unless --only)")
    parser.add_argument("--cotenancy-rounds", type=int, default=5,
                        help="rounds of the co-tenancy scenario (benchmarks/cotenancy.py); 0 skips it")
    parser.add_argument("--out", default="benchmarks/results")
    ns = parser.parse_args(argv)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    env = child_environment()
    runs = []
    load_before = os.getloadavg()
    others = OtherProcesses()
    for fw in ns.frameworks:
        print(f"running {fw} ...", flush=True)
        runs.append(_run_process(fw, out / f"{fw}.json", env, "benchmarks.runner", "--scale", str(ns.scale),
                                 "--budget", str(ns.budget), *(["--only", *ns.only] if ns.only else [])))
    models = ns.models if ns.models is not None else ([] if ns.only else [*MODELS, *TRANSFORMER_MODELS])
    model_runs = _interleaved_model_runs(models, env, out, ns.budget) if models else []
    cotenancy = _cotenancy_run(env, out, ns.cotenancy_rounds) if ns.cotenancy_rounds > 0 and not ns.only else None
    ceilings_cmd = [sys.executable, "-c",
                    f"import json; from benchmarks.ceilings import ceilings; print(json.dumps(ceilings({ns.scale})))"]
    ceil = json.loads(subprocess.run(ceilings_cmd, env=env, capture_output=True, text=True, check=True).stdout)
    load_after = os.getloadavg()
    print(write_report(runs, ceil, out, load_before, load_after, model_runs, others_share=others.share(),
                       cotenancy=cotenancy))


def _cotenancy_run(env: dict, out: Path, rounds: int) -> dict:
    """benchmarks/cotenancy.py in its own process, with the peers' default settings and then
    with their spinning turned off: {"default": JSON, "idle_peers": JSON}, each JSON or why
    it could not run."""
    results = {}
    for key, name, flags in (("default", "cotenancy.json", []), ("idle_peers", "cotenancy-idle-peers.json",
                                                                   ["--idle-peers"])):
        print(f"running the co-tenancy scenario{' (peers not spinning)' if flags else ''} ...", flush=True)
        path = out / name
        path.unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-m", "benchmarks.cotenancy", "--rounds", str(rounds),
                               "--out", str(out), *flags], env=env, capture_output=True, text=True)
        results[key] = json.loads(path.read_text()) if proc.returncode == 0 and path.exists() else \
            {"unavailable": f"process failed: {proc.stderr.strip()[-500:]}"}
    return results


MODEL_ROUNDS = 2   # rounds of the ONNX models, the frameworks' order reversed in the second


def _interleaved_model_runs(models: list[str], env: dict, out: Path, budget: float) -> list[dict]:
    """Each model on pyxla and on onnxruntime one right after the other, each in its own
    process, in MODEL_ROUNDS rounds that alternate which goes first, every round with a
    share of the budget; each framework's timings pooled over the rounds. The machine's
    speed drifts by 10-20% over minutes: all of one framework's models and then all of the
    other's (as this ran before) put minutes between the two timings of a model, and the
    drift into their ratio."""
    frameworks = ("pyxla", "onnxruntime")
    rounds: dict[str, list[dict]] = {fw: [] for fw in frameworks}
    for r in range(MODEL_ROUNDS):
        order = frameworks if r % 2 == 0 else frameworks[::-1]
        for name in models:
            for fw in order:
                print(f"running {name} on {fw} (round {r + 1} of {MODEL_ROUNDS}) ...", flush=True)
                rounds[fw].append(_run_process(fw, out / f"{fw}-onnx-models.json", env, "benchmarks.onnx_models",
                                               "--budget", str(budget / MODEL_ROUNDS), "--only", name))
    runs = []
    for fw in frameworks:
        merged = dict(merge_rounds(rounds[fw]), rounds=MODEL_ROUNDS)
        (out / f"{fw}-onnx-models.json").write_text(json.dumps(merged, indent=1))
        runs.append(merged)
    return runs


class OtherProcesses:
    """The share of the machine's CPU time that processes other than this run used while it
    ran: all busy time (/proc/stat) less this process's and its children's. The load average
    cannot say this: the run's own two threads raise it."""

    def __init__(self):
        self.start = (time.monotonic(), _busy_seconds(), _own_seconds())

    def share(self) -> float | None:
        t0, busy0, own0 = self.start
        busy1 = _busy_seconds()
        if busy0 is None or busy1 is None:
            return None
        elapsed = (time.monotonic() - t0) * (os.cpu_count() or 1)
        return max(0.0, (busy1 - busy0) - (_own_seconds() - own0)) / elapsed if elapsed > 0 else None


def _busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (None where /proc/stat is missing)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle and iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0       # already counted in user and nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


if __name__ == "__main__":
    main()
