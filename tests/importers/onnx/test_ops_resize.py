"""Resize and Upsample converters against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check, make_model, refuses, run_pyxla, with_output_types

NO_ROI = np.array([], np.float32)


def image(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [(1, 1, 2, 1.5), (1, 1, 0.6, 0.8)])
def test_resize_scales(rng, mode, coordinates, scales):
    check("Resize", {"x": image(rng, 1, 2, 4, 5), "roi": NO_ROI, "scales": np.array(scales, np.float32)},
          {"mode": mode, "coordinate_transformation_mode": coordinates}, opset=19, known=["roi", "scales"],
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_sizes_nearest_modes(rng, nearest_mode):
    check("Resize", {"x": image(rng, 1, 1, 4, 4), "roi": None, "scales": None, "sizes": np.array([1, 1, 7, 3])},
          {"mode": "nearest", "nearest_mode": nearest_mode}, opset=13, known=["sizes"])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_and_exclude_outside(rng, mode):
    x = image(rng, 1, 1, 8, 8)
    scales = np.array([1, 1, 0.4, 0.7], np.float32)
    check("Resize", {"x": x, "roi": None, "scales": scales}, {"mode": mode, "antialias": 1}, opset=18,
          known=["scales"], rtol=1e-4, atol=1e-5)
    if mode == "cubic":
        check("Resize", {"x": x, "roi": None, "scales": scales},
              {"mode": mode, "exclude_outside": 1, "cubic_coeff_a": -0.5}, opset=18, known=["scales"],
              rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_aspect_policy(rng, policy):
    check("Resize", {"x": image(rng, 1, 2, 4, 6), "roi": None, "scales": None, "sizes": np.array([7, 5])},
          {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy}, opset=18, known=["sizes"],
          rtol=1e-4, atol=1e-5)


def test_resize_tf_crop_and_resize(rng):
    roi = np.array([0, 0, 0.2, 0.3, 1, 1, 0.9, 1.2], np.float32)
    check("Resize", {"x": image(rng, 1, 1, 5, 5), "roi": roi, "scales": None, "sizes": np.array([1, 1, 3, 4])},
          {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 2.5},
          opset=13, known=["roi", "sizes"], rtol=1e-4, atol=1e-5)


def test_resize_integers(rng):
    x = rng.integers(0, 255, (1, 1, 3, 4)).astype(np.uint8)
    check("Resize", {"x": x, "roi": None, "scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": "nearest"},
          opset=13, known=["scales"])


def test_resize_opset_10(rng):
    # Resize-10: inputs (X, scales), asymmetric coordinates; nearest rounds down (as Upsample).
    x = image(rng, 1, 1, 3, 4)
    expected = x.repeat(2, axis=2).repeat(3, axis=3)
    inputs = {"x": x, "scales": np.array([1, 1, 2, 3], np.float32)}
    model = with_output_types(make_model("Resize", inputs, ["y"], {"mode": "nearest"}, 10, known=["scales"]),
                              [expected])
    np.testing.assert_array_equal(run_pyxla(model, {"x": x})[0], expected)


def test_upsample_nearest(rng):
    x = image(rng, 1, 2, 3, 2)
    check("Upsample", {"x": x, "scales": np.array([1, 1, 2, 3], np.float32)}, {"mode": "nearest"}, opset=9,
          known=["scales"])


def test_upsample_linear_attribute_scales(rng):
    x = image(rng, 1, 1, 3, 4)
    # Upsample-7's linear mode: asymmetric coordinates, neighbours clamped at the edge.
    i = np.arange(6) / 2.0
    lo = np.floor(i).astype(int)
    hi = np.minimum(lo + 1, 2)
    w = (i - lo)[:, None]
    expected = (x[0, 0][lo] * (1 - w) + x[0, 0][hi] * w)[None, None]
    model = with_output_types(make_model("Upsample", {"x": x}, ["y"], {"mode": "linear", "scales": [1.0, 1.0, 2.0, 1.0]},
                                         7), [expected.astype(np.float32)])
    np.testing.assert_allclose(run_pyxla(model, {"x": x}, check_model=False)[0], expected, rtol=1e-5, atol=1e-6)


def test_resize_refuses_unknown_mode(rng):
    refuses("Resize", {"x": image(rng, 1, 1, 2, 2), "roi": None, "scales": np.array([1, 1, 2, 2], np.float32)},
            {"mode": "area"}, opset=13, known=["scales"], match="'mode'='area'")
