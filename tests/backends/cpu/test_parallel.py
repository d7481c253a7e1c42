"""Kernels split across the worker pool (runtime/parallel.py, codegen's splitting): results equal the
interpreter's around the size threshold, at chunk boundaries and at full size; reductions to
a few results split along their reduced dimensions; row kernels, multi-output fusions, GEMM
epilogues and kernels inside loops; calls from several Python threads at once; and the
one-thread configuration (PYXLA_NUM_THREADS=1)."""
import multiprocessing
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import nn
from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.runtime import parallel
from pyxla.hlo import parse_module

from ...fusion.programs import ARGMAX_REDUCER
from .differential import (
    assert_concurrent_calls_correct,
    assert_cpu_matches_interpreter,
    assert_subnormal_products_flushed,
)


@pytest.fixture
def small_threshold(monkeypatch, pool):
    """Split even small kernels, so that splitting is tested on sizes the interpreter checks fast."""
    monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
    monkeypatch.setattr(codegen, "TASK_MIN_WORK", 16)
    return pool


def compile_with_ir(text: str, tmp_path, monkeypatch):
    """(executable, LLVM IR text) of an HLO module on the cpu backend."""
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    module = parse_module(text)
    executable = get_backend("cpu").compile(module)
    monkeypatch.delenv("PYXLA_DUMP")
    (ir_file,) = tmp_path.glob("*/llvm-ir.ll")
    return executable, ir_file.read_text()


def task_functions(ir_text: str) -> int:
    return sum(1 for line in ir_text.splitlines() if line.startswith("define") and ".task" in line)


ADD = """
add {
  add.a = f32[] parameter(0)
  add.b = f32[] parameter(1)
  ROOT add.s = f32[] add(add.a, add.b)
}
"""


def elementwise(dims: str) -> str:
    return f"""HloModule ew
ENTRY main {{
  x = f32[{dims}] parameter(0)
  y = f32[{dims}] parameter(1)
  m = f32[{dims}] multiply(x, y)
  ROOT r = f32[{dims}] add(m, x)
}}
"""


# --- the threshold ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [-1, 0, 1])
def test_loop_kernel_around_the_threshold(n, rng, pool, tmp_path, monkeypatch):
    """Two elementwise ops cost 2 per element: a kernel splits from PARALLEL_MIN_WORK / 2
    elements on, and gives the interpreter's results on either side."""
    size = codegen.PARALLEL_MIN_WORK // 2 + n
    text = elementwise(str(size))
    executable, ir_text = compile_with_ir(text, tmp_path, monkeypatch)
    assert task_functions(ir_text) == (1 if n >= 0 else 0)
    x, y = (rng.standard_normal(size).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(executable(x, y), x * y + x)


@pytest.mark.parametrize("dims", ["1000003", "3,333337", "7,11,13,17,19", "1031,257", "2,1,65537"])
def test_loop_kernel_odd_shapes_split_at_any_dimension(dims, rng, small_threshold):
    """Chunks cut the flat range of the outer dimensions anywhere, mid-row included."""
    assert_cpu_matches_interpreter(elementwise(dims), rng, rtol=0, atol=0)


@pytest.mark.parametrize("tasks_per_thread", [1, 3, 64])
def test_chunk_boundaries_for_any_task_count(tasks_per_thread, rng, small_threshold, monkeypatch):
    monkeypatch.setattr(codegen, "TASKS_PER_THREAD", tasks_per_thread)
    assert_cpu_matches_interpreter(elementwise("37,1009"), rng, rtol=0, atol=0)


def test_transposed_layout_output(rng, small_threshold):
    text = """HloModule t
ENTRY main {
  x = f32[301,517]{1,0} parameter(0)
  t = f32[517,301]{0,1} transpose(x), dimensions={1,0}
  ROOT e = f32[517,301]{0,1} exponential(t)
}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=2e-6)


# --- reductions -----------------------------------------------------------------------------

def full_reduction(op: str, dtype: str, dims: str, init: str, map_op: str = "multiply") -> str:
    rank = len(dims.split(","))
    return f"""HloModule r
reducer {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] {op}(a, b)
}}
ENTRY main {{
  x = {dtype}[{dims}] parameter(0)
  y = {dtype}[{dims}] parameter(1)
  m = {dtype}[{dims}] {map_op}(x, y)
  init = {dtype}[] constant({init})
  ROOT r = {dtype}[] reduce(m, init), dimensions={{{",".join(map(str, range(rank)))}}}, to_apply=reducer
}}
"""


@pytest.mark.parametrize("op,init", [("add", "0"), ("maximum", "-inf"), ("minimum", "inf")])
@pytest.mark.parametrize("dims", ["1048583", "3,100003", "2,2,2,65537"])
def test_full_float_reduction_split_in_parts(op, init, dims, rng, pool, tmp_path, monkeypatch):
    text = full_reduction(op, "f32", dims, init)
    executable, ir_text = compile_with_ir(text, tmp_path, monkeypatch)
    assert task_functions(ir_text) == 1
    shape = tuple(int(d) for d in dims.split(","))
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    want = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op](x.astype(np.float64) * y)
    np.testing.assert_allclose(executable(x, y), want, rtol=1e-5, atol=1e-6 * np.abs(x * y).sum())


@pytest.mark.parametrize("op,init", [("add", "0"), ("maximum", "-2147483648"), ("minimum", "2147483647"),
                                     ("and", "-1"), ("or", "0"), ("multiply", "1")])
def test_full_integer_reduction_split_in_parts_is_exact(op, init, rng, small_threshold):
    text = full_reduction(op, "s32", "3001,7", init, map_op="add" if op != "multiply" else "maximum")
    if op == "multiply":   # a product of mostly ones and a few twos and minus ones: no overflow
        x = np.where(rng.random((3001, 7)) < 0.002, 2, 1).astype(np.int32) * \
            np.where(rng.random((3001, 7)) < 0.5, -1, 1).astype(np.int32)
        assert_cpu_matches_interpreter(text, rng, [x, x], rtol=0, atol=0)
    else:
        assert_cpu_matches_interpreter(text, rng, rtol=0, atol=0)


def test_init_that_is_not_the_identity_is_applied_once(rng, pool, tmp_path, monkeypatch):
    text = full_reduction("add", "f32", "1048576", "5")
    executable, ir_text = compile_with_ir(text, tmp_path, monkeypatch)
    x = rng.standard_normal(1 << 20).astype(np.float32)
    y = np.ones_like(x)
    np.testing.assert_allclose(executable(x, y), 5 + x.astype(np.float64).sum(), rtol=1e-5,
                               atol=1e-6 * np.abs(x).sum())


def test_few_rows_split_along_the_reduced_dimension(rng, pool, tmp_path, monkeypatch):
    """Three long rows: each task reduces its part of every row; the mean uses the sums."""
    text = ADD.join(["HloModule few_rows\n", """
