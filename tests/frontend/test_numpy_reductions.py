"""pyxla.numpy's reductions against NumPy: axis (None, int, negative, tuple), keepdims,
dtype rules (sums of small ints are int64, means of ints float64), where/initial, NaN and
empty cases; eagerly and under jit."""
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyxla
import pyxla.numpy as pnp

from .pnp_testing import REDUCTION_TOL, assert_close, check_against_numpy, numpy_reference

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.uint8, np.bool_]


def values(rng, shape, dtype, lo=-3.0, hi=3.0):
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0 if np.dtype(dtype).kind == "u" else -4, 5, shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


@st.composite
def array_and_axis(draw, allow_tuple=True, allow_empty=False):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0 if allow_empty else 1, max_side=5))
    rank = len(shape)
    choices = [st.none()]
    if rank:
        choices.append(st.integers(-rank, rank - 1))
        if allow_tuple:
            choices.append(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank).map(tuple))
    return shape, draw(st.one_of(*choices)), draw(st.booleans())


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "max", "min", "amax", "amin", "all", "any",
                                  "var", "std", "ptp", "count_nonzero", "nansum"])
@SETTINGS
@given(case=array_and_axis(), dtype=st.sampled_from(DTYPES))
def test_reductions_match_numpy(name, case, dtype, rng):
    shape, axis, keepdims = case
    if name in ("var", "std", "mean", "ptp") and dtype is np.bool_:
        dtype = np.int8   # NumPy subtracts booleans in ptp and refuses it
    lo, hi = (0.5, 1.5) if name == "prod" else (-3, 3)
    x = values(rng, shape, dtype, lo, hi)
    kwargs = {"axis": axis} if name == "count_nonzero" else {"axis": axis, "keepdims": keepdims}
    check_against_numpy(lambda v: getattr(pnp, name)(v, **kwargs), lambda v: getattr(np, name)(v, **kwargs),
                        x, tol=REDUCTION_TOL, what=f"{name}({x.dtype}{list(shape)}, {kwargs})")


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@SETTINGS
@given(case=array_and_axis(allow_tuple=False), dtype=st.sampled_from(DTYPES))
def test_argmax_argmin_pick_the_first_extremum(name, case, dtype, rng):
    shape, axis, keepdims = case
    x = values(rng, shape, dtype)
    if np.dtype(dtype).kind == "f":
        x = np.round(x).astype(dtype)   # ties
    kwargs = {"axis": axis, "keepdims": keepdims}
    check_against_numpy(lambda v: getattr(pnp, name)(v, **kwargs), lambda v: getattr(np, name)(v, **kwargs),
                        x, what=f"{name}({x.dtype}{list(shape)}, {kwargs})")


def test_argmax_argmin_with_signed_zeros_and_nan(rng):
    """-0 and +0 are equal (the first of them wins, as in NumPy) and the first NaN wins; the
    extremum and its first index are two reductions (numpy/reductions.py)."""
    import pyxla
    import pyxla.lax as lax
    x = np.where(rng.random((6, 40)) < 0.5, -0.0, 0.0).astype(np.float32)
    x[1, 7] = x[1, 30] = np.nan
    x[2, 3] = -1.0
    x[3, 20] = 1.0
    for axis in (0, 1):
        for name in ("argmax", "argmin"):
            check_against_numpy(lambda v: getattr(pnp, name)(v, axis=axis), lambda v: getattr(np, name)(v, axis=axis),
                                x, what=f"{name}(axis={axis})")
            got = pyxla.jit(lambda v: getattr(lax, name)(v, axis, np.int64))(x)
            np.testing.assert_array_equal(np.asarray(got), getattr(np, name)(x, axis=axis))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@SETTINGS
@given(case=array_and_axis(allow_tuple=False), dtype=st.sampled_from(DTYPES))
def test_cumulative_reductions_match_numpy(name, case, dtype, rng):
    shape, axis, _ = case
    x = values(rng, shape, dtype, 0.5, 1.5)
    check_against_numpy(lambda v: getattr(pnp, name)(v, axis=axis), lambda v: getattr(np, name)(v, axis=axis),
                        x, tol=REDUCTION_TOL, what=f"{name}({x.dtype}{list(shape)}, axis={axis})")


