"""Reduction and ArgMax/ArgMin converters against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check

REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
# The opset from which each takes its axes as an input.
AXES_INPUT_FROM = {op: 13 if op == "ReduceSum" else 18 for op in REDUCTIONS}


def data(rng, op, shape=(3, 4, 5)):
    x = rng.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.5 if op in ("ReduceLogSum", "ReduceProd") else x


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_axes_attribute(rng, op, keepdims):
    check(op, {"x": data(rng, op)}, {"axes": [0, -1], "keepdims": keepdims}, opset=AXES_INPUT_FROM[op] - 1,
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_axes_input(rng, op, keepdims):
    check(op, {"x": data(rng, op), "axes": np.array([1], np.int64)}, {"keepdims": keepdims},
          opset=AXES_INPUT_FROM[op], known=["axes"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_no_axes_reduces_everything(rng, op):
    check(op, {"x": data(rng, op)}, {"keepdims": 0}, opset=18, rtol=1e-5, atol=1e-5)
    check(op, {"x": data(rng, op)}, {}, opset=11, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_noop_with_empty_axes(rng, op):
    check(op, {"x": data(rng, op), "axes": np.array([], np.int64)}, {"noop_with_empty_axes": 1},
          opset=18, known=["axes"], rtol=1e-5, atol=1e-5)


# (ReduceSumSquare is left out: onnx's reference widens int32 to int64, against the spec's
# "same type as the input".)
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1"])
def test_integer_reductions_keep_type(rng, op):
    x = rng.integers(-5, 6, (3, 4)).astype(np.int32)
    check(op, {"x": x, "axes": np.array([1], np.int64)}, opset=18, known=["axes"])


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp"])
def test_empty_reduction(op):
    check(op, {"x": np.zeros((2, 0, 4), np.float32), "axes": np.array([1], np.int64)}, {"keepdims": 1},
          opset=20, known=["axes"])


def test_log_sum_exp_large_values_do_not_overflow(rng):
    x = (rng.standard_normal((3, 6)) * 10 + 80).astype(np.float32)   # exp(80) overflows float32
    got = check("ReduceLogSumExp", {"x": x.astype(np.float64), "axes": np.array([1])}, opset=18, known=["axes"])[0]
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, -1, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremum(rng, op, axis, keepdims, last):
    x = rng.integers(-3, 4, (3, 4, 5)).astype(np.float32)   # many ties: first or last index matters
    check(op, {"x": x}, {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


def test_argmax_opset_1(rng):
    check("ArgMax", {"x": rng.standard_normal((3, 4)).astype(np.float32)}, {"axis": 1}, opset=1)
