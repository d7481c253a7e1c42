"""max_pool with indices through torch.compile(backend="pyxla"): values and indices equal
eager PyTorch's exactly, for windows that tile the input (strided slices and a first-match
select: pool.py's fast path, checked to emit no reduce-window) and for windows that overlap
or pad (the reduce-window over (value, index) pairs), with ties, -inf and NaN in windows."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import pyxla.torch as pt  # noqa: E402

CASES = [   # (spatial shape, kernel, stride, padding, ceil_mode, tiles)
    ((8, 10), 2, 2, 0, False, True),
    ((9, 7), 2, 2, 0, False, True),      # trailing row and column left out
    ((9, 9), 3, 3, 0, False, True),
    ((6, 8), (2, 4), (2, 4), 0, False, True),
    ((4, 6, 8), 2, 2, 0, False, True),   # 3-D
    ((9, 9), 3, 2, 1, True, False),      # overlapping, padded, ceil mode
    ((8, 8), 2, 1, 0, False, False),
]


def _input(rng, spatial):
    # small integers: many ties inside a window; then -inf and NaN in a few windows, and a
    # window with two NaNs (eager takes the last) and one of -inf only
    x = rng.integers(-2, 3, (2, 3, *spatial)).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, 6, replace=False)
    flat[picks[:2]] = -np.inf
    flat[picks[2:4]] = np.nan
    x[0, 0, ..., :2, :2] = np.nan
    x[0, 0, ..., 0, 0] = 1
    x[1, 2, ..., -2:, -2:] = -np.inf
    return torch.from_numpy(x)


@pytest.mark.parametrize("spatial, kernel, stride, padding, ceil_mode, tiles", CASES)
def test_values_and_indices_equal_eagers(seed, rng, spatial, kernel, stride, padding, ceil_mode, tiles):
    pool = F.max_pool3d if len(spatial) == 3 else F.max_pool2d

    def fn(x):
        return pool(x, kernel, stride, padding, ceil_mode=ceil_mode, return_indices=True)
    x = _input(rng, spatial)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pt.PyxlaFallbackWarning)
        got = torch.compile(fn, backend="pyxla")(x)
    want = fn(x)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    windows = [i for i in pt.export(_Pool(fn), (x,)).entry.instructions if i.opcode == "reduce-window"]
    assert (len(windows) == 0) == tiles


class _Pool(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)
