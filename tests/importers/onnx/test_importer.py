"""The importer framework: loading, inputs and outputs by name, symbolic dimensions, import-time
values, weights as parameters, refusals at load time, function bodies, the CLI."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pyxla.onnx  # noqa: E402
from pyxla.backends.cpu.runtime.executable import FormedArgument  # noqa: E402
from pyxla.errors import ArgumentError  # noqa: E402
from pyxla.importers.onnx import onnx_model  # noqa: E402
from pyxla.importers.onnx.registry import OnnxImportError  # noqa: E402
from pyxla.runtime import memory  # noqa: E402

OPSET = 17


def _model(nodes, inputs, outputs, initializers=(), opset=OPSET, functions=(), extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                             functions=list(functions), ir_version=min(onnx.IR_VERSION, 10))


def _mlp(rng, hidden=64):
    """x[batch, 32] -> Gemm -> Relu -> MatMul -> Softmax, with a dynamic batch dimension."""
    w1 = rng.standard_normal((hidden, 32)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, 10)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10]),
                    helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
                   [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                    numpy_helper.from_array(w2, "w2")])
    return model


def _assert_matches_reference(model, outputs, feeds, rtol=1e-5, atol=1e-6):
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert list(outputs) == [o.name for o in model.graph.output]
    for got, want in zip(outputs.values(), expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_load_from_path_bytes_and_proto(rng, tmp_path):
    model = _mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    for source in (str(path), path, model.SerializeToString(), model):
        m = pyxla.onnx.load(source)
        assert m.input_names == ["x"] and m.output_names == ["probs", "logits"]
        _assert_matches_reference(model, m(x=x), {"x": x}, rtol=1e-4, atol=1e-5)


def test_call_styles_agree(rng):
    model = pyxla.onnx.load(_mlp(rng))
    x = rng.standard_normal((2, 32)).astype(np.float32)
    a, b, c = model(x), model(x=x), model({"x": x})
    for name in model.output_names:
        np.testing.assert_array_equal(a[name], b[name])
        np.testing.assert_array_equal(a[name], c[name])


def test_dynamic_batch_compiles_per_signature(rng):
    onnx_proto = _mlp(rng)
    model = pyxla.onnx.load(onnx_proto)
    for batch in (1, 5, 1):
        x = rng.standard_normal((batch, 32)).astype(np.float32)
        out = model(x=x)
        assert out["probs"].shape == (batch, 10)
        _assert_matches_reference(onnx_proto, out, {"x": x}, rtol=1e-4, atol=1e-5)
    assert len(model._compiled) == 2


def test_symbolic_dimensions_must_agree(rng):
    nodes = [helper.make_node("Add", ["a", "b"], ["c"])]
    model = pyxla.onnx.load(_model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
                                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
                                   [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n", 3])]))
    a = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(model(a=a, b=a)["c"], a + a)
    with pytest.raises(ArgumentError, match="'n'.*input 'a' gave n = 4|n = 4"):
        model(a=a, b=a[:2])


def test_input_errors_name_the_input(rng):
    model = pyxla.onnx.load(_mlp(rng))
    x = rng.standard_normal((2, 32)).astype(np.float32)
    with pytest.raises(ArgumentError, match="missing input 'x'"):
        model()
    with pytest.raises(ArgumentError, match="no input 'y'"):
        model(x=x, y=x)
    with pytest.raises(ArgumentError, match="'x'.*float32.*float64"):
        model(x=x.astype(np.float64))
    with pytest.raises(ArgumentError, match="dimension 1 must be 32"):
        model(x=x[:, :5])
    with pytest.raises(ArgumentError, match="rank 2"):
        model(x=x[0])


def test_large_weights_become_parameters_and_small_ones_constants(rng):
    model = pyxla.onnx.load(_mlp(rng, hidden=256))      # w1: 256x32 = 8192 elements
    x = rng.standard_normal((2, 32)).astype(np.float32)
    sig = model.compile({"x": x})
    assert onnx_model.PARAMETER_MIN_ELEMENTS <= 256 * 32
    params = sig.module.entry.parameters
    sizes = sorted(p.shape.size for p in params[1:])
    assert sizes == ([256 * 10, 256 * 32] if onnx_model.PARAMETER_MIN_ELEMENTS <= 256 * 10 else [256 * 32])
    assert params[0].shape.dims == (2, 32) and len(params) == 1 + len(sig.weights)
    # a weight the executable takes in a form of its own (a dot's B in GEMM panels) comes packed
    assert all(w.shape == p.shape.dims for w, p in zip(sig.weights, params[1:]) if isinstance(w, np.ndarray))
    arrays = [w if isinstance(w, np.ndarray) else w.array for w in sig.weights]
    constants = [i for i in sig.module.entry.instructions if i.opcode == "constant"]
    assert all(c.shape.size < onnx_model.PARAMETER_MIN_ELEMENTS for c in constants)
    assert any(c.shape.dims == (256,) for c in constants)      # the bias stays a constant
    # weights start on a cache line: vector loads of them never span two
    assert all(w.ctypes.data % memory.ALIGNMENT == 0 and w.flags.c_contiguous for w in arrays)
    # Gemm's transB is applied to the known weight once, at import: no transpose at run time
    assert "transpose(" not in model.hlo_text({"x": x}, optimized=True)


def test_convolution_weights_are_reordered_once(rng):
    """A Conv's weights are a constant parameter: the executable takes them in the order its
    kernel reads them, made once at compile time, and the model still gives the reference."""
    w = rng.standard_normal((48, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48, 12, 12])],
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    loaded = pyxla.onnx.load(model)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    sig = loaded.compile({"x": x})
    assert list(sig.executable.parameter_forms) == [1]
    assert isinstance(sig.weights[0], FormedArgument)
    for _ in range(2):
        _assert_matches_reference(model, loaded(x=x), {"x": x}, rtol=1e-4, atol=1e-4)


def test_import_time_values_fold(rng):
    """Shape -> Gather -> Concat -> Reshape computes the target shape at import time; the
    module holds only the reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 12])], inits)
    model = pyxla.onnx.load(proto)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    _assert_matches_reference(proto, model(x=x), {"x": x})
    text = model.hlo_text({"x": x})
    assert "gather" not in text and "concatenate" not in text and "reshape(" in text


