"""Device arrays through gpu-sim: pyxla.device_put, jit on a GPU backend returning device
arrays, chained calls that keep their data on the device (counted by the memory's copies),
and the checks on what a device array may be passed as."""
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla.backends import get_backend
from pyxla.backends.gpu import DeviceArray, memory_for
from pyxla.errors import ArgumentError
from pyxla.hlo import parse_module


def test_device_put_round_trip_is_exact(rng):
    for x in (rng.standard_normal((3, 5)).astype(np.float32), rng.integers(-9, 9, 7).astype(np.int8),
              np.array(2.5), rng.standard_normal((2, 3, 4)).astype(np.float16)):
        d = pyxla.device_put(x, device="gpu-sim")
        assert isinstance(d, DeviceArray) and d.device == "gpu-sim"
        assert d.shape == x.shape and d.dtype == x.dtype and d.ndim == x.ndim and d.size == x.size
        assert d.block_until_ready() is d
        back = np.asarray(d)
        assert back.dtype == x.dtype
        np.testing.assert_array_equal(back, x)
    assert pyxla.device_put(d, device="gpu-sim") is d
    np.testing.assert_array_equal(pyxla.device_put(d, device="cpu"), np.asarray(d))


def test_device_put_refuses_unknown_devices_and_dtypes():
    with pytest.raises(ArgumentError, match="unknown device 'tpu'"):
        pyxla.device_put(np.ones(3), device="tpu")
    with pytest.raises(ArgumentError, match="not an array pyxla can hold"):
        pyxla.device_put(np.array(["a"]), device="gpu-sim")


def test_three_chained_jitted_calls_stay_on_the_device(rng):
    f = pyxla.jit(lambda x, w: pnp.tanh(x @ w), backend="gpu-sim")
    g = pyxla.jit(lambda h: h * 2.0 - pnp.sum(h, axis=1, keepdims=True), backend="gpu-sim")
    k = pyxla.jit(lambda h, w: pnp.exp(h @ w.T) + 1.0, backend="gpu-sim")
    x = rng.standard_normal((17, 33)).astype(np.float32)
    w = rng.standard_normal((33, 9)).astype(np.float32) * 0.3
    k(g(f(x, w)), w)   # compile all three (constants go up once per executable)
    memory = memory_for("gpu-sim")
    before = memory.counts()
    dx, dw = pyxla.device_put(x, device="gpu-sim"), pyxla.device_put(w, device="gpu-sim")
    out = k(g(f(dx, dw)), dw)
    middle = memory.counts()
    assert isinstance(out, DeviceArray)
    assert middle["uploads"] - before["uploads"] == 2     # the two device_puts, nothing else
    assert middle["downloads"] == before["downloads"]     # no result came back between calls
    got = np.asarray(out)
    assert memory.counts()["downloads"] - before["downloads"] == 1
    h = np.tanh(x.astype(np.float64) @ w.astype(np.float64))
    h = h * 2.0 - h.sum(axis=1, keepdims=True)
    want = np.exp(h @ w.astype(np.float64).T) + 1.0
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)


def test_jit_results_behave_as_arrays(rng):
    f = pyxla.jit(lambda x: (x + 1.0, pnp.sum(x)), backend="gpu-sim")
    x = rng.standard_normal(40).astype(np.float32)
    a, s = f(x)
    assert isinstance(a, DeviceArray) and isinstance(s, DeviceArray)
    np.testing.assert_allclose(np.asarray(a), x + 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(s), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a * 2 - 1, (x + 1.0) * 2 - 1, rtol=1e-6)   # operators on the host copy
    assert a[3] == np.float32(x[3] + 1.0) and len(a) == 40


def test_a_wrong_device_array_names_the_parameter(rng):
    executable = get_backend("gpu-sim").compile(parse_module("""HloModule m
ENTRY e {
  x = f32[4,3] parameter(0)
  ROOT n = f32[4,3] negate(x)
}
"""))
    with pytest.raises(ArgumentError, match="parameter x: expected f32\\[4,3\\]"):
        executable.run_device([pyxla.device_put(np.ones((3, 4), np.float32), device="gpu-sim")])
    with pytest.raises(ArgumentError, match="parameter x"):
        executable.run_device([pyxla.device_put(np.ones((4, 3), np.float64), device="gpu-sim")])
    with pytest.raises(ArgumentError, match="takes 1 arguments"):
        executable.run_device([])


def test_a_parameter_in_another_layout_goes_through_the_host(rng):
    executable = get_backend("gpu-sim").compile(parse_module("""HloModule m
ENTRY e {
  x = f32[5,6]{0,1} parameter(0)
  ROOT n = f32[5,6]{1,0} negate(x)
}
"""))
    x = rng.standard_normal((5, 6)).astype(np.float32)
    d = pyxla.device_put(x, device="gpu-sim")
    memory = memory_for("gpu-sim")
    before = memory.counts()
    (out,) = executable.run_device([d])
    after = memory.counts()
    assert after["downloads"] - before["downloads"] == 1 and after["uploads"] - before["uploads"] == 1
    np.testing.assert_array_equal(np.asarray(out), -x)


def test_a_result_that_is_a_parameter_or_constant_is_shared_not_copied(rng):
    executable = get_backend("gpu-sim").compile(parse_module("""HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  c = f32[3] constant({1, 2, 3})
  ROOT t = (f32[8], f32[3]) tuple(x, c)
}
"""))
    x = rng.standard_normal(8).astype(np.float32)
    d = pyxla.device_put(x, device="gpu-sim")
    same, const = executable.run_device([d])
    assert same.buffer.address == d.buffer.address
    np.testing.assert_array_equal(np.asarray(same), x)
    np.testing.assert_array_equal(np.asarray(const), [1, 2, 3])


def test_other_backends_take_a_device_array_as_its_host_copy(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    d = pyxla.device_put(x, device="gpu-sim")
    for backend in ("cpu", "interpreter"):
        out = pyxla.jit(lambda v: v * 2.0 + 1.0, backend=backend)(d)
        assert isinstance(out, np.ndarray)
        np.testing.assert_array_equal(out, x * np.float32(2.0) + np.float32(1.0))
