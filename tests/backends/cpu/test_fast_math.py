"""The CPU backend's inline transcendentals (llvm/fast_math.py) against NumPy/SciPy float64 over
their whole domains, special values included, and a check that loops using them vectorise."""
import re

import numpy as np
import pytest
import scipy.special

from pyxla.backends import get_backend
from pyxla.backends.llvm import elemental, fast_math
from pyxla.hlo import evaluate_module, flatten_result, parse_module

HLO_TYPE = {np.float32: "f32", np.float64: "f64"}
REFERENCE = {"exponential": np.exp, "log": np.log, "exponential-minus-one": np.expm1, "log-plus-one": np.log1p,
             "tanh": np.tanh, "logistic": scipy.special.expit, "erf": scipy.special.erf, "sine": np.sin,
             "cosine": np.cos, "tan": np.tan, "cbrt": np.cbrt, "rsqrt": lambda v: 1 / np.sqrt(v),
             "power": np.power, "atan2": np.arctan2}
BINARY = ("power", "atan2")


def module_text(op, dtype, n):
    t = HLO_TYPE[dtype]
    args = "p0, p1" if op in BINARY else "p0"
    return (f"HloModule m\nENTRY e {{\n  p0 = {t}[{n}] parameter(0)\n  p1 = {t}[{n}] parameter(1)\n"
            f"  ROOT r = {t}[{n}] {op}({args})\n}}\n")


def run(op, *xs):
    text = module_text(op, xs[0].dtype.type, xs[0].size)
    inputs = list(xs) if op in BINARY else [xs[0], xs[0]]
    return get_backend("cpu").compile(parse_module(text)).run_flat(inputs)[0]


def daz(x):
    """Denormal inputs read as zero, as the backend (and XLA's CPU) reads them."""
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, 0 * x, x).astype(np.float64)


def reference(op, *xs):
    with np.errstate(all="ignore"):
        return REFERENCE[op](*[daz(x) for x in xs])


def ulps(got, want):
    """Distance in units in the last place of got's type (NaN to NaN and equal values are 0;
    results below the smallest normal count as zero, as FTZ flushes them)."""
    dt = got.dtype.type
    tiny = np.finfo(dt).tiny
    with np.errstate(all="ignore"):
        want_t = want.astype(dt)
        want_t = np.where(np.abs(want_t) < tiny, 0 * want_t, want_t)
        spacing = np.maximum(np.spacing(np.abs(want_t)), np.spacing(dt(tiny))).astype(np.float64)
        d = np.abs(got.astype(np.float64) - want) / spacing
    same = (np.isnan(got) & np.isnan(want)) | (got == want_t)
    return np.where(same, 0.0, d)


def sweep(rng, dtype, lo, hi, n=100_000, signed=True):
    """Log-spaced magnitudes across [lo, hi] (both signs if signed), plus uniform points in [-5, 5]."""
    mags = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    near = rng.uniform(-5, 5, n)
    if signed:
        mags = mags * rng.choice([-1.0, 1.0], n)
    else:
        near = np.abs(near)
    return np.concatenate([mags, near]).astype(dtype)


def special_values(dtype):
    info = np.finfo(dtype)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, info.tiny, -info.tiny,
                     info.tiny / 4, -info.tiny / 4, info.max, -info.max, info.eps, 88.72, -87.3, -103.9,
                     709.7, -708.3, -745.0, 1e5, -1e5, 1e22, 3.4e38], dtype)


# (op, domain lo, domain hi, signed) and the worst error allowed in ulp per type; the
# measured worst cases are in llvm/fast_math.py's docstring (the reference itself is within 1 ulp
# of the true value for f64, which the f64 bounds include).
DOMAINS = {
    "exponential": (1e-30, 800.0, True), "log": (1e-300, None, False),
    "exponential-minus-one": (1e-30, 800.0, True), "log-plus-one": (1e-30, None, True),
    "tanh": (1e-30, 1e3, True), "logistic": (1e-30, 800.0, True), "erf": (1e-30, 30.0, True),
    "sine": (1e-30, None, True), "cosine": (1e-30, None, True), "tan": (1e-30, None, True),
    "cbrt": (1e-300, None, True), "rsqrt": (1e-300, None, False),
}
MAX_ULPS = {
    np.float32: {"exponential": 2, "log": 2, "exponential-minus-one": 2, "log-plus-one": 2, "tanh": 5,
                 "logistic": 3, "erf": 2, "sine": 1, "cosine": 1, "tan": 1, "cbrt": 1, "rsqrt": 2,
                 "power": 1, "atan2": 1},
    np.float64: {"exponential": 2, "log": 2, "exponential-minus-one": 3, "log-plus-one": 2, "tanh": 4,
                 "logistic": 4, "erf": 4, "sine": 2, "cosine": 2, "tan": 3, "rsqrt": 2, "atan2": 3},
    # (f64 logistic: SciPy's expit, the reference, is itself up to 2.3 ulp off)
}
CASES = [(dt, op) for dt in (np.float32, np.float64) for op in DOMAINS if op in MAX_ULPS[dt]]


