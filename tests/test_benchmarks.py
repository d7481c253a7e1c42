"""The benchmark harness runs end to end on tiny sizes (NumPy and pyxla only) and reports.
It asserts that the machinery works and that pyxla's results are correct, never a timing."""
import json

from benchmarks.__main__ import main


def test_suite_runs_and_reports(tmp_path):
    main(["--scale", "0.05", "--budget", "0.05", "--frameworks", "numpy", "pyxla",
          "--only", "sum_fma", "softmax", "layer_norm", "mlp", "dispatch", "--out", str(tmp_path)])
    report = (tmp_path / "report.md").read_text()
    assert "| workload | numpy | pyxla | pyxla / best peer |" in report
    data = json.loads((tmp_path / "report.json").read_text())
    pyxla = next(r for r in data["runs"] if r["framework"] == "pyxla")
    for name in ("sum_fma", "softmax", "layer_norm", "mlp", "dispatch"):
        entry = pyxla["results"][name]
        assert entry.get("correct"), (name, entry)
        assert entry["median_s"] > 0 and entry["first_call_s"] > 0
    assert set(data["ceilings"]) == {"copy_gb_per_s", "triad_gb_per_s", "sgemm_gflops"}
