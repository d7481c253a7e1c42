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
