"""Object detection: NonMaxSuppression.

How many boxes NonMaxSuppression selects depends on the boxes and scores, and pyxla's
arrays have static shapes, so the boxes, scores and thresholds must be known when the model
is loaded (inputs that give them are compiled for by value, as for NonZero); the selection
then runs in NumPy, in the boxes' precision.
"""
from __future__ import annotations

import numpy as np

from ..registry import NodeContext, converter, known
from .common import shape_of


def _corners(boxes: np.ndarray, center_point_box: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of (..., 4) boxes given as two corners in any order
    ([y1, x1, y2, x2]) or as [x_center, y_center, width, height]."""
    if center_point_box:
        half_w, half_h = boxes[..., 2] / 2, boxes[..., 3] / 2
        return (boxes[..., 1] - half_h, boxes[..., 0] - half_w, boxes[..., 1] + half_h, boxes[..., 0] + half_w)
    y1, x1, y2, x2 = (boxes[..., k] for k in range(4))
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _overlaps(boxes: np.ndarray, center_point_box: bool, iou_threshold) -> np.ndarray:
    """(n, n) True where two boxes' intersection over union exceeds the threshold; boxes
    that do not intersect or have no area never do."""
    y0, x0, y1, x1 = _corners(boxes, center_point_box)
    dy = np.minimum(y1[:, None], y1[None, :]) - np.maximum(y0[:, None], y0[None, :])
    dx = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :])
    area = (x1 - x0) * (y1 - y0)
    inter = dx * dy
    union = area[:, None] + area[None, :] - inter
    valid = (dx > 0) & (dy > 0) & (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / np.where(valid, union, 1) > iou_threshold)


def _optional_scalar(ctx: NodeContext, value, what: str, dtype):
    if value is None:
        return None
    value = known(ctx, value, what).reshape(-1)
    return None if value.size == 0 else value[0].astype(dtype)


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx: NodeContext, boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
    """Per batch and class: boxes by descending score (ties: the lower index first), each
    kept unless it overlaps a kept one by more than iou_threshold, at most
    max_output_boxes_per_class of them; those scoring at most score_threshold never count.
    Output rows (batch, class, box), in that order."""
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.unsupported(f"attribute 'center_point_box'={center}")
    b_dims, s_dims = shape_of(boxes), shape_of(scores)
    if len(b_dims) != 3 or b_dims[2] != 4 or len(s_dims) != 3 or s_dims[0] != b_dims[0] or s_dims[2] != b_dims[1]:
        raise ctx.error(f"boxes of shape {list(b_dims)} and scores of shape {list(s_dims)} do not fit "
                        "(batches, boxes, 4) and (batches, classes, boxes)")
    boxes = known(ctx, boxes, "boxes (how many are selected depends on them)")
    scores = known(ctx, scores, "scores (how many boxes are selected depends on them)")
    limit = _optional_scalar(ctx, max_output, "max_output_boxes_per_class", np.int64)
    iou = _optional_scalar(ctx, iou_threshold, "iou_threshold", boxes.dtype)
    floor = _optional_scalar(ctx, score_threshold, "score_threshold", scores.dtype)
    limit = 0 if limit is None else max(int(limit), 0)
    iou = np.zeros((), boxes.dtype) if iou is None else iou
    rows = []
    for b in range(b_dims[0]):
        overlaps = _overlaps(boxes[b], bool(center), iou)
        for c in range(s_dims[1]):
            s = scores[b, c]
            order = np.lexsort((np.arange(len(s)), -s.astype(np.float64)))
            if floor is not None:
                order = order[s[order] > floor]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not any(overlaps[i, k] for k in kept):
                    kept.append(int(i))
            rows.extend((b, c, k) for k in kept)
    return np.asarray(rows, np.int64).reshape(-1, 3)
