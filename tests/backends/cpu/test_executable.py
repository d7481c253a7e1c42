"""The call path of a CPU executable: the native call shim, reused output buffers and arenas,
and jit's fast path, which must never hand out memory a caller still holds or read a view's
bytes as if they were contiguous."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla.backends.cpu.runtime import call_shim
from pyxla.backends.cpu.runtime.executable import REUSED_OUTPUT_BYTES

BIG = REUSED_OUTPUT_BYTES // 4 + 37          # f32 elements: an output the executable reuses


def scaled_tanh(x, y):
    return pnp.tanh(x) * y


def reference(x, y):
    return np.tanh(x.astype(np.float64)) * y


def test_the_native_shim_is_used_on_cpython():
    assert call_shim._OFFSETS is not None


def test_held_results_are_never_overwritten(rng):
    f = pyxla.jit(scaled_tanh)
    calls = [(rng.standard_normal(BIG).astype(np.float32), np.float32(rng.uniform(1, 2))) for _ in range(6)]
    held = [f(x, np.asarray(y)) for x, y in calls]
    for (x, y), result in zip(calls, held):
        np.testing.assert_allclose(result, reference(x, y), rtol=3e-6)
    assert len({r.ctypes.data for r in held}) == len(held)


def test_a_held_view_keeps_its_buffer(rng):
    f = pyxla.jit(scaled_tanh)
    x1, x2 = (rng.standard_normal(BIG).astype(np.float32) for _ in range(2))
    one = np.asarray(np.float32(1.5))
    view = f(x1, one)[10:20]           # the full result is dropped, its slice kept
    expected = reference(x1, 1.5)[10:20]
    for _ in range(4):
        f(x2, one)
    np.testing.assert_allclose(view, expected, rtol=3e-6)


def test_dropped_results_are_reused_and_correct(rng):
    f = pyxla.jit(scaled_tanh)
    one = np.asarray(np.float32(1.0))
    addresses = set()
    for _ in range(5):
        x = rng.standard_normal(BIG).astype(np.float32)
        r = f(x, one)
        np.testing.assert_allclose(r, reference(x, 1.0), rtol=3e-6)
        addresses.add(r.ctypes.data)
        del r
    assert len(addresses) < 5


def test_views_and_scalars_take_the_checked_path(rng):
    f = pyxla.jit(lambda a, b: a - b)
    base = rng.standard_normal((9, 14)).astype(np.float32)
    b = rng.standard_normal((9, 7)).astype(np.float32)
    contiguous = np.ascontiguousarray(base[:, ::2])
    np.testing.assert_array_equal(f(contiguous, b), contiguous - b)   # fills the fast cache
    np.testing.assert_array_equal(f(base[:, ::2], b), base[:, ::2] - b)
    np.testing.assert_array_equal(f(base.T[::2].T[:, :7], b), base.T[::2].T[:, :7] - b)
    g = pyxla.jit(lambda a, b: a * b)
    x = np.asarray(np.float32(rng.uniform(1, 2)))
    assert g(x, x) == x * x
    assert g(np.float32(3.0), np.float32(2.0)) == np.float32(6.0)   # NumPy scalars, not arrays


def test_concurrent_calls_with_reused_outputs(rng):
    f = pyxla.jit(scaled_tanh)
    calls = [(rng.standard_normal(BIG).astype(np.float32), np.asarray(np.float32(i + 1))) for i in range(12)]
    f(*calls[0])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: f(*c), calls))
    for (x, y), r in zip(calls, results):
        np.testing.assert_allclose(r, reference(x, y), rtol=3e-6)


@pytest.mark.parametrize("n_outputs", [1, 3])
def test_tuple_results_on_the_fast_path(n_outputs, rng):
    f = pyxla.jit(lambda x: tuple(x * (i + 1) for i in range(n_outputs)) if n_outputs > 1 else (x + 1,))
    x = rng.standard_normal(33).astype(np.float32)
    for _ in range(2):   # the second call goes through the fast path
        out = f(x)
        assert isinstance(out, tuple) and len(out) == n_outputs
        for i, o in enumerate(out):
            expected = x * (i + 1) if n_outputs > 1 else x + 1
            np.testing.assert_array_equal(o, expected)
