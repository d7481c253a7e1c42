"""cholesky and triangular-solve (ops/linalg.py): against NumPy/SciPy in f64, f32 and f64,
batch dimensions, every attribute combination, on the interpreter and the cpu backend,
the text XLA's parser accepts and XLA's own values."""
import itertools

import numpy as np
import pytest
import scipy.linalg

from pyxla import VerifierError
from pyxla.backends import get_backend
from pyxla.hlo import parse_module, print_module, verify_module
from tests.xla_reference import parse_on_xla, run_on_xla

BACKENDS = ["interpreter", "cpu"]
TOL = {"f32": 2e-4, "f64": 1e-10}
NP = {"f32": np.float32, "f64": np.float64}


def _run(text, args, backend):
    return get_backend(backend).compile(parse_module(text)).run_flat(args)[0]


def _dims(shape):
    return ",".join(map(str, shape))


def _spd(rng, shape):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _cholesky_text(dtype, shape, lower):
    return (f"HloModule m\nENTRY e {{\n  a = {dtype}[{_dims(shape)}] parameter(0)\n"
            f"  ROOT c = {dtype}[{_dims(shape)}] cholesky(a), lower={str(lower).lower()}\n}}\n")


def _solve_text(dtype, a_shape, b_shape, left, lower, unit, transpose):
    return (f"HloModule m\nENTRY e {{\n  a = {dtype}[{_dims(a_shape)}] parameter(0)\n"
            f"  b = {dtype}[{_dims(b_shape)}] parameter(1)\n"
            f"  ROOT x = {dtype}[{_dims(b_shape)}] triangular-solve(a, b), left_side={str(left).lower()}, "
            f"lower={str(lower).lower()}, unit_diagonal={str(unit).lower()}, transpose_a={transpose}\n}}\n")


# --- cholesky ----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (2, 3, 4, 4)])
def test_cholesky_matches_numpy(backend, dtype, lower, shape):
    rng = np.random.default_rng(sum(shape) + lower)
    a = _spd(rng, shape)
    # Only the named triangle is read: garbage in the other one changes nothing.
    noisy = np.where(np.tril(np.ones(shape[-2:])) if lower else np.triu(np.ones(shape[-2:])), a, 1e3)
    got = _run(_cholesky_text(dtype, shape, lower), [noisy.astype(NP[dtype])], backend)
    want = np.linalg.cholesky(a)
    if not lower:
        want = np.swapaxes(want, -1, -2)
    assert got.dtype == NP[dtype]
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cholesky_of_a_matrix_not_positive_definite_is_nan(backend):
    rng = np.random.default_rng(3)
    a = _spd(rng, (3, 4, 4)).astype(np.float32)
    a[1, 2, 2] = -10.0
    got = _run(_cholesky_text("f32", a.shape, True), [a], backend)
    assert np.isnan(got[1]).all()
    assert not np.isnan(got[[0, 2]]).any()


# --- triangular-solve --------------------------------------------------------------------------

COMBOS = list(itertools.product([True, False], [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]))


def _solve_reference(a, b, left, lower, unit, transpose):
    out = np.empty(np.broadcast_shapes(b.shape))
    for k in np.ndindex(a.shape[:-2]):
        trans = 0 if transpose == "NO_TRANSPOSE" else 1
        if left:
            out[k] = scipy.linalg.solve_triangular(a[k], b[k], trans=trans, lower=lower, unit_diagonal=unit)
        else:   # x op(a) = b  <=>  op(a)^T x^T = b^T
            out[k] = scipy.linalg.solve_triangular(a[k], b[k].T, trans=1 - trans, lower=lower,
                                                   unit_diagonal=unit).T
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("left,lower,unit,transpose", COMBOS)
def test_triangular_solve_matches_scipy(backend, dtype, left, lower, unit, transpose):
    rng = np.random.default_rng(len(transpose) + 2 * left + 4 * lower + 8 * unit)
    m, n = 5, 3
    a = rng.standard_normal((2, m, m)) + 2 * m * np.eye(m)     # diagonally dominant
    a[..., np.arange(m), np.arange(m)] *= rng.choice([-1, 1], (2, m))
    b = rng.standard_normal((2, m, n) if left else (2, n, m))
    text = _solve_text(dtype, a.shape, b.shape, left, lower, unit, transpose)
    got = _run(text, [a.astype(NP[dtype]), b.astype(NP[dtype])], backend)
    # The triangle not named and (unit_diagonal) the diagonal are never read.
    want = _solve_reference(a, b, left, lower, unit, transpose)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_triangular_solve_unbatched_and_wide(backend):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((7, 7)) + 14 * np.eye(7)
    b = rng.standard_normal((7, 11))
    got = _run(_solve_text("f64", a.shape, b.shape, True, False, False, "TRANSPOSE"), [a, b], backend)
    np.testing.assert_allclose(got, scipy.linalg.solve_triangular(a, b, trans=1, lower=False), rtol=1e-10)


