"""dot/plan.py gemm_blocking: all of A's rows packed at once (MC) when they are more than the
cost model's MC and fit half of L2 at KC deep, a tuned MC kept; and MC changes no bit of the
product (fresh random inputs, against the default blocking and NumPy float64)."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.dot.gemm import tiling
from pyxla.backends.cpu.dot.plan import gemm_blocking
from pyxla.backends.cpu.tuning import machine
from pyxla.backends.cpu.tuning.params import GemmParams
from pyxla.backends.cpu.tuning.selection import Selection, gemm_key, pinned
from pyxla.hlo import parse_module


def _l2_rows(k: int) -> int:
    t = tiling("f32")
    return machine.cache_sizes()["L2"] // 2 // (min(k, t.kc) * 4)


@pytest.fixture
def l2():
    """This machine's L2, when it says, holds more rows at KC deep than the cost model's MC
    (the kernels are compiled for this machine's caches, so they are not patched)."""
    if "L2" not in machine.cache_sizes() or _l2_rows(768) < tiling("f32").mc + tiling("f32").mr:
        pytest.skip("no L2 size, or one that holds no more rows than MC")


def test_rows_that_fit_l2_are_packed_at_once(l2):
    t = tiling("f32")
    bound = _l2_rows(768)
    m = min(bound, t.mc + 2 * t.mr - 1)
    assert gemm_blocking("f32", 1, m, 300, 768, False, False).mc == -(-m // t.mr) * t.mr
    assert gemm_blocking("f32", 1, t.mc, 300, 768, False, False).mc is None      # the cost model's
    assert gemm_blocking("f32", 1, bound + 1, 300, 768, False, False).mc is None  # past L2


def test_a_tuned_mc_is_kept(l2):
    t = tiling("f32")
    m = t.mc + t.mr
    with pinned(Selection({gemm_key("f32", 1, m, 300, 768, False, False): GemmParams(mc=2 * t.mr)})):
        assert gemm_blocking("f32", 1, m, 300, 768, False, False).mc == 2 * t.mr


@pytest.mark.parametrize("constant", [False, True])
def test_mc_changes_no_bit(rng, monkeypatch, pool, l2, constant):
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", 0)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    t = tiling("f32")
    m, k, n = t.mc + t.mr + 5, 600, 90
    assert gemm_blocking("f32", 1, m, n, k, False, False).mc is not None
    text = f"""HloModule blocking
ENTRY main {{
  a = f32[{m},{k}] parameter(0)
  w = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    constants = (1,) if constant else ()
    rows_at_once = get_backend("cpu").compile(parse_module(text), constant_parameters=constants)
    with pinned(Selection({gemm_key("f32", 1, m, n, k, False, False): GemmParams(mc=t.mc)})):
        default = get_backend("cpu").compile(parse_module(text), constant_parameters=constants)
    got = rows_at_once.run_flat([a, w])[0]
    assert np.array_equal(got, default.run_flat([a, w])[0])
    np.testing.assert_allclose(got, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
