"""The machine's ceilings, measured with NumPy: memory bandwidth (copy, triad) and SGEMM."""
from __future__ import annotations

import time

import numpy as np


def _best(fn, repeats=5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def ceilings(scale: float = 1.0) -> dict:
    n = max(1 << 16, int((64 << 20) * scale * scale))   # 64M floats: well beyond the caches
    a = np.ones(n, np.float32)
    b = np.ones(n, np.float32)
    c = np.empty(n, np.float32)
    copy = _best(lambda: np.copyto(c, a))
    triad = _best(lambda: np.add(a, np.multiply(b, np.float32(3.0), out=c), out=c))
    m = max(64, int(2048 * scale))
    x = np.random.default_rng(0).standard_normal((m, m)).astype(np.float32)
    gemm = _best(lambda: x @ x, repeats=3)
    return {"copy_gb_per_s": 2 * a.nbytes / copy / 1e9,
            "triad_gb_per_s": 4 * a.nbytes / triad / 1e9,   # read b, write c, read c & a, write c
            "sgemm_gflops": 2 * m ** 3 / gemm / 1e9}
