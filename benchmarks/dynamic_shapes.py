"""Dynamic shapes: a bucket's padded executable against a compile for the exact size.

    python -m benchmarks.dynamic_shapes [--repeats 30]

For each workload and size, the same function is compiled twice: by `jit` for the
argument's exact shape (static), and by `jit(polymorphic_shapes=...)` (dynamic: traced
once, compiled for the size's bucket: the default buckets, or, in the rows whose bucket is
b<=512 or s<=512, one bucket for every size up to that bound; arguments copied into
bucket-sized buffers, outputs sliced). Calls alternate between the two, back to back, and
the table reports the median (and the minimum) of each and their ratios (dynamic / static;
1.0 = as fast). On a busy machine the minimum is the steadier figure. Results are checked
against each other first.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import pyxla
import pyxla.numpy as pnp


def mlp(x, w1, b1, w2, b2):
    h = pnp.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2


def _layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / pnp.sqrt(var + 1e-5) * g + b


def encoder_layer(x, wqkv, wo, w1, w2, g1, b1, g2, b2, heads=4):
    """A pre-norm transformer encoder layer on one sequence (s, d)."""
    s, d = x.shape
    h = _layer_norm(x, g1, b1)
    qkv = (h @ wqkv).reshape(s, 3, heads, d // heads)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]                       # (s, heads, dh)
    q, k, v = (pnp.transpose(t, (1, 0, 2)) for t in (q, k, v))       # (heads, s, dh)
    scores = q @ pnp.transpose(k, (0, 2, 1)) / np.sqrt(d // heads)   # (heads, s, s)
    p = pyxla.nn.softmax(scores, axis=-1)
    attended = pnp.transpose(p @ v, (1, 0, 2)).reshape(s, d)
    x = x + attended @ wo
    h = _layer_norm(x, g2, b2)
    return x + pyxla.nn.gelu(h @ w1) @ w2


def _weights(rng, shapes):
    return [(rng.standard_normal(s) * (1.0 / np.sqrt(s[0]) if len(s) == 2 else 0.1)).astype(np.float32)
            for s in shapes]


def _time_pair(static, dynamic, args, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of each call, measured alternately."""
    for _ in range(3):
        static(*args)
        dynamic(*args)
    st, dy = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        static(*args)
        t1 = time.perf_counter()
        dynamic(*args)
        t2 = time.perf_counter()
        st.append(t1 - t0)
        dy.append(t2 - t1)
    return st, dy


ONE_BUCKET = 512   # the single bucket of the "one bucket for all sizes" rows


def cases(rng):
    """(workload, dimension, size, function, spec, arguments, one bucket?)"""
    d, f = 256, 1024
    mlp_w = _weights(rng, [(512, 1024), (1024,), (1024, 10), (10,)])
    enc_w = _weights(rng, [(d, 3 * d), (d, d), (d, f), (f, d)]) + [np.ones(d, np.float32), np.zeros(d, np.float32)] * 2
    for n, one in ((64, False), (50, False), (33, False), (50, True), (300, True)):
        yield ("MLP 512-1024-10", "batch", n, mlp, "b, 512",
               [rng.standard_normal((n, 512)).astype(np.float32)] + mlp_w, one)
    for s, one in ((128, False), (100, False), (65, False), (100, True)):
        yield (f"encoder layer d={d}", "seq", s, encoder_layer, f"s, {d}",
               [rng.standard_normal((s, d)).astype(np.float32)] + enc_w, one)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    for name, dim, size, fn, spec, call_args, one in cases(rng):
        static = pyxla.jit(fn)
        symbol = spec.split(",")[0].strip()
        buckets = dict(shape_constraints=(f"{symbol} <= {ONE_BUCKET}",), size_buckets={symbol: (ONE_BUCKET,)}) \
            if one else {}
        dynamic = pyxla.jit(fn, polymorphic_shapes=(spec,) + (None,) * (len(call_args) - 1), **buckets)
        want, got = static(*call_args), dynamic(*call_args)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
        bucket = dynamic.buckets()[0]
        t_static, t_dynamic = _time_pair(static, dynamic, call_args, args.repeats)
        rows.append((name, f"{dim}={size}", ", ".join(f"{k}<={v}" for k, v in bucket.items()),
                     statistics.median(t_static) * 1e3, min(t_static) * 1e3,
                     statistics.median(t_dynamic) * 1e3, min(t_dynamic) * 1e3))
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}, "
          f"{os.cpu_count()} CPUs; {args.repeats} alternating calls")
    print("| workload | size | bucket | static, ms: median (min) | dynamic, ms: median (min) "
          "| dynamic / static: medians (mins) |")
    print("|---|---|---|---|---|---|")
    for name, size, bucket, ts, ts_min, td, td_min in rows:
        print(f"| {name} | {size} | {bucket} | {ts:.3f} ({ts_min:.3f}) | {td:.3f} ({td_min:.3f}) | "
              f"{td / ts:.2f} ({td_min / ts_min:.2f}) |")


if __name__ == "__main__":
    main()
