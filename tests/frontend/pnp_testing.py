"""Shared checks of the pyxla.numpy tests: run a function eagerly and under jit, compare
both with NumPy (dtype exactly, values within a tolerance that fits the dtype)."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

import pyxla
from pyxla.frontend.array import Array

# rtol/atol per result dtype, for elementwise results against a float64 NumPy reference.
ELEMENTWISE_TOL = {"float16": (4e-3, 1e-3), "bfloat16": (3.2e-2, 1e-2), "float32": (1e-5, 1e-6),
                   "float64": (1e-12, 1e-14)}
REDUCTION_TOL = {"float16": (8e-3, 2e-3), "bfloat16": (5e-2, 2e-2), "float32": (1e-4, 1e-5),
                 "float64": (1e-10, 1e-12)}


def is_floating(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == ml_dtypes.bfloat16


def numpy_reference(fn, *args, **kwargs):
    """NumPy's answer with warnings silenced (inf, NaN and division by zero are results here)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def widened(value):
    """A float input in float64 (where the reference computes), anything else unchanged."""
    if isinstance(value, np.ndarray) and is_floating(value.dtype):
        return value.astype(np.float64)
    return value


def jit(fn, **options):
    """pyxla.jit of `fn` under a plain name (module names come from function names, and
    a lambda's `<lambda>` is not a valid HLO name)."""
    def traced(*args):
        return fn(*args)
    return pyxla.jit(traced, **options)


def eager_and_jit(fn, *args):
    """fn(*args) run eagerly and under pyxla.jit (arguments traced, Python scalars weak)."""
    return fn(*args), jit(fn)(*args)


def assert_close(got, want, tol=ELEMENTWISE_TOL, dtype=None, what=""):
    """`got` has `want`'s shape and dtype (or `dtype`) and its values: exactly for integers
    and booleans, within `tol` of the result dtype for floats (NaN matches NaN)."""
    got = np.asarray(got)
    want = np.asarray(want)
    expected_dtype = np.dtype(dtype) if dtype is not None else want.dtype
    assert got.dtype == expected_dtype, f"{what}: dtype {got.dtype}, expected {expected_dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if is_floating(got.dtype):
        rtol, atol = tol[got.dtype.name]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_against_numpy(pnp_fn, np_fn, *args, tol=ELEMENTWISE_TOL, reference_args=None, what=""):
    """pnp_fn eagerly and under jit against np_fn: NumPy's dtype from the original args,
    NumPy's values from `reference_args` (by default the float args widened to float64)."""
    want_dtype = numpy_reference(np_fn, *args)
    want_dtype = want_dtype[0].dtype if isinstance(want_dtype, tuple) else np.asarray(want_dtype).dtype
    ref_args = reference_args if reference_args is not None else [widened(a) for a in args]
    want = numpy_reference(np_fn, *ref_args)
    eager, traced = eager_and_jit(pnp_fn, *args)
    for mode, got in (("eager", eager), ("jit", traced)):
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want), f"{what} {mode}: {got!r}"
            for g, w in zip(got, want):
                assert_close(g, np.asarray(w).astype(want_dtype), tol, want_dtype, f"{what} ({mode})")
        else:
            if mode == "eager":
                assert isinstance(got, Array), f"{what}: eager result is a {type(got).__name__}, not a pyxla.Array"
            assert_close(got, np.asarray(want).astype(want_dtype), tol, want_dtype, f"{what} ({mode})")
    return eager
