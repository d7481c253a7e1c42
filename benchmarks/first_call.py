"""First call of each ONNX light model in fresh processes: pyxla cold (an empty cache),
pyxla warm (the same cache, a second process) and onnxruntime.

    python -m benchmarks.first_call [--models squeezenet vgg19 ...] [--rounds 1] [--json out.json]

Each process times `import pyxla.onnx` (or `import onnxruntime`) apart from the first call:
pyxla.onnx.load of the model's file, compiling and the first run; onnxruntime's
InferenceSession and its first run. The inputs and reference outputs come from the parent
(benchmarks/onnx_models.py's model_case), saved to a temporary folder, so the timed process
imports only what the framework itself needs; every output is checked against the
reference. Python's bytecode is compiled once beforehand (as for an installed package),
so no process pays for compiling sources. Run it from a checkout nobody edits meanwhile:
the index's keys include a hash of pyxla's source, so an edit between the cold and the warm
process makes the warm one miss (marked in the table). Prints a markdown table (seconds;
the median over rounds when there are several) and the cold first calls' total against
the 10 s target; a warm first call meets its target when within 1.5 x onnxruntime's first
call or 0.15 s, whichever is larger.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MODELS = ("resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet", "squeezenet",
          "bvlc_alexnet", "vgg19", "zfnet512")
WARM_RATIO, WARM_FLOOR, COLD_TOTAL_TARGET = 1.5, 0.15, 10.0
RTOL, ATOL = 1e-3, 1e-7   # ONNX's backend test runner's tolerances for these models


# --- the timed process ------------------------------------------------------------------------

def child(framework: str, folder: str) -> dict:
    """Import the framework, then load and run the model saved in `folder`; the timings and
    whether the outputs match the references."""
    import time
    start = time.perf_counter()
    if framework == "pyxla":
        import pyxla.onnx
    else:
        import onnxruntime
    imported = time.perf_counter()
    path = os.path.join(folder, "model.onnx")
    with np.load(os.path.join(folder, "case.npz")) as case:
        feeds = {k[len("in:"):]: case[k] for k in case.files if k.startswith("in:")}
        want = [case[f"out:{i}"] for i in range(sum(k.startswith("out:") for k in case.files))]
    begin = time.perf_counter()
    if framework == "pyxla":
        model = pyxla.onnx.load(path)
        got = list(model(feeds).values())
    else:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, feeds)
    end = time.perf_counter()
    correct = len(got) == len(want) and all(
        g.shape == w.shape and np.allclose(g, w, rtol=RTOL, atol=ATOL) for g, w in zip(got, want))
    result = {"import_s": imported - start, "first_call_s": end - begin, "correct": bool(correct)}
    if framework == "pyxla":   # made from the load index (not traced)?
        result["from_index"] = model.compile(feeds).module is None
    return result


def _child_env(cache: str | None = None) -> dict:
    """The timed processes' environment: Python's bytecode cached (in a folder of its own,
    filled by warm_up), as in an installed package, whatever PYTHONDONTWRITEBYTECODE says here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "pyxla-first-call-pycache")
    if cache is not None:
        env["PYXLA_CACHE_DIR"] = cache
    return env


def warm_up() -> None:
    """Compile pyxla's, onnx's and onnxruntime's modules to bytecode once, so no timed
    process pays for it."""
    code = ("import pyxla, pyxla.onnx, onnx, onnxruntime; pyxla.jit; "
            "import pyxla.importers.onnx.importer, pyxla.importers.onnx.onnx_model, pyxla.backends.cpu")
    subprocess.run([sys.executable, "-c", code], env=_child_env(""), check=True,
                   cwd=Path(__file__).resolve().parents[1])


def _run_child(framework: str, folder: str, cache: str) -> dict:
    env = _child_env(cache)
    done = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--child", framework, folder],
                          env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent -------------------------------------------------------------------------------

def measure(name: str, rounds: int) -> dict:
    """{"cold": [...], "warm": [...], "onnxruntime": [...]}: one result per round each."""
    from .onnx_models import model_case
    model_bytes, feeds, want = model_case(name)
    results: dict[str, list] = {"cold": [], "warm": [], "onnxruntime": []}
    with tempfile.TemporaryDirectory(prefix="pyxla-first-call-") as folder:
        Path(folder, "model.onnx").write_bytes(model_bytes)
        np.savez(os.path.join(folder, "case.npz"), **{f"in:{k}": v for k, v in feeds.items()},
                 **{f"out:{i}": w for i, w in enumerate(want)})
        for _ in range(rounds):
            cache = tempfile.mkdtemp(prefix="cache-", dir=folder)
            os.chmod(cache, 0o700)
            results["cold"].append(_run_child("pyxla", folder, cache))
            results["warm"].append(_run_child("pyxla", folder, cache))
            results["onnxruntime"].append(_run_child("onnxruntime", folder, cache))
    return results


def _median(runs: list[dict], field: str) -> float | None:
    values = [r[field] for r in runs if field in r]
    return statistics.median(values) if values else None


def _cell(runs: list[dict], field: str = "first_call_s") -> str:
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return f"error: {errors[0]}"
    value = _median(runs, field)
    wrong = "" if all(r.get("correct", True) for r in runs) else " (wrong output)"
    return f"{value:.3f}{wrong}"


def _warm_cell(runs: list[dict]) -> str:
    """A warm process that compiled (missed the index: pyxla's source changed in between,
    say) is marked."""
    missed = sum(1 for r in runs if r.get("from_index") is False)
    return _cell(runs) + (f" ({missed} missed the index)" if missed else "")


def table(results: dict[str, dict]) -> str:
    lines = ["| model | cold | warm | onnxruntime | warm ÷ ort | warm target met? |",
             "|---|---|---|---|---|---|"]
    for name, runs in results.items():
        warm, ort = _median(runs["warm"], "first_call_s"), _median(runs["onnxruntime"], "first_call_s")
        ratio = f"{warm / ort:.2f}" if warm is not None and ort else "-"
        met = "-" if warm is None or ort is None else "yes" if warm <= max(WARM_RATIO * ort, WARM_FLOOR) else "no"
        lines.append(f"| {name} | {_cell(runs['cold'])} | {_warm_cell(runs['warm'])} | {_cell(runs['onnxruntime'])} "
                     f"| {ratio} | {met} |")
    imports = {k: _median([r for runs in results.values() for r in runs[k]], "import_s")
               for k in ("cold", "warm", "onnxruntime")}
    cold_total = sum(_median(runs["cold"], "first_call_s") or 0.0 for runs in results.values())
    verdict = "not judged on some" if len(results) < len(MODELS) else \
        "met" if cold_total <= COLD_TOTAL_TARGET else "not met"
    lines += ["", "import (median): pyxla.onnx cold {} s, warm {} s; onnxruntime {} s".format(*tuple(
        "-" if v is None else f"{v:.3f}" for v in imports.values())),
        f"cold first calls' total ({len(results)} of the {len(MODELS)} models): {cold_total:.2f} s "
        f"(target {COLD_TOTAL_TARGET:.0f} s for all of them: {verdict})"]
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPUs, load average {load}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "FOLDER"), help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        print(json.dumps(child(*ns.child)))
        return
    print(f"machine: {machine()}", flush=True)
    warm_up()
    results = {}
    for name in ns.models:
        results[name] = measure(name, ns.rounds)
        print(f"{name}: " + ", ".join(f"{k} {_cell(v)}" for k, v in results[name].items()), file=sys.stderr, flush=True)
    print(table(results))
    print(f"after: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
