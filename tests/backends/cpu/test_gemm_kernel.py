"""pyxla's own GEMM (dot/gemm.py) and dots as tasks of the pool (dot/tasks.py): the kernel
called directly on odd shapes, transposed and strided operands, edges of every tile size and
empty sums; the cut of products into blocks; and dots compiled to blocks on the pool (whole
products of a batch, blocks of single products, the epilogue per block or after all of
them), against NumPy float64 on fresh random inputs. Dots with m or n of 1 take the
matrix-vector kernels instead (test_gemv.py)."""
import ctypes

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.dot import gemm as gemm_kernel
from pyxla.backends.cpu.dot import tasks as dot_tasks
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.hlo import parse_module

DTYPES = {"f32": np.float32, "f64": np.float64}
TOLERANCE = {"f32": 2e-5, "f64": 1e-13}
CANARY = 0xA5


@pytest.fixture(params=sorted(gemm_kernel.BLOCKING))
def vector_bytes(request, monkeypatch):
    """Each vector width's kernel and blocking, whatever the host's (LLVM splits vectors wider
    than the host's registers, so either runs correctly anywhere)."""
    monkeypatch.setattr(host_jit(), "vector_bytes", request.param)
    return request.param


def _kernel(dtype_name):
    args = [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 2 + \
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return ctypes.CFUNCTYPE(None, *args)(gemm_kernel.gemm_address(dtype_name))


def _strides(x):
    return [s // x.itemsize for s in x.strides]


def _run_kernel(dtype_name, a, b, c):
    """c = a @ b by the kernel (a, b, c any 2-D views), with a canary after the workspace."""
    m, k = a.shape
    n = b.shape[1]
    size = gemm_kernel.workspace_bytes(dtype_name, m, n, k)
    raw = np.full(size + 64 + 4096, CANARY, np.uint8)
    start = -raw.ctypes.data % 64
    _kernel(dtype_name)(m, n, k, a.ctypes.data, *_strides(a), b.ctypes.data, *_strides(b),
                        c.ctypes.data, _strides(c)[0], raw.ctypes.data + start)
    assert (raw[start + size:] == CANARY).all(), "the kernel wrote past workspace_bytes"


def _close(got, want, dtype_name, k):
    scale = max(1.0, float(np.abs(want).max())) * np.sqrt(max(k, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE[dtype_name] * scale)


# m, n, k: single elements, and the edges of both blockings (gemm_kernel.BLOCKING): AVX2's
# MR 6, NR 16 / 8, MC 72 / 36, KC 512 and AVX-512's MR 8, NR 32 / 16, MC 128 / 64, KC 256; NC 1024
SHAPES = [(1, 1, 1), (7, 19, 5), (6, 16, 512), (145, 17, 513), (73, 1025, 300), (37, 9, 1025), (13, 2050, 600),
          (200, 9, 1), (8, 32, 256), (129, 33, 257), (65, 31, 511), (17, 47, 9)]


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("a_layout,b_layout", [("rows", "rows"), ("columns", "columns"), ("rows", "strided")])
def test_kernel_matches_numpy(rng, vector_bytes, dtype_name, m, n, k, a_layout, b_layout):
    dt = DTYPES[dtype_name]
    a = rng.standard_normal((m, k)).astype(dt) if a_layout == "rows" else \
        np.asfortranarray(rng.standard_normal((m, k)).astype(dt))
    if b_layout == "rows":
        b = rng.standard_normal((k, n)).astype(dt)
    elif b_layout == "columns":
        b = np.asfortranarray(rng.standard_normal((k, n)).astype(dt))
    else:   # every other column of a wider matrix, rows 3 columns longer still
        b = rng.standard_normal((k, 2 * n + 3)).astype(dt)[:, :2 * n:2]
    c = np.full((m, n + 5), np.nan, dt)   # rows wider than the product: the rest stays untouched
    _run_kernel(dtype_name, a, b, c[:, :n])
    _close(c[:, :n], a.astype(np.float64) @ b.astype(np.float64), dtype_name, k)
    assert np.isnan(c[:, n:]).all()


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
def test_kernel_empty_sum_is_zero(rng, vector_bytes, dtype_name):
    dt = DTYPES[dtype_name]
    a, b = np.empty((9, 0), dt), np.empty((0, 21), dt)
    c = rng.standard_normal((9, 21)).astype(dt)
    _run_kernel(dtype_name, a, b, c)
    assert (c == 0).all()


def test_equal_columns_give_equal_results(rng, vector_bytes):
    """Each element is the same fused multiply-add chain wherever it lies in the tiles."""
    a = rng.standard_normal((37, 300)).astype(np.float32)
    column = rng.standard_normal((300, 1)).astype(np.float32)
    b = np.repeat(column, 41, axis=1)
    c = np.empty((37, 41), np.float32)
    _run_kernel("f32", a, b, c)
    assert (c == c[:, :1]).all()


@pytest.mark.parametrize("a_layout", ["rows", "columns"])
@pytest.mark.parametrize("k", [7, 600])
def test_single_panel_of_b_matches_wide_products(rng, vector_bytes, a_layout, k):
    """A product whose B is one register tile wide reads A in place instead of packing it
    (rows past the edge of A read its last row again): its elements are the same bits as
    those of a product with more columns, whose A is packed, and NumPy's to f32 rounding."""
    nr = gemm_kernel.tiling("f32").nr
    a = rng.standard_normal((41, k)).astype(np.float32)   # 41 rows: the last register tile is cut
    if a_layout == "columns":
        a = np.asfortranarray(a)
    wide = rng.standard_normal((k, 3 * nr + 5)).astype(np.float32)
    narrow = {nr, nr - 3, 1}
    c_wide = np.empty((41, wide.shape[1]), np.float32)
    _run_kernel("f32", a, wide, c_wide)
    for n in sorted(narrow):
        c = np.full((41, n), np.nan, np.float32)
        _run_kernel("f32", a, np.ascontiguousarray(wide[:, :n]), c)
        assert np.array_equal(c, c_wide[:, :n]), n
    _close(c_wide, a.astype(np.float64) @ wide.astype(np.float64), "f32", k)


# --- batched dots compiled to the kernel ------------------------------------------------------

def _compile(text, monkeypatch, min_work=0, tasks=None):
    """The executable, and the depth k of each GEMM call site emitted; `tasks`, a list,
    gets each dot's task count (1: on the calling thread)."""
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", min_work)
    calls = []
    emit, emit_tasks = dot_tasks.emit_own_gemm, codegen.emit_dot_tasks

    def counting(*args, **kwargs):
        calls.append(args[7])
        return emit(*args, **kwargs)

    def counting_tasks(*args, **kwargs):
        if tasks is not None:
            tasks.append(args[11])
        return emit_tasks(*args, **kwargs)

    monkeypatch.setattr(dot_tasks, "emit_own_gemm", counting)
    monkeypatch.setattr(codegen, "emit_dot_tasks", counting_tasks)
    # code generation must run (a module compiled before under other constants would load
    # from the executable cache)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    return get_backend("cpu").compile(parse_module(text)), calls


def _dot_module(t, lhs, rhs, out, lc, rc, nb, epilogue=""):
    batch = ",".join(map(str, range(nb)))
    dims = f"lhs_batch_dims={{{batch}}}, rhs_batch_dims={{{batch}}}, lhs_contracting_dims={{{lc}}}, " \
           f"rhs_contracting_dims={{{rc}}}"
    root = "ROOT " if not epilogue else ""
    text = f"""
HloModule batched
ENTRY main {{
  a = {t}[{','.join(map(str, lhs))}] parameter(0)
  b = {t}[{','.join(map(str, rhs))}] parameter(1)
  {root}d = {t}[{','.join(map(str, out))}] dot(a, b), {dims}
{epilogue}}}
"""
    return text


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True), (True, True)])
def test_batched_dot_on_the_pool(rng, monkeypatch, pool, dtype_name, a_t, b_t):
    batch, m, n, k = (3, 5), 23, 37, 70
    lhs = (*batch, k, m) if a_t else (*batch, m, k)
    rhs = (*batch, n, k) if b_t else (*batch, k, n)
    text = _dot_module(dtype_name, lhs, rhs, (*batch, m, n), 2 if a_t else 3, 3 if b_t else 2, 2)
    executable, calls = _compile(text, monkeypatch)
    assert calls == [k]
    dt = DTYPES[dtype_name]
    a, b = rng.standard_normal(lhs).astype(dt), rng.standard_normal(rhs).astype(dt)
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if a_t else a.astype(np.float64)
    b64 = np.swapaxes(b, -1, -2).astype(np.float64) if b_t else b.astype(np.float64)
    _close(executable(a, b), a64 @ b64, dtype_name, k)


