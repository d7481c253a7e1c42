"""The matrix-vector kernels (dot/gemv.py) called directly on odd lengths, strided rows and
both vector widths; and dots with m == 1 or n == 1 compiled to them, in both orientations of
the matrix, with batch dimensions, a fused bias + ReLU epilogue, f32 and f64, on the pool and
on one thread, against NumPy float64 on fresh random inputs."""
import ctypes

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.dot import gemm as gemm_kernel
from pyxla.backends.cpu.dot import gemv as gemv_kernel
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.hlo import parse_module

DTYPES = {"f32": np.float32, "f64": np.float64}
TOLERANCE = {"f32": 2e-5, "f64": 1e-13}
KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                          ctypes.c_void_p)


@pytest.fixture(params=[32, 64])
def vector_bytes(request, monkeypatch):
    """Both vector widths' kernels whatever the host's (LLVM splits wider vectors)."""
    monkeypatch.setattr(host_jit(), "vector_bytes", request.param)
    return request.param


def _close(got, want, dtype_name, k):
    scale = max(1.0, float(np.abs(want).max())) * np.sqrt(max(k, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE[dtype_name] * scale)


def _call(dtype_name, transposed, x, m, y):
    """y[:count] = x M by the kernel; M [k, count] or, transposed, [count, k], rows as strided."""
    k = x.size
    count = m.shape[0] if transposed else m.shape[1]
    ld = m.strides[0] // m.itemsize
    KERNEL(gemv_kernel.gemv_address(dtype_name, transposed))(k, count, x.ctypes.data, m.ctypes.data, ld,
                                                              y.ctypes.data)


# k and count: one element, below and across one vector (4..16 lanes), odd lengths on both sides
LENGTHS = [(1, 1), (3, 5), (17, 33), (64, 64), (257, 129), (1000, 37), (13, 1001)]


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("k,count", LENGTHS)
@pytest.mark.parametrize("transposed", [False, True])
def test_kernel_matches_numpy(rng, vector_bytes, dtype_name, k, count, transposed):
    dt = DTYPES[dtype_name]
    x = rng.standard_normal(k).astype(dt)
    shape = (count, k) if transposed else (k, count)
    m = rng.standard_normal((shape[0], shape[1] + 3)).astype(dt)[:, :shape[1]]   # rows 3 elements apart
    y = np.full(count + 7, np.nan, dt)
    _call(dtype_name, transposed, x, m, y)
    mat = m.T if transposed else m
    _close(y[:count], x.astype(np.float64) @ mat.astype(np.float64), dtype_name, k)
    assert np.isnan(y[count:]).all(), "the kernel wrote past y"


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
def test_rows_kernel_sums_as_the_gemm_does(rng, vector_bytes, dtype_name):
    """The rows kernel adds the terms in k order, one fused multiply-add each: its results are
    the GEMM's to the bit (vector lanes and the scalar tail alike)."""
    dt = DTYPES[dtype_name]
    k, n = 301, 77
    x, m = rng.standard_normal(k).astype(dt), rng.standard_normal((k, n)).astype(dt)
    y = np.empty(n, dt)
    _call(dtype_name, False, x, m, y)
    c = np.empty((1, n), dt)
    workspace = np.zeros(gemm_kernel.workspace_bytes(dtype_name, 1, n, k) + 64, np.uint8)
    args = [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 2 + \
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    ctypes.CFUNCTYPE(None, *args)(gemm_kernel.gemm_address(dtype_name))(
        1, n, k, x.ctypes.data, k, 1, m.ctypes.data, n, 1, c.ctypes.data, n,
        workspace.ctypes.data + (-workspace.ctypes.data % 64))
    assert (y == c[0]).all()


# --- dots compiled to the kernels -------------------------------------------------------------

@pytest.fixture(params=["pool", "one thread"])
def threads(request, monkeypatch):
    """Dots emitted for the pool (every matrix-vector dot split) or for one thread."""
    if request.param == "pool":
        request.getfixturevalue("pool")
        monkeypatch.setattr(codegen, "GEMV_PARALLEL_MIN_WORK", 0)
    else:
        monkeypatch.setattr(codegen, "worker_pool", lambda: None)
    return request.param


def _compile(text, monkeypatch):
    """The executable and (count, k, transposed, tasks, whether the epilogue runs per part) of
    each matrix-vector call site."""
    calls = []
    emit = codegen.emit_gemv

    def recording(kernel, dtype_name, out, x, m, batch, count, k, transposed, tasks, epilogue=None):
        calls.append((count, k, transposed, tasks, epilogue is not None))
        return emit(kernel, dtype_name, out, x, m, batch, count, k, transposed, tasks, epilogue)

    monkeypatch.setattr(codegen, "emit_gemv", recording)
    # code generation must run (a module compiled before under other constants would load
    # from the executable cache)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    return get_backend("cpu").compile(parse_module(text)), calls


def _dims(shape):
    return ",".join(map(str, shape))


def _bias_relu_module(t, lhs, rhs, out, lc, rc, nb, bias_dim):
    """d = dot(a, b); ROOT max(d + broadcast(c along bias_dim), 0), fused as kOutput."""
    batch = ",".join(map(str, range(nb)))
    dims = f"lhs_batch_dims={{{batch}}}, rhs_batch_dims={{{batch}}}, lhs_contracting_dims={{{lc}}}, " \
           f"rhs_contracting_dims={{{rc}}}"
    return f"""
HloModule matrix_vector
ENTRY main {{
  a = {t}[{_dims(lhs)}] parameter(0)
  b = {t}[{_dims(rhs)}] parameter(1)
  c = {t}[{out[bias_dim]}] parameter(2)
  d = {t}[{_dims(out)}] dot(a, b), {dims}
  cb = {t}[{_dims(out)}] broadcast(c), dimensions={{{bias_dim}}}
  s = {t}[{_dims(out)}] add(d, cb)
  z = {t}[] constant(0)
  zb = {t}[{_dims(out)}] broadcast(z), dimensions={{}}
  ROOT r = {t}[{_dims(out)}] maximum(s, zb)
}}
"""


def _expect_tasks(calls, threads, count, k, transposed, per_part=True):
    ((c, kk, tr, tasks, epilogue),) = calls
    assert (c, kk, tr, epilogue) == (count, k, transposed, per_part)
    assert (tasks > 1) == (threads == "pool")


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
@pytest.mark.parametrize("k", [131, 40])
def test_row_times_matrix_with_bias_relu(rng, monkeypatch, threads, dtype_name, b_t, batch, k):
    """x[..., 1, k] @ B (B [..., k, n] or [..., n, k]) + bias, ReLU: m == 1. On the pool B [k, n]
    is cut in slices of rows summed afterwards (k 131) or, too short for that, in column
    blocks (k 40)."""
    n, nb = 203, len(batch)
    lhs, out = (*batch, 1, k), (*batch, 1, n)
    rhs = (*batch, n, k) if b_t else (*batch, k, n)
    text = _bias_relu_module(dtype_name, lhs, rhs, out, nb + 1, nb + 1 if b_t else nb, nb, nb + 1)
    executable, calls = _compile(text, monkeypatch)
    _expect_tasks(calls, threads, n, k, b_t)
    dt = DTYPES[dtype_name]
    a, b, c = (rng.standard_normal(s).astype(dt) for s in (lhs, rhs, n))
    b64 = np.swapaxes(b, -1, -2).astype(np.float64) if b_t else b.astype(np.float64)
    want = np.maximum(a.astype(np.float64) @ b64 + c, 0)
    assert (want == 0).any() and (want > 0).any()   # the ReLU bites on some elements, not all
    _close(executable(a, b, c), want, dtype_name, k)


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("a_t", [False, True])
def test_matrix_times_column_with_bias_relu(rng, monkeypatch, threads, dtype_name, a_t):
    """A (A [2, m, k] or [2, k, m]) @ x[2, k, 1] + bias per row, ReLU: n == 1, the same kernels
    with the operands' roles swapped (A row-major is read by dot products)."""
    m, k = 67, 45
    lhs = (2, k, m) if a_t else (2, m, k)
    text = _bias_relu_module(dtype_name, lhs, (2, k, 1), (2, m, 1), 1 if a_t else 2, 1, 1, 1)
    executable, calls = _compile(text, monkeypatch)
    _expect_tasks(calls, threads, m, k, not a_t)
    dt = DTYPES[dtype_name]
    a, x, c = (rng.standard_normal(s).astype(dt) for s in (lhs, (2, k, 1), m))
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if a_t else a.astype(np.float64)
    want = np.maximum(a64 @ x.astype(np.float64) + c[:, None], 0)
    _close(executable(a, x, c), want, dtype_name, k)


def test_vectors_without_free_dimensions(rng, monkeypatch, threads):
    """Operands of rank batch + 1: [b, k] . [b, k, n] -> [b, n], [b, m, k] . [b, k] -> [b, m] and
    [b, k] . [b, k] -> [b]."""
    text = """
HloModule vectors
ENTRY main {
  a = f32[5,300] parameter(0)
  b = f32[5,300,21] parameter(1)
  ROOT d = f32[5,21] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_contracting_dims={1}
}
"""
    executable, calls = _compile(text, monkeypatch)
    _expect_tasks(calls, threads, 21, 300, False, per_part=False)
    a, b = rng.standard_normal((5, 300)).astype(np.float32), rng.standard_normal((5, 300, 21)).astype(np.float32)
    _close(executable(a, b), np.einsum("bk,bkn->bn", a.astype(np.float64), b), "f32", 300)

    text = text.replace("f32[5,300] parameter(0)", "f32[5,21,300] parameter(0)").replace(
        "f32[5,300,21]", "f32[5,300]").replace("lhs_contracting_dims={1}", "lhs_contracting_dims={2}")
    executable, calls = _compile(text, monkeypatch)
    _expect_tasks(calls, threads, 21, 300, True, per_part=False)
    a = rng.standard_normal((5, 21, 300)).astype(np.float32)
    b = rng.standard_normal((5, 300)).astype(np.float32)
    _close(executable(a, b), np.einsum("bmk,bk->bm", a.astype(np.float64), b), "f32", 300)

    a = rng.standard_normal((5, 300)).astype(np.float32)
    text = text.replace("f32[5,21,300] parameter(0)", "f32[5,300] parameter(0)").replace(
        "f32[5,21]", "f32[5]").replace("lhs_contracting_dims={2}", "lhs_contracting_dims={1}")
    executable, calls = _compile(text, monkeypatch)
    assert [call[:2] for call in calls] == [(1, 300)]
    b = rng.standard_normal((5, 300)).astype(np.float32)
    _close(executable(a, b), np.einsum("bk,bk->b", a.astype(np.float64), b), "f32", 300)


def test_epilogue_reading_other_elements(rng, monkeypatch, threads):
    """An epilogue that reads the product elsewhere (reversed) runs after the whole product,
    over a copy in kernel scratch, not per block over results already written."""
    text = """
HloModule reversed
ENTRY main {
  a = f32[1,700] parameter(0)
  b = f32[700,333] parameter(1)
  d = f32[1,333] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[1,333] reverse(d), dimensions={1}
  ROOT s = f32[1,333] multiply(d, r)
}
"""
    executable, calls = _compile(text, monkeypatch)
    _expect_tasks(calls, threads, 333, 700, False, per_part=False)
    a, b = rng.standard_normal((1, 700)).astype(np.float32), rng.standard_normal((700, 333)).astype(np.float32)
    d = a.astype(np.float64) @ b
    _close(executable(a, b), d * d[:, ::-1], "f32", 700)


def test_small_products_stay_on_one_thread(monkeypatch, pool):
    """Below GEMV_PARALLEL_MIN_WORK multiply-adds waking the workers costs more than it saves."""
    text = _bias_relu_module("f32", (1, 64), (64, 100), (1, 100), 1, 0, 0, 1)
    monkeypatch.setattr(codegen, "GEMV_PARALLEL_MIN_WORK", 6401)
    _, calls = _compile(text, monkeypatch)
    assert calls[0][3] == 1
    monkeypatch.setattr(codegen, "GEMV_PARALLEL_MIN_WORK", 6400)
    _, calls = _compile(text, monkeypatch)
    assert calls[0][3] == pool.threads * codegen.TASKS_PER_THREAD


@pytest.mark.parametrize("batch,length,unit,tasks,want", [
    (1, 4096, 4, 8, 512), (1, 1000, 4, 8, 128), (1, 3, 4, 8, 3), (8, 1000, 4, 8, 1000),
    (3, 100, 4, 8, 36), (1, 5, 4, 8, 4), (2, 4096, 4, 1, 4096)])
def test_part_length(batch, length, unit, tasks, want):
    """Parts of whole units, enough of them for the tasks when the batch is short."""
    got = gemv_kernel.part_length(length, unit, batch, tasks)
    assert got == want
    assert got % unit == 0 or got == length
    if got < length:
        assert batch * -(-length // got) >= min(tasks, batch * -(-length // unit))
