"""The report: a markdown table of medians and ratios to the best peer, a JSON file and a
PNG bar chart of pyxla's ratio per workload."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from .cotenancy import format_lines as cotenancy_lines
from .cotenancy import spin_lines
from .workloads import WORKLOADS


def _cell(entry: dict | None) -> str:
    if not entry:
        return "–"
    if "unsupported" in entry:
        return "n/a"
    if "error" in entry:
        return "fails"
    t = entry["median_s"]
    text = f"{t * 1e6:.1f} µs" if t < 1e-3 else f"{t * 1e3:.2f} ms"
    return text + ("" if entry.get("correct", True) else " (wrong)")


# pyxla itself, by another way in: not a peer (torch.compile(backend="pyxla") runs pyxla's kernels)
OWN_FRAMEWORKS = frozenset({"pyxla", "torch_pyxla"})


def summarize(runs: list[dict]) -> dict:
    """Per workload: each framework's median and pyxla's ratio to the best peer."""
    table = {}
    for w in WORKLOADS:
        row = {r["framework"]: r["results"].get(w.name) for r in runs}
        peers = {fw: e["median_s"] for fw, e in row.items()
                 if fw not in OWN_FRAMEWORKS and e and "median_s" in e and e.get("correct", True)}
        mine = row.get("pyxla") or {}
        ratio = None
        if peers and "median_s" in mine and mine.get("correct", True):   # a wrong answer has no speed
            ratio = mine["median_s"] / min(peers.values())
        table[w.name] = {"row": row, "best_peer": min(peers, key=peers.get) if peers else None,
                         "pyxla_over_best_peer": ratio}
    return table


def summarize_models(model_runs: list[dict]) -> dict:
    """Per ONNX model: pyxla's and onnxruntime's entries and pyxla's ratio to onnxruntime."""
    by_fw = {r["framework"]: r.get("results", {}) for r in model_runs}
    names = list(dict.fromkeys(name for r in model_runs for name in r.get("results", {})))
    table = {}
    for name in names:
        mine, peer = by_fw.get("pyxla", {}).get(name) or {}, by_fw.get("onnxruntime", {}).get(name) or {}
        ratio = None
        if "median_s" in mine and "median_s" in peer and mine.get("correct", True) and peer.get("correct", True):
            ratio = mine["median_s"] / peer["median_s"]
        table[name] = {"pyxla": mine, "onnxruntime": peer, "pyxla_over_onnxruntime": ratio}
    return table


def _model_lines(model_runs: list[dict]) -> list[str]:
    table = summarize_models(model_runs)
    if not table:
        return []
    lines = ["", "ONNX models (light models: batch 1, ONNX's own inputs, checked against its reference outputs; "
             "gpt2_small: 1 x 128 tokens, bert_base: 4 x 128, checked against torch eager):", "",
             "| model | pyxla | onnxruntime | pyxla / onnxruntime | first call: pyxla | onnxruntime |",
             "|---|---|---|---|---|---|"]
    for name, t in table.items():
        ratio = t["pyxla_over_onnxruntime"]
        first = [f"{t[fw]['first_call_s']:.2f} s" if "first_call_s" in t[fw] else "–"
                 for fw in ("pyxla", "onnxruntime")]
        lines.append(f"| {name} | {_cell(t['pyxla'])} | {_cell(t['onnxruntime'])} | "
                     f"{f'{ratio:.2f}' if ratio else '–'} | {first[0]} | {first[1]} |")
    return lines


def _blas_text(libraries) -> str:
    parts = [f"{b.get('internal_api', '?')} {b.get('version', '')} {b.get('architecture', '')} kernels, "
             f"{b.get('num_threads', '?')} threads" if "note" not in b else b["note"] for b in libraries or []]
    return "; ".join(parts) or "none loaded"


def _failures(runs: list[dict]) -> list[str]:
    lines = []
    for r in runs:
        if "unavailable" in r:
            lines.append(f"\n{r['framework']}: not run ({r['unavailable'][:200]})")
        for wname, e in r.get("results", {}).items():
            if e and "error" in e:
                lines.append(f"\n{r['framework']} / {wname}: {e['error'][:200]}")
    return lines


def _cotenancy_section(cotenancy: dict | None) -> list[str]:
    """cotenancy: {"default": cotenancy.py's result, "idle_peers": the same with the peers
    not spinning}; either may be missing or say why it did not run."""
    if not cotenancy:
        return []
    lines = ["", "Co-tenancy (one process; pyxla's time right after another library's call over its time alone, "
             "median of the rounds (range); the cores that library's threads and pyxla's kept busy during "
             "pyxla's call, and pyxla's threads waiting for a core; benchmarks/cotenancy.py):"]
    for key, title in (("default", "the peers' default settings"),
                       ("idle_peers", "the peers set not to spin (OPENBLAS_THREAD_TIMEOUT=4, "
                                      "OMP_WAIT_POLICY=PASSIVE, onnxruntime allow_spinning 0)")):
        result = cotenancy.get(key)
        if not result:
            continue
        lines += ["", f"With {title}:", ""]
        if "unavailable" in result:
            lines.append(f"not run ({result['unavailable'][:200]})")
            continue
        lines += cotenancy_lines(result["results"]) + [
            "", f"{result['rounds']} rounds of {result['calls']} calls per scenario, on {result['cores']} cores. "
            "How long each library's threads keep cores busy after its call (pyxla idle):", ""]
        lines += spin_lines(result.get("spin_after", {}))
    return lines


