"""A dot whose output fusion ends in another element type (a convert to f16, bf16 or f64
after the bias, as mixed-precision models write it): the product still takes pyxla's GEMM
(or the matrix-vector kernel), into kernel scratch, and the epilogue runs over the result
afterwards, where before the whole fusion fell back to elemental loops (50x slower). Checked
on fresh random inputs: one output fusion, the product's kernel called, and the bits of the
f32 product converted by NumPy (converting rounds once, so the sums are the plain dot's)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.fusion.instruction_fusion import kernels
from pyxla.hlo import parse_module

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}


def _module(batch: int, m: int, k: int, n: int, out: str | None) -> str:
    b = f"{batch}," if batch else ""
    bd = "lhs_batch_dims={0}, rhs_batch_dims={0}, " if batch else ""
    c = 2 if batch else 1
    tail = f"  ROOT out = {out}[{b}{m},{n}] convert(s)\n" if out else ""
    s = "s" if out else "ROOT s"
    return f"""HloModule converted_epilogue
ENTRY main {{
  a = f32[{b}{m},{k}] parameter(0)
  w = f32[{b}{k},{n}] parameter(1)
  bias = f32[{n}] parameter(2)
  d = f32[{b}{m},{n}] dot(a, w), {bd}lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{c - 1}}}
  bb = f32[{b}{m},{n}] broadcast(bias), dimensions={{{c}}}
  {s} = f32[{b}{m},{n}] add(d, bb)
{tail}}}
"""


@pytest.mark.parametrize("out", sorted(TYPES))
@pytest.mark.parametrize("batch,m,k,n", [(0, 64, 80, 96), (0, 130, 257, 33), (0, 1, 90, 70), (3, 20, 40, 50)])
def test_the_product_takes_the_gemm_and_the_convert_rounds_its_bits(rng, monkeypatch, pool, out, batch, m, k, n):
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", 0)   # on the pool
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    calls: list = []
    for name in ("emit_dot_tasks", "emit_gemv"):
        real = getattr(codegen, name)
        monkeypatch.setattr(codegen, name, lambda *a, real=real, name=name, **kw: (calls.append(name), real(*a, **kw)))
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + (m, k)).astype(np.float32)
    w = rng.standard_normal(lead + (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    converted = get_backend("cpu").compile(parse_module(_module(batch, m, k, n, out)))
    ks = kernels(converted.module.entry)
    assert len(ks) == 1 and ks[0].attrs.get("kind") == "kOutput", [x.describe() for x in ks]
    assert calls == ["emit_gemv" if m == 1 else "emit_dot_tasks"]
    got = converted.run_flat([a, w, bias])[0]
    plain = get_backend("cpu").compile(parse_module(_module(batch, m, k, n, None))).run_flat([a, w, bias])[0]
    assert got.dtype == TYPES[out]
    np.testing.assert_array_equal(got, plain.astype(TYPES[out]))
    want = a.astype(np.float64) @ w + bias
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2 if out != "f64" else 1e-4,
                               atol=0.1 * np.sqrt(k) if out != "f64" else 1e-3)
