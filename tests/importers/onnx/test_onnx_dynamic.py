"""pyxla.onnx.load(model, dynamic=True): dim_param inputs become dimension symbols; the graph
is traced once and compiled once per size bucket. Compared with onnxruntime and NumPy."""
import contextlib
import re
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pyxla.onnx  # noqa: E402
from pyxla.errors import ArgumentError  # noqa: E402

SIZES = (1, 4, 3, 9, 2, 17, 6, 33)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _buckets(sizes):
    """The default buckets the sizes fall in: powers of two from 16 up."""
    return {max(16, 1 << max(0, n - 1).bit_length()) for n in sizes}


def test_mlp_with_symbolic_batch(capsys, monkeypatch):
    rng = np.random.default_rng(0)
    w1, b1 = rng.standard_normal((10, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    model = _model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
         helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
         helper.make_node("ReduceSum", ["logits"], ["total"], keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
        [("w1", w1), ("b1", b1), ("w2", w2)])
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    capsys.readouterr()
    loaded = pyxla.onnx.load(model, dynamic=True)
    for n in SIZES:
        x = rng.standard_normal((n, 10)).astype(np.float32)
        out = loaded(x=x)
        y_ref, total_ref = _onnxruntime(model, {"x": x})
        assert out["y"].shape == (n, 4)
        np.testing.assert_allclose(out["y"], y_ref, rtol=1e-5, atol=1e-6)
        logits = np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2   # the reduction over the padded batch
        np.testing.assert_allclose(out["total"], logits.sum(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out["total"], total_ref, rtol=1e-4, atol=1e-4)
    log = capsys.readouterr().err
    assert len(re.findall("pyxla: tracing", log)) == 1, log
    assert len(re.findall("pyxla: compiling", log)) == len(_buckets(SIZES)) == loaded.polymorphic.compile_count


def _attention_model(rng, d=8):
    """Self-attention over a symbolic sequence length, with a mask input sharing it."""
    wq, wk, wv = (rng.standard_normal((d, d)).astype(np.float32) * 0.5 for _ in range(3))
    scale = np.asarray(1.0 / np.sqrt(d), np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Unsqueeze", ["mask", "one"], ["m3"]),   # batch x 1 x seq
        helper.make_node("Add", ["ss", "m3"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("ReduceMean", ["o"], ["pooled"], axes=[1], keepdims=0),
    ]
    model = _model(nodes,
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d]),
                    helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"])],
                   [helper.make_tensor_value_info("o", TensorProto.FLOAT, ["batch", "seq", d]),
                    helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", d])],
                   [("wq", wq), ("wk", wk), ("wv", wv), ("scale", scale), ("one", np.asarray([1], np.int64))])
    return model


def test_attention_with_symbolic_sequence_length(capsys, monkeypatch):
    rng = np.random.default_rng(1)
    model = _attention_model(rng)
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    capsys.readouterr()
    loaded = pyxla.onnx.load(model, dynamic=True)
    for s in SIZES:
        x = rng.standard_normal((2, s, 8)).astype(np.float32)
        mask = np.where(rng.random((2, s)) < 0.3, -1e4, 0.0).astype(np.float32)
        mask[:, 0] = 0.0
        out = loaded(x=x, mask=mask)
        o_ref, pooled_ref = _onnxruntime(model, {"x": x, "mask": mask})
        assert out["o"].shape == (2, s, 8)
        np.testing.assert_allclose(out["o"], o_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["pooled"], pooled_ref, rtol=1e-4, atol=1e-5)
    log = capsys.readouterr().err
    assert len(re.findall("pyxla: tracing", log)) == 1, log
    assert loaded.polymorphic.compile_count == len(_buckets(SIZES)), log
    assert "batch<=16, seq<=64 (size batch=2, seq=33)" in log   # the smallest default bucket is 16


def test_symbolic_inputs_that_disagree_are_an_argument_error():
    loaded = pyxla.onnx.load(_attention_model(np.random.default_rng(2)), dynamic=True)
    with pytest.raises(ArgumentError, match="seq"):
        loaded(x=np.ones((2, 5, 8), np.float32), mask=np.zeros((2, 6), np.float32))
    assert loaded.polymorphic.compile_count == 0


def test_shape_of_a_symbolic_dimension_is_computed_at_run_time():
    model = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
                    helper.make_node("ReduceSum", ["x", "axis0"], ["t"], keepdims=0),
                    helper.make_node("Gather", ["f", "zero"], ["n"], axis=0),
                    helper.make_node("Div", ["t", "n"], ["mean"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                   [helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
                    helper.make_tensor_value_info("mean", TensorProto.FLOAT, [3])],
                   [("zero", np.asarray(0, np.int64)), ("axis0", np.asarray([0], np.int64))])
    loaded = pyxla.onnx.load(model, dynamic=True, size_buckets={"n": (64,)})
    rng = np.random.default_rng(3)
    for n in (1, 5, 64, 20, 2, 33, 7):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        out = loaded(x=x)
        np.testing.assert_array_equal(out["s"], [n, 3])
        np.testing.assert_allclose(out["mean"], x.astype(np.float64).mean(0), rtol=1e-5, atol=1e-6)
    assert loaded.polymorphic.compile_count == 1


def test_reshape_targets_computed_from_symbolic_shapes(capsys, monkeypatch):
    """The `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` chain exporters write for
    multi-head attention, with batch and sequence length both symbolic."""
    rng = np.random.default_rng(4)
    d = 16
    w = rng.standard_normal((d, d)).astype(np.float32)

    def i64(*v):
        return np.asarray(v, np.int64)

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Shape", ["h"], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads", "dh"], ["t4"], axis=0),
        helper.make_node("Reshape", ["h", "t4"], ["h4"]),                        # (b, s, 4, 4)
        helper.make_node("Transpose", ["h4"], ["q"], perm=[0, 2, 1, 3]),         # (b, 4, s, 4)
        helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["o4t"], perm=[0, 2, 1, 3]),
        helper.make_node("Mul", ["s1", "one"], ["s1b"]),                          # arithmetic on a size
        helper.make_node("Concat", ["b1", "s1b", "minus_one"], ["t3"], axis=0),
        helper.make_node("Reshape", ["o4t", "t3"], ["y"]),                        # (b, s, 16)
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),            # a size as a value
        helper.make_node("Div", ["y", "sf"], ["out"]),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                   [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", d]),
                    helper.make_tensor_value_info("shp", TensorProto.INT64, [3])],
                   [("w", w), ("i0", np.asarray(0, np.int64)), ("i1", np.asarray(1, np.int64)), ("ax0", i64(0)),
                    ("heads", i64(4)), ("dh", i64(4)), ("minus_one", i64(-1)), ("one", i64(1))])
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    capsys.readouterr()
    loaded = pyxla.onnx.load(model, dynamic=True, size_buckets={"batch": (4,), "seq": (8, 32)})
    cases = ((2, 3), (1, 7), (3, 5), (4, 1), (1, 8), (2, 20), (3, 32), (1, 9))
    for b, s in cases:
        x = (rng.standard_normal((b, s, d)) * 0.3).astype(np.float32)
        out = loaded(x=x)
        out_ref, shp_ref = _onnxruntime(model, {"x": x})
        assert out["out"].shape == (b, s, d)
        np.testing.assert_allclose(out["out"], out_ref, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(out["shp"], shp_ref)
    log = capsys.readouterr().err
    assert len(re.findall("pyxla: tracing", log)) == 1, log
    assert loaded.polymorphic.buckets() == [{"batch": 4, "seq": 8}, {"batch": 4, "seq": 32}]


def test_torch_exported_transformer_block_with_dynamic_batch_and_sequence():
    """A pre-LN transformer block exported by torch.onnx (TorchScript exporter) with
    dynamic_axes: its Shape/Gather/Concat/Reshape head splitting runs on symbolic sizes."""
    import io
    import math

    torch = pytest.importorskip("torch")
    nn = torch.nn
    d, heads = 32, 4

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ffn = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln1(x)
            q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in (self.q(h), self.k(h), self.v(h)))
            y = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), dim=-1) @ v
            x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
            return x + self.ffn(self.ln2(x))

    torch.manual_seed(0)
    buf = io.BytesIO()
    with _quiet_deprecations():   # the TorchScript exporter is deprecated in torch 2.9+
        torch.onnx.export(Block().eval(), (torch.randn(2, 5, d),), buf, input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17,
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    model = onnx.load_from_string(buf.getvalue())
    assert {"Shape", "Gather", "Concat", "Reshape"} <= {n.op_type for n in model.graph.node}
    loaded = pyxla.onnx.load(model, dynamic=True)
    rng = np.random.default_rng(5)
    for b, s in ((2, 5), (1, 9), (3, 3), (2, 16), (1, 1), (4, 30), (1, 7)):
        x = rng.standard_normal((b, s, d)).astype(np.float32)
        (want,) = _onnxruntime(model, {"x": x})
        np.testing.assert_allclose(loaded(x=x)["y"], want, rtol=1e-4, atol=2e-5)
    assert loaded.polymorphic.trace_count == 1


@contextlib.contextmanager
def _quiet_deprecations():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield
