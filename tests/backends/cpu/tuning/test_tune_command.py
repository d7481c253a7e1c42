"""`pyxla tune` and PYXLA_AUTOTUNE=1: the search in a child process, its winners in the
database, the next compile using them. The budget is too small to try candidates, so what
is asserted is the path, not which candidate is fastest here."""
import numpy as np
import pytest

from pyxla.backends.cpu.tuning import database
from pyxla.backends.cpu.tuning.params import to_json
from pyxla.backends.cpu.tuning.selection import parameters_of
from pyxla.cli import main

from .programs import CONV, compile_text, conv_inputs, conv_reference


def test_pyxla_tune_records_every_kernel_and_the_next_compile_uses_it(tmp_path, capsys):
    path = tmp_path / "conv.hlo"
    path.write_text(CONV)
    assert main(["tune", str(path), "--budget", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 tunable kernels" in out and "convolution f32[2,16,16,16]" in out
    db = database.load()
    (key,) = db.kernels
    record = db.kernels[key]
    assert record.program == str(path) and record.seconds > 0 and record.default_seconds > 0
    exe = compile_text(CONV)
    assert parameters_of(exe) == {key: to_json(record.params)}
    x, w = conv_inputs(np.random.default_rng(8))
    want = conv_reference(x, w)
    np.testing.assert_allclose(exe.run_flat([x, w])[0], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert main(["tune", "--show"]) == 0
    assert key in capsys.readouterr().out


def test_pyxla_tune_needs_a_program(capsys):
    assert main(["tune"]) == 2
    assert "give programs" in capsys.readouterr().err


def test_autotune_at_compile_time(monkeypatch):
    monkeypatch.setenv("PYXLA_AUTOTUNE", "1")
    monkeypatch.setenv("PYXLA_AUTOTUNE_BUDGET", "1")
    exe = compile_text(CONV)
    db = database.load()
    (key,) = db.kernels
    assert parameters_of(exe) == {key: to_json(db.kernels[key].params)}
    monkeypatch.delenv("PYXLA_AUTOTUNE")
    assert parameters_of(compile_text(CONV)) == {key: to_json(db.kernels[key].params)}


def test_autotune_without_a_cache_directory_warns_and_compiles(monkeypatch):
    monkeypatch.setenv("PYXLA_AUTOTUNE", "1")
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    with pytest.warns(RuntimeWarning, match="needs the on-disk cache"):
        exe = compile_text(CONV)
    assert parameters_of(exe) == {}
    x, w = conv_inputs(np.random.default_rng(10))
    want = conv_reference(x, w)
    np.testing.assert_allclose(exe.run_flat([x, w])[0], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
