"""Lists of arrays given to pyxla.numpy functions, as JAX's jnp takes them: array and
asarray stack a (nested) list holding traced values (Python scalars in it weak); any other
function refuses a list of arrays with JAX's TypeError, inside jit and eagerly alike."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp

X = np.array([0.5, 1.5, 2.5], np.float32)
Y = np.array([1.0, 2.0, 3.0], np.float32)
MODES = {"jit": pyxla.jit, "eager": lambda f: f}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("fn, want", [
    (lambda x, y: pnp.array([x[0], x[1]]), np.array([0.5, 1.5], np.float32)),
    (lambda x, y: pnp.asarray([x[2], y[0], x[0]]), np.array([2.5, 1.0, 0.5], np.float32)),
    (lambda x, y: pnp.asarray((x, y)), np.stack([X, Y])),
    # Python scalars are weak: the list takes the arrays' float32
    (lambda x, y: pnp.array([x[0], 2.0]), np.array([0.5, 2.0], np.float32)),
    (lambda x, y: pnp.array([[x[0], x[1]], [y[0], 1]]), np.array([[0.5, 1.5], [1.0, 1.0]], np.float32)),
    (lambda x, y: pnp.array([x[0], x[1]], dtype=np.int32), np.array([0, 1], np.int32)),
    (lambda x, y: pnp.sum(pnp.array([x, y]), axis=0), X + Y),
    (lambda x, y: pnp.array([x[0], x[1]], ndmin=2), np.array([[0.5, 1.5]], np.float32)),
], ids=["array", "asarray", "tuple_of_arrays", "weak_scalar", "nested", "dtype", "sum_of_array", "ndmin"])
def test_array_stacks_a_list_of_arrays(mode, fn, want):
    got = MODES[mode](fn)(X, Y)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("fn, message", [
    (lambda x, y: pnp.sum([x, y]), "sum requires ndarray or scalar arguments, got <class 'list'> at position 0."),
    (lambda x, y: pnp.mean((x, y)), "mean requires ndarray or scalar arguments, got <class 'tuple'> at position 0."),
    (lambda x, y: pnp.add([x[0], x[1]], 1.0), "add requires ndarray or scalar arguments, got <class 'list'> at position 0."),
    (lambda x, y: pnp.where(x > 1, [x[0], x[1], x[2]], y),
     "where requires ndarray or scalar arguments, got <class 'list'> at position 1."),
    (lambda x, y: pnp.tanh([x, y]), "tanh requires ndarray or scalar arguments, got <class 'list'> at position 0."),
], ids=["sum", "mean_tuple", "add", "where", "tanh"])
def test_other_functions_refuse_a_list_of_arrays(mode, fn, message):
    with pytest.raises(TypeError) as info:
        MODES[mode](fn)(X, Y)
    assert str(info.value).startswith(message)
    assert "pyxla.numpy.asarray" in str(info.value)
    assert not isinstance(info.value, pyxla.ConcretizationError)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_lists_of_python_numbers_are_still_data(mode):
    got = MODES[mode](lambda x: pnp.add(x, [1.0, 2.0, 3.0]) + pnp.sum([1, 2]))(X)
    np.testing.assert_allclose(np.asarray(got), X + np.array([1.0, 2.0, 3.0]) + 3)
