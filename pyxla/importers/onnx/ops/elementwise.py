"""Elementwise operators: arithmetic, math functions, comparisons, logic and bits, Where,
Cast, Identity and Constant.

Binary operators broadcast NumPy-style (ONNX's multidirectional broadcasting, opset 7 on),
which both NumPy and pyxla.numpy do. Where ONNX's integer semantics differ from NumPy's
(Div truncates toward zero; shifts past the bit width), the converter spells them out.
"""
from __future__ import annotations

import functools

import numpy as np

from .... import lax
from ....hlo.types import from_numpy_dtype
from ..registry import converter, is_known
from .common import (
    SATURATING_FLOAT8,
    as_dtype,
    check_dtype,
    convert_saturating,
    is_float_dtype,
    is_int_dtype,
    onnx_dtype,
)

# --- arithmetic ---------------------------------------------------------------------------


def _binary(op_type: str, name: str):
    @converter(op_type, since=7)
    def convert(ctx, a, b):
        return getattr(ctx.xp, name)(a, b)
    convert.__name__ = op_type.lower()
    return convert


add = _binary("Add", "add")
sub = _binary("Sub", "subtract")
mul = _binary("Mul", "multiply")


@converter("Div", since=7)
def div(ctx, a, b):
    xp = ctx.xp
    if is_float_dtype(a.dtype):
        return xp.divide(a, b)
    # Integers: C's division, truncating toward zero (NumPy's floor_divide rounds down).
    q = xp.floor_divide(a, b)
    inexact = xp.not_equal(xp.remainder(a, b), 0)
    signs_differ = xp.not_equal(xp.less(a, 0), xp.less(b, 0))
    return xp.add(q, xp.logical_and(inexact, signs_differ).astype(q.dtype))


@converter("Pow", since=7)
def pow_(ctx, base, exponent):
    # From opset 12 the exponent may have another type; the result keeps the base's.
    return as_dtype(ctx.xp, ctx.xp.power(base, exponent), base.dtype)


@converter("Mod", since=10)
def mod(ctx, a, b):
    fmod = ctx.attr("fmod", 0)
    if fmod not in (0, 1):
        raise ctx.unsupported(f"attribute 'fmod'={fmod}")
    # fmod=0: the sign of the divisor (Python's %); fmod=1: the sign of the dividend (C's fmod).
    return ctx.xp.fmod(a, b) if fmod else ctx.xp.remainder(a, b)


def _unary(op_type: str, name: str, since: int = 1):
    @converter(op_type, since=since)
    def convert(ctx, x):
        return getattr(ctx.xp, name)(x)
    convert.__name__ = op_type.lower()
    return convert


