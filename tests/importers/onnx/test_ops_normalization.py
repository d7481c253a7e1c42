"""Normalisation converters against onnx's reference evaluator (NumPy where it has none)."""
import numpy as np
import pytest

from .single_node import check, make_model, refuses, run_pyxla, with_output_types


def floats(rng, *shape):
    return (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization(rng, axis, with_bias):
    x = floats(rng, 2, 3, 4)
    norm_shape = x.shape[axis % 3:]
    inputs = {"x": x, "scale": floats(rng, *norm_shape), "bias": floats(rng, *norm_shape) if with_bias else None}
    check("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, opset=17, rtol=1e-4, atol=1e-5)


def test_layer_normalization_mean_and_inverse_std_outputs(rng):
    x = floats(rng, 3, 5)
    check("LayerNormalization", {"x": x, "scale": floats(rng, 5), "bias": floats(rng, 5)}, opset=17,
          outputs=("y", "mean", "inv_std"), rtol=1e-4, atol=1e-5)


def test_layer_normalization_refuses_other_stash_type(rng):
    refuses("LayerNormalization", {"x": floats(rng, 3, 5), "scale": floats(rng, 5)}, {"stash_type": 11},
            opset=17, match="'stash_type'=11")


def test_rms_normalization(rng):
    check("RMSNormalization", {"x": floats(rng, 2, 3, 4), "scale": floats(rng, 4)}, {"epsilon": 1e-4}, opset=23,
          rtol=1e-4, atol=1e-5)
    check("RMSNormalization", {"x": floats(rng, 2, 3, 4), "scale": floats(rng, 3, 4)}, {"axis": 1}, opset=23,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5)])
def test_instance_normalization(rng, shape):
    check("InstanceNormalization", {"x": floats(rng, *shape), "s": floats(rng, 3), "b": floats(rng, 3)},
          {"epsilon": 1e-4}, opset=6, rtol=1e-4, atol=1e-5)


def _group_norm(x, scale, bias, groups, eps):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(rng, opset):
    # Opset 18 has one scale and bias per group, 21 one per channel; the reference evaluator
    # implements only 21's, so NumPy is the oracle (and onnx's checker calls 18 deprecated).
    x = floats(rng, 2, 6, 3, 2)
    groups, c = 3, 6
    k = groups if opset == 18 else c
    scale, bias = floats(rng, k), floats(rng, k)
    per_channel = (np.repeat(scale, c // groups), np.repeat(bias, c // groups)) if opset == 18 else (scale, bias)
    expected = _group_norm(x, *per_channel, groups, 1e-5)
    inputs = {"x": x, "scale": scale, "bias": bias}
    model = with_output_types(make_model("GroupNormalization", inputs, ["y"], {"num_groups": groups}, opset),
                              [expected.astype(np.float32)])
    np.testing.assert_allclose(run_pyxla(model, inputs, check_model=False)[0], expected, rtol=1e-4, atol=1e-5)


def test_group_normalization_against_reference(rng):
    check("GroupNormalization", {"x": floats(rng, 2, 4, 5), "scale": floats(rng, 4), "bias": floats(rng, 4)},
          {"num_groups": 2, "epsilon": 1e-3}, opset=21, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axes", [None, [0, 1], [2]])
def test_mean_variance_normalization(rng, axes):
    check("MeanVarianceNormalization", {"x": floats(rng, 2, 3, 4, 2)}, {} if axes is None else {"axes": axes},
          opset=13, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization(rng, p, axis):
    # onnx's reference computes the 1-norm without absolute values: positive inputs for p=1.
    x = np.abs(floats(rng, 3, 4)) if p == 1 else floats(rng, 3, 4)
    x[1] = 0.0        # a zero norm along axis -1 gives zeros
    check("LpNormalization", {"x": x}, {"p": p, "axis": axis}, opset=22, rtol=1e-5, atol=1e-6)


def test_lp_normalization_one_norm_of_negative_values(rng):
    x = floats(rng, 3, 4)
    expected = x / np.abs(x).sum(axis=1, keepdims=True)
    model = with_output_types(make_model("LpNormalization", {"x": x}, ["y"], {"p": 1, "axis": 1}, 1), [expected])
    np.testing.assert_allclose(run_pyxla(model, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


def test_lp_normalization_refuses_other_p(rng):
    refuses("LpNormalization", {"x": floats(rng, 3, 4)}, {"p": 3}, opset=22, match="'p'=3")