def near_multiples_of_half_pi(dtype):
    """Arguments next to k*pi/2 (the hard cases of range reduction), small and huge k."""
    k = np.concatenate([np.arange(1, 2000), np.geomspace(1e3, 1e30, 2000).round()])
    x = (k * (np.pi / 2)).astype(dtype)
    return np.concatenate([x, np.nextafter(x, dtype(np.inf)), np.nextafter(x, dtype(0))])


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{HLO_TYPE[d]}-{o}" for d, o in CASES])
def test_accuracy_over_the_domain(dtype, op, rng):
    lo, hi, signed = DOMAINS[op]
    hi = float(np.finfo(dtype).max) if hi is None else hi
    x = np.concatenate([sweep(rng, dtype, max(lo, float(np.finfo(dtype).tiny)), hi, signed=signed),
                        special_values(dtype)])
    if op == "log-plus-one":
        x = np.where(x < -1, rng.uniform(-1, 0, x.size), x).astype(dtype)
    if op in ("sine", "cosine", "tan"):
        x = np.concatenate([x, near_multiples_of_half_pi(dtype), sweep(rng, dtype, 1e3, 1e8)])
    got = run(op, x)
    err = ulps(got, reference(op, x))
    worst = int(np.argmax(err))
    assert err.max() <= MAX_ULPS[dtype][op], \
        f"{op}({x[worst]!r}) = {got[worst]!r}, want {reference(op, x[worst:worst + 1])[0]!r} ({err.max():.2f} ulp)"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_atan2_over_the_plane(dtype, rng):
    y = sweep(rng, dtype, 1e-30, 1e30)
    x = sweep(rng, dtype, 1e-30, 1e30)[rng.permutation(y.size)]
    got = run("atan2", y, x)
    err = ulps(got, reference("atan2", y, x))
    assert err.max() <= MAX_ULPS[dtype]["atan2"], f"worst {err.max():.2f} ulp at atan2({y[np.argmax(err)]!r}, ...)"