for _op, _name in [("Neg", "negative"), ("Abs", "abs"), ("Sign", "sign"), ("Reciprocal", "reciprocal"),
                   ("Sqrt", "sqrt"), ("Exp", "exp"), ("Log", "log"), ("Ceil", "ceil"), ("Floor", "floor"),
                   ("Round", "rint"), ("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "arcsin"),
                   ("Acos", "arccos"), ("Atan", "arctan"), ("Sinh", "sinh"), ("Cosh", "cosh"),
                   ("Asinh", "arcsinh"), ("Acosh", "arccosh"), ("Atanh", "arctanh"), ("IsNaN", "isnan"),
                   ("Not", "logical_not"), ("BitwiseNot", "invert")]:
    _unary(_op, _name)


@converter("Erf", since=9)
def erf(ctx, x):
    # NumPy has no erf; lax.erf runs on the evaluator when x is known.
    return lax.erf(x)


@converter("IsInf", since=10)
def isinf(ctx, x):
    xp = ctx.xp
    negative, positive = ctx.attr("detect_negative", 1), ctx.attr("detect_positive", 1)
    inf = xp.isinf(x)
    if negative and positive:
        return inf
    if negative:
        return xp.logical_and(inf, xp.less(x, 0))
    if positive:
        return xp.logical_and(inf, xp.greater(x, 0))
    return xp.zeros(np.shape(x), dtype=bool)


# --- variadic -----------------------------------------------------------------------------

def _fold(name: str):
    def fold(ctx, *xs):
        return functools.reduce(getattr(ctx.xp, name), xs)
    return fold


max_ = converter("Max", since=8)(_fold("maximum"))
min_ = converter("Min", since=8)(_fold("minimum"))
sum_ = converter("Sum", since=8)(_fold("add"))


@converter("Mean", since=8)
def mean(ctx, *xs):
    return ctx.xp.divide(functools.reduce(ctx.xp.add, xs), len(xs))


@converter("Clip", since=6)
def clip_attributes(ctx, x):
    lo = ctx.attr("min", -np.inf)
    hi = ctx.attr("max", np.inf)
    return ctx.xp.minimum(ctx.xp.maximum(x, np.asarray(lo, x.dtype)), np.asarray(hi, x.dtype))


@converter("Clip", since=11)
def clip_inputs(ctx, x, lo=None, hi=None):
    out = x
    if lo is not None:
        out = ctx.xp.maximum(out, lo)
    if hi is not None:
        out = ctx.xp.minimum(out, hi)
    return out


# --- comparisons, logic and bits ---------------------------------------------------------

for _op, _name in [("Equal", "equal"), ("Less", "less"), ("Greater", "greater"),
                   ("LessOrEqual", "less_equal"), ("GreaterOrEqual", "greater_equal"),
                   ("And", "logical_and"), ("Or", "logical_or"), ("Xor", "logical_xor"),
                   ("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"), ("BitwiseXor", "bitwise_xor")]:
    _binary(_op, _name)


@converter("BitShift", since=11)
def bitshift(ctx, x, y):
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.unsupported(f"attribute 'direction'={direction!r}")
    xp = ctx.xp
    bits = np.dtype(x.dtype).itemsize * 8
    signed = np.issubdtype(x.dtype, np.signedinteger)
    y = as_dtype(xp, y, x.dtype)
    if direction == "LEFT":
        shifted = lax.shift_left(x, y)
    else:
        shifted = (lax.shift_right_arithmetic if signed else lax.shift_right_logical)(x, y)
    # A shift by a negative amount or by the width or more leaves only the sign fill.
    fill = xp.where(xp.less(x, 0), -1, 0).astype(x.dtype) if signed and direction == "RIGHT" else 0
    out_of_range = xp.logical_or(xp.less(y, 0), xp.greater_equal(y, bits)) if signed else xp.greater_equal(y, bits)
    return xp.where(out_of_range, fill, shifted).astype(x.dtype)


@converter("Where", since=9)
def where(ctx, condition, x, y):
    return ctx.xp.where(condition, x, y)


# --- types, identity, constants ----------------------------------------------------------

def _cast(ctx, x, dtype):
    """x as dtype. To the four 8-bit float types of `saturate` (opset 19, default 1),
    out-of-range values and ±inf clamp to ±largest first; with saturate=0 they overflow as
    HLO convert does (inf for f8e5m2, NaN for the fn/fnuz types). Floats to 4- and 2-bit
    integers truncate to int32 first, then wrap (as ONNX's reference, through ml_dtypes,
    does). round_mode only applies to FLOAT8E8M0, which onnx_dtype refuses."""
    check_dtype(ctx, x)
    saturate = ctx.attr("saturate", 1) if ctx.opset >= 19 else 1
    ctx.attr("round_mode")
    xp = ctx.xp
    if dtype == np.dtype(bool) and not is_known(x):
        return xp.not_equal(x, 0)
    if dtype in SATURATING_FLOAT8 and saturate:
        return convert_saturating(xp, x, dtype)
    if is_int_dtype(dtype) and from_numpy_dtype(dtype).bits < 8 and is_float_dtype(x.dtype):
        x = as_dtype(xp, x, np.int32)
    return as_dtype(xp, x, dtype)


@converter("Cast", since=6)
def cast(ctx, x):
    return _cast(ctx, x, onnx_dtype(ctx, ctx.attr("to"), "'to' element type"))


@converter("CastLike", since=15)
def cast_like(ctx, x, like):
    check_dtype(ctx, like, "target_type")
    return _cast(ctx, x, np.dtype(like.dtype))


@converter("BitCast", since=26)
def bitcast(ctx, x):
    dtype = onnx_dtype(ctx, ctx.attr("to"), "'to' element type")
    source = np.dtype(x.dtype)
    if dtype.itemsize != source.itemsize:
        raise ctx.error(f"cannot reinterpret {source} as {dtype}: the widths differ")
    if is_known(x):
        return np.asarray(x).view(dtype)
    if np.dtype(bool) in (dtype, source):   # a bool is one byte holding 0 or 1
        return ctx.xp.not_equal(x, 0) if dtype == np.dtype(bool) else x.astype(dtype)
    return lax.bitcast_convert_type(x, dtype)


@converter("Identity", since=1)
def identity(ctx, x):
    return x


_CONSTANT_SCALARS = {"value_float": np.float32, "value_int": np.int64}
_CONSTANT_LISTS = {"value_floats": np.float32, "value_ints": np.int64}


@converter("Constant", since=1)
def constant(ctx):
    given = [name for name in ctx.attrs if ctx.attr(name) is not None]
    if len(given) != 1:
        raise ctx.error(f"needs exactly one value attribute, has {given}")
    (name,) = given
    value = ctx.attr(name)
    if name == "value":
        return check_dtype(ctx, np.asarray(value), "attribute 'value'")
    if name in _CONSTANT_SCALARS:
        return np.asarray(value, dtype=_CONSTANT_SCALARS[name])
    if name in _CONSTANT_LISTS:
        return np.asarray(list(value), dtype=_CONSTANT_LISTS[name])
    raise ctx.unsupported(f"attribute {name!r}")
