"""The CPU backend's inline f32 transcendentals against NumPy float64 over their whole range."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import parse_module

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-45, 88.0, 88.72, 88.8, -87.0, -104.0,
                    -200.0, 1e30, -1e30, 0.5, -0.5, 1.0, 3.4e38, 1.1754944e-38], np.float32)


def run(op, x):
    text = f"HloModule m\nENTRY e {{\n  x = f32[{x.size}] parameter(0)\n  ROOT r = f32[{x.size}] {op}(x)\n}}\n"
    return get_backend("cpu").compile(parse_module(text)).run_flat([x])[0]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in f32 units in the last place (NaN to NaN and equal infinities are 0)."""
    with np.errstate(over="ignore"):   # exp beyond f32's range is inf in f32
        want32 = want.astype(np.float32)
    spacing = np.spacing(np.abs(want32)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(got.astype(np.float64) - want) / np.maximum(spacing, np.finfo(np.float32).tiny)
    same = (np.isnan(got) & np.isnan(want)) | (got == want32)
    return np.where(same, 0.0, d)


def sweep(rng, lo, hi, n=200_000):
    """Log-spaced magnitudes and both signs across [lo, hi], plus uniform points."""
    mags = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    signs = rng.choice([-1.0, 1.0], n)
    return np.concatenate([mags * signs, rng.uniform(-5, 5, n)]).astype(np.float32)


def reference(op, x):
    x64 = x.astype(np.float64)
    x64 = np.where(np.abs(x64) < np.finfo(np.float32).tiny, 0.0, x64)   # DAZ, as XLA's CPU
    with np.errstate(all="ignore"):
        return {"exponential": np.exp, "log": np.log, "tanh": np.tanh,
                "logistic": lambda v: 1 / (1 + np.exp(-v))}[op](x64)


@pytest.mark.parametrize("op,max_ulps", [("exponential", 2), ("log", 2), ("tanh", 5), ("logistic", 3)])
def test_accuracy_over_the_range(op, max_ulps, rng):
    x = np.concatenate([sweep(rng, 1e-38, 3e38 if op == "log" else 120), SPECIAL])
    if op == "log":
        x = np.abs(x)
    got = run(op, x)
    want = reference(op, x)
    want = np.where(np.abs(want) < np.finfo(np.float32).tiny, 0.0, want)   # FTZ of the result
    err = ulps(got, want)
    worst = int(np.argmax(err))
    assert err.max() <= max_ulps, f"{op}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r} ({err.max():.1f} ulp)"


def test_special_values():
    got = run("exponential", np.array([np.nan, np.inf, -np.inf, 0.0, 89.0, -110.0], np.float32))
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == 0 and got[3] == 1 and got[4] == np.inf and got[5] == 0
    got = run("log", np.array([np.nan, np.inf, -1.0, 0.0, -0.0, 1.0], np.float32))
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]) and got[3] == -np.inf and got[4] == -np.inf
    assert got[5] == 0
    got = run("tanh", np.array([np.nan, np.inf, -np.inf, -0.0, 20.0], np.float32))
    assert np.isnan(got[0]) and got[1] == 1 and got[2] == -1 and got[3] == 0 and np.signbit(got[3]) and got[4] == 1


def test_the_loop_vectorises(tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    run("tanh", np.ones(1024, np.float32))
    optimised = (tmp_path / "m" / "llvm-ir.optimized.ll").read_text()
    assert "<8 x float>" in optimised or "<4 x float>" in optimised or "<16 x float>" in optimised
