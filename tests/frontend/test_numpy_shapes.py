"""pyxla.numpy's creation and array-manipulation functions against NumPy, eagerly and under jit."""
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyxla.numpy as pnp
from pyxla.errors import TraceError

from .pnp_testing import check_against_numpy, jit

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def data(rng, *shape, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def same(pnp_call, np_call, *args):
    """pnp_call and np_call agree (eagerly and under jit) on `args`."""
    check_against_numpy(pnp_call, np_call, *args, reference_args=list(args))


def each_piece(pieces_fn):
    """A list result as a tuple, which jit can return and the checks compare piece by piece."""
    return lambda *a: tuple(pieces_fn(*a))


# --- creation -------------------------------------------------------------------------------

FILLED = [
    ("zeros", lambda m, v: m.zeros((2, 3))),
    ("ones", lambda m, v: m.ones(4, np.int8)),
    ("empty", lambda m, v: m.empty((0, 2))),
    ("full", lambda m, v: m.full((2, 2), 7)),
    ("full float32", lambda m, v: m.full((3,), 2.5, np.float32)),
    ("zeros_like", lambda m, v: m.zeros_like(v)),
    ("ones_like", lambda m, v: m.ones_like(v, dtype=np.float64)),
    ("full_like", lambda m, v: m.full_like(v, 3)),
    ("full_like shape", lambda m, v: m.full_like(v, -1, shape=(4,))),
]


@pytest.mark.parametrize("name, make", FILLED, ids=[n for n, _ in FILLED])
def test_filled_arrays_and_likes(name, make, rng):
    """make(module, v) is spelled once and run with pnp and with np."""
    x = data(rng, 2, 3, dtype=np.int16)
    same(lambda v: make(pnp, v), lambda v: make(np, v), x)


def test_full_with_a_traced_fill_value(rng):
    fill = np.float32(rng.standard_normal())
    same(lambda f: pnp.full((2, 3), f), lambda f: np.full((2, 3), f), fill)


@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 2, 0.25), (10, 0, -3), (0.5, 3.0, 0.5), (-4, 4, 1.5), (3, 3)])
@pytest.mark.parametrize("dtype", [None, np.float32, np.int32])
def test_arange(args, dtype):
    want = np.arange(*args, dtype=dtype)
    got = pnp.arange(*args, dtype=dtype)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(jit(lambda: pnp.arange(*args, dtype=dtype))(), want, rtol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(num=5), dict(num=7, endpoint=False), dict(num=1), dict(num=0),
                                    dict(num=6, dtype=np.int32), dict(num=4, dtype=np.float32)])
def test_linspace(kwargs, rng):
    start, stop = float(rng.uniform(-5, 0)), float(rng.uniform(1, 5))
    same(lambda a, b: pnp.linspace(a, b, **kwargs), lambda a, b: np.linspace(a, b, **kwargs), start, stop)
    lo, hi = data(rng, 3), data(rng, 2, 3) + 5
    same(lambda a, b: pnp.linspace(a, b, 4, axis=-1), lambda a, b: np.linspace(a, b, 4, axis=-1), lo, hi)
    got, step = pnp.linspace(start, stop, 5, retstep=True)
    assert np.isclose(step, np.linspace(start, stop, 5, retstep=True)[1])


@pytest.mark.parametrize("n, m, k", [(3, None, 0), (3, 5, 1), (4, 2, -1), (2, 2, 5), (0, 3, 0)])
def test_eye_tri_tril_triu(n, m, k, rng):
    for name in ("eye", "tri"):
        want = getattr(np, name)(n, m, k, dtype=np.float32)
        got = getattr(pnp, name)(n, m, k, dtype=np.float32)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    x = data(rng, 2, 4, 3)
    same(lambda v: pnp.tril(v, k), lambda v: np.tril(v, k), x)
    same(lambda v: pnp.triu(v, k), lambda v: np.triu(v, k), x)
    np.testing.assert_array_equal(pnp.identity(3, np.int32), np.identity(3, np.int32))


