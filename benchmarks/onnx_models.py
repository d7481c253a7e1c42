"""ONNX's light model architectures (shipped in the onnx wheel, onnx/backend/test/data/light),
run by ONE framework (pyxla or onnxruntime) in this process; writes a JSON of the timings.

    python -m benchmarks.onnx_models --framework pyxla --out results/pyxla-onnx.json

Inputs are those ONNX's backend test runner generates for these models (its deterministic
dummy data), so each output is checked against the reference output shipped beside the model,
with the runner's tolerances. For each model: the first call (load + compile + run) and the
median and interquartile spread of steady-state runs.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np

from . import transformer_models
from .runner import blas_info, measure

MODELS = ("resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet", "squeezenet",
          "bvlc_alexnet", "vgg19", "zfnet512")
RTOL, ATOL = 1e-3, 1e-7   # ONNX's backend test runner's tolerances for these models


def light_dir() -> Path:
    import onnx.backend.test
    return Path(onnx.backend.test.__file__).parent / "data" / "light"


def model_case(name: str):
    """(model bytes, {input name: array}, [reference output arrays]) for light model `name`,
    or for one of the generated transformers (transformer_models.py)."""
    if name in transformer_models.TRANSFORMER_MODELS:
        return transformer_models.model_case(name)
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.runner import Runner

    path = light_dir() / f"light_{name}.onnx"
    model = onnx.load(str(path))
    initialized = {i.name for i in model.graph.initializer}
    feeds = {x.name: Runner.generate_dummy_data(x, seed=0, name=name, random=False)
             for x in model.graph.input if x.name not in initialized}
    outputs = [numpy_helper.to_array(onnx.load_tensor(str(light_dir() / f"light_{name}_output_{i}.pb")))
               for i in range(len(model.graph.output))]
    return path.read_bytes(), feeds, outputs


def _pyxla_session(model_bytes: bytes, feeds: dict):
    import pyxla.onnx
    model = pyxla.onnx.load(model_bytes)
    return lambda: list(model(feeds).values())


def _onnxruntime_session(model_bytes: bytes, feeds: dict):
    import onnxruntime as ort
    session = ort.InferenceSession(model_bytes, ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


SESSIONS = {"pyxla": _pyxla_session, "onnxruntime": _onnxruntime_session}


def version(framework: str) -> str:
    if framework == "pyxla":
        import pyxla
        return pyxla.__version__
    import onnxruntime
    return onnxruntime.__version__


def run_models(framework: str, budget: float, only: list[str] | None) -> dict:
    results = {"framework": framework, "results": {}}
    try:
        results["version"] = version(framework)
        import onnx  # noqa: F401  (the models come from its wheel)
    except Exception as e:
        results["unavailable"] = f"{type(e).__name__}: {e}"
        return results
    for name in MODELS + transformer_models.TRANSFORMER_MODELS:
        if only and name not in only:
            continue
        entry: dict = {}
        try:
            model_bytes, feeds, want = model_case(name)
            start = time.perf_counter()
            run = SESSIONS[framework](model_bytes, feeds)
            got = run()
            entry["first_call_s"] = time.perf_counter() - start
            entry["correct"] = len(got) == len(want) and all(_close(name, g, w) for g, w in zip(got, want))
            entry["max_abs_error"] = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
            entry.update(summarize_times(measure(run, 3, budget)))
        except Exception as e:
            entry = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                     "trace": traceback.format_exc(limit=3)}
        results["results"][name] = entry
    results["blas"] = blas_info()
    results["load_average"] = os.getloadavg()
    return results


def _close(name: str, got: np.ndarray, want: np.ndarray) -> bool:
    if name in transformer_models.TRANSFORMER_MODELS:
        return transformer_models.close_enough(got, want)
    return got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL)


def summarize_times(times: list[float]) -> dict:
    """Median, interquartile spread and count of steady-state timings, and the timings."""
    q1, q3 = np.percentile(times, [25, 75])
    return {"median_s": float(np.median(times)), "iqr_s": float(q3 - q1), "repeats": len(times),
            "times_s": [float(t) for t in times]}


def merge_rounds(rounds: list[dict]) -> dict:
    """One framework's runs (run_models results, a model in several of them) as one: for
    each model the first run's first call and check and every run's timings pooled; a run
    that failed on a model makes its failure the model's result."""
    ran = next((run for run in rounds if "unavailable" not in run), rounds[0])   # a process that failed says why
    merged = {k: v for k, v in ran.items() if k != "results"}
    merged["results"] = {}
    for name in dict.fromkeys(n for run in rounds for n in run.get("results", {})):
        entries = [run["results"][name] for run in rounds if name in run.get("results", {})]
        failed = [e for e in entries if "error" in e]
        entry = dict(failed[0] if failed else entries[0])
        if not failed:
            entry.update(summarize_times([t for e in entries for t in e["times_s"]]))
        merged["results"][name] = entry
    return merged


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", required=True, choices=sorted(SESSIONS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of steady-state runs per model")
    parser.add_argument("--only", nargs="*")
    ns = parser.parse_args(argv)
    with open(ns.out, "w") as f:
        json.dump(run_models(ns.framework, ns.budget, ns.only), f, indent=1)


if __name__ == "__main__":
    main()
