"""sort, argsort, searchsorted, median, quantile and percentile against NumPy (NaN last,
stable ties), eagerly and under jit."""
import numpy as np
import pytest

import pyxla.numpy as pnp

from .pnp_testing import REDUCTION_TOL, check_against_numpy


def with_nans(rng, shape):
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.2] = np.nan
    return x.astype(np.float32)


@pytest.mark.parametrize("axis", [-1, 0, None])
def test_sort_puts_nan_last(axis, rng):
    x = with_nans(rng, (5, 7))
    check_against_numpy(lambda v: pnp.sort(v, axis), lambda v: np.sort(v, axis), x, reference_args=[x])
    i = rng.integers(-3, 3, (4, 6)).astype(np.int16)
    check_against_numpy(lambda v: pnp.sort(v, axis), lambda v: np.sort(v, axis), i)
    b = rng.random((3, 4)) < 0.5
    check_against_numpy(lambda v: pnp.sort(v, axis), lambda v: np.sort(v, axis), b)


@pytest.mark.parametrize("axis", [-1, 0, None])
def test_argsort_is_stable(axis, rng):
    ties = rng.integers(0, 4, (6, 5)).astype(np.int32)
    check_against_numpy(lambda v: pnp.argsort(v, axis), lambda v: np.argsort(v, axis, kind="stable"), ties)
    x = with_nans(rng, (4, 6))
    check_against_numpy(lambda v: pnp.argsort(v, axis), lambda v: np.argsort(v, axis, kind="stable"), x,
                        reference_args=[x])
    check_against_numpy(lambda v: pnp.argsort(v, axis, descending=True),
                        lambda v: np.argsort(-v, axis, kind="stable"), ties)   # stable: ties keep their order


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side, rng):
    a = np.sort(rng.integers(0, 10, 12)).astype(np.float32)
    v = rng.integers(-1, 12, (3, 4)).astype(np.float32)
    v[0, 0] = np.nan
    check_against_numpy(lambda x, y: pnp.searchsorted(x, y, side), lambda x, y: np.searchsorted(x, y, side), a, v)
    perm = rng.permutation(12)
    shuffled = a[perm]
    sorter = np.argsort(shuffled, kind="stable")
    check_against_numpy(lambda x, y, s: pnp.searchsorted(x, y, side, sorter=s),
                        lambda x, y, s: np.searchsorted(x, y, side, sorter=s), shuffled, v, sorter)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n", [1, 8, 9, 100, 1025])
def test_searchsorted_binary_search(side, n, rng):
    """Sizes either side of the counting path (n <= 8) and the binary search's halvings
    (2**k and 2**k + 1 elements): runs of equal elements, NaN at the end of `a`, and values
    equal to elements, beyond both ends, infinite and NaN; integers too."""
    a = rng.standard_normal(n).astype(np.float32)
    a[: n // 3] = a[0]
    a[rng.integers(0, n, max(1, n // 10))] = np.nan
    a = np.sort(a)
    v = np.concatenate([rng.standard_normal(20), a[rng.integers(0, n, 6)], [np.nan, np.inf, -np.inf, 1e30]])
    check_against_numpy(lambda x, y: pnp.searchsorted(x, y, side), lambda x, y: np.searchsorted(x, y, side),
                        a, v.astype(np.float32).reshape(2, -1))
    ints = np.sort(rng.integers(-5, 5, n))
    check_against_numpy(lambda x, y: pnp.searchsorted(x, y, side), lambda x, y: np.searchsorted(x, y, side),
                        ints, rng.integers(-7, 7, (3, 5)))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), (-1, False)])
def test_median_quantile_percentile(axis, keepdims, rng):
    for shape in ((5, 6), (4, 7)):   # odd and even counts
        x = rng.standard_normal(shape)
        check_against_numpy(lambda v: pnp.median(v, axis, keepdims=keepdims),
                            lambda v: np.median(v, axis, keepdims=keepdims), x, tol=REDUCTION_TOL)
        for q in (0.3, np.array([0.0, 0.5, 0.9, 1.0])):
            check_against_numpy(lambda v: pnp.quantile(v, q, axis, keepdims=keepdims),
                                lambda v: np.quantile(v, q, axis, keepdims=keepdims), x, tol=REDUCTION_TOL)
        check_against_numpy(lambda v, q: pnp.percentile(v, q, axis), lambda v, q: np.percentile(v, q, axis),
                            x, np.array([10.0, 75.0]), tol=REDUCTION_TOL)
    ints = rng.integers(0, 9, (3, 5))
    check_against_numpy(lambda v: pnp.median(v, axis), lambda v: np.median(v, axis), ints, tol=REDUCTION_TOL)
    nan = rng.standard_normal((3, 5))
    nan[1, 2] = np.nan
    check_against_numpy(lambda v: pnp.median(v, axis), lambda v: np.median(v, axis), nan, tol=REDUCTION_TOL)
    with pytest.raises(NotImplementedError, match="nearest"):
        pnp.quantile(nan, 0.5, method="nearest")
