"""External data is opened once, relative to the model's directory, one path component at a
time without following symlinks, and checked through the descriptor it is read from (a
regular file with one link, long enough): a symlink (even one pointing inside), a symlinked
directory, a hard link, '..', a directory, a missing or short file are each an
OnnxImportError that names the tensor and the file."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pyxla.onnx  # noqa: E402
from pyxla.importers.onnx.registry import OnnxImportError  # noqa: E402

W = np.arange(8, dtype=np.float32)


def _save(model_dir, location: str, offset: int = 0, length: int | None = None):
    graph = helper.make_graph([helper.make_node("Add", ["x", "weights"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                              [numpy_helper.from_array(W, "weights")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length or W.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path = model_dir / "m.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "outside.bin").write_bytes(W.tobytes())
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    return d


def _refused(path, *fragments):
    with pytest.raises(OnnxImportError) as info:
        pyxla.onnx.load(path)
    text = str(info.value)
    assert "'weights'" in text, text
    for fragment in fragments:
        assert fragment in text, text


def test_plain_file_is_read(model_dir):
    (model_dir / "sub" / "w.bin").write_bytes(b"\0" * 4 + W.tobytes())
    path = _save(model_dir, "sub/./w.bin", offset=4)
    np.testing.assert_array_equal(pyxla.onnx.load(path)(x=np.ones(8, np.float32))["y"], W + 1)


def test_symlink_to_outside(model_dir):
    os.symlink(model_dir.parent / "outside.bin", model_dir / "link.bin")
    _refused(_save(model_dir, "link.bin"), "'link.bin'", "symlink")


def test_symlink_to_a_file_inside_is_refused_too(model_dir):
    (model_dir / "real.bin").write_bytes(W.tobytes())
    os.symlink("real.bin", model_dir / "link.bin")
    _refused(_save(model_dir, "link.bin"), "symlink")


def test_symlinked_directory_component(model_dir):
    os.symlink(model_dir.parent, model_dir / "up")
    _refused(_save(model_dir, "up/outside.bin"), "'up'", "symlink")


def test_hard_link_to_outside(model_dir):
    os.link(model_dir.parent / "outside.bin", model_dir / "hard.bin")
    _refused(_save(model_dir, "hard.bin"), "'hard.bin'", "2 hard links")


@pytest.mark.parametrize("location", ["../outside.bin", "sub/../../outside.bin", "sub/..\\..\\outside.bin"])
def test_dot_dot_components(model_dir, location):
    _refused(_save(model_dir, location), "leaves the model's directory")


def test_directory(model_dir):
    _refused(_save(model_dir, "sub"), "'sub'", "not a regular file")


def test_missing_file(model_dir):
    _refused(_save(model_dir, "sub/absent.bin"), "'sub/absent.bin'", "does not exist")


def test_file_too_short_for_offset_and_length(model_dir):
    (model_dir / "short.bin").write_bytes(W.tobytes()[:20])
    _refused(_save(model_dir, "short.bin", offset=8, length=16), "'short.bin'", "has 20 bytes", "8..24")
    _refused(_save(model_dir, "short.bin", offset=24, length=0), "has 20 bytes")