def test_diag_meshgrid_asarray(rng):
    v = data(rng, 4)
    for k in (0, 2, -1):
        same(lambda a: pnp.diag(a, k), lambda a: np.diag(a, k), v)
        same(lambda a: pnp.diag(a, k), lambda a: np.diag(a, k), data(rng, 3, 5))
    x, y = data(rng, 3), data(rng, 4)
    for indexing in ("xy", "ij"):
        same(each_piece(lambda a, b: pnp.meshgrid(a, b, indexing=indexing)),
             each_piece(lambda a, b: np.meshgrid(a, b, indexing=indexing)), x, y)
    arr = pnp.asarray([[1, 2], [3, 4]], dtype=np.float32)
    assert isinstance(arr, pnp.ndarray) and arr.dtype == np.float32
    assert pnp.array([1.5, 2], ndmin=3).shape == (1, 1, 2)
    stacked = jit(lambda a, b: pnp.asarray([a, b]))(x, x)
    np.testing.assert_array_equal(stacked, np.stack([x, x]))
    with pytest.raises(TypeError, match="complex"):
        pnp.asarray([1 + 2j])


# --- manipulation ------------------------------------------------------------------------------

@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), data_=st.data())
def test_reshape_transpose_and_axes(shape, data_, rng):
    x = data(rng, *shape)
    size = x.size
    new = data_.draw(st.sampled_from([(-1,), (size,), (1, size, 1), (-1, 1)] + ([(2, -1)] if size % 2 == 0 else [])))
    same(lambda v: pnp.reshape(v, new), lambda v: np.reshape(v, new), x)
    same(lambda v: pnp.asarray(v).reshape(*new), lambda v: v.reshape(*new), x)
    perm = tuple(data_.draw(st.permutations(range(x.ndim))))
    same(lambda v: pnp.transpose(v, perm), lambda v: np.transpose(v, perm), x)
    same(lambda v: pnp.asarray(v).T, lambda v: v.T, x)
    a, b = data_.draw(st.integers(-x.ndim, x.ndim - 1)), data_.draw(st.integers(-x.ndim, x.ndim - 1))
    same(lambda v: pnp.swapaxes(v, a, b), lambda v: np.swapaxes(v, a, b), x)
    same(lambda v: pnp.moveaxis(v, a, b), lambda v: np.moveaxis(v, a, b), x)
    e = data_.draw(st.integers(-x.ndim - 1, x.ndim))
    same(lambda v: pnp.expand_dims(v, e), lambda v: np.expand_dims(v, e), x)
    same(pnp.squeeze, np.squeeze, x)
    same(pnp.ravel, np.ravel, x)
    same(lambda v: pnp.flip(v, a), lambda v: np.flip(v, a), x)
    same(pnp.flip, np.flip, x)


def test_expand_dims_with_tuple_and_squeeze_errors(rng):
    x = data(rng, 3, 1, 4)
    same(lambda v: pnp.expand_dims(v, (0, -1)), lambda v: np.expand_dims(v, (0, -1)), x)
    same(lambda v: pnp.squeeze(v, 1), lambda v: np.squeeze(v, 1), x)
    with pytest.raises(ValueError):
        pnp.squeeze(x, 0)
    with pytest.raises(TraceError, match="reshape.*12"):
        pnp.reshape(x, (5, -1))


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
def test_broadcasting_functions(shapes, rng):
    xs = [data(rng, *s) for s in shapes.input_shapes]
    same(lambda v: pnp.broadcast_to(v, shapes.result_shape), lambda v: np.broadcast_to(v, shapes.result_shape), xs[0])
    same(each_piece(pnp.broadcast_arrays), each_piece(np.broadcast_arrays), *xs)
    assert pnp.broadcast_shapes(*shapes.input_shapes) == shapes.result_shape


def test_broadcast_errors_name_the_shapes():
    with pytest.raises(TraceError, match=r"broadcast_to.*\(3, 4\).*\(5,\)"):
        pnp.broadcast_to(np.ones((3, 4)), (5,))