ENTRY main {
  x = f32[3,400009] parameter(0)
  zero = f32[] constant(0)
  s = f32[3] reduce(x, zero), dimensions={1}, to_apply=add
  n = f32[] constant(400009)
  nb = f32[3] broadcast(n), dimensions={}
  mean = f32[3] divide(s, nb)
  mb = f32[3,400009] broadcast(mean), dimensions={0}
  d = f32[3,400009] subtract(x, mb)
  d2 = f32[3,400009] multiply(d, d)
  v = f32[3] reduce(d2, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[3], f32[3]) tuple(mean, v)
}
"""])
    executable, ir_text = compile_with_ir(text, tmp_path, monkeypatch)
    assert task_functions(ir_text) >= 2
    x = (rng.standard_normal((3, 400009)) + 3).astype(np.float32)
    mean, var = executable(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(1), rtol=1e-5)
    np.testing.assert_allclose(var, ((x64 - x64.mean(1, keepdims=True)) ** 2).sum(1), rtol=1e-4)


def test_column_reduction_split_over_its_results(rng, small_threshold):
    text = ADD.join(["HloModule columns\n", """
ENTRY main {
  x = f32[517,1003] parameter(0)
  zero = f32[] constant(0)
  ROOT s = f32[1003] reduce(x, zero), dimensions={0}, to_apply=add
}
"""])
    assert_cpu_matches_interpreter(text, rng, rtol=1e-5, atol=1e-4)


def test_argmax_rows_split(rng, small_threshold):
    text = f"""HloModule argmax
{ARGMAX_REDUCER}
ENTRY main {{
  x = f32[301,257] parameter(0)
  iota = s32[301,257] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[301], s32[301]) reduce(x, iota, ninf, zero), dimensions={{1}}, to_apply=argmax
}}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=0, atol=0)


def test_whole_vector_argmax_is_not_split_but_correct(rng, pool):
    f = pyxla.jit(lambda x: pnp.argmax(x), backend="cpu")
    x = rng.standard_normal(1 << 20).astype(np.float32)
    assert int(f(x)) == int(np.argmax(x))


# --- row kernels, multi-output fusions, epilogues, loops ---------------------------------------

