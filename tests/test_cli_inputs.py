"""`pyxla run --inputs FILE` with a file that is not an .npz archive of plain arrays: the
command names the file and the reason and exits 2, with no NumPy traceback."""
from importlib import resources

import numpy as np
import pytest

from pyxla.cli import main

EXAMPLE = str(resources.files("pyxla.examples").joinpath("mlp_softmax.hlo"))


def _run(path, capsys):
    code = main(["run", EXAMPLE, "--inputs", str(path)])
    return code, capsys.readouterr().err


def test_text_file(tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_text("not an archive\n")
    code, err = _run(path, capsys)
    assert code == 2
    assert str(path) in err and "not an .npz archive" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04garbage", b"\x80\x04K\x01."])
def test_damaged_or_empty_file(tmp_path, capsys, content):
    path = tmp_path / "in.npz"
    path.write_bytes(content)
    code, err = _run(path, capsys)
    assert code == 2
    assert str(path) in err and "not an .npz archive" in err


def test_npy_file(tmp_path, capsys):
    path = tmp_path / "in.npy"
    np.save(path, np.ones(3, np.float32))
    code, err = _run(path, capsys)
    assert code == 2
    assert str(path) in err and "single .npy array" in err


def test_object_array(tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, arg0=np.array([1, "a", None], dtype=object))
    code, err = _run(path, capsys)
    assert code == 2
    assert str(path) in err and "'arg0'" in err and "object arrays" in err


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "absent.npz"
    code, err = _run(path, capsys)
    assert code == 2
    assert str(path) in err


def test_run_onnx_reads_inputs_the_same_way(tmp_path, capsys):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = tmp_path / "m.onnx"
    model.write_bytes(helper.make_model(graph).SerializeToString())
    path = tmp_path / "in.npz"
    np.savez(path, x=np.array([None, 1], dtype=object))
    assert main(["run-onnx", str(model), "--inputs", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'x'" in err
