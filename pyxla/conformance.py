"""The HLO conformance corpus: load a case, run it on a backend, compare with XLA's outputs.

A case directory holds module.hlo, optimized.hlo, module.stablehlo.mlir, inputs.npz,
expected.npz and meta.json (see the corpus README); the levels are the three programs.
bf16 arrays are stored as uint16 bit patterns.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
LEVELS = {"module": "module.hlo", "optimized": "optimized.hlo", "stablehlo": "module.stablehlo.mlir"}
HLO_LEVELS = ("module", "optimized")   # the levels written in XLA's HLO text (the HLO parser's tests)


@dataclass
class Case:
    name: str
    path: Path
    meta: dict
    inputs: list[np.ndarray]
    expected: list[np.ndarray]

    def hlo_text(self, level: str = "module") -> str:
        return (self.path / LEVELS[level]).read_text()


def _load_arrays(path: Path, specs: list[dict]) -> list[np.ndarray]:
    with np.load(path) as z:
        out = []
        for spec in specs:
            a = z[spec["name"]]
            if spec["dtype"] == "bf16":
                a = a.view(ml_dtypes.bfloat16)
            out.append(a)
    return out


def load_case(path) -> Case:
    path = Path(path)
    meta = json.loads((path / "meta.json").read_text())
    return Case(meta.get("name", path.name), path, meta,
                _load_arrays(path / "inputs.npz", meta["inputs"]),
                _load_arrays(path / "expected.npz", meta["outputs"]))


def case_dirs(corpus) -> list[Path]:
    corpus = Path(corpus)
    return sorted(p for p in corpus.iterdir() if (p / "meta.json").is_file())


def default_corpus() -> Path:
    """../shared/hlo_corpus next to the checkout, or $PYXLA_CORPUS."""
    import os
    env = os.environ.get("PYXLA_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "hlo_corpus"


def corpus_case_dirs() -> list[Path]:
    """The case directories of the default corpus; a missing corpus is an error, not zero cases."""
    corpus = default_corpus()
    if not corpus.is_dir():
        raise FileNotFoundError(f"the HLO conformance corpus is missing at {corpus} (set PYXLA_CORPUS)")
    return case_dirs(corpus)


def compare(actual, expected: np.ndarray, spec: dict) -> str | None:
    """None when `actual` matches `expected` within the output's tolerance, else why not."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != expected {list(expected.shape)}"
    if spec["dtype"] == "bf16" and actual.dtype != ml_dtypes.bfloat16:
        return f"dtype {actual.dtype} != bfloat16"
    if spec["dtype"] != "bf16" and actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    rtol, atol = spec["rtol"], spec["atol"]
    if spec["dtype"] in FLOAT_TYPES:
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        bad = nan_a != nan_e
        inf_e = np.isinf(e)
        bad |= inf_e & (a != e)
        finite = ~nan_e & ~inf_e & ~nan_a
        with np.errstate(invalid="ignore", over="ignore"):   # inf - inf where `finite` is False
            bad |= finite & ~(np.abs(a - e) <= atol + rtol * np.abs(e))
    else:
        bad = actual != expected
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ (rtol={rtol}, atol={atol}); "
            f"first at {list(idx)}: got {actual[idx]!r}, expected {expected[idx]!r}")


def run_case(case: Case, level: str, run: Callable[[str, list[np.ndarray]], list[np.ndarray]]) -> list[str]:
    """Run one case at one level; the list of problems (empty when it passes)."""
    outputs = run(case.hlo_text(level), case.inputs)
    specs = case.meta["outputs"]
    if len(outputs) != len(specs):
        return [f"{len(outputs)} outputs, expected {len(specs)}"]
    problems = []
    for i, (got, want, spec) in enumerate(zip(outputs, case.expected, specs)):
        why = compare(got, want, spec)
        if why:
            problems.append(f"out{i} ({spec['dtype']}): {why}")
    return problems
