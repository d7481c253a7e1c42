"""Activation and softmax-family converters against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check, refuses


def floats(rng, *shape):
    return (rng.standard_normal(shape) * 2).astype(np.float32)


ACTIVATIONS = [
    ("Relu", {}, 14), ("Relu", {}, 6), ("LeakyRelu", {"alpha": 0.2}, 16), ("LeakyRelu", {}, 6),
    ("Elu", {"alpha": 0.7}, 6), ("Selu", {}, 6), ("Selu", {"alpha": 1.5, "gamma": 0.5}, 22),
    ("Celu", {"alpha": 1.7}, 12), ("Sigmoid", {}, 13), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 6),
    ("HardSwish", {}, 14), ("Tanh", {}, 13), ("Softplus", {}, 1), ("Softsign", {}, 1),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20), ("Mish", {}, 18),
    ("ThresholdedRelu", {"alpha": 0.5}, 10), ("Shrink", {"lambd": 0.8, "bias": 0.3}, 9),
    ("Swish", {"alpha": 1.3}, 24),
]


@pytest.mark.parametrize("op,attrs,opset", ACTIVATIONS, ids=[f"{o}-{s}-{len(a)}" for o, a, s in ACTIVATIONS])
def test_activation(rng, op, attrs, opset):
    check(op, {"x": floats(rng, 3, 4, 5)}, attrs, opset=opset, rtol=1e-5, atol=1e-6)


def test_relu_on_integers(rng):
    check("Relu", {"x": rng.integers(-50, 50, (4, 5)).astype(np.int32)}, opset=14)


def test_shrink_on_integers(rng):
    check("Shrink", {"x": rng.integers(-10, 10, (4, 5)).astype(np.int32)}, {"lambd": 1.5}, opset=9)


@pytest.mark.parametrize("slope_shape", [(5,), (4, 1), (1,)])
def test_prelu_broadcasts_slope(rng, slope_shape):
    check("PRelu", {"x": floats(rng, 3, 4, 5), "slope": floats(rng, *slope_shape)}, opset=16)


def test_gelu_refuses_unknown_approximation(rng):
    refuses("Gelu", {"x": floats(rng, 3)}, {"approximate": "sigmoid"}, opset=20, match="'approximate'='sigmoid'")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_one_axis(rng, op, axis):
    x = floats(rng, 3, 4, 5)
    if op == "Hardmax":
        x[0, 0, :2] = 7.0     # a tie: the first index wins
    check(op, {"x": x}, {"axis": axis}, opset=13, rtol=1e-5, atol=1e-6)


def _coerced_2d(op, x, axis):
    """ONNX before opset 13: the input as a matrix [prod(dims[:axis]), prod(dims[axis:])],
    normalised along its rows, in float64."""
    m = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    if op == "Hardmax":
        y = np.zeros_like(m)
        y[np.arange(len(m)), m.argmax(axis=1)] = 1
    else:
        e = np.exp(m - m.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True)
        if op == "LogSoftmax":
            y = np.log(y)
    return y.reshape(x.shape)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis,opset", [(1, 11), (2, 11), (-2, 11), (1, 1), (0, 11)])
def test_softmax_family_before_13_coerces_to_2d(rng, op, axis, opset):
    # onnx's reference evaluator implements only the opset-13 meaning, so the oracle is NumPy.
    from .single_node import make_model, run_pyxla, with_output_types
    x = floats(rng, 2, 3, 4)
    expected = _coerced_2d(op, x, axis % 3)
    model = with_output_types(make_model(op, {"x": x}, ["result"], {"axis": axis}, opset),
                              [expected.astype(np.float32)])
    (got,) = run_pyxla(model, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_softmax_default_axis_changed_at_13(rng):
    from .single_node import make_model, run_pyxla, with_output_types
    x = floats(rng, 2, 3, 4)
    expected = _coerced_2d("Softmax", x, 1)      # opset 11 default axis=1: over dims 1 and 2 together
    model = with_output_types(make_model("Softmax", {"x": x}, ["result"], {}, 11), [expected.astype(np.float32)])
    np.testing.assert_allclose(run_pyxla(model, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    check("Softmax", {"x": x}, opset=13)       # default axis=-1
