"""The pyxla command line: run, fmt and check."""
import shutil
import subprocess
import sys
from importlib import resources

import numpy as np

from pyxla.cli import main
from pyxla.conformance import corpus_case_dirs

EXAMPLE = resources.files("pyxla.examples").joinpath("mlp_softmax.hlo")


def _example_inputs(rng, path):
    args = {"arg0": rng.standard_normal((256, 512)), "arg1": rng.standard_normal((512, 1024)) / 20,
            "arg2": rng.standard_normal(1024), "arg3": rng.standard_normal((1024, 10)) / 30}
    args = {k: v.astype(np.float32) for k, v in args.items()}
    np.savez(path, **args)
    return args


def test_run_writes_outputs(tmp_path, rng, capsys):
    args = _example_inputs(rng, tmp_path / "in.npz")
    assert main(["run", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    printed = capsys.readouterr().out
    assert "out0: float32[256, 10]" in printed
    with np.load(tmp_path / "out.npz") as z:
        probs = z["out0"]
    x, w1, b1, w2 = (args[f"arg{i}"].astype(np.float64) for i in range(4))
    logits = np.tanh(x @ w1 + b1) @ w2
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(probs, e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_run_quiet_prints_nothing(tmp_path, rng, capsys):
    _example_inputs(rng, tmp_path / "in.npz")
    assert main(["run", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"), "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_run_names_missing_argument(tmp_path, rng, capsys):
    np.savez(tmp_path / "in.npz", arg0=rng.standard_normal((256, 512)).astype(np.float32))
    assert main(["run", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert "has no arg1 for parameter w1 (f32[512,1024])" in capsys.readouterr().err


def test_run_names_wrong_shape(tmp_path, rng, capsys):
    args = _example_inputs(rng, tmp_path / "in.npz")
    args["arg2"] = rng.standard_normal(31).astype(np.float32)
    np.savez(tmp_path / "in.npz", **args)
    assert main(["run", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert "parameter b1: expected shape f32[1024]" in capsys.readouterr().err


def test_malformed_text_reports_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text(EXAMPLE.read_text().replace("tanh(biased)", "tanh(biased]"))
    assert main(["fmt", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:23:" in err and "ParseError" in err


def test_fmt_round_trips(tmp_path, capsys):
    assert main(["fmt", str(EXAMPLE)]) == 0
    once = capsys.readouterr().out
    (tmp_path / "once.hlo").write_text(once)
    assert main(["fmt", str(tmp_path / "once.hlo")]) == 0
    assert capsys.readouterr().out == once


def test_check_reports_summary_line(tmp_path):
    # A corpus of two real cases, through the installed entry point.
    cases = corpus_case_dirs()[:2]
    for c in cases:
        (tmp_path / c.name).symlink_to(c)
    proc = subprocess.run([sys.executable, "-m", "pyxla", "check", str(tmp_path), "--level", "module"],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "2 passed, 0 failed", proc.stdout + proc.stderr
    assert proc.returncode == 0


def test_emit_writes_ptx_for_every_kernel(tmp_path, rng):
    out = tmp_path / "k.ptx"
    assert main(["emit", str(EXAMPLE), "-o", str(out), "--arch", "sm_80"]) == 0
    ptx = out.read_text()
    assert ".target sm_80" in ptx and ptx.count(".entry") >= 2
    ptxas = shutil.which("ptxas")
    if ptxas:
        done = subprocess.run([ptxas, "-arch=sm_80", str(out), "-o", str(tmp_path / "k.cubin")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert main(["emit", str(EXAMPLE), "--format", "llvm", "-o", str(tmp_path / "k.ll")]) == 0
    assert "ptx_kernel" in (tmp_path / "k.ll").read_text()


def test_emit_names_an_op_the_gpu_backend_refuses(tmp_path, capsys):
    module = tmp_path / "cholesky.hlo"
    module.write_text("HloModule m\nENTRY e {\n  x = f32[4,4] parameter(0)\n"
                      "  ROOT c = f32[4,4] cholesky(x), lower=true\n}\n")
    assert main(["emit", str(module)]) == 2
    assert "cannot emit cholesky" in capsys.readouterr().err
