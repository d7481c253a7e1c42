"""Indexing against NumPy: every index form through x[...] on tracers and x.at[...].get()
eagerly, functional updates x.at[...].set/add/... against NumPy's in-place equivalents
(np.add.at for duplicates), take, take_along_axis, diagonal and friends."""
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import pyxla
import pyxla.numpy as pnp
from pyxla.errors import ConcretizationError, TraceError

from .pnp_testing import check_against_numpy, jit

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SHAPE = (4, 5, 6)

INDEXES = {
    "int": 2,
    "negative int": -1,
    "ints": (1, -2),
    "all ints": (3, 4, 5),
    "slice": slice(1, 3),
    "slice step": slice(None, None, 2),
    "negative step": slice(None, None, -1),
    "negative step bounds": (slice(3, 0, -2), slice(-1, -6, -3)),
    "slice past the end": slice(2, 100),
    "empty slice": slice(3, 1),
    "ellipsis": (Ellipsis, 1),
    "ellipsis middle": (0, Ellipsis, slice(1, 4)),
    "newaxis": (None, 1, None, slice(None), None),
    "empty tuple": (),
    "int list": [0, 2, 2, -1],
    "int array 2-d": np.array([[0, 3], [1, -4]]),
    "two arrays broadcast": (np.array([[0], [2]]), np.array([1, -1, 3])),
    "arrays apart": (np.array([0, 3]), slice(None), np.array([5, -6])),
    "arrays adjacent after slice": (slice(1, 3), np.array([0, 4, 1]), np.array([2, 2, -1])),
    "int and array": (1, slice(None), np.array([0, 5])),
    "int next to array": (slice(None), 1, np.array([0, 5])),
    "array with newaxis": (np.array([1, 2]), None, np.array([0, 3])),
    "arrays apart after slice": (slice(None), np.array([0, 3]), None, np.array([1, 2])),
    "arrays apart by slice": (np.array([[2], [1]]), slice(1, 4), np.array([0, 3, 5])),
    "array then ellipsis": (np.array([3, 0]), Ellipsis),
    "empty array": np.array([], dtype=np.int64),
    "mask 1-d": np.array([True, False, True, True]),
    "mask 2-d": (slice(None), np.arange(30).reshape(5, 6) % 3 == 0),
    "mask and array": (np.array([True, False, False, True]), slice(None), np.array([1, 4])),
    "mask everything": np.ones(SHAPE, bool),
}


def make(rng, shape=SHAPE, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def getitem_checks(x, index, what):
    """x[index] under jit (x traced, the index a constant) and eagerly via .at[].get()."""
    check_against_numpy(lambda v: pnp.asarray(v).at[index].get(), lambda v: v[index], x,
                        reference_args=[x], what=what)
    check_against_numpy(lambda v: v[index] if not isinstance(v, np.ndarray) else pnp.asarray(v).at[index].get(),
                        lambda v: v[index], x, reference_args=[x], what=what)


@pytest.mark.parametrize("name", INDEXES)
def test_index_forms_match_numpy(name, rng):
    getitem_checks(make(rng), INDEXES[name], name)


@SETTINGS
@given(index=hnp.basic_indices(SHAPE, min_dims=0, allow_newaxis=True, allow_ellipsis=True))
def test_generated_basic_indices(index, rng):
    getitem_checks(make(rng), index, repr(index))


@SETTINGS
@given(index=hnp.integer_array_indices(SHAPE, result_shape=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)))
def test_generated_integer_array_indices(index, rng):
    getitem_checks(make(rng), index, repr(index))


def test_traced_integer_indices_are_normalised(rng):
    x = make(rng)
    idx = np.array([[0, -1], [-4, 2]], np.int32)
    check_against_numpy(lambda v, i: pnp.asarray(v).at[i].get(), lambda v, i: v[i], x, idx, reference_args=[x, idx])
    check_against_numpy(lambda v, i: pnp.asarray(v).at[:, i, 1:].get(), lambda v, i: v[:, i, 1:], x, idx,
                        reference_args=[x, idx])
    j = np.array([3, 0, -2], np.int64)
    check_against_numpy(lambda v, i, k: pnp.asarray(v).at[i[:, :1], 1, k].get(), lambda v, i, k: v[i[:, :1], 1, k],
                        x, idx, j, reference_args=[x, idx, j])
    for k in (2, -1, -4):   # a traced scalar index: a dynamic slice
        got = jit(lambda v, i: (v[i], v[1:3, i], v[..., i]))(x, np.int32(k))
        for g, w in zip(got, (x[k], x[1:3, k], x[..., k])):
            np.testing.assert_array_equal(g, w)


