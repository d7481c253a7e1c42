"""GridSample and RoiAlign against onnx's reference evaluator on fresh random images, grids
and boxes: every mode, padding mode and corner convention, 2-D and 3-D grids."""
import numpy as np
import pytest

from .single_node import check


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(rng, mode, padding_mode, align_corners):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)      # some points outside
    check("GridSample", {"x": x, "grid": grid},
          {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}, opset=20,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(rng, mode):
    x = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 3, 2, 4, 3)).astype(np.float32)
    check("GridSample", {"x": x, "grid": grid}, {"mode": mode}, opset=20, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("half_pixel", ["half_pixel", "output_half_pixel"])
def test_roi_align(rng, mode, half_pixel):
    x = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
    corners = rng.uniform(0, 8, (5, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1).astype(np.float32)  # x1 y1 x2 y2
    batch = rng.integers(0, 2, 5).astype(np.int64)
    check("RoiAlign", {"x": x, "rois": rois, "batch_indices": batch},
          {"mode": mode, "output_height": 3, "output_width": 4, "sampling_ratio": 2, "spatial_scale": 0.9,
           "coordinate_transformation_mode": half_pixel}, opset=16, rtol=1e-4, atol=1e-5)