def test_epilogue_per_product(rng, monkeypatch, pool):
    """bias + tanh on each product while it is in cache."""
    epilogue = """  c = f32[12] parameter(2)
  cb = f32[12,20,12] broadcast(c), dimensions={2}
  s = f32[12,20,12] add(d, cb)
  ROOT t = f32[12,20,12] tanh(s)
"""
    text = _dot_module("f32", (12, 20, 31), (12, 31, 12), (12, 20, 12), 2, 1, 1, epilogue)
    executable, calls = _compile(text, monkeypatch)
    assert calls == [31]
    a = rng.standard_normal((12, 20, 31)).astype(np.float32)
    b = rng.standard_normal((12, 31, 12)).astype(np.float32)
    c = rng.standard_normal(12).astype(np.float32)
    want = np.tanh(a.astype(np.float64) @ b + c)
    np.testing.assert_allclose(executable(a, b, c), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooled", [True, False])
def test_epilogue_reading_other_products(rng, monkeypatch, pool, pooled):
    """An epilogue that reads the product at other places (reversed order) must see the
    product, not results already written in its place: it runs after every product, over a
    copy of the product in kernel scratch (the GEMM on the pool and on the calling thread)."""
    epilogue = """  r = f32[8,10,7] reverse(d), dimensions={0,2}
  ROOT s = f32[8,10,7] multiply(d, r)
"""
    text = _dot_module("f32", (8, 10, 15), (8, 15, 7), (8, 10, 7), 2, 1, 1, epilogue)
    tasks: list[int] = []
    executable, calls = _compile(text, monkeypatch, 0 if pooled else 10 ** 9, tasks)
    assert calls == [15] and (tasks[0] > 1) == pooled
    a = rng.standard_normal((8, 10, 15)).astype(np.float32)
    b = rng.standard_normal((8, 15, 7)).astype(np.float32)
    d = a.astype(np.float64) @ b
    np.testing.assert_allclose(executable(a, b), d * d[::-1, :, ::-1], rtol=1e-5, atol=1e-5)


def test_small_dots_run_on_the_calling_thread(monkeypatch, pool):
    """Dots below OWN_GEMM_MIN_WORK multiply-adds are not worth the pool: pyxla's GEMM in
    one task, on the calling thread (never BLAS, whose threads ignore PYXLA_NUM_THREADS)."""
    for min_work, pooled in ((8 * 1101, False), (8 * 1100, True)):
        tasks: list[int] = []
        _, calls = _compile(_dot_module("f32", (8, 10, 11), (8, 11, 10), (8, 10, 10), 2, 1, 1), monkeypatch,
                            min_work, tasks)
        assert calls == [11] and len(tasks) == 1 and (tasks[0] > 1) == pooled


@pytest.mark.parametrize("batch,m,n,tasks", [(1, 256, 4096, 8), (1, 256, 1024, 8), (1, 2048, 512, 8), (3, 50, 70, 8),
                                             (64, 256, 256, 8), (1, 5, 7, 8), (2, 1, 300, 6), (1, 300, 1, 6)])
def test_blocks_cover_every_product(batch, m, n, tasks):
    plan = dot_tasks.plan_blocks("f32", batch, m, n, tasks)
    assert plan.rows * plan.row_blocks >= m > plan.rows * (plan.row_blocks - 1)
    assert plan.columns * plan.column_blocks >= n > plan.columns * (plan.column_blocks - 1)
    if batch >= tasks:
        assert (plan.rows, plan.columns) == (m, n)
    elif m >= tasks * gemm_kernel.tiling("f32").mr or n >= tasks * gemm_kernel.tiling("f32").nr:   # room for enough blocks
        assert batch * plan.per_product >= tasks
    else:
        assert plan.per_product >= 1


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("m,n,k", [(256, 1024, 64), (101, 203, 37), (2000, 30, 9)])
def test_single_product_in_blocks_with_epilogue(rng, monkeypatch, pool, dtype_name, m, n, k):
    """One product cut into blocks across the pool, bias + GELU-like tanh epilogue per block."""
    t = dtype_name
    text = f"""
HloModule single
ENTRY main {{
  a = {t}[{m},{k}] parameter(0)
  b = {t}[{k},{n}] parameter(1)
  c = {t}[{n}] parameter(2)
  d = {t}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  cb = {t}[{m},{n}] broadcast(c), dimensions={{1}}
  s = {t}[{m},{n}] add(d, cb)
  ROOT r = {t}[{m},{n}] tanh(s)
}}
"""
    executable, calls = _compile(text, monkeypatch)
    assert calls == [k]
    dt = DTYPES[dtype_name]
    a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    c = rng.standard_normal(n).astype(dt)
    want = np.tanh(a.astype(np.float64) @ b + c)
    np.testing.assert_allclose(executable(a, b, c), want, rtol=1e-5 if t == "f32" else 1e-12,
                               atol=1e-5 if t == "f32" else 1e-12)
