"""The tiled GEMM (shared-memory tiles, a barrier-separated loop over K) through gpu-sim on
odd sizes, against NumPy in float64 (exact for integers); its PTX through ptxas."""
import shutil
import subprocess

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.gpu import kernel_ir
from pyxla.backends.gpu.ptx import compile_ptx
from pyxla.backends.gpu.simt import Loop
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module

PTXAS = shutil.which("ptxas")


def dot_module(m: int, k: int, n: int, t: str = "f32") -> str:
    return f"""HloModule m
ENTRY e {{
  a = {t}[{m},{k}] parameter(0)
  b = {t}[{k},{n}] parameter(1)
  ROOT d = {t}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def assert_product_close(got, want, magnitude) -> None:
    """got within f32 rounding of the float64 product: a relative 1e-5 and an absolute 1e-6
    of the sum of the products' magnitudes (|a| @ |b|)."""
    assert np.all(np.abs(got - want) <= 1e-5 * np.abs(want) + 1e-6 * magnitude + 1e-7), (got, want)


def run(text: str, inputs: list) -> list:
    return get_backend("gpu-sim").compile(parse_module(text)).run_flat(inputs)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (31, 33, 1), (33, 31, 33), (3, 1025, 5), (17, 5, 1025), (64, 70, 40)])
def test_gemm_f32(m, k, n, rng):
    text = dot_module(m, k, n)
    (spec,) = kernel_ir(compile_module(parse_module(text)), "host")[1]
    assert any(isinstance(s, Loop) for s in spec.launches[0].steps)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    (got,) = run(text, [a, b])
    assert_product_close(got, a.astype(np.float64) @ b, np.abs(a.astype(np.float64)) @ np.abs(b))


@pytest.mark.parametrize("m,k,n", [(33, 31, 35), (2, 100, 3)])
def test_gemm_s32_is_exact(m, k, n, rng):
    text = dot_module(m, k, n, "s32")
    a, b = rng.integers(-50, 50, (m, k)).astype(np.int32), rng.integers(-50, 50, (k, n)).astype(np.int32)
    (got,) = run(text, [a, b])
    np.testing.assert_array_equal(got, a @ b)


def test_batched_gemm_with_transposed_operand_fused(rng):
    text = """HloModule m
ENTRY e {
  a = f32[3,33,31] parameter(0)
  b = f32[3,35,31] parameter(1)
  ROOT d = f32[3,33,35] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},
      lhs_contracting_dims={2}, rhs_contracting_dims={2}
}
"""
    a, b = rng.standard_normal((3, 33, 31)).astype(np.float32), rng.standard_normal((3, 35, 31)).astype(np.float32)
    (got,) = run(text, [a, b])
    a64 = a.astype(np.float64)
    assert_product_close(got, np.einsum("bmk,bnk->bmn", a64, b), np.einsum("bmk,bnk->bmn", np.abs(a64), np.abs(b)))


def test_gemm_bf16_accumulates_in_f32(rng):
    import ml_dtypes
    text = dot_module(33, 64, 31, "bf16")
    a = rng.standard_normal((33, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 31)).astype(ml_dtypes.bfloat16)
    (got,) = run(text, [a, b])
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), rtol=2e-2, atol=5e-2)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on the PATH")
def test_gemm_ptx_tiles_in_shared_memory(tmp_path):
    ptx = compile_ptx(kernel_ir(compile_module(parse_module(dot_module(64, 70, 40))), "ptx")[0], "sm_90")
    assert "ld.shared" in ptx and "bar.sync" in ptx
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    done = subprocess.run([PTXAS, "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bias_and_relu_fused_after_the_gemm(rng):
    text = """HloModule m
ENTRY e {
  a = f32[33,70] parameter(0)
  b = f32[70,31] parameter(1)
  c = f32[31] parameter(2)
  d = f32[33,31] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  cb = f32[33,31] broadcast(c), dimensions={1}
  s = f32[33,31] add(d, cb)
  z = f32[] constant(0)
  zb = f32[33,31] broadcast(z), dimensions={}
  ROOT r = f32[33,31] maximum(s, zb)
}
"""
    specs = kernel_ir(compile_module(parse_module(text)), "host")[1]
    assert any(isinstance(s, Loop) for spec in specs for launch in spec.launches for s in launch.steps)
    a, b = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 31)).astype(np.float32)
    c = rng.standard_normal(31).astype(np.float32)
    (got,) = run(text, [a, b, c])
    a64 = a.astype(np.float64)
    assert_product_close(got, np.maximum(a64 @ b + c, 0), np.abs(a64) @ np.abs(b) + np.abs(c))
