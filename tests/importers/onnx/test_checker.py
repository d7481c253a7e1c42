"""Models onnx.checker's full check (with strict shape and type inference) or onnxruntime
refuse are refused by the importer too, each an OnnxImportError saying why and naming the
node; valid models the check alone would trip over still load."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import pyxla.onnx  # noqa: E402
from pyxla.onnx import OnnxImportError  # noqa: E402

vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _conv(w, b=None, opset=17):
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    return _model([helper.make_node("Conv", inputs, ["y"], name="conv1")],
                  [vi("x", T.FLOAT, [1, 1, 4, 4])], [vi("y", T.FLOAT, [1, 1, 2, 2])],
                  [w] + ([b] if b is not None else []), opset)


def test_conv_with_int32_weights_refused():
    model = _conv(numpy_helper.from_array(np.ones((1, 1, 3, 3), np.int32), "w"))
    with pytest.raises(OnnxImportError, match=r"malformed.*conv1.*Conv.*tensor\(int32\)"):
        pyxla.onnx.load(model)


def test_conv_with_uint4_bias_refused():
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    model = _conv(w, helper.make_tensor("b", T.UINT4, [1], [1]), opset=21)
    with pytest.raises(OnnxImportError, match=r"malformed.*Conv.*tensor\(uint4\)"):
        pyxla.onnx.load(model)


def test_gemm_with_uint4_c_refused():
    model = _model([helper.make_node("Gemm", ["a", "b", "c"], ["y"])],
                   [vi("a", T.FLOAT, [2, 2]), vi("b", T.FLOAT, [2, 2])], [vi("y", T.FLOAT, [2, 2])],
                   [helper.make_tensor("c", T.UINT4, [2], [1, 2])], opset=21)
    # the node is unnamed: the message names it by op type and index
    with pytest.raises(OnnxImportError, match=r"malformed: node 'Gemm #0' \(Gemm\).*tensor\(uint4\)"):
        pyxla.onnx.load(model)


def test_gather_with_float_indices_refused():
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"])],
                   [vi("x", T.FLOAT, [3, 2])], [vi("y", T.FLOAT, [2, 2])],
                   [numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "i")])
    with pytest.raises(OnnxImportError, match=r"Gather.*indices.*tensor\(float\)"):
        pyxla.onnx.load(model)


def test_two_dimensional_reshape_shape_refused():
    # the checker's inference lets it through; onnxruntime fails when it runs
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                   [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [3, 2])],
                   [numpy_helper.from_array(np.array([[3, 2]], np.int64), "s")])
    with pytest.raises(OnnxImportError, match=r"node 'r' \(Reshape.*shape input must be 1-D, got shape \(1, 2\)"):
        pyxla.onnx.load(model)(np.ones((2, 3), np.float32))


def _loop(cond_shape, body_cond_shape):
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, body_cond_shape), vi("v_in", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, body_cond_shape), vi("v_out", T.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "one")])
    return _model([helper.make_node("Loop", ["n", "c", "v"], ["r"], body=body, name="loop")],
                  [vi("v", T.FLOAT, [2]), vi("c", T.BOOL, cond_shape)], [vi("r", T.FLOAT, [2])],
                  [numpy_helper.from_array(np.array(3, np.int64), "n")])


def test_loop_condition_of_shape_1_for_a_scalar_body_condition_refused():
    with pytest.raises(OnnxImportError, match=r"malformed: node 'loop' \(Loop\).*rank"):
        pyxla.onnx.load(_loop([1], []))


def test_consistent_loop_condition_runs():
    for shape in ([], [1]):
        out = pyxla.onnx.load(_loop(shape, shape))(v=np.zeros(2, np.float32), c=np.ones(shape, bool))
        np.testing.assert_array_equal(out["r"], [3.0, 3.0])


def test_opset_newer_than_onnx_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])],
                   opset=99)
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(OnnxImportError, match=rf"opset 99 of the default domain.*up to {newest}"):
        pyxla.onnx.load(model)
    with pytest.raises(OnnxImportError, match="opset 99"):      # not a checker matter: always refused
        pyxla.onnx.load(model, check=False)


def test_function_operator_with_a_defaulted_attribute_loads():
    # ONNX's inference leaves MeanVarianceNormalization's default `axes` out of its body, so
    # the full check alone refuses this valid model (ONNX's own test_mvn)
    model = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
                   [vi("x", T.FLOAT, [2, 3, 2, 2])], [vi("y", T.FLOAT, [2, 3, 2, 2])], opset=13)
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype(np.float32)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(pyxla.onnx.load(model)(x)["y"], want, rtol=1e-4, atol=1e-5)


def test_function_operator_with_a_bad_attribute_still_refused():
    model = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[7])],
                   [vi("x", T.FLOAT, [2, 3, 2, 2])], [vi("y", T.FLOAT, [2, 3, 2, 2])], opset=13)
    with pytest.raises(OnnxImportError, match="malformed.*MeanVarianceNormalization"):
        pyxla.onnx.load(model)


def _given_as(model, form: str, tmp_path):
    if form == "proto":
        return model
    data = model.SerializeToString()
    if form == "bytes":
        return data
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("form", ["proto", "bytes", "path"])
def test_the_checker_reads_the_bytes_given(form, tmp_path, monkeypatch, rng):
    """A model given as bytes or a file is checked from those bytes (not serialized again:
    seconds for a large model), a ModelProto from itself; either way the same refusal, and
    a valid model that needs the function-defaults retry still loads."""
    checked = []
    check = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m, **kw: checked.append(m) or check(m, **kw))
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")   # (no load index: every load checks)
    bad = _conv(numpy_helper.from_array(np.ones((1, 1, 3, 3), np.int32), "w"))
    with pytest.raises(OnnxImportError, match=r"malformed.*conv1.*Conv.*tensor\(int32\)"):
        pyxla.onnx.load(_given_as(bad, form, tmp_path))
    if form == "proto":
        assert isinstance(checked[0], onnx.ModelProto)
    else:
        assert checked[0] == bad.SerializeToString()
    mvn = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
                 [vi("x", T.FLOAT, [2, 3, 2, 2])], [vi("y", T.FLOAT, [2, 3, 2, 2])], opset=13)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(pyxla.onnx.load(_given_as(mvn, form, tmp_path))(x)["y"], want, rtol=1e-4, atol=1e-5)
