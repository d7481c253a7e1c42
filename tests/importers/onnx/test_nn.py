"""Neural-network operators (ops/nn.py) against onnx's reference evaluator on random inputs."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from .single_node import check, make_model, reference, refuses, run_pyxla, with_output_types


def _run(op_type, inputs, attrs, opset, outputs=("y",), known=()):
    """pyxla's outputs for one node (where the reference evaluator cannot be the oracle)."""
    model = with_output_types(make_model(op_type, inputs, outputs, attrs, opset, known))
    return run_pyxla(model, {k: v for k, v in inputs.items() if k not in known})


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- Conv ------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {},
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 2, 1, 0], "strides": [2, 1]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"auto_pad": "VALID", "strides": [1, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 0, 1, 0]},
])
@pytest.mark.parametrize("known_weights", [True, False])
def test_conv_2d(rng, attrs, known_weights):
    x, w, b = _f32(rng, 2, 4, 9, 8), _f32(rng, 6, 4, 3, 3), _f32(rng, 6)
    check("Conv", {"x": x, "w": w, "b": b}, attrs, opset=11, known=("w", "b") if known_weights else (),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("group", [2, 6])
def test_conv_groups(rng, group):
    x, w = _f32(rng, 1, 6, 7, 7), _f32(rng, 12, 6 // group, 3, 3)
    check("Conv", {"x": x, "w": w}, {"group": group, "pads": [1, 1, 1, 1]}, opset=11, known=("w",),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_1d_and_3d(rng, rank):
    spatial = (7,) * rank
    x, w = _f32(rng, 2, 3, *spatial), _f32(rng, 4, 3, *(3,) * rank)
    check("Conv", {"x": x, "w": w}, {"strides": [2] * rank, "pads": [1] * (2 * rank)}, opset=11, known=("w",),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2]},
    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    {"strides": [3, 2], "output_shape": [12, 9]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"dilations": [2, 2]},
])
def test_conv_transpose(rng, attrs):
    x, w, b = _f32(rng, 2, 4, 4, 4), _f32(rng, 4, 3, 3, 3), _f32(rng, 3)
    check("ConvTranspose", {"x": x, "w": w, "b": b}, attrs, opset=11, known=("w",), rtol=1e-4, atol=1e-4)


def test_conv_transpose_groups(rng):
    """The reference evaluator has no grouped ConvTranspose: each group is an ungrouped
    ConvTranspose of its input channels with its slice of the kernel."""
    x, w = _f32(rng, 2, 4, 4, 4), _f32(rng, 4, 3, 3, 3)
    attrs = {"strides": [2, 1], "pads": [1, 0, 0, 1]}
    expected = np.concatenate([
        reference(make_model("ConvTranspose", {"x": x[:, 2 * g:2 * g + 2], "w": w[2 * g:2 * g + 2]}, ["y"], attrs, 11,
                             known=("w",)), {"x": x[:, 2 * g:2 * g + 2]})[0] for g in range(2)], axis=1)
    (got,) = _run("ConvTranspose", {"x": x, "w": w}, {**attrs, "group": 2}, 11, known=("w",))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# --- pools -----------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 3], "strides": [2, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "storage_order": 1},
])
def test_max_pool_indices(rng, attrs):
    """MaxPool's second output: the flat index (row-major, or column-major with storage_order
    1) of each window's maximum, in the unpadded input. The values are checked against the
    reference evaluator, the indices against NumPy (the evaluator's are wrong for windows that
    overlap)."""
    x = _f32(rng, 2, 3, 7, 6)
    check("MaxPool", {"x": x}, attrs, opset=12, outputs=("y",))
    y, indices = _run("MaxPool", {"x": x}, attrs, opset=12, outputs=("y", "indices"))
    n, c, h, w = x.shape
    plane, at = np.divmod(indices, h * w)
    rows, cols = (np.divmod(at, w) if not attrs.get("storage_order") else np.divmod(at, h)[::-1])
    np.testing.assert_array_equal(x.reshape(n * c, h, w)[plane, rows, cols], y)   # a window's maximum
    assert (plane == np.arange(n * c).reshape(n, c, 1, 1)).all()
    (kh, kw), (sh, sw) = attrs["kernel_shape"], attrs.get("strides", [1, 1])
    top, left = attrs.get("pads", [0, 0])[:2]
    out_r, out_c = np.indices(y.shape[2:])
    dr, dc = rows - (sh * out_r - top), cols - (sw * out_c - left)
    assert ((dr >= 0) & (dr < kh) & (dc >= 0) & (dc < kw)).all()               # inside its window


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
])
def test_average_pool(rng, attrs):
    check("AveragePool", {"x": _f32(rng, 2, 3, 8, 9)}, attrs, opset=11, rtol=1e-5, atol=1e-6)


