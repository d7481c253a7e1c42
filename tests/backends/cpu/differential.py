"""Differential checks: the CPU backend against the reference evaluator on the same inputs."""
from __future__ import annotations

import numpy as np

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module


def random_inputs(module, rng) -> list[np.ndarray]:
    out = []
    for p in module.entry.parameters:
        shape = p.shape
        dt = shape.dtype
        if dt.is_pred:
            a = rng.random(shape.dims) < 0.5
        elif dt.is_integral:
            info = np.iinfo(dt.np_dtype)
            a = rng.integers(max(info.min, -1000), min(info.max, 1000), shape.dims, endpoint=True)
        else:
            a = rng.standard_normal(shape.dims) * 3
        out.append(np.asarray(a).astype(dt.np_dtype))
    return out


def assert_cpu_matches_interpreter(text: str, rng, inputs=None, rtol: float = 1e-5, atol: float = 1e-6):
    module = parse_module(text)
    inputs = inputs if inputs is not None else random_inputs(module, rng)
    want = flatten_result(evaluate_module(module, inputs))
    got = get_backend("cpu").compile(parse_module(text)).run_flat(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def emitted_by(monkeypatch, emitter) -> list[str]:
    """The names of the convolutions a tiles.EMITTERS class emits, as a list that fills
    while compiling."""
    seen = []
    emit = emitter.emit
    monkeypatch.setattr(emitter, "emit", lambda self, *args: seen.append(self.conv.name) or emit(self, *args))
    return seen


SUBNORMAL_PRODUCT = """HloModule flush
ENTRY main {
  x = f32[100003] parameter(0)
  y = f32[100003] parameter(1)
  ROOT m = f32[100003] multiply(x, y)
}
"""


def assert_subnormal_products_flushed(rng) -> None:
    """Products that underflow to subnormals come out zero (the interpreter flushes them
    too), in whichever chunk and on whichever thread they were computed."""
    x = (rng.random(100_003) + 1).astype(np.float32) * np.float32(1e-20)
    (got,) = assert_cpu_matches_interpreter(SUBNORMAL_PRODUCT, rng, [x, x], rtol=0, atol=0)
    assert not got.any()


def assert_concurrent_calls_correct(rng, size: int) -> None:
    """Twelve calls of a jitted sum and elementwise product from four Python threads at
    once, each result against float64."""
    from concurrent.futures import ThreadPoolExecutor

    import pyxla
    import pyxla.numpy as pnp
    f = pyxla.jit(lambda x, y, z: (pnp.sum(x + y * z), pnp.tanh(x) * y), backend="cpu")
    inputs = [[rng.standard_normal(size).astype(np.float32) for _ in range(3)] for _ in range(12)]
    f(*inputs[0])
    with ThreadPoolExecutor(4) as threads:
        results = list(threads.map(lambda ins: f(*ins), inputs))
    for (x, y, z), (total, t) in zip(inputs, results):
        x64, y64, z64 = (a.astype(np.float64) for a in (x, y, z))
        np.testing.assert_allclose(total, np.sum(x64 + y64 * z64), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(t, np.tanh(x64) * y64, rtol=1e-5, atol=1e-6)