def test_shape_fed_as_input_compiles_per_value(rng):
    """Reshape's target given as a graph input: the model compiles for each target value
    (the input becomes static), and the data input stays traced."""
    proto = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                    helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    model = pyxla.onnx.load(proto)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    for target in ([3, 4], [4, -1], [3, 4]):
        out = model(x=x, shape=np.array(target, np.int64))
        np.testing.assert_array_equal(out["y"], x.reshape(target))
    assert model.static_inputs == {"shape"} and len(model._compiled) == 2
    sig = model.compile({"x": x, "shape": np.array([12, 1], np.int64)})
    assert sig.traced_inputs == [("x", None)]     # (input, element of a sequence input or None)


def test_outputs_known_at_import_and_passed_through_inputs(rng):
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Neg", ["x"], ["neg"])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
                    helper.make_tensor_value_info("same", TensorProto.FLOAT, [2, 3]),
                    helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2, 3])])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    _assert_matches_reference(proto, pyxla.onnx.load(proto)(x=x), {"x": x})


def test_nodes_out_of_order_are_sorted(rng):
    nodes = [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Neg", ["x"], ["t"])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    x = rng.standard_normal(5).astype(np.float32)
    out = pyxla.onnx.load(proto, check=False)(x=x)     # the checker insists on order
    np.testing.assert_array_equal(out["y"], np.maximum(-x, 0))


def test_initializer_backed_input_can_be_overridden(rng):
    w = rng.standard_normal(4).astype(np.float32)
    proto = _model([helper.make_node("Mul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                    helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                   [numpy_helper.from_array(w, "w")])
    model = pyxla.onnx.load(proto)
    x, w2 = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
    assert model.input_names == ["x"]
    np.testing.assert_allclose(model(x=x)["y"], x * w)
    np.testing.assert_allclose(model(x=x, w=w2)["y"], x * w2)


# --- refusals at load time ------------------------------------------------------------------

def test_unknown_operator_refused_at_load_naming_the_node():
    proto = _model([helper.make_node("Neg", ["x"], ["t"]), helper.make_node("NoSuchOp", ["t"], ["y"],
                                                                             name="mystery", domain="example.com")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                   extra_opsets=[helper.make_opsetid("example.com", 1)])
    with pytest.raises(OnnxImportError, match=r"node 'mystery' \(NoSuchOp\).*example.com::NoSuchOp.*not supported"):
        pyxla.onnx.load(proto)


def test_unread_attribute_refused(rng):
    """An attribute the converter does not read would be ignored silently: refused instead."""
    node = helper.make_node("Relu", ["x"], ["y"], name="r", made_up_attribute=3)
    proto = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = pyxla.onnx.load(proto, check=False)     # the checker does not know the attribute either
    with pytest.raises(OnnxImportError, match=r"node 'r' \(Relu.*'made_up_attribute'=3.*not supported"):
        model(x=rng.standard_normal(3).astype(np.float32))


def test_missing_value_named():
    proto = _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    with pytest.raises(OnnxImportError, match="nowhere"):
        pyxla.onnx.load(proto, check=False)(x=np.ones(3, np.float32))


def test_converter_errors_name_the_node(rng):
    proto = _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                    helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(OnnxImportError, match=r"node 'mm' \(MatMul"):
        pyxla.onnx.load(proto, check=False)(a=np.ones((2, 3), np.float32), b=np.ones((4, 5), np.float32))


def test_sequence_input(rng):
    """A sequence input is a Python list of arrays; the model compiles for its length and
    each element's shape."""
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["k", 3])
    nodes = [helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0)]
    proto = _model(nodes, [seq], [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                  helper.make_tensor_value_info("c", TensorProto.FLOAT, ["m", 3])])
    model = pyxla.onnx.load(proto)
    parts = [rng.standard_normal((k, 3)).astype(np.float32) for k in (2, 1, 4)]
    out = model(s=parts)
    assert int(out["n"]) == 3
    np.testing.assert_array_equal(out["c"], np.concatenate(parts))


# --- functions ------------------------------------------------------------------------------

def test_model_local_function_expanded(rng):
    """A node calling a function of the model runs the function's body, with the caller's
    attribute values bound to its attribute references."""
    scale = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    body = [helper.make_node("Constant", [], ["a"], value_float=0.0),
            helper.make_node("Mul", ["x", "x"], ["sq"])]
    body[0].attribute[0].CopyFrom(scale)
    body[0].attribute[0].name = "value_float"
    body.append(helper.make_node("Add", ["sq", "a"], ["y"]))
    fn = helper.make_function("local", "SquarePlus", ["x"], ["y"], body, [helper.make_opsetid("", OPSET)],
                              attributes=["alpha"])
    node = helper.make_node("SquarePlus", ["x"], ["y"], domain="local", alpha=2.5)
    proto = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], functions=[fn],
                   extra_opsets=[helper.make_opsetid("local", 1)])
    x = rng.standard_normal(4).astype(np.float32)
    out = pyxla.onnx.load(proto)(x=x)
    np.testing.assert_allclose(out["y"], x * x + np.float32(2.5), rtol=1e-6)


# --- command line ---------------------------------------------------------------------------

def test_cli_run_onnx(rng, tmp_path, capsys):
    from pyxla.cli import main

    proto = _mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, path)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run-onnx", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    assert "probs: float32[3, 10]" in capsys.readouterr().out
    expected = ReferenceEvaluator(proto).run(None, {"x": x})
    with np.load(tmp_path / "out.npz") as z:
        assert sorted(z.files) == ["logits", "probs"]
        np.testing.assert_allclose(z["probs"], expected[0], rtol=1e-4, atol=1e-6)


def test_cli_run_onnx_reports_missing_input(rng, tmp_path, capsys):
    from pyxla.cli import main

    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(rng), path)
    np.savez(tmp_path / "in.npz", wrong=np.ones(3))
    assert main(["run-onnx", str(path), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert "missing input 'x'" in capsys.readouterr().err


def test_import_pyxla_does_not_import_onnx():
    import subprocess
    import sys

    # nor does pyxla.onnx: onnx loads when a model must be parsed (here: the backend adapter)
    code = ("import sys, pyxla; assert 'onnx' not in sys.modules; pyxla.onnx.load; assert 'onnx' not in sys.modules; "
            "pyxla.onnx.backend; assert 'onnx' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
