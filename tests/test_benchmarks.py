"""The benchmark harness runs end to end on tiny sizes (NumPy and pyxla only) and reports.
It asserts that the machinery works and that pyxla's results are correct, never a timing."""
import json
import os

import pytest

from benchmarks.__main__ import main


def test_suite_runs_and_reports(tmp_path):
    main(["--scale", "0.05", "--budget", "0.05", "--frameworks", "numpy", "pyxla",
          "--only", "sum_fma", "softmax", "layer_norm", "mlp", "mlp_train", "cnn_train", "dispatch", "--out", str(tmp_path)])
    report = (tmp_path / "report.md").read_text()
    assert "| workload | numpy | pyxla | pyxla / best peer |" in report
    data = json.loads((tmp_path / "report.json").read_text())
    pyxla = next(r for r in data["runs"] if r["framework"] == "pyxla")
    for name in ("sum_fma", "softmax", "layer_norm", "mlp", "mlp_train", "cnn_train", "dispatch"):
        entry = pyxla["results"][name]
        assert entry.get("correct"), (name, entry)
        assert entry["median_s"] > 0 and entry["first_call_s"] > 0
    assert set(data["ceilings"]) == {"copy_gb_per_s", "triad_gb_per_s", "sgemm_gflops"}
    share = data["others_cpu_share"]
    assert share is None or 0 <= share <= 1


def test_every_part_of_a_loss_and_its_gradients_is_checked():
    import numpy as np

    from benchmarks.runner import check
    want = (np.float64(2.0), np.ones((3, 2)), np.arange(2.0))
    assert check((np.float32(2.0), np.ones((3, 2), np.float32), np.arange(2, dtype=np.float32)), want, 1e-3)[1]
    wrong_grad = (np.float32(2.0), np.ones((3, 2), np.float32), np.array([0.0, 2.0], np.float32))
    error, correct = check(wrong_grad, want, 1e-3)
    assert not correct and error == 1.0
    assert check((np.float32(2.0),), want, 1e-3) == (float("inf"), False)


def test_a_framework_without_a_workload_reports_it_unsupported(monkeypatch, tmp_path):
    import sys
    import types

    from benchmarks.report import write_report
    from benchmarks.runner import run_framework
    fake = types.ModuleType("benchmarks.frameworks.fake_impl")
    fake.NAME, fake.version, fake.BUILDERS = "fake", lambda: "1", {}
    monkeypatch.setitem(sys.modules, "benchmarks.frameworks.fake_impl", fake)
    run = run_framework("fake", 0.05, 0.01, ["mlp_train"])
    assert run["results"] == {"mlp_train": {"unsupported": "fake has no mlp_train workload"}}
    report = write_report([run], {"copy_gb_per_s": 1, "triad_gb_per_s": 1, "sgemm_gflops": 1}, tmp_path,
                          (0, 0, 0), (0, 0, 0))
    assert "| mlp_train | n/a |" in report and "fails" not in report


@pytest.mark.parametrize("share,busy", [(0.5, True), (0.01, False)])
def test_report_says_when_other_processes_took_the_cpus(tmp_path, share, busy):
    from benchmarks.report import write_report
    report = write_report([], {"copy_gb_per_s": 1, "triad_gb_per_s": 1, "sgemm_gflops": 1}, tmp_path,
                          (0, 0, 0), (3, 3, 3), others_share=share)
    assert f"Other processes used {100 * share:.0f}% of the CPUs" in report
    assert ("BUSY" in report) == busy


def test_onnx_light_models_are_timed_and_checked(tmp_path):
    pytest.importorskip("onnx")
    from benchmarks.onnx_models import run_models
    from benchmarks.report import write_report

    run = run_models("pyxla", budget=0.01, only=["squeezenet"])
    entry = run["results"]["squeezenet"]
    assert entry.get("correct"), entry
    assert entry["median_s"] > 0 and entry["repeats"] >= 3 and entry["first_call_s"] >= entry["median_s"]
    peer = {"framework": "onnxruntime", "results": {"squeezenet": dict(entry, median_s=2 * entry["median_s"])}}
    report = write_report([], {"copy_gb_per_s": 1, "triad_gb_per_s": 1, "sgemm_gflops": 1}, tmp_path,
                          (0, 0, 0), (0, 0, 0), [run, peer])
    assert "| squeezenet |" in report and "| 0.50 |" in report
    assert json.loads((tmp_path / "report.json").read_text())["onnx_models"]["summary"]["squeezenet"] == 0.5


def test_model_rounds_pool_their_timings_and_keep_failures():
    from benchmarks.onnx_models import merge_rounds
    first = {"framework": "pyxla", "version": "1", "results": {
        "a": {"first_call_s": 2.0, "correct": True, "times_s": [3.0, 1.0], "median_s": 2.0},
        "b": {"first_call_s": 1.0, "correct": True, "times_s": [1.0], "median_s": 1.0}}}
    second = {"framework": "pyxla", "version": "1", "results": {
        "a": {"first_call_s": 0.5, "correct": True, "times_s": [5.0, 4.0, 6.0], "median_s": 5.0},
        "b": {"error": "RuntimeError: out of memory"}}}
    crashed = {"framework": "pyxla", "unavailable": "process failed: killed", "results": {}}
    merged = merge_rounds([crashed, first, second])
    a = merged["results"]["a"]
    assert a["median_s"] == 4.0 and a["repeats"] == 5 and a["first_call_s"] == 2.0
    assert merged["results"]["b"] == {"error": "RuntimeError: out of memory"}
    assert merged["version"] == "1" and "unavailable" not in merged


def test_each_model_runs_on_both_frameworks_back_to_back(tmp_path, monkeypatch):
    """Model by model, the two frameworks one right after the other, the order reversed in
    the second round: the machine's drift stays out of a model's ratio."""
    import benchmarks.__main__ as bench
    calls = []

    def fake_process(framework, path, env, module, *args):
        name = args[args.index("--only") + 1]
        calls.append((framework, name))
        return {"framework": framework, "results": {name: {"first_call_s": 1.0, "correct": True,
                                                           "times_s": [len(calls) * 1.0], "median_s": 1.0}}}

    monkeypatch.setattr(bench, "_run_process", fake_process)
    runs = bench._interleaved_model_runs(["resnet50", "squeezenet"], {}, tmp_path, 1.0)
    assert calls == [("pyxla", "resnet50"), ("onnxruntime", "resnet50"), ("pyxla", "squeezenet"),
                     ("onnxruntime", "squeezenet"), ("onnxruntime", "resnet50"), ("pyxla", "resnet50"),
                     ("onnxruntime", "squeezenet"), ("pyxla", "squeezenet")]
    pyxla = next(r for r in runs if r["framework"] == "pyxla")
    assert pyxla["results"]["resnet50"]["times_s"] == [1.0, 6.0]
    assert json.loads((tmp_path / "pyxla-onnx-models.json").read_text())["rounds"] == 2


@pytest.mark.parametrize("name", ["mlp_train", "cnn_train"])
def test_hand_written_backward_passes_match_autodiff(name):
    """The float64 references of the training workloads (forward and backward written out in
    NumPy) against pyxla.value_and_grad of the same loss on the reference interpreter."""
    import numpy as np

    import pyxla
    from benchmarks.frameworks import pyxla_impl
    from benchmarks.workloads import BY_NAME
    ins = [a.astype(np.float64) for a in BY_NAME[name].make_inputs(np.random.default_rng(), 0.125)]
    want = BY_NAME[name].reference(*ins)
    loss, keys = ((pyxla_impl.mlp_loss, pyxla_impl.PARAMS) if name == "mlp_train"
                  else (pyxla_impl.cnn_loss, pyxla_impl.CNN_PARAMS))
    value, grads = pyxla.jit(pyxla.value_and_grad(loss), backend="interpreter")(dict(zip(keys, ins[1:5])), ins[0],
                                                                                 ins[5])
    for got, ref in zip((value, *(grads[k] for k in keys)), want):
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_a_wrong_pyxla_result_gets_no_ratio():
    """A wrong answer has no speed: neither the workload ratio nor the ONNX ratio is printed."""
    from benchmarks.report import summarize, summarize_models
    from benchmarks.workloads import WORKLOADS

    name = WORKLOADS[0].name
    runs = [{"framework": "pyxla", "results": {name: {"median_s": 1.0, "correct": False}}},
            {"framework": "jax", "results": {name: {"median_s": 2.0, "correct": True}}}]
    assert summarize(runs)[name]["pyxla_over_best_peer"] is None
    runs[0]["results"][name]["correct"] = True
    assert summarize(runs)[name]["pyxla_over_best_peer"] == 0.5
    models = [{"framework": "pyxla", "results": {"m": {"median_s": 1.0, "correct": False}}},
              {"framework": "onnxruntime", "results": {"m": {"median_s": 2.0}}}]
    assert summarize_models(models)["m"]["pyxla_over_onnxruntime"] is None


