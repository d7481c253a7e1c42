"""Windows shared by convolution, reduce_window and select_and_scatter_add: padding given
as 'SAME' / 'VALID' or (low, high) pairs, and XLA's per-dimension WindowDim records."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import TraceError
from ..frontend.tracing import where
from ..hlo.attributes import WindowDim


def ints_or_ones(values: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """`values` as a tuple of ints, or all ones when None (the default stride or dilation)."""
    return (1,) * rank if values is None else tuple(int(v) for v in values)


def dilated(size: int, dilation: int) -> int:
    """The extent of `size` elements spread `dilation` apart."""
    return 0 if size == 0 else (size - 1) * dilation + 1


def padtype_to_pads(in_shape: Sequence[int], window_shape: Sequence[int], window_strides: Sequence[int],
                    padding: str | Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(low, high) padding per dimension, as JAX computes it.

    'VALID' pads nothing; 'SAME' pads so that the output has ceil(in / stride) positions,
    the odd element going to the high side ('SAME_LOWER': to the low side).
    """
    if not isinstance(padding, str):
        pads = [tuple(int(v) for v in p) for p in padding]
        if len(pads) != len(in_shape) or any(len(p) != 2 for p in pads):
            raise TraceError(f"padding {padding!r} must give one (low, high) pair per window "
                             f"dimension ({len(in_shape)}){where()}")
        return pads
    kind = padding.upper()
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise TraceError(f"unknown padding {padding!r}: use 'SAME', 'SAME_LOWER', 'VALID' or "
                         f"(low, high) pairs{where()}")
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        out = -(-size // stride)
        total = max((out - 1) * stride + window - size, 0)
        small, large = total // 2, total - total // 2
        pads.append((small, large) if kind == "SAME" else (large, small))
    return pads


def window_attribute(window_dimensions: Sequence[int], window_strides: Sequence[int] | None,
                     pads: Sequence[tuple[int, int]], base_dilation: Sequence[int] | None = None,
                     window_dilation: Sequence[int] | None = None) -> tuple[WindowDim, ...]:
    rank = len(window_dimensions)
    strides = ints_or_ones(window_strides, rank)
    base = ints_or_ones(base_dilation, rank)
    win = ints_or_ones(window_dilation, rank)
    if not (len(strides) == len(pads) == len(base) == len(win) == rank):
        raise TraceError(f"window dimensions {list(window_dimensions)}, strides {list(strides)}, padding "
                         f"{list(pads)} and dilations must all have {rank} entries{where()}")
    return tuple(WindowDim(size=int(k), stride=int(s), pad_low=int(lo), pad_high=int(hi),
                           lhs_dilate=int(b), rhs_dilate=int(w))
                 for k, s, (lo, hi), b, w in zip(window_dimensions, strides, pads, base, win))


def window_padding(in_shape: Sequence[int], window_dimensions: Sequence[int], window_strides: Sequence[int] | None,
                   padding: Any, base_dilation: Sequence[int] | None = None,
                   window_dilation: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """Padding pairs for a window over an array of `in_shape` (dilations included)."""
    rank = len(in_shape)
    strides = ints_or_ones(window_strides, rank)
    base = ints_or_ones(base_dilation, rank)
    win = ints_or_ones(window_dilation, rank)
    return padtype_to_pads([dilated(s, b) for s, b in zip(in_shape, base)],
                           [dilated(k, w) for k, w in zip(window_dimensions, win)], strides, padding)
