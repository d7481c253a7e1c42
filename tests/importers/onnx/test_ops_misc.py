"""Det, Col2Im, TensorScatter, NonMaxSuppression and MaxUnpool against onnx's reference
evaluator on fresh random inputs."""
import numpy as np
import pytest

from .single_node import check


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5, 5), (1, 1)])
def test_det(rng, shape):
    check("Det", {"x": rng.standard_normal(shape).astype(np.float32)}, opset=22, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1]}, {"pads": [1, 0, 1, 2]}, {"dilations": [2, 2]}])
def test_col2im(rng, attrs):
    """The inverse of im2col: columns summed back into a 7x6 image."""
    image, block = np.array([7, 6], np.int64), np.array([2, 3], np.int64)
    dil, pads, strides = attrs.get("dilations", [1, 1]), attrs.get("pads", [0, 0, 0, 0]), attrs.get("strides", [1, 1])
    blocks = 1
    for d in range(2):
        span = dil[d] * (block[d] - 1) + 1
        blocks *= (image[d] + pads[d] + pads[d + 2] - span) // strides[d] + 1
    x = rng.standard_normal((2, 3 * 6, blocks)).astype(np.float32)
    check("Col2Im", {"x": x, "image_shape": image, "block_shape": block}, attrs, opset=18,
          known=("image_shape", "block_shape"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(rng, mode):
    """A key/value cache update: each batch entry writes its rows at its own position."""
    cache = rng.standard_normal((3, 2, 8, 4)).astype(np.float32)
    update = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    top = 8 if mode == "circular" else 6
    write = rng.integers(0, top, 3).astype(np.int64)
    check("TensorScatter", {"cache": cache, "update": update, "write_indices": write}, {"axis": 2, "mode": mode},
          opset=24)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression(rng, center_point_box):
    corners = rng.uniform(0, 10, (2, 12, 2, 2))
    if center_point_box:
        boxes = np.concatenate([corners.mean(axis=2), np.abs(corners[:, :, 0] - corners[:, :, 1])], axis=-1)
    else:
        boxes = np.concatenate([corners.min(axis=2), corners.max(axis=2)], axis=-1)
    scores = rng.random((2, 3, 12)).astype(np.float32)
    check("NonMaxSuppression", {"boxes": boxes.astype(np.float32), "scores": scores,
                                "max_out": np.array([4], np.int64), "iou": np.array([0.3], np.float32),
                                "score_min": np.array([0.2], np.float32)},
          {"center_point_box": center_point_box}, opset=11, known=("max_out", "iou", "score_min"))


def test_max_unpool(rng):
    """Values placed back at the indices MaxPool took them from, zeros elsewhere."""
    x = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    plane = rng.permutation(36)[:9].reshape(3, 3)      # distinct positions in each 6x6 plane
    indices = (np.arange(6).reshape(2, 3, 1, 1) * 36 + plane).astype(np.int64)
    check("MaxUnpool", {"x": x, "i": indices}, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22)
