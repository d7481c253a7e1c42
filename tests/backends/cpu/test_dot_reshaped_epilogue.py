"""A dot's epilogue behind a reshape of the product's rows (an ONNX MatMul of [b, s, k] by
[k, n]: a dot of [b * s, k] reshaped back to [b, s, n]) that may reshape back to [b * s, n]
at its end (the next MatMul's input): one output fusion, the GEMM's
kernel with the epilogue applied per block in place, the weight in GEMM panels, on fresh
random inputs against NumPy float64, and the same bits as the epilogue without the reshapes
(the product's sums do not change)."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.dot.plan import GemmPanels
from pyxla.fusion.instruction_fusion import kernels
from pyxla.hlo import parse_module


def _module(m: int, k: int, n: int, reshaped: bool, back: bool, batch: int = 1) -> str:
    """tanh(a w + bias + residual), reshaped to [batch, m / batch, n] after the dot when
    `reshaped`, and to [m, n] again at the end when `back`."""
    s = f"[{batch},{m // batch},{n}]" if reshaped else f"[{m},{n}]"
    d = f"  dr = f32{s} reshape(d)\n" if reshaped else ""
    product = "dr" if reshaped else "d"
    dims = "2" if reshaped else "1"
    root = f"  ROOT out = f32[{m},{n}] reshape(g)\n" if back else ""
    g = "g" if back else "ROOT g"
    return f"""HloModule reshaped_epilogue
ENTRY main {{
  a = f32[{m},{k}] parameter(0)
  w = f32[{k},{n}] parameter(1)
  bias = f32[{n}] parameter(2)
  residual = f32{s} parameter(3)
  d = f32[{m},{n}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{d}  bb = f32{s} broadcast(bias), dimensions={{{dims}}}
  b1 = f32{s} add({product}, bb)
  b2 = f32{s} add(b1, residual)
  {g} = f32{s} tanh(b2)
{root}}}
"""


def _compile(text: str, monkeypatch, constant: bool = False, in_place: list | None = None):
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", 0)   # on the pool, in column blocks
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    if in_place is not None:
        reads = codegen.epilogue_in_place

        def spy(dot, root):
            in_place.append(reads(dot, root))
            return in_place[-1]
        monkeypatch.setattr(codegen, "epilogue_in_place", spy)
    return get_backend("cpu").compile(parse_module(text), constant_parameters=(1,) if constant else ())


@pytest.mark.parametrize("m,k,n,batch", [(37, 100, 45, 1), (128, 70, 200, 1), (1, 50, 60, 1), (96, 40, 50, 4),
                                         (120, 33, 70, 3)])
@pytest.mark.parametrize("back", [False, True])
def test_one_output_fusion_with_the_bits_of_the_plain_epilogue(rng, monkeypatch, pool, m, k, n, batch, back):
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    residual = rng.standard_normal((m, n)).astype(np.float32)
    seen: list = []
    reshaped = _compile(_module(m, k, n, True, back, batch), monkeypatch, in_place=seen)
    ks = kernels(reshaped.module.entry)
    assert len(ks) == 1 and ks[0].attrs.get("kind") == "kOutput", [k.describe() for k in ks]
    assert seen == [True]   # the epilogue runs on the product where the GEMM stored it
    got = reshaped.run_flat([a, w, bias, residual.reshape(batch, m // batch, n)])[0]
    assert got.shape == ((m, n) if back else (batch, m // batch, n))
    plain = _compile(_module(m, k, n, False, False), monkeypatch).run_flat([a, w, bias, residual])[0]
    assert np.array_equal(got.reshape(m, n), plain)
    want = np.tanh(a.astype(np.float64) @ w + bias + residual)
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-4)


def test_the_weight_comes_in_gemm_panels(rng, monkeypatch, pool):
    m, k, n = 40, 90, 70
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    residual = rng.standard_normal((2, m // 2, n)).astype(np.float32)
    text = _module(m, k, n, True, True, batch=2)
    formed = _compile(text, monkeypatch, constant=True)
    assert isinstance(formed.parameter_forms.get(1), GemmPanels)
    once = formed.prepare_argument(1, w)
    plain = _compile(text, monkeypatch).run_flat([a, w, bias, residual])[0]
    assert np.array_equal(formed.run_unchecked([a, once, bias, residual])[0], plain)


def test_an_epilogue_reading_the_product_transposed_reads_it_from_scratch(rng, monkeypatch, pool):
    """Element (0, i, j) of the result reads (j, i) of the product: not in place, the
    epilogue runs after the whole product, from a copy."""
    m, k = 48, 30
    text = f"""HloModule transposed_epilogue
ENTRY main {{
  a = f32[{m},{k}] parameter(0)
  w = f32[{k},{m}] parameter(1)
  d = f32[{m},{m}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  dr = f32[1,{m},{m}] reshape(d)
  t = f32[1,{m},{m}] transpose(dr), dimensions={{0,2,1}}
  ROOT s = f32[1,{m},{m}] add(dr, t)
}}
"""
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, m)).astype(np.float32)
    seen: list = []
    executable = _compile(text, monkeypatch, in_place=seen)
    got = executable.run_flat([a, w])[0]
    product = a.astype(np.float64) @ w
    np.testing.assert_allclose(got[0], product + product.T, rtol=1e-4, atol=1e-4)
    assert seen == [False]


def test_a_reshape_that_cuts_the_rows_otherwise_keeps_the_product_apart(rng, monkeypatch, pool):
    """[12, 8] as [8, 12]: row i of the result is not row i of the product (same bytes, other
    rows), so the epilogue is not the GEMM's; the values still match."""
    text = """HloModule other_rows
ENTRY main {
  a = f32[12,20] parameter(0)
  w = f32[20,8] parameter(1)
  d = f32[12,8] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[8,12] reshape(d)
  ROOT t = f32[8,12] tanh(r)
}
"""
    a = rng.standard_normal((12, 20)).astype(np.float32)
    w = rng.standard_normal((20, 8)).astype(np.float32)
    executable = _compile(text, monkeypatch)
    assert not any(k.attrs.get("kind") == "kOutput" for k in kernels(executable.module.entry))
    got = executable.run_flat([a, w])[0]
    np.testing.assert_allclose(got, np.tanh((a.astype(np.float64) @ w).reshape(8, 12)), rtol=1e-5, atol=1e-5)
