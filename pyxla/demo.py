"""`make demo`: parse a bundled HLO program, verify it, run it, and show what happened.

The program is a small MLP with a softmax head (pyxla/examples/mlp_softmax.hlo). It runs
on the interpreter backend on random inputs and is checked against NumPy in float64.
"""
from __future__ import annotations

import time
from importlib import resources

import numpy as np

from .backends import get_backend
from .hlo import parse_module, print_module


def numpy_reference(x, w1, b1, w2):
    x, w1, b1, w2 = (a.astype(np.float64) for a in (x, w1, b1, w2))
    logits = np.tanh(x @ w1 + b1) @ w2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    text = resources.files("pyxla.examples").joinpath("mlp_softmax.hlo").read_text()
    t0 = time.perf_counter()
    module = parse_module(text, source="mlp_softmax.hlo")
    t1 = time.perf_counter()
    executable = get_backend("interpreter").compile(module)   # verifies the module
    t2 = time.perf_counter()

    print("== the module, as pyxla prints it ==")
    print(print_module(module))
    rng = np.random.default_rng()
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    result = executable(*args)
    times = []
    for _ in range(20):
        s = time.perf_counter()
        executable(*args)
        times.append(time.perf_counter() - s)
    expected = numpy_reference(*args)
    error = float(np.max(np.abs(result - expected)))

    print("== what pyxla did ==")
    n_instr = sum(len(c.instructions) for c in module.computations)
    print(f"parsed {len(module.computations)} computations, {n_instr} instructions in {(t1 - t0) * 1e3:.2f} ms")
    print(f"verified in {(t2 - t1) * 1e3:.2f} ms (no optimisation passes yet)")
    print(f"ran on the interpreter backend: median {np.median(times) * 1e3:.3f} ms per call over {len(times)} calls")
    print(f"result {result.dtype}{list(result.shape)}; rows sum to 1: {np.allclose(result.sum(axis=1), 1, atol=1e-5)}")
    print(f"max |pyxla - numpy float64| = {error:.2e}  ->  {'OK' if error < 1e-5 else 'MISMATCH'}")
    print("first row:", np.array2string(result[0], precision=4, suppress_small=True))
    if error >= 1e-5:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
