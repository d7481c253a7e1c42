"""Compiled programs called from several Python threads at once (an executable takes a
free arena per call, runtime/executable.py): a GEMM with bias and ReLU on pyxla's own GEMM
on the pool and on one thread, 3x3 convolutions on the Winograd route and on the direct tiles, one
executable compiled once and called through `Compiled`, and first calls of fresh jitted
functions racing to compile. Every thread starts at a barrier and makes its calls on
fresh random inputs; each result is compared with NumPy in float64 after the thread's
next call, so a buffer handed to two calls at once shows as a wrong result."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.conv.tiles import TiledConvolution
from pyxla.backends.cpu.conv.winograd import WinogradConvolution

THREADS = 4
CALLS = 50
EPS32 = float(np.finfo(np.float32).eps)


def on_threads(rng, work, *, calls: int = CALLS) -> list:
    """work(thread number, generator) `calls` times on each of THREADS threads, which start
    together at a barrier; each thread has its own generator seeded from `rng`. A thread
    checks the result of each call after making its next one (`work` returns a function
    that checks). Returns what the checks return, per thread; the first exception of any
    thread is raised here."""
    seeds = rng.integers(0, 2**63, THREADS)
    barrier = threading.Barrier(THREADS)
    results: list = [None] * THREADS
    errors: list[BaseException] = []

    def main(t: int) -> None:
        try:
            gen = np.random.default_rng(seeds[t])
            barrier.wait(timeout=120)
            checked, pending = [], None
            for _ in range(calls):
                check = work(t, gen)
                if pending is not None:
                    checked.append(pending())
                pending = check
            checked.append(pending())
            results[t] = checked
        except BaseException as e:   # re-raised in the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=main, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    assert all(r is not None and len(r) == calls for r in results)
    return results


def assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> None:
    """got (f32) equals want (f64) within an elementwise error bound."""
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.isfinite(got).all()
    excess = np.abs(got.astype(np.float64) - want) - bound
    assert excess.max() <= 0, f"{int((excess > 0).sum())} elements out of bound, worst by {excess.max():.3g}"


@pytest.fixture
def routes(monkeypatch, pool):
    """The kernels chosen while compiling, by name, as a list that fills: "own gemm" (pyxla's
    blocked GEMM on the pool), "one-thread gemm" (the same GEMM on the calling thread), and
    the convolution emitters' class names."""
    seen: list[str] = []
    dot_tasks = codegen.emit_dot_tasks

    def gemm(*a, **k):
        seen.append("own gemm" if a[11] > 1 else "one-thread gemm")   # a[11]: the task count
        return dot_tasks(*a, **k)

    monkeypatch.setattr(codegen, "emit_dot_tasks", gemm)
    for cls in (TiledConvolution, WinogradConvolution):
        emit = cls.__dict__["emit"]
        monkeypatch.setattr(cls, "emit", lambda self, *a, emit=emit: seen.append(type(self).__name__) or emit(self, *a))
    return seen


# --- GEMM with bias and ReLU -----------------------------------------------------------------

def dense_relu(x, w, b):
    return pnp.maximum(pnp.matmul(x, w) + b, 0.0)


def dense_inputs(gen, m: int, k: int, n: int):
    return (gen.standard_normal((m, k)).astype(np.float32), gen.standard_normal((k, n)).astype(np.float32),
            gen.standard_normal(n).astype(np.float32))


def matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64, in blocks of 8 rows: products that small run on one BLAS thread,
    so that the references stay fast while pyxla's pool and the other threads hold the
    cores (OpenBLAS's own threads wait badly for a busy core)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.concatenate([a[i: i + 8] @ b for i in range(0, a.shape[0], 8)])


def abs_dot_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An upper bound of |a| @ |b| (Cauchy-Schwarz: the rows' norms times the columns')."""
    return np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=0))


def dense_check(got, x, w, b):
    """A check of `got` against relu(x @ w + b) in float64, within the worst-case bound
    of an f32 dot of k terms (any order, with or without FMA) plus the bias's rounding."""
    b64 = b.astype(np.float64)
    want = np.maximum(matmul64(x, w) + b64, 0.0)
    bound = (x.shape[1] + 2) * EPS32 * (abs_dot_bound(x.astype(np.float64), w.astype(np.float64)) + np.abs(b64))

    def check():
        assert_within(got, want, bound)
        return float(want.max())
    return check


@pytest.mark.parametrize("m,k,n,route", [(128, 256, 192, "own gemm"), (32, 64, 48, "one-thread gemm")])
def test_dense_relu_from_threads(m, k, n, route, rng, routes):
    """128x256 @ 256x192 is 6.3M multiply-adds, past OWN_GEMM_MIN_WORK: pyxla's GEMM in
    blocks on the pool; 32x64 @ 64x48 is under it: the GEMM on the calling thread."""
    assert (m * n * k >= codegen.OWN_GEMM_MIN_WORK) == (route == "own gemm")
    f = pyxla.jit(dense_relu)
    x, w, b = dense_inputs(rng, m, k, n)
    dense_check(f(x, w, b), x, w, b)()
    assert routes == [route]

    def call(_, gen):
        x, w, b = dense_inputs(gen, m, k, n)
        return dense_check(f(x, w, b), x, w, b)

    results = on_threads(rng, call)
    assert f.trace_count == 1 and routes == [route]
    assert all(largest > 0 for per_thread in results for largest in per_thread)   # ReLU left values


# --- 3x3 convolutions ------------------------------------------------------------------------

def conv_bias_relu(x, w, b, stride):
    y = lax.conv_general_dilated(x, w, (stride, stride), ((1, 1), (1, 1)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return pnp.maximum(y + b, 0.0)


def reference_conv(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """NHWC x HWIO, padding 1 on each side, in float64: one matmul per window offset."""
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    oh, ow = (h + 2 - kh) // stride + 1, (wd + 2 - kw) // stride + 1
    out = np.zeros((n, oh, ow, o))
    for dy in range(kh):
        for dx in range(kw):
            window = padded[:, dy: dy + stride * (oh - 1) + 1: stride, dx: dx + stride * (ow - 1) + 1: stride, :]
            out += window @ w[dy, dx]
    return out


def conv_inputs(gen, shape, features: int):
    n, h, w, c = shape
    return (gen.standard_normal(shape).astype(np.float32),
            (gen.standard_normal((3, 3, c, features)) / np.sqrt(9 * c)).astype(np.float32),
            gen.standard_normal(features).astype(np.float32))


def conv_check(got, x, w, b, stride):
    """A check of `got` against relu(conv(x, w) + b) in float64, within the worst-case bound
    of the direct sum of 9c products, (9c + 2) eps (|x| * |w| + |b|). Winograd's transforms
    round otherwise, but stay far inside it (about 1% of it here)."""
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    want = np.maximum(reference_conv(x64, w64, stride) + b64, 0.0)
    bound = (9 * x.shape[3] + 2) * EPS32 * (reference_conv(np.abs(x64), np.abs(w64), stride) + np.abs(b64))

    def check():
        assert_within(got, want, bound)
        return got.shape
    return check


CONVS = {
    # 2 images of 16x16, 16 -> 32 features, stride 1: Winograd (3x3, stride 1, features a
    # whole number of vectors, 128 tiles of 2x2)
    "winograd": ((2, 16, 16, 16), 32, 1, "WinogradConvolution"),
    # stride 2: the direct tiles
    "tiles": ((2, 16, 16, 16), 32, 2, "TiledConvolution"),
}


@pytest.mark.parametrize("case", CONVS)
def test_conv_from_threads(case, rng, routes):
    shape, features, stride, emitter = CONVS[case]
    f = pyxla.jit(conv_bias_relu, static_argnums=3)

    def run(gen):
        x, w, b = conv_inputs(gen, shape, features)
        return conv_check(f(x, w, b, stride), x, w, b, stride)

    run(rng)()
    assert routes == [emitter]
    results = on_threads(rng, lambda _, gen: run(gen))
    out = (shape[0], (shape[1] - 1) // stride + 1, (shape[2] - 1) // stride + 1, features)
    assert f.trace_count == 1 and routes == [emitter]
    assert {s for per_thread in results for s in per_thread} == {out}


# --- one executable, compiled once -----------------------------------------------------------

def two_layers(x, w1, b1, w2):
    return pnp.matmul(pnp.maximum(pnp.matmul(x, w1) + b1, 0.0), w2)


def test_one_compiled_executable_from_threads(rng, routes):
    """Lowered and compiled once, called through `Compiled` (which checks every argument)
    from all threads: the hidden layer lives in the arena, taken per call, and the 1 MiB
    result is an output buffer handed out again once its caller drops it."""
    shapes = [(1024, 64), (64, 16), (16,), (16, 256)]   # both products own-GEMM sized

    def inputs(gen):
        return [gen.standard_normal(s).astype(np.float32) for s in shapes]

    compiled = pyxla.jit(two_layers).lower(*inputs(rng)).compile()
    assert compiled.executable.arena_size > 0
    assert routes == ["own gemm", "own gemm"]

    def call(_, gen):
        x, w1, b1, w2 = inputs(gen)
        got = compiled(x, w1, b1, w2)
        assert got.nbytes >= 1 << 20
        b164, w264 = b1.astype(np.float64), w2.astype(np.float64)
        hidden = np.maximum(matmul64(x, w1) + b164, 0.0)
        want = matmul64(hidden, w2)
        # the first product's error carried through the second, plus the second's own
        hidden_bound = 66 * EPS32 * (abs_dot_bound(x.astype(np.float64), w1.astype(np.float64)) + np.abs(b164))
        bound = abs_dot_bound(hidden_bound + 18 * EPS32 * (hidden + hidden_bound), w264)

        def check():
            assert_within(got, want, bound)
            return got.shape
        return check

    results = on_threads(rng, call)
    assert {s for per_thread in results for s in per_thread} == {(1024, 256)}
    assert routes == ["own gemm", "own gemm"]   # compiled once


# --- first calls racing to compile ------------------------------------------------------------

def test_first_calls_race_to_compile(rng, routes, monkeypatch, capsys):
    """A fresh jitted function called first from all threads at once: each thread may trace
    and compile it (jit takes no lock), but every result is right, no thread traces it
    twice, PYXLA_LOG_COMPILES logs each compile, and once the race is over the cache
    answers every call."""
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    lock = threading.Lock()
    traces = []

    def doubled_dense(x, w, b):
        with lock:
            traces.append(threading.get_ident())
        return dense_relu(x, w, b) * 2.0

    f = pyxla.jit(doubled_dense)

    def call(_, gen):
        x, w, b = dense_inputs(gen, 128, 256, 192)
        return dense_check(f(x, w, b) / np.float32(2.0), x, w, b)

    on_threads(rng, call, calls=5)
    raced = len(traces)
    assert 1 <= raced <= THREADS and len(set(traces)) == raced
    assert 1 <= f.trace_count <= THREADS
    assert routes == ["own gemm"] * raced
    logged = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pyxla: compiling")]
    assert len(logged) == raced and all(line.startswith("pyxla: compiling doubled_dense:") for line in logged)
    on_threads(rng, call, calls=5)
    assert len(traces) == raced and routes == ["own gemm"] * raced
    assert "pyxla: compiling" not in capsys.readouterr().err


def test_first_calls_of_different_programs_race(rng, routes):
    """Four fresh programs (GEMM on the pool and on one thread, Winograd, reduction) compiled
    and run at once,
    one per thread: the LLVM JIT and the worker pool are shared between them."""
    f_dense = pyxla.jit(dense_relu)
    f_conv = pyxla.jit(conv_bias_relu, static_argnums=3)
    f_sum = pyxla.jit(lambda x: pnp.sum(pnp.tanh(x) * x, axis=1))

    def program(t: int, gen):
        if t < 2:
            m, k, n = [(128, 256, 192), (32, 64, 48)][t]
            x, w, b = dense_inputs(gen, m, k, n)
            return dense_check(f_dense(x, w, b), x, w, b)
        if t == 2:
            x, w, b = conv_inputs(gen, (2, 16, 16, 16), 32)
            return conv_check(f_conv(x, w, b, 1), x, w, b, 1)
        x = gen.standard_normal((64, 1000)).astype(np.float32)
        got = f_sum(x)
        x64 = x.astype(np.float64)
        want = np.sum(np.tanh(x64) * x64, axis=1)
        bound = (1000 + 8) * EPS32 * np.sum(np.abs(np.tanh(x64) * x64), axis=1)   # tanh within 4 ulp
        return lambda: assert_within(got, want, bound)

    on_threads(rng, program, calls=5)
    assert sorted(routes) == sorted(["own gemm", "one-thread gemm", "WinogradConvolution"])
    assert (f_dense.trace_count, f_conv.trace_count, f_sum.trace_count) == (2, 1, 1)
