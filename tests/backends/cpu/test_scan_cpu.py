"""Running reductions (a reduce-window whose window is a whole dimension padded on one side:
cumsum, cumprod, cummax, cummin) as scans (ops/scan.py): forward scans bit-identical to the
windows folded element by element (the same order of operations), reverse scans equal to
NumPy float64 within rounding, integers and max/min exactly, NaN carried along, an init value
that is not the identity folded in once, and windows of other shapes left to the window
kernels. Fresh random inputs; the reference windows are the same module compiled with the
scan turned off."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu.ops import scan, windows
from pyxla.hlo import evaluate_module, flatten_result, parse_module

DIMS = (3, 40, 33)
OPS = {"add": np.add, "multiply": np.multiply, "maximum": np.fmax, "minimum": np.fmin}


def _module(t: str, op: str, axis: int, reverse: bool, init: str, dims=DIMS, window=None) -> str:
    n = dims[axis]
    parts = []
    for d in range(len(dims)):
        if d == axis:
            low, high = (0, n - 1) if reverse else (n - 1, 0)
            parts.append((n, f"{low}_{high}"))
        else:
            parts.append((1, "0_0"))
    window = window or ("size=" + "x".join(str(s) for s, _ in parts) + " pad=" + "x".join(p for _, p in parts))
    shape = ",".join(map(str, dims))
    return f"""HloModule scan
red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {op}(a, b)
}}
ENTRY e {{
  x = {t}[{shape}] parameter(0)
  i = {t}[] constant({init})
  ROOT s = {t}[{shape}] reduce-window(x, i), window={{{window}}}, to_apply=red
}}
"""


def _run(text: str, x, monkeypatch, scans: bool, seen: list | None = None):
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    if not scans:
        monkeypatch.setattr(windows, "scan_dimension", lambda instr: None)
    elif seen is not None:
        real = windows.emit_scan
        monkeypatch.setattr(windows, "emit_scan", lambda *a: (seen.append(a[2:]), real(*a)))
    return get_backend("cpu").compile(parse_module(text)).run_flat([x])[0]


def _input(rng, t: str, op: str):
    if t[0] == "s":
        return rng.integers(-1 if op == "multiply" else -1000, 2 if op == "multiply" else 1000, DIMS).astype(np.int32)
    x = rng.standard_normal(DIMS)
    if op == "multiply":
        x = 1 + 0.05 * x   # products that stay finite over 40 steps
    return x.astype({"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}[t])


@pytest.mark.parametrize("t", ["f32", "f64", "bf16", "s32"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_forward_scans_have_the_windows_bits(rng, monkeypatch, t, op, axis):
    x = _input(rng, t, op)
    init = {"add": "0", "multiply": "1", "maximum": "-inf" if t[0] == "f" else "-2147483648",
            "minimum": "inf" if t[0] == "f" else "2147483647"}[op]
    text = _module(t, op, axis, False, init)
    seen: list = []
    got = _run(text, x, monkeypatch, True, seen)
    assert seen == [(axis, False)]
    want = _run(text, x, monkeypatch, False)
    np.testing.assert_array_equal(got, want)
    accumulate = {"add": np.cumsum, "multiply": np.cumprod}.get(op)
    reference = accumulate(x.astype(np.float64), axis=axis) if accumulate else \
        OPS[op].accumulate(x.astype(np.float64), axis=axis)
    tolerance = 0.1 if t == "bf16" else 1e-4   # (bf16 rounds each partial result to 8 bits)
    np.testing.assert_allclose(got.astype(np.float64), reference, rtol=tolerance, atol=tolerance * 10)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("axis", [0, 2])
def test_reverse_scans_equal_numpy(rng, monkeypatch, op, axis):
    x = _input(rng, "f32", op)
    init = {"add": "0", "multiply": "1", "maximum": "-inf", "minimum": "inf"}[op]
    seen: list = []
    got = _run(_module("f32", op, axis, True, init), x, monkeypatch, True, seen)
    assert seen == [(axis, True)]
    flipped = np.flip(x.astype(np.float64), axis)
    accumulate = {"add": np.cumsum, "multiply": np.cumprod}.get(op)
    scanned = accumulate(flipped, axis=axis) if accumulate else OPS[op].accumulate(flipped, axis=axis)
    np.testing.assert_allclose(got, np.flip(scanned, axis), rtol=1e-5, atol=1e-4)


def test_an_init_value_and_nan_are_folded_in(rng, monkeypatch):
    """An init value that is not the reducer's identity is folded in once, before the first
    element, as the backend's windows fold it (skipping the padding, as XLA's CPU loops do;
    the evaluator folds it once per padding element too, which no running reduction has)."""
    x = rng.standard_normal(DIMS).astype(np.float32)
    x[1, 7, 5] = np.nan
    for op, init in (("add", "1.5"), ("maximum", "0.25")):
        text = _module("f32", op, 1, False, init)
        got = _run(text, x, monkeypatch, True)
        np.testing.assert_array_equal(got, _run(text, x, monkeypatch, False))
        first = np.float32(1.5) + x[:, 0] if op == "add" else np.maximum(np.float32(0.25), x[:, 0])
        np.testing.assert_array_equal(got[:, 0], first)
        assert np.isnan(got[1, 7:, 5]).all() and not np.isnan(got[1, :7, 5]).any()


@pytest.mark.parametrize("window", ["size=1x39x1 pad=0_0x38_0x0_0",     # one short of the dimension
                                    "size=1x40x1 pad=0_0x20_19x0_0",    # padded on both sides
                                    "size=2x40x1 pad=1_0x39_0x0_0"])    # two windowed dimensions
def test_other_windows_are_not_scans(rng, monkeypatch, window):
    text = _module("f32", "add", 1, False, "0", window=window)
    assert scan.scan_dimension(parse_module(text).entry.root) is None
    x = rng.standard_normal(DIMS).astype(np.float32)
    want = flatten_result(evaluate_module(parse_module(text), [x]))[0]
    np.testing.assert_allclose(_run(text, x, monkeypatch, True), want, rtol=1e-5, atol=1e-5)