def test_average_pool_dilated(rng):
    check("AveragePool", {"x": _f32(rng, 1, 2, 9, 9)}, {"kernel_shape": [2, 2], "dilations": [2, 2]},
          opset=19, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(rng, op):
    check(op, {"x": _f32(rng, 2, 5, 6, 7)}, opset=11, rtol=1e-5, atol=1e-6)


def test_lp_pool(rng):
    check("LpPool", {"x": _f32(rng, 1, 2, 6, 6)}, {"kernel_shape": [2, 2], "p": 3, "strides": [2, 2]},
          opset=11, rtol=1e-4, atol=1e-5)


def test_global_lp_pool(rng):
    """The reference evaluator lacks GlobalLpPool: NumPy float64 is the oracle."""
    x = _f32(rng, 2, 3, 4, 5)
    (got,) = _run("GlobalLpPool", {"x": x}, {"p": 3}, 11)
    expected = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(got, expected, rtol=1e-4)


# --- normalisation ---------------------------------------------------------------------------

@pytest.mark.parametrize("known_stats", [True, False])
def test_batch_normalization(rng, known_stats):
    c = 5
    inputs = {"x": _f32(rng, 2, c, 4, 3), "scale": _f32(rng, c), "bias": _f32(rng, c), "mean": _f32(rng, c),
              "var": rng.uniform(0.5, 2.0, c).astype(np.float32)}
    check("BatchNormalization", inputs, {"epsilon": 1e-3}, opset=15,
          known=("scale", "bias", "mean", "var") if known_stats else (), rtol=1e-4, atol=1e-5)


def test_batch_normalization_training(rng):
    c = 3
    inputs = {"x": _f32(rng, 4, c, 5), "scale": _f32(rng, c), "bias": _f32(rng, c), "mean": _f32(rng, c),
              "var": rng.uniform(0.5, 2.0, c).astype(np.float32)}
    check("BatchNormalization", inputs, {"training_mode": 1, "momentum": 0.8}, opset=15,
          outputs=("y", "running_mean", "running_var"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_normalization_old_opsets(rng, opset):
    """NumPy float64 is the oracle: the reference evaluator's opset-9 BatchNormalization
    blends in the batch statistics whenever momentum has a value (it always has one)."""
    c = 3
    stats = {"scale": _f32(rng, c), "bias": _f32(rng, c), "mean": _f32(rng, c),
             "var": rng.uniform(0.5, 2.0, c).astype(np.float32)}
    x = _f32(rng, 2, c, 3, 3)
    attrs = {"epsilon": 1e-4, **({"is_test": 1} if opset < 7 else {})}
    (got,) = _run("BatchNormalization", {"x": x, **stats}, attrs, opset, known=tuple(stats))
    s, b, m, v = (stats[k].astype(np.float64).reshape(-1, 1, 1) for k in ("scale", "bias", "mean", "var"))
    np.testing.assert_allclose(got, s * (x - m) / np.sqrt(v + 1e-4) + b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn(rng, size):
    """NumPy float64 is the oracle (the reference evaluator's LRN loops over the batch, not
    the channels)."""
    x = _f32(rng, 2, 7, 4, 3)
    alpha, beta, bias = 2e-3, 0.75, 1.5
    (got,) = _run("LRN", {"x": x}, {"size": size, "alpha": alpha, "beta": beta, "bias": bias}, 13)
    x64 = x.astype(np.float64)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sums = np.stack([(x64[:, max(0, c - lo):c + hi + 1] ** 2).sum(axis=1) for c in range(x.shape[1])], axis=1)
    np.testing.assert_allclose(got, x64 / (bias + alpha / size * sums) ** beta, rtol=1e-5, atol=1e-6)


# --- matrix products -------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1}, {"alpha": 0.5, "beta": 2.0, "transB": 1},
                                   {"transA": 1, "transB": 1, "beta": 0.0}])
@pytest.mark.parametrize("known_b", [True, False])
def test_gemm(rng, attrs, known_b):
    m, k, n = 5, 7, 4
    a = _f32(rng, k, m) if attrs.get("transA") else _f32(rng, m, k)
    b = _f32(rng, n, k) if attrs.get("transB") else _f32(rng, k, n)
    check("Gemm", {"a": a, "b": b, "c": _f32(rng, n)}, attrs, opset=13, known=("b", "c") if known_b else (),
          rtol=1e-4, atol=1e-5)


def test_gemm_without_c(rng):
    check("Gemm", {"a": _f32(rng, 3, 4), "b": _f32(rng, 4, 2)}, {"alpha": 2.0}, opset=13, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                    ((4,), (4, 3)), ((3, 4), (4,)), ((2, 3, 4), (4,))])
def test_matmul(rng, shapes):
    a, b = (_f32(rng, *s) for s in shapes)
    check("MatMul", {"a": a, "b": b}, opset=13, rtol=1e-4, atol=1e-5)


def test_matmul_int32(rng):
    a = rng.integers(-5, 5, (3, 4)).astype(np.int32)
    b = rng.integers(-5, 5, (4, 2)).astype(np.int32)
    check("MatMul", {"a": a, "b": b}, opset=13)


# --- dropout ---------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [10, 13])
def test_dropout_is_identity_in_inference(rng, opset):
    check("Dropout", {"x": _f32(rng, 3, 4)}, {"ratio": 0.3} if opset < 12 else {}, opset=opset,
          outputs=("y", "mask"))


def test_dropout_7_mask_has_the_input_type(rng):
    """Dropout-7's mask is of the input's type (bool from opset 10 on)."""
    x = _f32(rng, 3, 4)
    model = with_output_types(make_model("Dropout", {"x": x}, ["y", "mask"], {"ratio": 0.3}, 7), [x, x])
    y, mask = run_pyxla(model, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32 and mask.shape == x.shape and np.all(mask == 1)


def test_dropout_training_refused(rng):
    refuses("Dropout", {"x": _f32(rng, 3, 4), "ratio": np.array(0.5, np.float32), "training_mode": np.array(True)},
            opset=13, known=("ratio", "training_mode"), match="training mode")