@pytest.mark.parametrize("shape", [(1031, 257), (2, 300007), (5, 3, 70001), (4096, 64)])
def test_softmax_and_layer_norm_rows(shape, rng, pool):
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape[-1:]).astype(np.float32)
    b = rng.standard_normal(shape[-1:]).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(pyxla.jit(lambda x: nn.softmax(x, axis=-1), backend="cpu")(x),
                               e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    mean = x64.mean(-1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    got = pyxla.jit(lambda x, g, b: nn.layer_norm(x, g, b, eps=1e-5), backend="cpu")(x, g, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


SOFTMAX = """HloModule softmax
max {
  ma = f32[] parameter(0)
  mb = f32[] parameter(1)
  ROOT mm = f32[] maximum(ma, mb)
}
""" + ADD + """
ENTRY main {
  x = f32[513,1031] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[513] reduce(x, ninf), dimensions={1}, to_apply=max
  mrow = f32[513,1031] broadcast(m), dimensions={0}
  d = f32[513,1031] subtract(x, mrow)
  e = f32[513,1031] exponential(d)
  zero = f32[] constant(0)
  s = f32[513] reduce(e, zero), dimensions={1}, to_apply=add
  sb = f32[513,1031] broadcast(s), dimensions={0}
  ROOT p = f32[513,1031] divide(e, sb)
}
"""


def test_softmax_keeps_the_row_of_exponentials(rng, pool, tmp_path, monkeypatch):
    """exp(x - max) is computed once per element: kept in a row buffer by the sum and read
    back by the division, in every task."""
    executable, ir_text = compile_with_ir(SOFTMAX, tmp_path, monkeypatch)
    assert "alloca float, i64 1031" in ir_text and task_functions(ir_text) == 1
    x = (rng.standard_normal((513, 1031)) * 4).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(executable(x), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_multi_output_fusion_rows(rng, small_threshold):
    text = ADD.join(["HloModule multi\n", """
fused {
  p = f32[123,457] parameter(0)
  zero = f32[] constant(0)
  s = f32[123] reduce(p, zero), dimensions={1}, to_apply=add
  sb = f32[123,457] broadcast(s), dimensions={0}
  d = f32[123,457] subtract(p, sb)
  e = f32[123,457] exponential(p)
  ROOT t = (f32[123,457], f32[123], f32[123,457]) tuple(d, s, e)
}
ENTRY main {
  x = f32[123,457] parameter(0)
  ROOT f = (f32[123,457], f32[123], f32[123,457]) fusion(x), kind=kInput, calls=fused
}
"""])
    assert_cpu_matches_interpreter(text, rng, rtol=1e-5, atol=1e-4)


def test_gemm_epilogue_split(rng, pool):
    f = pyxla.jit(lambda x, w, b: nn.gelu(x @ w + b, approximate=True), backend="cpu")
    x = rng.standard_normal((257, 129)).astype(np.float32)
    w = (rng.standard_normal((129, 1031)) / 11).astype(np.float32)
    b = rng.standard_normal(1031).astype(np.float32)
    h = x.astype(np.float64) @ w + b
    want = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(f(x, w, b), want, rtol=1e-4, atol=1e-4)


def _gelu_softmax_sum(x, w, b):
    h = nn.gelu(x @ w + b, approximate=True)
    return h, nn.softmax(h, axis=-1), pnp.sum(h * h)


@pytest.mark.parametrize("tasks_per_thread,gemm_tasks_per_thread", [(4, 1), (4, 4), (4, 8), (1, 2), (16, 2)])
def test_chunk_counts_leave_results_bit_identical(tasks_per_thread, gemm_tasks_per_thread, rng, pool, monkeypatch):
    """More, smaller tasks (so that a core another library's threads take costs one small
    chunk) change where each thread works, not what an element computes: a GEMM with its
    GELU epilogue and a row softmax give the same bits with the default chunk counts and
    with others, and agree with float64. A sum split along its reduced dimension adds one
    partial sum per chunk, so its bits follow TASKS_PER_THREAD (not the GEMM's blocks)."""
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")   # each variant compiled, none loaded from the cache
    x = rng.standard_normal((256, 384)).astype(np.float32)
    w = (rng.standard_normal((384, 1024)) / 20).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    monkeypatch.setattr(codegen, "TASKS_PER_THREAD", 4)
    monkeypatch.setattr(codegen, "GEMM_TASKS_PER_THREAD", 2)
    default = [np.asarray(r) for r in pyxla.jit(_gelu_softmax_sum, backend="cpu")(x, w, b)]
    monkeypatch.setattr(codegen, "TASKS_PER_THREAD", tasks_per_thread)
    monkeypatch.setattr(codegen, "GEMM_TASKS_PER_THREAD", gemm_tasks_per_thread)
    other = [np.asarray(r) for r in pyxla.jit(_gelu_softmax_sum, backend="cpu")(x, w, b)]
    np.testing.assert_array_equal(other[0], default[0])
    np.testing.assert_array_equal(other[1], default[1])
    if tasks_per_thread == 4:
        np.testing.assert_array_equal(other[2], default[2])
    h = x.astype(np.float64) @ w + b
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    e = np.exp(h - h.max(-1, keepdims=True))
    for got in (default, other):
        np.testing.assert_allclose(got[0], h, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got[1], e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got[2], np.sum(h * h), rtol=1e-4)


def test_split_kernels_inside_a_while_loop(rng, small_threshold):
    text = ADD.join(["HloModule loop\n", """
cond {
  cs = (s32[], f32[301,103]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(5)
  ROOT lt = pred[] compare(ci, cn), direction=LT
}
body {
  s = (s32[], f32[301,103]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[301,103] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  zero = f32[] constant(0)
  r = f32[301] reduce(x, zero), dimensions={1}, to_apply=add
  rb = f32[301,103] broadcast(r), dimensions={0}
  c = f32[] constant(0.01)
  cb = f32[301,103] broadcast(c), dimensions={}
  y = f32[301,103] multiply(rb, cb)
  z = f32[301,103] add(x, y)
  ROOT t = (s32[], f32[301,103]) tuple(j, z)
}
ENTRY main {
  x0 = f32[301,103] parameter(0)
  start = s32[] constant(0)
  s0 = (s32[], f32[301,103]) tuple(start, x0)
  w = (s32[], f32[301,103]) while(s0), condition=cond, body=body
  ROOT out = f32[301,103] get-tuple-element(w), index=1
}
"""])
    assert_cpu_matches_interpreter(text, rng, rtol=1e-4, atol=1e-4)


def test_subnormals_flushed_on_every_thread(rng, small_threshold):
    """Workers run with the caller's MXCSR: a product that underflows to a subnormal is
    flushed to zero in every chunk, as a serial run (and the interpreter) flushes it."""
    assert_subnormal_products_flushed(rng)


# --- threads, configurations ---------------------------------------------------------------------

def test_concurrent_calls_from_python_threads(rng, pool):
    """One caller at a time takes the pool; the others run their tasks serially meanwhile."""
    assert_concurrent_calls_correct(rng, 300_007)


def _sum_in_child(queue):
    x = np.arange(1 << 20, dtype=np.float32) % 7
    queue.put(float(pyxla.jit(lambda x: pnp.sum(x * x), backend="cpu")(x)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pool_restarts_in_a_forked_child(pool):
    pyxla.jit(lambda x: pnp.sum(x), backend="cpu")(np.ones(1 << 20, np.float32))   # the pool has run
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_sum_in_child, args=(queue,))
    child.start()
    value = queue.get(timeout=120)
    child.join(timeout=60)
    x = np.arange(1 << 20, dtype=np.float64) % 7
    assert child.exitcode == 0 and value == float((x * x).sum())


def test_one_thread_configuration(rng, tmp_path):
    """PYXLA_NUM_THREADS=1: no pool, no task functions, the same results."""
    script = textwrap.dedent(f"""
        import numpy as np, pyxla, pyxla.numpy as pnp
        from pyxla.backends.cpu.runtime import parallel
        assert parallel.thread_count() == 1 and parallel.worker_pool() is None
        x = np.random.default_rng({int(rng.integers(2 ** 31))}).standard_normal(1 << 21).astype(np.float32)
        total, e = pyxla.jit(lambda x: (pnp.sum(x * x), pnp.exp(x)), backend="cpu")(x)
        np.testing.assert_allclose(total, (x.astype(np.float64) ** 2).sum(), rtol=1e-5)
        np.testing.assert_allclose(e, np.exp(x.astype(np.float64)), rtol=1e-6)
        print("one thread ok")
    """)
    env = dict(os.environ, PYXLA_NUM_THREADS="1", PYXLA_DUMP=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "one thread ok" in done.stdout
    (ir_file,) = tmp_path.glob("*/llvm-ir.ll")
    assert "define" in ir_file.read_text() and task_functions(ir_file.read_text()) == 0


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_bad_thread_count_is_refused_by_name(value, monkeypatch):
    monkeypatch.setenv("PYXLA_NUM_THREADS", value)
    with pytest.raises(ValueError, match="PYXLA_NUM_THREADS"):
        parallel.thread_count()


def test_thread_count_defaults_to_the_usable_cores(monkeypatch):
    monkeypatch.delenv("PYXLA_NUM_THREADS", raising=False)
    assert parallel.thread_count() == min(len(os.sched_getaffinity(0)), parallel.MAX_THREADS)
    monkeypatch.setenv("PYXLA_NUM_THREADS", "5")
    assert parallel.thread_count() == 5
