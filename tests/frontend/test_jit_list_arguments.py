"""A Python list given to a jitted function where an array is expected: jit treats it as a
pytree (as JAX does), each number its own traced scalar; the op that receives the list says
that a list is not an array and how to make one (JAX's ops raise a TypeError too), instead
of a ConcretizationError about one scalar of it."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp


def _error(fn, *args, **kwargs) -> Exception:
    with pytest.raises(TypeError) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("op", [lambda x, w: x @ w, lambda x, w: x + w, lambda x, w: pnp.tanh(w) * x[:, :2]])
def test_list_argument_to_an_op(op):
    err = _error(pyxla.jit(op), np.ones((4, 4), np.float32), [[1, 2]] * 4)
    text = str(err)
    assert "argument 1 (a list of 8 traced values) of type <class 'list'>" in text
    assert "a list is not an array" in text and "np.asarray" in text
    assert isinstance(err, pyxla.TraceError) and not isinstance(err, pyxla.ConcretizationError)


def test_keyword_and_tuple_arguments():
    text = str(_error(pyxla.jit(lambda x, w: x + w), np.ones(2, np.float32), w=(1.0, 2.0)))
    assert "argument 'w' (a tuple of 2 traced values) of type <class 'tuple'>" in text


def test_lists_used_as_pytrees_still_work():
    assert pyxla.jit(lambda t: t[0] + t[1])([np.ones(2), np.ones(2)]).tolist() == [2.0, 2.0]
    got = pyxla.jit(lambda x, w: x @ pnp.asarray(w))(np.ones((3, 4), np.float32), [[1, 2]] * 4)
    np.testing.assert_array_equal(got, np.full((3, 2), [4.0, 8.0]))
    np.testing.assert_array_equal(pyxla.jit(lambda x: x + [1.0, 2.0])(np.zeros(2, np.float32)), [1.0, 2.0])


def test_a_traced_scalar_in_control_flow_still_says_concrete():
    with pytest.raises(pyxla.ConcretizationError):
        pyxla.jit(lambda x: 1 if x[0] > 0 else 2)(np.ones(2))
