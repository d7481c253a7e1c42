"""Reading model files: malformed input is an OnnxImportError, external data is read only
from the model's own directory."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pyxla.onnx  # noqa: E402
from pyxla.importers.onnx.registry import OnnxImportError  # noqa: E402


def _add_weight_model(w: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(w.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(w.shape))],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _external(model: onnx.ModelProto, location: str, offset: int = 0, length: int | None = None) -> onnx.ModelProto:
    """The model with its initializer pointing at `location` instead of holding its data."""
    tensor = model.graph.initializer[0]
    size = len(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length or size))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model


def test_external_data_in_the_model_directory_is_read(rng, tmp_path):
    w = rng.standard_normal((4, 5)).astype(np.float32)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16 + w.tobytes())
    model = _external(_add_weight_model(w), "weights.bin", offset=16)
    onnx.save(model, tmp_path / "m.onnx")
    x = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_array_equal(pyxla.onnx.load(tmp_path / "m.onnx")(x=x)["y"], x + w)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(w.tobytes())
    onnx.save(_external(_add_weight_model(w), "sub/w.bin"), tmp_path / "m2.onnx")
    np.testing.assert_array_equal(pyxla.onnx.load(tmp_path / "m2.onnx")(x=x)["y"], x + w)


@pytest.mark.parametrize("location, match", [
    ("/etc/passwd", "absolute path"),
    ("../secret.bin", "leaves the model's directory"),
    ("sub/../../secret.bin", "leaves the model's directory"),
    ("missing.bin", "does not exist"),
])
def test_external_data_outside_the_model_directory_refused(rng, tmp_path, location, match):
    w = rng.standard_normal(8).astype(np.float32)
    (tmp_path / "secret.bin").write_bytes(w.tobytes())
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    onnx.save(_external(_add_weight_model(w), location), model_dir / "m.onnx")
    with pytest.raises(OnnxImportError, match=match):
        pyxla.onnx.load(model_dir / "m.onnx")


def test_external_data_symlink_out_of_the_directory_refused(rng, tmp_path):
    w = rng.standard_normal(8).astype(np.float32)
    (tmp_path / "secret.bin").write_bytes(w.tobytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    os.symlink(tmp_path / "secret.bin", model_dir / "link.bin")
    onnx.save(_external(_add_weight_model(w), "link.bin"), model_dir / "m.onnx")
    with pytest.raises(OnnxImportError, match="outside the model's directory"):
        pyxla.onnx.load(model_dir / "m.onnx")


def test_external_data_past_the_end_of_the_file_refused(rng, tmp_path):
    w = rng.standard_normal(8).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(w.tobytes()[:10])
    onnx.save(_external(_add_weight_model(w), "w.bin"), tmp_path / "m.onnx")
    with pytest.raises(OnnxImportError, match="has 10 bytes"):
        pyxla.onnx.load(tmp_path / "m.onnx")


def test_external_data_of_an_in_memory_model_needs_a_directory(rng):
    model = _external(_add_weight_model(rng.standard_normal(3).astype(np.float32)), "w.bin")
    with pytest.raises(OnnxImportError, match="load the model from its path"):
        pyxla.onnx.load(model)


# --- malformed files ------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(OnnxImportError, match="cannot read ONNX model"):
        pyxla.onnx.load(tmp_path / "nothing.onnx")


@pytest.mark.parametrize("data", [b"", b"not a model at all \xff\xfe", bytes(range(256)) * 4])
def test_garbage_bytes_refused(tmp_path, data):
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(OnnxImportError):
        pyxla.onnx.load(path)


def test_truncated_model_refused(rng, tmp_path):
    data = _add_weight_model(rng.standard_normal((16, 16)).astype(np.float32)).SerializeToString()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 7):
        with pytest.raises(OnnxImportError):
            pyxla.onnx.load(data[:cut])


def test_tensor_with_wrong_data_size_refused(rng):
    model = _add_weight_model(rng.standard_normal(8).astype(np.float32))
    model.graph.initializer[0].raw_data = b"\0" * 12       # 3 floats for a tensor of 8
    with pytest.raises(OnnxImportError, match="initializer 'w'|tensor 'w'"):
        pyxla.onnx.load(model, check=False)


def test_checker_failure_is_an_import_error(rng):
    model = _add_weight_model(rng.standard_normal(3).astype(np.float32))
    model.graph.node[0].input[1] = "undefined_value"
    with pytest.raises(OnnxImportError, match="malformed"):
        pyxla.onnx.load(model)


def test_not_a_model_type():
    with pytest.raises(OnnxImportError, match="not a int"):
        pyxla.onnx.load(42)