def test_joining(rng):
    a, b, c = data(rng, 2, 3), data(rng, 4, 3, dtype=np.int32), data(rng, 1, 3, dtype=np.float64)
    same(lambda x, y, z: pnp.concatenate([x, y, z]), lambda x, y, z: np.concatenate([x, y, z]), a, b, c)
    same(lambda x, y: pnp.concatenate([x, y], axis=None), lambda x, y: np.concatenate([x, y], axis=None), a, b)
    p, q = data(rng, 2, 3), data(rng, 2, 3)
    for axis in (0, 1, -1, 2):
        same(lambda x, y: pnp.stack([x, y], axis), lambda x, y: np.stack([x, y], axis), p, q)
    for name in ("hstack", "vstack", "dstack", "column_stack"):
        same(lambda x, y: getattr(pnp, name)([x, y]), lambda x, y: getattr(np, name)([x, y]), p, q)
    v, w = data(rng, 3), data(rng, 2)
    for name in ("hstack", "vstack", "column_stack"):
        args = (v, w) if name == "hstack" else (v, v)
        same(lambda x, y: getattr(pnp, name)([x, y]), lambda x, y: getattr(np, name)([x, y]), *args)
    same(lambda x, y: pnp.append(x, y), lambda x, y: np.append(x, y), p, v)
    with pytest.raises(TraceError, match=r"concatenate.*\(2, 3\).*\(2, 4\)"):
        pnp.concatenate([p, data(rng, 2, 4)], axis=0)


@pytest.mark.parametrize("spec", [3, [1, 4], [2, -1], [0, 0, 5], 1])
def test_splitting(spec, rng):
    x = data(rng, 6, 4)
    if not isinstance(spec, int) or 6 % spec == 0:
        same(each_piece(lambda v: pnp.split(v, spec)), each_piece(lambda v: np.split(v, spec)), x)
    same(each_piece(lambda v: pnp.array_split(v, 4, axis=1)), each_piece(lambda v: np.array_split(v, 4, axis=1)), x)
    same(each_piece(lambda v: pnp.array_split(v, 4)), each_piece(lambda v: np.array_split(v, 4)), x)
    same(each_piece(lambda v: pnp.hsplit(v, 2)), each_piece(lambda v: np.hsplit(v, 2)), x)
    with pytest.raises(ValueError, match="equal division"):
        pnp.split(x, 4)


@pytest.mark.parametrize("shift, axis", [(2, None), (-1, 0), (7, 1), ((1, -2), (0, 1)), (3, (0, 1))])
def test_roll_rot90_tile_repeat(shift, axis, rng):
    x = data(rng, 3, 5)
    same(lambda v: pnp.roll(v, shift, axis), lambda v: np.roll(v, shift, axis), x)
    for k in range(-1, 4):
        same(lambda v: pnp.rot90(v, k), lambda v: np.rot90(v, k), x)
    for reps in (2, (2, 1), (1, 2, 3)):
        same(lambda v: pnp.tile(v, reps), lambda v: np.tile(v, reps), x)
    for repeats, ax in ((2, None), (3, 1), ([1, 0, 2], 0)):
        same(lambda v: pnp.repeat(v, repeats, ax), lambda v: np.repeat(v, repeats, ax), x)


def test_roll_by_a_traced_shift(rng):
    x = data(rng, 7)
    for s in (3, -9, 0):
        np.testing.assert_array_equal(jit(lambda v, k: pnp.roll(v, k))(x, s), np.roll(x, s))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("width", [1, (2, 3), ((0, 2), (3, 1)), ((1, 1), (0, 0))])
def test_pad(mode, width, rng):
    x = data(rng, 4, 5)
    same(lambda v: pnp.pad(v, width, mode=mode), lambda v: np.pad(v, width, mode=mode), x)


def test_pad_constant_values(rng):
    x = data(rng, 3, 2, dtype=np.int32)
    same(lambda v: pnp.pad(v, 2, constant_values=7), lambda v: np.pad(v, 2, constant_values=7), x)
    same(lambda v: pnp.pad(v, ((1, 2), (3, 0)), constant_values=((1, 2), (3, 4))),
         lambda v: np.pad(v, ((1, 2), (3, 0)), constant_values=((1, 2), (3, 4))), x)
    with pytest.raises(NotImplementedError, match="linear_ramp"):
        pnp.pad(x, 1, mode="linear_ramp")


def test_diff(rng):
    x = data(rng, 4, 6)
    for n, axis in ((1, -1), (2, 0), (3, 1)):
        same(lambda v: pnp.diff(v, n, axis), lambda v: np.diff(v, n, axis), x)
    same(lambda v: pnp.diff(v, prepend=0.0), lambda v: np.diff(v, prepend=0.0), x)
    same(pnp.diff, np.diff, rng.random(6) < 0.5)