def test_cotenancy_scenario_times_pyxla_after_another_librarys_call(tmp_path, monkeypatch):
    from benchmarks import cotenancy
    from benchmarks.cotenancy import run
    from benchmarks.report import write_report
    monkeypatch.setattr(cotenancy, "SETTLE_S", cotenancy.SETTLE_S)
    monkeypatch.setattr(cotenancy, "SPIN_WINDOWS_S", cotenancy.SPIN_WINDOWS_S)
    cotenancy.set_settle(0.01)   # (the harness checked, not the machine measured)
    result = run(rounds=2, calls=2, models=[], peers=["numpy"], scale=0.05)
    mlp = result["results"]["mlp"]
    assert set(mlp) == {"alone", "numpy", "correct"} and mlp["correct"] is True
    assert mlp["alone"]["ratio"] == 1.0 and mlp["numpy"]["ratio"] > 0
    assert mlp["numpy"]["ratio_min"] <= mlp["numpy"]["ratio"] <= mlp["numpy"]["ratio_max"]
    assert mlp["numpy"]["foreign_cores"] >= 0 and mlp["numpy"]["own_cores"] >= 0 and mlp["numpy"]["own_waiting"] >= 0
    report = write_report([], {"copy_gb_per_s": 1, "triad_gb_per_s": 1, "sgemm_gflops": 1}, tmp_path,
                          (0, 0, 0), (0, 0, 0), cotenancy={"default": result})
    assert "| workload | alone | after numpy |" in report and "| mlp |" in report
    assert len(result["spin_after"]["numpy"]) == 6 and "| numpy |" in report and "| pyxla (mlp) |" in report


def test_cotenancy_with_idle_peers_restarts_with_their_settings(tmp_path):
    import subprocess
    import sys

    from benchmarks.cotenancy import IDLE_PEERS_ENVIRONMENT
    subprocess.run([sys.executable, "-m", "benchmarks.cotenancy", "--idle-peers", "--rounds", "1", "--calls", "1",
                    "--models", "--peers", "numpy", "--scale", "0.05", "--settle-s", "0.01", "--out", str(tmp_path)], check=True,
                   capture_output=True, env={k: v for k, v in os.environ.items() if k not in IDLE_PEERS_ENVIRONMENT})
    result = json.loads((tmp_path / "cotenancy-idle-peers.json").read_text())
    assert result["idle_peers"] is True and set(result["results"]["mlp"]) == {"alone", "numpy", "correct"}


def test_pyxla_through_torch_compile_is_not_a_peer():
    """torch.compile(backend="pyxla") runs pyxla's own kernels: the best peer is another
    framework even where that one is faster."""
    from benchmarks.report import summarize
    from benchmarks.workloads import WORKLOADS

    name = WORKLOADS[0].name
    runs = [{"framework": "pyxla", "results": {name: {"median_s": 1.0, "correct": True}}},
            {"framework": "torch_pyxla", "results": {name: {"median_s": 0.9, "correct": True}}},
            {"framework": "torch", "results": {name: {"median_s": 2.0, "correct": True}}}]
    row = summarize(runs)[name]
    assert row["best_peer"] == "torch" and row["pyxla_over_best_peer"] == 0.5
