"""Arguments in the other byte order (">f4" on a little-endian machine) hold the same values
as the native dtype: a jitted function reorders their bytes, so a call with them equals the
call with native arrays and shares its compilation; the first call may be either.
Compiled.__call__ and the executable's run_flat do the same. (JAX 0.10 refuses such arrays
with a TypeError; pyxla takes them, as NumPy does.)"""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
from pyxla.backends import get_backend
from pyxla.hlo import parse_module

# every dtype pyxla compiles for that has a byte order (one-byte types and ml_dtypes' have none)
DTYPES = ["f2", "f4", "f8", "i2", "i4", "i8", "u2", "u4", "u8"]


def _other_order(dtype: str) -> str:
    return (">" if np.little_endian else "<") + dtype


def _values(dtype: str) -> np.ndarray:
    return (np.arange(12).reshape(3, 4) * 3 + 1).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_then_other_order(dtype):
    f = pyxla.jit(lambda a, b: a * 2 + b)
    x = _values(dtype)
    swapped = x.astype(_other_order(dtype))
    want = f(x, x)
    got = f(swapped, swapped)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.dtype(dtype)
    assert f.trace_count == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_other_order_first(dtype):
    f = pyxla.jit(lambda a: a + a)
    x = _values(dtype)
    got = f(x.astype(_other_order(dtype)))
    np.testing.assert_array_equal(got, x + x)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(f(x), x + x)
    assert f.trace_count == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_call(dtype):
    x = _values(dtype)
    compiled = pyxla.jit(lambda a: a * 3).lower(x).compile()
    np.testing.assert_array_equal(compiled(x.astype(_other_order(dtype))), x * 3)


def test_leaves_of_a_pytree_and_mixed_orders():
    f = pyxla.jit(lambda d: d["a"] - d["b"])
    a = np.linspace(-1, 1, 5).astype(">f4")
    b = np.linspace(0, 2, 5).astype("<f4")
    np.testing.assert_array_equal(f({"a": a, "b": b}), a.astype("f4") - b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_executable_run_flat(dtype):
    name = {"f2": "f16", "f4": "f32", "f8": "f64", "i2": "s16", "i4": "s32", "i8": "s64",
            "u2": "u16", "u4": "u32", "u8": "u64"}[dtype]
    text = f"HloModule m\nENTRY e {{\n  p = {name}[3,4] parameter(0)\n  ROOT n = {name}[3,4] add(p, p)\n}}\n"
    x = _values(dtype)
    (got,) = get_backend("cpu").compile(parse_module(text)).run_flat([x.astype(_other_order(dtype))])
    np.testing.assert_array_equal(got, x + x)
