"""Elementwise functions: NumPy's ufuncs for real dtypes, plus round, clip, where and friends.

Each ufunc is applied in four steps (`apply_ufunc`):
  1. promotion: the operands' common dtype by NumPy 2's rules (Python scalars weak);
  2. the loop: the NumPy ufunc's own type resolution says which dtypes it computes in and
     returns (sqrt of int8 computes in float16, true_divide of ints in float64, comparisons
     return bool), so results have exactly NumPy's dtypes;
  3. operands are converted and broadcast; float16/bfloat16 are computed in float32 and
     rounded once at the end, as NumPy's half loops (and XLA) do;
  4. an implementation emits HLO on operands of one dtype and shape.
Implementations follow NumPy where XLA differs: floor division and modulo round toward
-inf (XLA truncates), integer division by zero gives 0.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from ..frontend.tracing import Tracer
from .core import (BFLOAT16, BOOL, FLOAT16, FLOAT32, broadcast_shapes, broadcast_to, compare,
                   constant_like, convert, dtype_of, export, full, hlo, is_float, is_python_scalar,
                   is_weak, mark_weak, operand, operand_dtypes, promote_types, result_type, select,
                   shape_of, supported_dtype)

# --- applying a ufunc -------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _loop(name: str, ufunc: np.ufunc, dtypes: tuple[np.dtype, ...]) -> tuple[tuple, tuple]:
    """(input dtypes, output dtypes) of NumPy's loop for operands of `dtypes`.

    NumPy knows no bfloat16 loops for most ufuncs; bfloat16 is resolved as float32 and
    the float32 parts of the answer read back as bfloat16."""
    half = BFLOAT16 in dtypes
    keys = tuple(FLOAT32 if d == BFLOAT16 else d for d in dtypes)
    try:
        resolved = ufunc.resolve_dtypes(keys + (None,) * ufunc.nout)
    except (TypeError, np.exceptions.DTypePromotionError) as e:
        listed = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"pyxla.numpy.{name} is not defined for operands of dtype {listed}: {e}") from None
    if half:
        resolved = tuple(BFLOAT16 if d == FLOAT32 else d for d in resolved)
    return resolved[:ufunc.nin], resolved[ufunc.nin:]


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return FLOAT32 if dtype in (FLOAT16, BFLOAT16) else dtype


def apply_ufunc(name: str, ufunc: np.ufunc, impl: Callable, args: tuple, dtype: Any = None,
                promote: bool = True) -> Any:
    """`impl` applied as NumPy applies `ufunc` (see the module doc). `promote=False` keeps
    each operand's own dtype (ldexp takes a float and an int)."""
    xs = [operand(name, a) for a in args]
    dtypes = operand_dtypes(xs)
    if dtype is not None:
        dtypes = [supported_dtype(name, dtype)] * len(xs)
    elif promote:
        common = functools.reduce(promote_types, dtypes)
        dtypes = [common] * len(xs)
    ins, outs = _loop(name, ufunc, tuple(dtypes))
    shape = broadcast_shapes(name, *[shape_of(x) for x in xs])
    values = [broadcast_to(convert(convert(x, d), _compute_dtype(d)), shape, name) for x, d in zip(xs, ins)]
    result = impl(*values)
    weak = all(is_weak(a) for a in args)
    if isinstance(result, tuple):
        return tuple(mark_weak(convert(r, d), weak) for r, d in zip(result, outs))
    return mark_weak(convert(result, outs[0]), weak)


def _ufunc(name: str, np_ufunc: np.ufunc, impl: Callable, aliases: tuple[str, ...] = (), doc: str = "") -> None:
    """Define pyxla.numpy.<name>, the counterpart of `np_ufunc`, computed by `impl`."""
    def fn(*args, out=None, dtype=None, **kwargs):
        if len(args) != np_ufunc.nin:
            raise TypeError(f"pyxla.numpy.{name} takes {np_ufunc.nin} argument(s), got {len(args)}")
        if out is not None:
            raise NotImplementedError(f"pyxla.numpy.{name}(out=...): arrays are immutable, use the result")
        if kwargs:
            raise NotImplementedError(f"pyxla.numpy.{name}: keyword argument(s) {', '.join(kwargs)}")
        return apply_ufunc(name, np_ufunc, impl, args, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"NumPy's {np_ufunc.__name__}, elementwise, with NumPy's broadcasting and dtypes."
    export(fn, aliases=aliases)


# --- helpers on one dtype and shape ----------------------------------------------------

def _c(value: float, like: Any) -> Any:
    return constant_like(value, like)


def _is_float(x: Any) -> bool:
    return is_float(dtype_of(x))


def _is_unsigned(x: Any) -> bool:
    return dtype_of(x).kind == "u"


def _nan(x: Any) -> Any:
    return compare(x, x, "NE")


def _signbit(x: Any) -> Any:
    """The sign bit of floats (set for -0 and negative NaNs), x < 0 for integers."""
    dt = dtype_of(x)
    if is_float(dt):
        bits = hlo.bitcast_convert(x, shape=_same_width_int(x))
        return compare(bits, _c(0, bits), "LT")
    if dt.kind == "u" or dt == BOOL:
        return full(False, BOOL, shape_of(x))
    return compare(x, _c(0, x), "LT")


def _same_width_int(x: Any):
    from .core import element_shape
    return element_shape(np.dtype(f"int{dtype_of(x).itemsize * 8}"), shape_of(x))


def _copysign(magnitude: Any, sign_of: Any) -> Any:
    a = hlo.abs(magnitude)
    return select(_signbit(sign_of), hlo.negate(a), a)


def _truth(x: Any) -> Any:
    return x if dtype_of(x) == BOOL else compare(x, _c(0, x), "NE")


def _trunc(x: Any) -> Any:
    if not _is_float(x):
        return x
    return select(compare(x, _c(0, x), "LT"), hlo.ceil(x), hlo.floor(x))