def test_nan_handling(rng):
    x = rng.standard_normal((4, 6))
    x[0, 2] = x[1, 0] = x[1, 5] = np.nan
    x[3, :] = np.nan
    for name in ("max", "min", "argmax", "argmin", "sum", "mean"):
        check_against_numpy(lambda v: getattr(pnp, name)(v, axis=1), lambda v: getattr(np, name)(v, axis=1),
                            x, tol=REDUCTION_TOL, what=name)
    for name in ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd"):
        check_against_numpy(lambda v: getattr(pnp, name)(v, axis=1), lambda v: getattr(np, name)(v, axis=1),
                            x, tol=REDUCTION_TOL, what=name)
    inf = np.array([[-np.inf, -np.inf], [np.inf, 1.0]])
    check_against_numpy(lambda v: pnp.argmax(v, axis=1), lambda v: np.argmax(v, axis=1), inf)
    check_against_numpy(lambda v: pnp.argmin(v, axis=0), lambda v: np.argmin(v, axis=0), inf)


def test_dtype_initial_and_where(rng):
    x = rng.integers(-50, 50, (3, 5)).astype(np.int8)
    check_against_numpy(lambda v: pnp.sum(v, axis=0, dtype=np.int16), lambda v: np.sum(v, axis=0, dtype=np.int16), x)
    check_against_numpy(lambda v: pnp.mean(v, dtype=np.float32), lambda v: np.mean(v, dtype=np.float32), x,
                        tol=REDUCTION_TOL)
    mask = rng.random((3, 5)) < 0.6
    mask[:, 0] = True
    f = rng.standard_normal((3, 5)).astype(np.float32)
    check_against_numpy(lambda v, m: pnp.sum(v, axis=1, where=m, initial=2.0),
                        lambda v, m: np.sum(v, axis=1, where=m, initial=2.0), f, mask, tol=REDUCTION_TOL)
    check_against_numpy(lambda v, m: pnp.max(v, axis=0, where=m, initial=-1.0),
                        lambda v, m: np.max(v, axis=0, where=m, initial=-1.0), f, mask)
    check_against_numpy(lambda v, m: pnp.mean(v, axis=1, where=m), lambda v, m: np.mean(v, axis=1, where=m),
                        f, mask, tol=REDUCTION_TOL)
    check_against_numpy(lambda v, m: pnp.var(v, axis=1, where=m, ddof=1),
                        lambda v, m: np.var(v, axis=1, where=m, ddof=1), f, mask, tol=REDUCTION_TOL)
    check_against_numpy(lambda v: pnp.std(v, axis=(0, 1), ddof=2), lambda v: np.std(v, axis=(0, 1), ddof=2),
                        f, tol=REDUCTION_TOL)
    w = rng.uniform(0.1, 1, 5)
    check_against_numpy(lambda v, w: pnp.average(v, axis=1, weights=w), lambda v, w: np.average(v, axis=1, weights=w),
                        f, w, tol=REDUCTION_TOL)


def test_empty_reductions():
    empty = np.zeros((0, 3), np.float32)
    check_against_numpy(lambda v: pnp.sum(v, axis=0), lambda v: np.sum(v, axis=0), empty)
    check_against_numpy(lambda v: pnp.prod(v, axis=0), lambda v: np.prod(v, axis=0), empty)
    check_against_numpy(lambda v: pnp.any(v, axis=0), lambda v: np.any(v, axis=0), empty)
    check_against_numpy(lambda v: pnp.max(v, axis=1), lambda v: np.max(v, axis=1), empty)
    check_against_numpy(lambda v: pnp.cumsum(v, axis=0), lambda v: np.cumsum(v, axis=0), empty)
    with pytest.raises(ValueError, match="zero-size array"):
        pnp.max(empty, axis=0)
    with pytest.raises(ValueError, match="empty sequence"):
        pnp.argmax(empty, axis=0)


def test_long_float32_sum_stays_accurate(rng):
    x = rng.uniform(0, 1, 20000).astype(np.float32)
    got = pyxla.jit(pnp.sum)(x)
    assert abs(float(got) - x.astype(np.float64).sum()) < 1e-5 * x.sum()
    half = x.astype(np.float16)
    assert_close(pnp.sum(half), np.asarray(half.astype(np.float64).sum(), np.float16), REDUCTION_TOL)


def test_tracer_methods(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)

    def methods(v):
        return (v.sum(), v.sum(axis=0), v.mean(axis=1, keepdims=True), v.max(0), v.min(), v.argmax(),
                v.argmin(axis=1), v.var(), v.std(axis=0, ddof=1), v.prod(axis=1), v.cumsum(axis=1),
                v.any(), (v > 0).all(axis=0), np.ptp(v, axis=1), v.astype(np.int32), v.round(1),
                np.allclose(v, v + 1e-9), np.array_equal(v, v * 1.0), pnp.array_equal(v, v[:1]))

    for got, want in zip(pyxla.jit(methods)(x), numpy_reference(methods, x)):
        assert_close(got, want, REDUCTION_TOL, what=str(want))