# --- XLA's parser and values ----------------------------------------------------------------------

@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_text_and_values_match_xla(lower):
    rng = np.random.default_rng(5)
    a = _spd(rng, (2, 5, 5)).astype(np.float32)
    a[1, 0, 0] = -1.0    # not positive definite: XLA's NaNs too
    module = parse_module(_cholesky_text("f32", a.shape, lower))
    text = print_module(module)
    assert f"lower={str(lower).lower()}" in text
    parse_on_xla(text)
    want = run_on_xla(text, [a])[0]
    for backend in BACKENDS:
        np.testing.assert_allclose(_run(text, [a], backend), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("left,lower,unit,transpose", [COMBOS[0], COMBOS[4], COMBOS[9], COMBOS[13], COMBOS[23]])
def test_triangular_solve_text_and_values_match_xla(left, lower, unit, transpose):
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((3, 4, 4)) + 8 * np.eye(4)).astype(np.float32)
    b = rng.standard_normal((3, 4, 2) if left else (3, 2, 4)).astype(np.float32)
    text = print_module(parse_module(_solve_text("f32", a.shape, b.shape, left, lower, unit, transpose)))
    parse_on_xla(text)
    want = run_on_xla(text, [a, b])[0]
    for backend in BACKENDS:
        np.testing.assert_allclose(_run(text, [a, b], backend), want, rtol=1e-5, atol=1e-5)


# --- the verifier ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,message", [
    ("a = f32[3,4] parameter(0)\n  ROOT c = f32[3,4] cholesky(a), lower=true", "square matrices"),
    ("a = f32[4] parameter(0)\n  ROOT c = f32[4] cholesky(a), lower=true", "square matrices"),
    ("a = s32[4,4] parameter(0)\n  ROOT c = s32[4,4] cholesky(a), lower=true", "floating-point"),
    ("a = f32[4,4] parameter(0)\n  b = f32[4,2] parameter(1)\n"
     "  ROOT x = f32[4,2] triangular-solve(a, b), left_side=true, lower=true", "transpose_a"),
    ("a = f32[4,4] parameter(0)\n  b = f32[4,2] parameter(1)\n"
     "  ROOT x = f32[4,2] triangular-solve(a, b), left_side=false, lower=true, transpose_a=NO_TRANSPOSE",
     "must have 4 columns"),
    ("a = f32[2,4,4] parameter(0)\n  b = f32[3,4,2] parameter(1)\n"
     "  ROOT x = f32[3,4,2] triangular-solve(a, b), left_side=true, transpose_a=NO_TRANSPOSE", "batch dimensions"),
    ("a = f32[4,4] parameter(0)\n  b = f64[4,2] parameter(1)\n"
     "  ROOT x = f64[4,2] triangular-solve(a, b), left_side=true, transpose_a=NO_TRANSPOSE", "one element type"),
    ("a = f32[4,4] parameter(0)\n  b = f32[4,2] parameter(1)\n"
     "  ROOT x = f32[4,2] triangular-solve(a, b), left_side=true, transpose_a=CONJUGATE", "transpose_a=CONJUGATE"),
])
def test_verifier_refuses(text, message):
    module = parse_module(f"HloModule m\nENTRY e {{\n  {text}\n}}\n")
    with pytest.raises(VerifierError, match=message):
        verify_module(module)


# --- pyxla.lax.linalg ------------------------------------------------------------------------------

def test_lax_linalg_matches_numpy():
    from pyxla import lax
    rng = np.random.default_rng(11)
    a = _spd(rng, (2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(lax.linalg.cholesky(a), np.linalg.cholesky(a.astype(np.float64)), rtol=1e-4, atol=1e-4)
    t = np.tril(a[0])
    b = rng.standard_normal((3, 4)).astype(np.float32)
    got = lax.linalg.triangular_solve(t, b, left_side=False, lower=True, transpose_a=True)
    np.testing.assert_allclose(got @ t.T, b, rtol=1e-4, atol=1e-4)