def test_index_errors():
    x = np.ones(SHAPE, np.float32)
    with pytest.raises(IndexError, match="out of bounds"):
        pnp.asarray(x).at[4].get()
    with pytest.raises(IndexError, match="out of bounds"):
        jit(lambda v: v[:, [0, 5]])(x)
    with pytest.raises(IndexError, match="too many indices"):
        jit(lambda v: v[0, 0, 0, 0])(x)
    with pytest.raises(IndexError, match="boolean index"):
        jit(lambda v: v[np.ones(3, bool)])(x)
    with pytest.raises(TraceError, match="boolean mask.*where"):
        jit(lambda v: v[v > 0])(x)
    with pytest.raises(TypeError, match="immutable.*at"):
        jit(lambda v: v.__setitem__(0, 1.0))(x)


# --- updates -------------------------------------------------------------------------------------

UPDATE_INDEXES = ["int", "negative int", "ints", "slice step", "negative step bounds", "ellipsis middle",
                  "newaxis", "int list", "int array 2-d", "two arrays broadcast", "arrays apart",
                  "int next to array", "arrays apart after slice", "mask 2-d", "mask everything", "empty array"]
NUMPY_AT = {"add": np.add.at, "multiply": np.multiply.at, "min": np.minimum.at, "max": np.maximum.at}


def numpy_update(x, index, values, how):
    out = x.copy()
    if how == "set":
        out[index] = values
    else:
        NUMPY_AT[how](out, index, values)
    return out


@pytest.mark.parametrize("how", ["set", "add", "multiply", "min", "max"])
@pytest.mark.parametrize("name", UPDATE_INDEXES)
def test_at_updates_match_numpy(name, how, rng):
    x = make(rng)
    index = INDEXES[name]
    target_shape = x[index].shape
    # values broadcast from a smaller shape (the trailing dims of the target)
    values = rng.standard_normal(target_shape[-1:] if target_shape else ()).astype(np.float32)
    check_against_numpy(lambda v, u: getattr(pnp.asarray(v).at[index], how)(u),
                        lambda v, u: numpy_update(v, index, u, how), x, values,
                        reference_args=[x, values], what=f"at[{name}].{how}")


def test_duplicate_indices_accumulate_like_add_at(rng):
    x = rng.integers(-5, 5, 6).astype(np.int32)
    idx = np.array([1, 3, 1, 1, -5, 0])
    vals = rng.integers(-9, 9, 6).astype(np.int32)
    check_against_numpy(lambda v, i, u: pnp.asarray(v).at[i].add(u), lambda v, i, u: numpy_update(v, i, u, "add"),
                        x, idx, vals, reference_args=[x, idx, vals])
    # set with duplicates keeps the last value, as NumPy's assignment does
    check_against_numpy(lambda v, u: pnp.asarray(v).at[[2, 2, 2]].set(u), lambda v, u: numpy_update(v, [2, 2, 2], u, "set"),
                        x, vals[:3], reference_args=[x, vals[:3]])


def test_at_update_converts_values_and_accepts_scalars(rng):
    x = make(rng, (3, 4))
    got = jit(lambda v, s: v.at[1:, ::2].add(s))(x, 2)
    want = x.copy()
    want[1:, ::2] += 2
    np.testing.assert_allclose(got, want)
    assert got.dtype == np.float32
    i = np.arange(6, dtype=np.int16)
    out = pnp.asarray(i).at[::2].set(7.9)
    np.testing.assert_array_equal(out, [7, 1, 7, 3, 7, 5])
    assert out.dtype == np.int16
    assert isinstance(out, pnp.ndarray) and np.array_equal(i, np.arange(6))   # the original is untouched
    np.testing.assert_allclose(pnp.asarray(x).at[0].divide(2.0)[0], x[0] / 2, rtol=1e-6)
    np.testing.assert_allclose(pnp.asarray(x).at[1].subtract(1.0)[1], x[1] - 1, rtol=1e-6)


