"""Reductions in SIMT form (row: warp shuffles and shared memory; column: a shared-memory
tree; two stages for small outputs of long reductions) through gpu-sim, on odd sizes,
against NumPy in float64; their PTX through ptxas when it is on the PATH."""
import shutil
import subprocess

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.gpu import kernel_ir
from pyxla.backends.gpu.ptx import compile_ptx
from pyxla.backends.gpu.simt import Barrier, Shuffle
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module

PTXAS = shutil.which("ptxas")

def assert_sum_close(got, x, dims) -> None:
    """got within f32 rounding of the float64 sums: a relative 1e-5, and an absolute 1e-6 of
    the sum of magnitudes (the bound of a tree-and-serial f32 sum of these lengths)."""
    want = x.astype(np.float64).sum(dims)
    scale = np.abs(x.astype(np.float64)).sum(dims)
    assert np.all(np.abs(got - want) <= 1e-5 * np.abs(want) + 1e-6 * scale + 1e-7), (got, want)


def run(text: str, inputs: list) -> list:
    return get_backend("gpu-sim").compile(parse_module(text)).run_flat(inputs)


def kernels(text: str):
    return kernel_ir(compile_module(parse_module(text)), "host")[1]


def steps_of(spec) -> list:
    return [s for launch in spec.launches for s in launch.steps]


def reduce_module(shape: tuple, dims: tuple, t: str = "f32") -> str:
    kept = [n for d, n in enumerate(shape) if d not in dims]
    return f"""HloModule m
add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
ENTRY e {{
  x = {t}[{",".join(map(str, shape))}] parameter(0)
  z = {t}[] constant(0)
  ROOT r = {t}[{",".join(map(str, kept))}] reduce(x, z), dimensions={{{",".join(map(str, dims))}}}, to_apply=add
}}
"""


@pytest.mark.parametrize("rows,cols", [(1, 31), (3, 31), (5, 33), (2, 1025), (33, 7), (4, 300)])
def test_row_reduction_uses_shuffles(rows, cols, rng):
    text = reduce_module((rows, cols), (1,))
    (spec,) = kernels(text)
    assert any(isinstance(s, Shuffle) for s in steps_of(spec))
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    (got,) = run(text, [x])
    assert_sum_close(got, x, 1)


@pytest.mark.parametrize("rows,cols", [(31, 1), (31, 3), (33, 5), (1025, 2), (7, 33), (40, 70)])
def test_column_reduction_is_a_shared_memory_tree(rows, cols, rng):
    text = reduce_module((rows, cols), (0,))
    (spec,) = kernels(text)
    assert any(isinstance(s, Barrier) for s in steps_of(spec))
    assert not any(isinstance(s, Shuffle) for s in steps_of(spec))
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    (got,) = run(text, [x])
    assert_sum_close(got, x, 0)


@pytest.mark.parametrize("n", [8192, 20001])
def test_full_reduction_in_two_stages(n, rng):
    text = reduce_module((n,), (0,))
    (spec,) = kernels(text)
    assert len(spec.launches) == 2 and spec.scratch
    x = rng.standard_normal(n).astype(np.float32)
    (got,) = run(text, [x])
    assert_sum_close(got, x, None)


def test_long_column_reduction_in_two_stages(rng):
    text = reduce_module((9000, 3), (0,))
    (spec,) = kernels(text)
    assert len(spec.launches) == 2
    x = rng.standard_normal((9000, 3)).astype(np.float32)
    (got,) = run(text, [x])
    assert_sum_close(got, x, 0)


@pytest.mark.parametrize("shape,dims", [((1, 1), (1,)), ((3, 1025, 5), (1,)), ((31, 4, 33), (0, 2)), ((2, 3, 33), (1, 2))])
def test_reductions_over_several_dims(shape, dims, rng):
    text = reduce_module(shape, dims)
    x = rng.standard_normal(shape).astype(np.float32)
    (got,) = run(text, [x])
    assert_sum_close(got, x, dims)


@pytest.mark.parametrize("shape,dims", [((5, 1025), (1,)), ((1025, 5), (0,)), ((10000,), (0,))])
def test_integer_sums_are_exact(shape, dims, rng):
    text = reduce_module(shape, dims, "s32")
    x = rng.integers(-1000, 1000, shape).astype(np.int32)
    (got,) = run(text, [x])
    np.testing.assert_array_equal(got, x.sum(dims, dtype=np.int32))


@pytest.mark.parametrize("rows,cols", [(7, 33), (3, 1025), (2, 9000)])
def test_variadic_argmax_rows(rows, cols, rng):
    text = f"""HloModule m
argmax {{
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}}
ENTRY e {{
  x = f32[{rows},{cols}] parameter(0)
  iota = s32[{rows},{cols}] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[{rows}], s32[{rows}]) reduce(x, iota, ninf, zero), dimensions={{1}}, to_apply=argmax
}}
"""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    values, where = run(text, [x])
    np.testing.assert_array_equal(where, x.argmax(1))
    np.testing.assert_array_equal(values, x.max(1))


def test_fused_softmax_denominator(rng):
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[33,1025] parameter(0)
  ex = f32[33,1025] exponential(x)
  z = f32[] constant(0)
  s = f32[33] reduce(ex, z), dimensions={1}, to_apply=add
  b = f32[33,1025] broadcast(s), dimensions={0}
  ROOT d = f32[33,1025] divide(ex, b)
}
"""
    x = rng.standard_normal((33, 1025)).astype(np.float32)
    (got,) = run(text, [x])
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on the PATH")
def test_reduction_ptx_uses_shuffles_barriers_and_shared_memory(tmp_path):
    module = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[5,1025] parameter(0)
  z = f32[] constant(0)
  r = f32[5] reduce(x, z), dimensions={1}, to_apply=add
  c = f32[1025] reduce(x, z), dimensions={0}, to_apply=add
  f = f32[] reduce(c, z), dimensions={0}, to_apply=add
  ROOT t = (f32[5], f32[1025], f32[]) tuple(r, c, f)
}
"""
    ptx = compile_ptx(kernel_ir(compile_module(parse_module(module)), "ptx")[0], "sm_90")
    assert "shfl.sync.down.b32" in ptx and "bar.sync" in ptx and ".shared" in ptx
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    done = subprocess.run([PTXAS, "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_mean_and_variance_fused_after_the_reductions(rng):
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[33,1025] parameter(0)
  z = f32[] constant(0)
  s = f32[33] reduce(x, z), dimensions={1}, to_apply=add
  sq = f32[33,1025] multiply(x, x)
  s2 = f32[33] reduce(sq, z), dimensions={1}, to_apply=add
  n = f32[] constant(1025)
  nb = f32[33] broadcast(n), dimensions={}
  mean = f32[33] divide(s, nb)
  m2 = f32[33] divide(s2, nb)
  mm = f32[33] multiply(mean, mean)
  var = f32[33] subtract(m2, mm)
  ROOT t = (f32[33], f32[33]) tuple(mean, var)
}
"""
    specs = kernels(text)
    assert specs and all(any(isinstance(s, Shuffle) for s in steps_of(spec)) for spec in specs)
    x = (rng.standard_normal((33, 1025)) + 0.5).astype(np.float32)
    mean, var = run(text, [x])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x64.var(1), rtol=1e-4, atol=1e-5)
