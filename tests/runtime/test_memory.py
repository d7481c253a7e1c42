"""Aligned arrays: where they start, what they hold, and that their buffer outlives them."""
import gc

import numpy as np
import pytest

from pyxla.runtime.memory import ALIGNMENT, aligned_copy, aligned_empty


@pytest.mark.parametrize("shape,dtype", [((3, 1000), np.float32), (7, np.float64),
                                         ((1 << 20,), np.uint8), ((2, 3, 5), np.int16)])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    for _ in range(5):    # several allocations: malloc's offsets vary with size and history
        a = aligned_empty(shape, dtype)
        assert a.ctypes.data % ALIGNMENT == 0
        assert a.shape == (shape if isinstance(shape, tuple) else (shape,)) and a.dtype == dtype
        assert a.flags.c_contiguous and a.flags.writeable


def test_an_empty_array_has_its_shape():
    a = aligned_empty((0, 4), np.float32)     # (no element: where it starts does not matter)
    assert a.shape == (0, 4) and a.size == 0


def test_aligned_copy_holds_the_values(rng):
    x = rng.standard_normal((33, 17))
    y = aligned_copy(x, np.float32)
    assert y.ctypes.data % ALIGNMENT == 0 and y.dtype == np.float32
    np.testing.assert_array_equal(y, x.astype(np.float32))
    z = aligned_copy(x.T)            # a transposed view becomes C-contiguous
    assert z.flags.c_contiguous
    np.testing.assert_array_equal(z, x.T)


def test_the_buffer_lives_as_long_as_the_array(rng):
    x = rng.standard_normal(4096)
    y = aligned_copy(x)
    del x
    gc.collect()
    junk = [np.full(4096, np.nan) for _ in range(20)]    # would reuse freed memory
    assert np.all(np.isfinite(y)) and len(junk) == 20
