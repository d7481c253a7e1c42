"""Transposes through shared-memory tiles, through gpu-sim on odd sizes, compared exactly
with NumPy (a transpose moves values); fused elementwise work against float64."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.gpu import kernel_ir
from pyxla.backends.gpu.simt import Barrier
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module


def run(text: str, inputs: list) -> list:
    return get_backend("gpu-sim").compile(parse_module(text)).run_flat(inputs)


@pytest.mark.parametrize("r,c", [(1, 31), (31, 33), (33, 1025), (2, 3), (64, 32)])
def test_transpose_2d_through_a_tile(r, c, rng):
    text = f"""HloModule m
ENTRY e {{
  x = f32[{r},{c}] parameter(0)
  ROOT t = f32[{c},{r}] transpose(x), dimensions={{1,0}}
}}
"""
    specs = kernel_ir(compile_module(parse_module(text)), "host")[1]
    x = rng.standard_normal((r, c)).astype(np.float32)
    (got,) = run(text, [x])
    np.testing.assert_array_equal(got, x.T)
    if r > 1:   # a 1-row transpose is a reshape
        assert any(isinstance(s, Barrier) for spec in specs for launch in spec.launches for s in launch.steps)


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 2, 0)])
def test_transpose_3d(perm, rng):
    shape = (3, 33, 31)
    out = tuple(shape[p] for p in perm)
    text = f"""HloModule m
ENTRY e {{
  x = f64[{",".join(map(str, shape))}] parameter(0)
  ROOT t = f64[{",".join(map(str, out))}] transpose(x), dimensions={{{",".join(map(str, perm))}}}
}}
"""
    x = rng.standard_normal(shape)
    (got,) = run(text, [x])
    np.testing.assert_array_equal(got, np.transpose(x, perm))


def test_layout_changing_copy_and_fused_transpose(rng):
    text = """HloModule m
ENTRY e {
  x = f32[33,1025]{1,0} parameter(0)
  y = f32[33,1025]{0,1} copy(x)
  t = f32[1025,33] transpose(x), dimensions={1,0}
  s = f32[1025,33] tanh(t)
  ROOT r = (f32[33,1025]{0,1}, f32[1025,33]) tuple(y, s)
}
"""
    x = rng.standard_normal((33, 1025)).astype(np.float32)
    y, s = run(text, [x])
    np.testing.assert_array_equal(y, x)
    np.testing.assert_allclose(s, np.tanh(x.T.astype(np.float64)), rtol=1e-6, atol=1e-7)