# --- functions -------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("mode", [None, "wrap", "clip"])
def test_take(axis, mode, rng):
    x = make(rng, (4, 5))
    n = x.size if axis is None else x.shape[axis]
    idx = rng.integers(-n if mode is None else -2 * n, n if mode is None else 2 * n, (2, 3))
    check_against_numpy(lambda v, i: pnp.take(v, i, axis=axis, mode=mode), lambda v, i: np.take(v, i, axis=axis, mode=mode),
                        x, idx, reference_args=[x, idx])
    check_against_numpy(lambda v: pnp.take(v, 3, axis=axis), lambda v: np.take(v, 3, axis=axis), x,
                        reference_args=[x])


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_take_along_axis(axis, rng):
    x = make(rng, (3, 5))
    if axis is None:
        idx = rng.integers(0, x.size, 7)
    else:
        shape = list(x.shape)
        shape[axis] = 4
        idx = rng.integers(-x.shape[axis], x.shape[axis], shape)
    check_against_numpy(lambda v, i: pnp.take_along_axis(v, i, axis), lambda v, i: np.take_along_axis(v, i, axis),
                        x, idx, reference_args=[x, idx])
    order = np.argsort(x, axis=-1)
    np.testing.assert_array_equal(pnp.take_along_axis(x, order, -1), np.sort(x, axis=-1))
    broadcasting = rng.integers(0, 5, (1, 2))
    check_against_numpy(lambda v, i: pnp.take_along_axis(v, i, 1), lambda v, i: np.take_along_axis(v, i, 1),
                        x, broadcasting, reference_args=[x, broadcasting])


@pytest.mark.parametrize("offset", [0, 1, -2, 7])
def test_diagonal_and_trace(offset, rng):
    x = make(rng, (4, 5, 3))
    for axes in ((0, 1), (2, 0), (1, -1)):
        check_against_numpy(lambda v: pnp.diagonal(v, offset, *axes), lambda v: np.diagonal(v, offset, *axes), x,
                            reference_args=[x])
        check_against_numpy(lambda v: pnp.trace(v, offset, *axes), lambda v: np.trace(v, offset, *axes), x)


def test_select_compress_nonzero(rng):
    x = make(rng, (3, 4))
    conds = [x > 1, x < -1]
    check_against_numpy(lambda v: pnp.select([v > 1, v < -1], [v, -v], 0.5), lambda v: np.select([v > 1, v < -1], [v, -v], 0.5),
                        x, reference_args=[x])
    mask = np.array([True, False, True])
    check_against_numpy(lambda v: pnp.compress(mask, v, axis=0), lambda v: np.compress(mask, v, axis=0), x,
                        reference_args=[x])
    for got, want in zip(pnp.nonzero(conds[0]), np.nonzero(conds[0])):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pnp.argwhere(x > 0), np.argwhere(x > 0))
    with pytest.raises(ConcretizationError, match="nonzero.*concrete"):
        jit(lambda v: pnp.nonzero(v))(x)


# --- the eager array type ----------------------------------------------------------------------------

def test_eager_results_are_arrays_that_numpy_reads_without_copying(rng):
    x = make(rng, (3, 4))
    out = pnp.exp(x)
    assert type(out) is pyxla.Array and isinstance(out, np.ndarray)
    view = np.asarray(out)
    assert type(view) is np.ndarray and np.shares_memory(view, out)
    updated = out.at[0, ::2].set(0.0)   # functional: `out` itself keeps its values
    assert type(updated) is pyxla.Array
    np.testing.assert_array_equal(updated[0, ::2], 0)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    # an Array is an ordinary argument of a jitted function
    np.testing.assert_allclose(jit(lambda v: v.at[1].add(1.0))(out), np.exp(x) + (np.arange(3) == 1)[:, None],
                               rtol=1e-6)
