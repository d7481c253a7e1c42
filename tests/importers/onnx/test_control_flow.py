"""If, Loop and Scan (ops/control_flow.py) against onnx's reference evaluator, with the
decision known at import time (inlined, unrolled) and traced (lax.cond / while_loop / scan)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pyxla.onnx  # noqa: E402

F = TensorProto.FLOAT


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = pyxla.onnx.load(model)(feeds)
    for (name, g), e in zip(got.items(), expected):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return got


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)], ir_version=min(onnx.IR_VERSION, 10))


def _if_model(cond_known: bool, cond_value: bool = True):
    """y = If(cond) then x * 2 else x - w (both branches read outer values)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [], [_vi("t", F, [3])],
                               [numpy_helper.from_array(np.float32(2.0), "two")])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [], [_vi("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    inputs = [_vi("x", F, [3]), _vi("w", F, [3])]
    inits = [numpy_helper.from_array(np.array(cond_value), "c")] if cond_known else []
    if not cond_known:
        inputs.append(_vi("c", TensorProto.BOOL, []))
    return _model([node], inputs, [_vi("y", F, [3])], inits)


@pytest.mark.parametrize("value", [True, False])
def test_if_known_condition_is_inlined(rng, value):
    model = _if_model(True, value)
    x, w = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    _check(model, {"x": x, "w": w})
    assert "conditional" not in pyxla.onnx.load(model).hlo_text({"x": x, "w": w})


def test_if_traced_condition(rng):
    model = _if_model(False)
    x, w = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    for c in (True, False):
        _check(model, {"x": x, "w": w, "c": np.array(c)})
    assert "conditional" in pyxla.onnx.load(model).hlo_text({"x": x, "w": w, "c": np.array(True)})


def _loop_model(trip_known: bool, with_scan: bool, early_exit: bool):
    """acc = acc + x * i for i in range(M) (stopping once acc's sum exceeds a bound when
    early_exit), optionally collecting acc per iteration."""
    body_nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
                  helper.make_node("Mul", ["x", "fi"], ["xi"]),
                  helper.make_node("Add", ["acc_in", "xi"], ["acc_out"])]
    if early_exit:
        body_nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "bound"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    outputs = [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [4])]
    if with_scan:
        body_nodes.append(helper.make_node("Identity", ["acc_out"], ["acc_scan"]))
        outputs.append(_vi("acc_scan", F, [4]))
    body = helper.make_graph(body_nodes, "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                                                 _vi("acc_in", F, [4])], outputs,
                             [numpy_helper.from_array(np.float32(10.0), "bound")] if early_exit else [])
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc"] + (["accs"] if with_scan else []), body=body)
    inputs = [_vi("x", F, [4]), _vi("acc0", F, [4])]
    inits = [numpy_helper.from_array(np.array(True), "cond")]
    if trip_known:
        inits.append(numpy_helper.from_array(np.array(6, np.int64), "M"))
    else:
        inputs.append(_vi("M", TensorProto.INT64, []))
    outs = [_vi("acc", F, [4])] + ([_vi("accs", F, [6, 4])] if with_scan else [])
    return _model([node], inputs, outs, inits)


@pytest.mark.parametrize("with_scan", [False, True])
def test_loop_known_trip_count_is_unrolled(rng, with_scan):
    model = _loop_model(True, with_scan, early_exit=False)
    feeds = {"x": rng.standard_normal(4).astype(np.float32), "acc0": rng.standard_normal(4).astype(np.float32)}
    _check(model, feeds)
    assert "while" not in pyxla.onnx.load(model).hlo_text(feeds)


@pytest.mark.parametrize("trip_known", [True, False])
def test_loop_with_traced_exit_is_a_while_loop(rng, trip_known):
    model = _loop_model(trip_known, False, early_exit=True)
    feeds = {"x": rng.uniform(0.1, 1, 4).astype(np.float32), "acc0": rng.standard_normal(4).astype(np.float32)}
    if not trip_known:
        feeds["M"] = np.array(9, np.int64)
    _check(model, feeds)
    assert "while" in pyxla.onnx.load(model).hlo_text(feeds)


def _scan_body():
    """state = state + x_t; out_t = state * x_t."""
    return helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
                             [_vi("s_in", F, [2]), _vi("x_t", F, [2])], [_vi("s_out", F, [2]), _vi("y_t", F, [2])])


@pytest.mark.parametrize("attrs", [{}, {"scan_input_directions": [1]}, {"scan_output_directions": [1]},
                                   {"scan_input_axes": [1], "scan_output_axes": [1]}])
@pytest.mark.parametrize("traced", [True, False])
def test_scan(rng, attrs, traced):
    """NumPy float64 is the oracle (the reference evaluator scans forward along axis 0 only)."""
    x_shape = [2, 5] if attrs.get("scan_input_axes") == [1] else [5, 2]
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=_scan_body(), num_scan_inputs=1, **attrs)
    s0, x = rng.standard_normal(2).astype(np.float32), rng.standard_normal(x_shape).astype(np.float32)
    inputs, inits = [_vi("s0", F, [2])], []
    if traced:
        inputs.append(_vi("x", F, x_shape))
    else:
        inits.append(numpy_helper.from_array(x, "x"))
    y_shape = [2, 5] if attrs.get("scan_output_axes") == [1] else [5, 2]
    model = _model([node], inputs, [_vi("s", F, [2]), _vi("y", F, y_shape)], inits)
    got = pyxla.onnx.load(model)({"s0": s0, **({"x": x} if traced else {})})
    xs = np.moveaxis(x.astype(np.float64), attrs.get("scan_input_axes", [0])[0], 0)
    xs = xs[::-1] if attrs.get("scan_input_directions") == [1] else xs
    state, ys = s0.astype(np.float64), []
    for x_t in xs:
        state = state + x_t
        ys.append(state * x_t)
    ys = np.stack(ys[::-1] if attrs.get("scan_output_directions") == [1] else ys)
    np.testing.assert_allclose(got["s"], state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["y"], np.moveaxis(ys, 0, attrs.get("scan_output_axes", [0])[0]), rtol=1e-5, atol=1e-6)


def test_scan_opset_8_batches(rng):
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "y"], body=_scan_body(), num_scan_inputs=1)
    model = _model([node], [_vi("s0", F, [3, 2]), _vi("x", F, [3, 4, 2])], [_vi("s", F, [3, 2]), _vi("y", F, [3, 4, 2])],
                   opset=8)
    s0, x = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((3, 4, 2)).astype(np.float32)
    got = pyxla.onnx.load(model)(s0=s0, x=x)
    states, ys = s0.astype(np.float64).copy(), np.zeros((3, 4, 2))
    for t in range(4):
        states = states + x[:, t]
        ys[:, t] = states * x[:, t]
    # five f32 terms of size ~1 summed: an absolute error of a few 1e-7, large relative to a
    # sum that cancels to near zero
    np.testing.assert_allclose(got["s"], states, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["y"], ys, rtol=1e-5, atol=1e-6)
