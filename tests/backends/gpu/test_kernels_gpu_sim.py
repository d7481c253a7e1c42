"""The GPU backend's kernel kinds through gpu-sim, on odd sizes (1, 31, 33, 1025 elements;
rows that are not a multiple of a warp), against the evaluator; its refusals and settings."""
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla.backends import get_backend
from pyxla.backends.gpu import GpuUnsupported
from pyxla.backends.gpu.ptx import architecture, compile_ptx
from pyxla.hlo import evaluate_module, flatten_result, parse_module

SIZES = [1, 31, 33, 1025]


def sim_matches_evaluator(text: str, inputs: list, rtol: float = 1e-6) -> None:
    got = get_backend("gpu-sim").compile(parse_module(text)).run_flat(inputs)
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16"])
def test_elementwise_chain(n, t, rng):
    text = f"""HloModule m
ENTRY e {{
  x = {t}[{n}] parameter(0)
  y = {t}[{n}] parameter(1)
  p = {t}[{n}] multiply(x, y)
  s = {t}[{n}] tanh(p)
  ROOT r = {t}[{n}] add(s, x)
}}
"""
    dtype = get_dtype(t)
    inputs = [rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)]
    sim_matches_evaluator(text, inputs, rtol=1e-5 if t in ("f32", "f64") else 1e-2)


def get_dtype(t):
    from pyxla.hlo.types import ELEMENT_TYPES
    return ELEMENT_TYPES[t].np_dtype


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 31), (5, 33), (2, 1025), (33, 7)])
def test_row_and_column_reductions(rows, cols, rng):
    text = f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{rows},{cols}] parameter(0)
  z = f32[] constant(0)
  r = f32[{rows}] reduce(x, z), dimensions={{1}}, to_apply=add
  c = f32[{cols}] reduce(x, z), dimensions={{0}}, to_apply=add
  ROOT t = (f32[{rows}], f32[{cols}]) tuple(r, c)
}}
"""
    # the GPU sums as a tree, the evaluator in order: f32 rounding differs by a few ulps of the sums
    sim_matches_evaluator(text, [rng.standard_normal((rows, cols)).astype(np.float32)], rtol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 31, 33), (17, 5, 1025)])
def test_dot(m, k, n, rng):
    text = f"""HloModule m
ENTRY e {{
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    sim_matches_evaluator(text, [rng.standard_normal((m, k)).astype(np.float32),
                                 rng.standard_normal((k, n)).astype(np.float32)], rtol=1e-5)


def test_variadic_reduce_argmax(rng):
    text = """HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  v = f32[] select(gt, v0, v1)
  i = s32[] select(gt, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[7,33] parameter(0)
  iota = s32[7,33] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[7], s32[7]) reduce(x, iota, ninf, zero), dimensions={1}, to_apply=argmax
}
"""
    sim_matches_evaluator(text, [rng.standard_normal((7, 33)).astype(np.float32)])


def test_layouts_and_transpose(rng):
    text = """HloModule m
ENTRY e {
  x = f32[31,33]{0,1} parameter(0)
  t = f32[33,31]{1,0} transpose(x), dimensions={1,0}
  ROOT n = f32[33,31]{0,1} negate(t)
}
"""
    sim_matches_evaluator(text, [rng.standard_normal((31, 33)).astype(np.float32)])


def test_jit_on_gpu_sim(rng):
    f = pyxla.jit(lambda x, y: pnp.sum(pnp.exp(x) * y, axis=-1), backend="gpu-sim")
    x, y = rng.standard_normal((5, 1025)).astype(np.float32), rng.standard_normal((5, 1025)).astype(np.float32)
    np.testing.assert_allclose(f(x, y), (np.exp(x.astype(np.float64)) * y).sum(-1), rtol=1e-4)


def test_unsupported_op_is_refused_with_its_name():
    text = """HloModule m
ENTRY e {
  x = f32[4,4] parameter(0)
  ROOT c = f32[4,4] cholesky(x), lower=true
}
"""
    with pytest.raises(GpuUnsupported, match="the GPU backend cannot emit cholesky"):
        get_backend("gpu-sim").compile(parse_module(text))


def test_architecture_setting(monkeypatch):
    monkeypatch.setenv("PYXLA_GPU_ARCH", "sm_80")
    assert architecture() == "sm_80"
    monkeypatch.setenv("PYXLA_GPU_ARCH", "hopper")
    with pytest.raises(ValueError, match="PYXLA_GPU_ARCH"):
        architecture()


def test_missing_libdevice_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PYXLA_LIBDEVICE", str(tmp_path / "nowhere.bc"))
    ir_text = ('define float @k(float %x, float %y) {\n  %r = call float @"fmodf"(float %x, float %y)\n'
               '  ret float %r\n}\ndeclare float @"fmodf"(float, float)\n')
    with pytest.raises(FileNotFoundError, match="nowhere.bc"):
        compile_ptx(ir_text, "sm_90")
