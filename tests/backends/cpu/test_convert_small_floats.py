"""`convert` from f64 and f32 to every narrower float rounds once, to nearest even, on the
evaluator and on the cpu backend alike: the answer is ml_dtypes' scalar conversion of the
exact value (NumPy's for f16). A value just above or below a midpoint of the target must
not land on the midpoint first (rounding through f32 to nearest would, then go to even).

bf16 is the exception XLA makes: f64 -> bf16 rounds through f32 (flushing f32 subnormals),
and ml_dtypes' scalar conversion rounds through f32 too, so the reference holds for it.
(JAX's XLA on x86 also rounds f64 -> f16 through f32, an artefact of LLVM's lowering there;
pyxla rounds it once, as IEEE and NumPy do.)"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module
from pyxla.hlo.types import BF16, F16, LOW_PRECISION_FLOATS

NARROW = [F16, BF16, *LOW_PRECISION_FLOATS]


def _finite_values(target) -> np.ndarray:
    """Every finite value of `target` that is not negative, ascending (up to 2**16 of them)."""
    bits = np.arange(1 << min(target.bits, 16), dtype=np.uint32)
    storage = np.dtype(f"u{target.np_dtype.itemsize}")
    with np.errstate(invalid="ignore"):
        values = bits.astype(storage).view(target.np_dtype).astype(np.float64)
    return np.unique(values[np.isfinite(values) & (values >= 0)])


def _midpoint_cases(target, source) -> np.ndarray:
    """Midpoints between neighbouring values of `target`, the source's neighbours of each, and
    values past the largest; both signs, with zeros, infinities and NaN."""
    values = _finite_values(target)
    if len(values) > 600:   # f16, bf16: every 97th pair keeps the test quick and spans the range
        values = values[::97]
    mids = (values[:-1] + values[1:]) / 2
    top = values[-1]
    cases = [values, mids, top * 1.01, top * 2, 1e30]
    if source == np.float64:
        cases += [mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids * (1 + 2.0**-30), mids * (1 - 2.0**-30)]
    else:
        m = mids.astype(np.float32)
        cases += [np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(0))]
    x = np.concatenate([np.ravel(np.asarray(c, np.float64)) for c in cases])
    x = np.concatenate([x, -x, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    with np.errstate(over="ignore"):
        return x.astype(source)


def _reference(x: np.ndarray, target) -> np.ndarray:
    """One rounding of each exact value: the scalar types round a Python float directly.
    f64 -> bf16 goes through an f32 conversion instruction in XLA, which flushes what would be
    an f32 subnormal to zero."""
    scalar = np.float16 if target == F16 else target.np_dtype.type
    if target == BF16 and x.dtype == np.float64:
        x = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(0.0, x), x)
    with np.errstate(over="ignore"):
        return np.array([scalar(float(v)) for v in x], dtype=target.np_dtype)


def _assert_same(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, what
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
    bad = np.flatnonzero(~same)
    assert not len(bad), f"{what}: {len(bad)} differ, e.g. {x[bad[:5]].tolist()} -> {g[bad[:5]].tolist()}, " \
                         f"want {w[bad[:5]].tolist()}"


@pytest.mark.parametrize("source", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("target", NARROW, ids=lambda t: t.name)
def test_convert_rounds_once(target, source):
    x = _midpoint_cases(target, source)
    src = "f64" if source == np.float64 else "f32"
    text = (f"HloModule convert\nENTRY e {{\n  p = {src}[{len(x)}] parameter(0)\n"
            f"  ROOT c = {target.name}[{len(x)}] convert(p)\n}}\n")
    want = _reference(x, target)
    evaluated = flatten_result(evaluate_module(parse_module(text), [x]))[0]
    _assert_same(np.asarray(evaluated), want, x, f"evaluator {src} -> {target.name}")
    compiled = get_backend("cpu").compile(parse_module(text)).run_flat([x])[0]
    _assert_same(np.asarray(compiled), want, x, f"cpu {src} -> {target.name}")


def test_f8_just_above_a_midpoint():
    # 1 + 2**-4 is the midpoint between f8e4m3fn's 1 and 1.125; through f32 the value below
    # becomes that tie and goes to even (1.0): XLA gives 1.125.
    x = np.array([1 + 2**-4 + 2**-40], np.float64)
    text = "HloModule m\nENTRY e {\n  p = f64[1] parameter(0)\n  ROOT c = f8e4m3fn[1] convert(p)\n}\n"
    got = flatten_result(evaluate_module(parse_module(text), [x]))[0]
    assert float(np.asarray(got)[0]) == 1.125
    assert float(ml_dtypes.float8_e4m3fn(x[0])) == 1.125