def test_f32_power_over_its_range(rng):
    n = 100_000
    x = sweep(rng, np.float32, 1e-3, 1e3, n // 2)
    y = (rng.standard_normal(x.size) * 20).astype(np.float32)
    y[::3] = np.round(y[::3])   # integer exponents: negative bases keep a real power
    got = run("power", x, y)
    err = ulps(got, reference("power", x, y))
    worst = int(np.argmax(err))
    assert err.max() <= MAX_ULPS[np.float32]["power"], f"{x[worst]!r}**{y[worst]!r} = {got[worst]!r}"


def same_values(got, want):
    """Bit-for-bit on what IEEE fixes: NaN, infinities and signed zeros; 1 ulp elsewhere."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    exact = ~nan & (np.isinf(want) | (want == 0))
    assert np.array_equal(got[exact], want[exact])
    assert np.array_equal(np.signbit(got[exact]), np.signbit(want[exact]))
    assert ulps(got[~nan & ~exact], want[~nan & ~exact].astype(np.float64)).max(initial=0) <= 1


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{HLO_TYPE[d]}-{o}" for d, o in CASES])
def test_special_values_match_the_evaluator(dtype, op):
    x = special_values(dtype)
    module = parse_module(module_text(op, dtype, x.size))
    want = flatten_result(evaluate_module(module, [x, x]))[0]
    same_values(run(op, x), want)


@pytest.mark.parametrize("op", BINARY)
def test_binary_special_values_match_the_evaluator(op):
    s = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, np.inf, -np.inf, np.nan, 1e-30, 1e30],
                 np.float32)
    x, y = (a.ravel() for a in np.meshgrid(s, s))
    module = parse_module(module_text(op, np.float32, x.size))
    want = flatten_result(evaluate_module(module, [x, y]))[0]
    same_values(run(op, x, y), want)


LIBM = {"exponential": "exp", "log": "log", "exponential-minus-one": "expm1", "log-plus-one": "log1p",
        "tanh": "tanh", "logistic": "exp", "erf": "erf", "sine": "sin", "cosine": "cos", "tan": "tan",
        "cbrt": "cbrt", "rsqrt": "sqrt", "power": "pow", "atan2": "atan2"}
VECTORISED = [(dt, op) for dt in (np.float32, np.float64) for op in MAX_ULPS[dt]]


@pytest.mark.parametrize("dtype,op", VECTORISED, ids=[f"{HLO_TYPE[d]}-{o}" for d, o in VECTORISED])
def test_the_loop_vectorises_without_libm_calls(dtype, op, tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    get_backend("cpu").compile(parse_module(module_text(op, dtype, 4096)))
    optimised = (tmp_path / "m" / "llvm-ir.optimized.ll").read_text()
    scalar = "float" if dtype == np.float32 else "double"
    assert re.search(rf"<(4|8|16) x {scalar}>", optimised), f"{op} on {scalar}: no vector instructions"
    name = LIBM[op]
    # libm itself, or an LLVM intrinsic that lowers to it (llvm.sqrt is an instruction)
    pattern = rf"call [^\n]*@{name}f?\(" if op == "rsqrt" else rf"call [^\n]*@(?:llvm\.)?{name}f?[.(]"
    calls = re.findall(pattern, optimised)
    assert not calls, f"{op} on {scalar} still calls {calls[0]}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exponent", [-0.75, 0.75, -0.5, 0.5, 0.25, -0.25])
def test_power_by_a_constant_quarter_uses_square_roots(dtype, exponent, rng, monkeypatch):
    """pow(x, c) for constant c of +-1/4, +-1/2, +-3/4 (LRN's -0.75) is computed with square
    roots (fast_math.pow_by_roots): within 4 ulp over the whole range,
    and IEEE pow's special values exactly (finite negatives NaN, -0 and -inf as +0, +inf)."""
    routed = []
    monkeypatch.setattr(elemental, "power_by_roots",
                        lambda e, x, c: routed.append(c) or fast_math.power_by_roots(e, x, c))
    t = HLO_TYPE[dtype]
    x = np.concatenate([sweep(rng, dtype, np.finfo(dtype).tiny, np.finfo(dtype).max, 50_000, signed=False),
                        special_values(dtype)]).astype(dtype)
    n = x.size
    text = (f"HloModule m\nENTRY e {{\n  p0 = {t}[{n}] parameter(0)\n  c = {t}[] constant({exponent})\n"
            f"  b = {t}[{n}] broadcast(c), dimensions={{}}\n  ROOT r = {t}[{n}] power(p0, b)\n}}\n")
    got = get_backend("cpu").compile(parse_module(text)).run_flat([x])[0]
    assert routed == [exponent]
    want = reference("power", x, np.full_like(x, exponent)).astype(dtype)
    special = np.isnan(want) | np.isinf(want) | (want == 0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[special & ~np.isnan(want)], want[special & ~np.isnan(want)])
    err = ulps(got[~special], want[~special])
    assert err.max() <= 4, f"worst {err.max():.2f} ulp at {x[~special][np.argmax(err)]!r}**{exponent}"


def test_f32_erf_over_every_256th_float_and_its_special_values():
    """f32 erf is computed in f32 lanes (fast_math.erf_f32, three fitted intervals): every
    256th f32 of [-4.5, 4.5] (where the intervals meet and where erf reaches 1 included), the
    subnormals (read as zero), +-0 with their signs, +-inf and NaN."""
    top = np.float32(4.5).view(np.int32)
    positive = np.arange(0, top, 256, dtype=np.int32).view(np.float32)
    edges = np.array([1.0, 2.0, 3.92], np.float32)
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(5))])
    x = np.concatenate([positive, -positive, edges, -edges])
    got = run("erf", x)
    err = ulps(got, reference("erf", x))
    worst = int(np.argmax(err))
    assert err.max() <= MAX_ULPS[np.float32]["erf"], f"erf({x[worst]!r}) = {got[worst]!r} ({err.max():.2f} ulp)"
    tiny = np.finfo(np.float32).tiny
    special = np.array([0.0, -0.0, tiny / 2, -tiny / 2, tiny / 2**20, np.inf, -np.inf, np.nan, 3.92, 1e30, -1e30],
                       np.float32)
    got = run("erf", special)
    assert got[:5].tolist() == [0.0, 0.0, 0.0, 0.0, 0.0]
    assert np.signbit(got[:5]).tolist() == [False, True, False, True, False]
    assert got[5:7].tolist() == [1.0, -1.0] and np.isnan(got[7])
    assert got[8:].tolist() == [1.0, 1.0, -1.0]