BUSY_SHARE = 0.1   # other processes using more than this share of the CPUs make a run "busy"


def write_report(runs: list[dict], ceilings: dict, out: Path, load_before, load_after,
                 model_runs: list[dict] = (), others_share: float | None = None,
                 cotenancy: dict | None = None) -> str:
    """others_share: the CPU share other processes used during the run (None: unknown, and
    the load average before the run decides). cotenancy: benchmarks/cotenancy.py's result."""
    table = summarize(runs)
    names = [r["framework"] for r in runs]
    if others_share is not None:
        busy = others_share > BUSY_SHARE
        load_text = f"Other processes used {100 * others_share:.0f}% of the CPUs during the run"
    else:
        busy = load_before[0] > 0.5 * (os.cpu_count() or 1)
        load_text = f"Load average before the run: {load_before[0]:.2f}"
    lines = [f"# pyxla benchmarks, {time.strftime('%Y-%m-%d')}",
             "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores; ceilings: copy "
             f"{ceilings['copy_gb_per_s']:.1f} GB/s, triad {ceilings['triad_gb_per_s']:.1f} GB/s, "
             f"SGEMM {ceilings['sgemm_gflops']:.0f} GFLOP/s.",
             load_text + (" — the machine was BUSY: treat these numbers with care." if busy else "."),
             "",
             "| workload | " + " | ".join(names) + " | pyxla / best peer |",
             "|---|" + "---|" * len(names) + "---|"]
    for w in WORKLOADS:
        t = table[w.name]
        ratio = t["pyxla_over_best_peer"]
        lines.append(f"| {w.name} | " + " | ".join(_cell(t["row"].get(n)) for n in names)
                     + f" | {ratio:.2f} ({t['best_peer']})" if ratio else
                     f"| {w.name} | " + " | ".join(_cell(t["row"].get(n)) for n in names) + " | – |")
    lines.append("")
    lines.append("First call (trace + compile + run):")
    lines.append("")
    lines.append("| workload | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for w in WORKLOADS:
        cells = []
        for n in names:
            e = table[w.name]["row"].get(n)
            cells.append(f"{e['first_call_s'] * 1e3:.0f} ms" if e and "first_call_s" in e else "–")
        lines.append(f"| {w.name} | " + " | ".join(cells) + " |")
    lines += ["", "BLAS in each framework's process (threadpoolctl):", ""]
    lines += [f"- {r['framework']}: {_blas_text(r.get('blas'))}" for r in runs if "blas" in r]
    lines += _model_lines(list(model_runs))
    lines += _cotenancy_section(cotenancy)
    lines += _failures(runs) + _failures(list(model_runs))
    markdown = "\n".join(lines) + "\n"
    (out / "report.md").write_text(markdown)
    (out / "report.json").write_text(json.dumps({"runs": runs, "ceilings": ceilings, "summary": {
        k: {"best_peer": v["best_peer"], "pyxla_over_best_peer": v["pyxla_over_best_peer"]} for k, v in table.items()},
        "onnx_models": {"runs": list(model_runs), "summary": {
            k: v["pyxla_over_onnxruntime"] for k, v in summarize_models(list(model_runs)).items()}},
        "cotenancy": cotenancy, "load_average": [load_before, load_after], "others_cpu_share": others_share},
        indent=1, default=str))
    ratios = {k: v["pyxla_over_best_peer"] for k, v in table.items()}
    ratios.update({f"onnx {k}": v["pyxla_over_onnxruntime"] for k, v in summarize_models(list(model_runs)).items()})
    _chart(ratios, out / "ratios.png")
    return markdown


def _chart(ratios: dict, path: Path) -> None:
    """A bar per workload (and ONNX model): pyxla's time over the best peer's."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = [k for k, v in ratios.items() if v]
    values = [ratios[k] for k in names]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(names, values, color=["tab:green" if v <= 1 else "tab:red" for v in values])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")   # a 10x gap and a 10% lead both stay readable
    for x, v in enumerate(values):
        ax.annotate(f"{v:.2f}", (x, v), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("pyxla time / best peer's (log)")
    ax.set_title("lower is better; below 1: pyxla is fastest")
    plt.xticks(rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
