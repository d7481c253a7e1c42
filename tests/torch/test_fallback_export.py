"""A graph with an op pyxla cannot lower runs in eager PyTorch with a warning naming the op;
PYXLA_DEBUG=torch shows graphs and HLO; pyxla.torch.export gives HLO that pyxla's parser
reads back and runs to eager's result."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import pyxla.torch as pt  # noqa: E402
from pyxla.cli import main  # noqa: E402
from pyxla.hlo.parser import parse_module  # noqa: E402
from pyxla.hlo.printer import print_module  # noqa: E402

from .conftest import assert_close  # noqa: E402


def test_unsupported_op_falls_back_with_a_warning(seed):
    def f(x):
        return torch.special.i0(x) * 2 + torch.tanh(x)   # i0: no lowering
    x = torch.randn(5, 3)
    with pytest.warns(pt.PyxlaFallbackWarning, match=r"i0"):
        got = torch.compile(f, backend="pyxla")(x)
    assert_close(got, f(x))


def test_registered_ops_are_the_table(seed):
    assert "addmm.default" in pt.LOWERINGS and "convolution_backward.default" in pt.LOWERINGS
    assert "i0.default" not in pt.LOWERINGS


def test_debug_prints_graph_and_hlo(seed, monkeypatch, capsys):
    monkeypatch.setenv("PYXLA_DEBUG", "torch")
    x = torch.randn(3, 4)
    got = torch.compile(lambda x: torch.relu(x) * 3, backend="pyxla")(x)
    assert_close(got, torch.relu(x) * 3)
    err = capsys.readouterr().err
    assert "pyxla torch:" in err and "aten.relu" in err and "HloModule" in err


def test_export_mlp_hlo_round_trip(seed, tmp_path):
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3)).eval()
    x = torch.randn(4, 6)
    text = print_module(pt.export(model, (x,)))
    assert text.startswith("HloModule") and "dot(" in text
    parse_module(text)                                   # pyxla's parser reads it back
    (tmp_path / "mlp.hlo").write_text(text)
    np.savez(tmp_path / "in.npz", arg0=x.numpy())
    want = model(x).detach().numpy()
    for backend in ("interpreter", "cpu"):               # as `pyxla run` runs it
        out = tmp_path / f"out-{backend}.npz"
        assert main(["run", str(tmp_path / "mlp.hlo"), "--inputs", str(tmp_path / "in.npz"), "--out", str(out),
                     "--backend", backend, "--quiet"]) == 0
        np.testing.assert_allclose(np.load(out)["out0"], want, rtol=1e-5, atol=1e-5)
