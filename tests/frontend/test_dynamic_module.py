"""HLO text with dynamic dimensions (`?`, `<=N`) compiled and run for the arguments' sizes
(frontend/dynamic_module.py), against NumPy in float64."""
import numpy as np
import pytest

from pyxla.cli import main
from pyxla.errors import ArgumentError
from pyxla.frontend.dynamic_module import compile_dynamic, has_dynamic_dimensions
from pyxla.hlo import parse_module

# a dense layer with tanh over a dynamic batch, and its column sums (a reduction over the
# dynamic dimension: the padding must not reach it)
LAYER = """HloModule layer

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[?,4] parameter(0)
  w = f32[4,3] parameter(1)
  bias = f32[3] parameter(2)
  d = f32[?,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[?,3] broadcast(bias), dimensions={1}
  t = f32[?,3] tanh(f32[?,3] add(d, bb))
  z = f32[] constant(0)
  s = f32[3] reduce(t, z), dimensions={0}, to_apply=add
  ROOT r = (f32[?,3], f32[3]) tuple(t, s)
}
"""

# two bounded parameters XLA takes to be one size (an elementwise op joins them), and a
# maximum over the dynamic dimension
BOUNDED = """HloModule bounded

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[<=12,5] parameter(0)
  y = f32[<=12,5] parameter(1)
  p = f32[<=12,5] multiply(x, y)
  lo = f32[] constant(-inf)
  ROOT m = f32[5] reduce(p, lo), dimensions={0}, to_apply=max
}
"""


def _layer_reference(x, w, bias):
    t = np.tanh(x.astype(np.float64) @ w + bias)
    return t, t.sum(0)


def test_one_module_serves_every_batch_size_one_compile_per_bucket(rng, capfd, monkeypatch):
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    module = parse_module(LAYER)
    assert has_dynamic_dimensions(module)
    executable = compile_dynamic(module)
    w, bias = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    sizes = (1, 2, 5, 8, 13, 31, 7, 64, 3)
    for n in sizes:
        x = rng.standard_normal((n, 4)).astype(np.float32)
        t, s = executable.run_flat([x, w, bias])
        want_t, want_s = _layer_reference(x, w, bias)
        assert t.shape == (n, 3) and s.shape == (3,)
        np.testing.assert_allclose(t, want_t, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)
    buckets = {max(16, 1 << max(0, n - 1).bit_length()) for n in sizes}   # powers of two from 16
    assert executable.compile_count == len(buckets)
    logged = [line for line in capfd.readouterr().err.splitlines() if "compiling layer" in line]
    assert len(logged) == len(buckets) and all("x.0<=" in line for line in logged)


def test_bounded_dimensions_are_tied_checked_and_capped(rng):
    executable = compile_dynamic(parse_module(BOUNDED))
    for n in (1, 4, 9, 12):
        x, y = (rng.standard_normal((n, 5)).astype(np.float32) for _ in range(2))
        (m,) = executable.run_flat([x, y])
        np.testing.assert_array_equal(m, (x * y).max(0))   # exact: one rounding per product
    assert executable.compile_count == 1   # one bucket, 12: the smallest default one (16) capped by the bound
    with pytest.raises(ArgumentError, match=r"argument 0 \(x\) dimension 0 has size 13, larger than its bound 12"):
        executable.run_flat([np.ones((13, 5), np.float32)] * 2)
    with pytest.raises(ArgumentError, match=r"argument 1 \(y\) dimension 0 has size 4, but argument 0 \(x\) "
                                            r"dimension 0 has 3"):
        executable.run_flat([np.ones((3, 5), np.float32), np.ones((4, 5), np.float32)])
    with pytest.raises(ArgumentError, match=r"argument 0 \(x\): dimension 1 has size 4, expected 5"):
        executable.run_flat([np.ones((3, 4), np.float32)] * 2)


def test_the_interpreter_runs_the_same_buckets(rng):
    module = parse_module(LAYER)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w, bias = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    got = compile_dynamic(module, "interpreter").run_flat([x, w, bias])
    for g, want in zip(got, _layer_reference(x, w, bias)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_sizes_no_parameter_gives_are_refused_naming_the_instruction():
    text = """HloModule unbound
ENTRY main {
  x = f32[4] parameter(0)
  ROOT i = f32[?] iota(), iota_dimension=0
}
"""
    with pytest.raises(NotImplementedError, match=r"%i \(iota\) in main has the shape f32\[\?\], whose dynamic size "
                                                  r"no parameter gives"):
        compile_dynamic(parse_module(text))


def test_set_dimension_size_is_refused():
    text = """HloModule sds
ENTRY main {
  x = f32[8] parameter(0)
  n = s32[] parameter(1)
  ROOT d = f32[<=8] set-dimension-size(x, n), dimensions={0}
}
"""
    with pytest.raises(NotImplementedError, match="set-dimension-size"):
        compile_dynamic(parse_module(text))


def test_pyxla_run_takes_dynamic_text(tmp_path, rng, capsys):
    path = tmp_path / "layer.hlo"
    path.write_text(LAYER)
    x = rng.standard_normal((11, 4)).astype(np.float32)
    w, bias = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    np.savez(tmp_path / "in.npz", arg0=x, arg1=w, arg2=bias)
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    assert "out0: float32[11, 3]" in capsys.readouterr().out
    with np.load(tmp_path / "out.npz") as z:
        for key, want in zip(("out0", "out1"), _layer_reference(x, w, bias)):
            np.testing.assert_allclose(z[key], want, rtol=1e-5, atol=1e-5)
