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
from collections.abc import Callable
from typing import Any

import numpy as np

from ..frontend.tracing import Tracer, bind
from .core import (
    BFLOAT16,
    BOOL,
    FLOAT16,
    FLOAT32,
    broadcast_shapes,
    broadcast_to,
    compare,
    constant_like,
    convert,
    dtype_of,
    element_shape,
    export,
    full,
    hlo,
    is_float,
    is_python_scalar,
    is_weak,
    mark_weak,
    operand,
    operand_dtypes,
    promote_types,
    result_type,
    select,
    shape_of,
    supported_dtype,
)

# --- applying a ufunc -------------------------------------------------------------------


@functools.cache
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
    xs = [operand(name, a, i) for i, a in enumerate(args)]
    dtypes = operand_dtypes(xs) if promote else [dtype_of(x) for x in xs]
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


def _ufunc(name: str, np_ufunc: np.ufunc, impl: Callable, aliases: tuple[str, ...] = (), doc: str = "") -> Callable:
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
    return export(fn, aliases=aliases)


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
    return element_shape(np.dtype(f"int{dtype_of(x).itemsize * 8}"), shape_of(x))


def _copysign(magnitude: Any, sign_of: Any) -> Any:
    a = hlo.abs(magnitude)
    return select(_signbit(sign_of), hlo.negate(a), a)


def _and(a: Any, b: Any) -> Any:
    return bind("and", a, b)


def _or(a: Any, b: Any) -> Any:
    return bind("or", a, b)


def _not(a: Any) -> Any:
    return bind("not", a)


def _truth(x: Any) -> Any:
    return x if dtype_of(x) == BOOL else compare(x, _c(0, x), "NE")


def _trunc(x: Any) -> Any:
    if not _is_float(x):
        return x
    return select(compare(x, _c(0, x), "LT"), hlo.ceil(x), hlo.floor(x))


def _float_divmod(a: Any, b: Any) -> tuple[Any, Any]:
    """NumPy's npy_divmod for floats: (floor division, modulo) exactly as NumPy computes them;
    the quotient comes from (a - fmod(a, b)) / b, so 1.0 // 0.1 is 9.0, not 10.0."""
    zero, one = _c(0, a), _c(1, a)
    mod = hlo.remainder(a, b)
    div = hlo.divide(hlo.subtract(a, mod), b)
    mod_nonzero = compare(mod, zero, "NE")
    # A nonzero remainder takes the divisor's sign; the quotient moves down by one to match.
    adjust = _and(mod_nonzero, compare(compare(b, zero, "LT"), compare(mod, zero, "LT"), "NE"))
    mod = select(adjust, hlo.add(mod, b), mod)
    div = select(adjust, hlo.subtract(div, one), div)
    mod = select(mod_nonzero, mod, _copysign(zero, b))
    # Snap the quotient to the integer it should be (it may be a hair off after the division).
    floordiv = hlo.floor(div)
    floordiv = select(compare(hlo.subtract(div, floordiv), _c(0.5, a), "GT"), hlo.add(floordiv, one), floordiv)
    exact = hlo.divide(a, b)
    floordiv = select(compare(div, zero, "NE"), floordiv, _copysign(zero, exact))
    return select(compare(b, zero, "EQ"), exact, floordiv), mod


def _int_divmod(a: Any, b: Any) -> tuple[Any, Any]:
    """Floor division and modulo of integers (NumPy's): XLA truncates, so a quotient with a
    nonzero remainder of the wrong sign moves down by one. Division by zero gives 0, 0."""
    zero = _c(0, a)
    by_zero = compare(b, zero, "EQ")
    quotient = hlo.divide(a, b)
    remainder = hlo.remainder(a, b)
    if not _is_unsigned(a):
        adjust = _and(compare(remainder, zero, "NE"),
                      compare(compare(remainder, zero, "LT"), compare(b, zero, "LT"), "NE"))
        quotient = select(adjust, hlo.subtract(quotient, _c(1, a)), quotient)
        remainder = select(adjust, hlo.add(remainder, b), remainder)
    return select(by_zero, zero, quotient), select(by_zero, zero, remainder)


def _divmod(a: Any, b: Any) -> tuple[Any, Any]:
    return _float_divmod(a, b) if _is_float(a) else _int_divmod(a, b)


def _fmod(a: Any, b: Any) -> Any:
    r = hlo.remainder(a, b)
    if _is_float(a):
        return r
    return select(compare(b, _c(0, b), "EQ"), _c(0, a), r)   # NumPy: integer fmod by 0 is 0


def _power(a: Any, b: Any) -> Any:
    if not _is_float(b) and not isinstance(b, Tracer) and np.any(np.asarray(b) < 0):
        raise ValueError("pyxla.numpy.power: integers to negative integer powers are not allowed")
    return hlo.power(a, b)


def _fmax_fmin(direction: str) -> Callable:
    def impl(a, b):
        m = hlo.maximum(a, b) if direction == "max" else hlo.minimum(a, b)
        if not _is_float(a):
            return m
        return select(_nan(b), a, select(_nan(a), b, m))   # NaN only when both are NaN
    return impl


def _hypot(a: Any, b: Any) -> Any:
    """sqrt(a² + b²) without overflow: m * sqrt(1 + (n/m)²) with m = max(|a|, |b|)."""
    ax, ay = hlo.abs(a), hlo.abs(b)
    m, n = hlo.maximum(ax, ay), hlo.minimum(ax, ay)
    r = hlo.divide(n, m)
    out = hlo.multiply(m, hlo.sqrt(hlo.add(_c(1, a), hlo.multiply(r, r))))
    out = select(compare(m, _c(0, a), "EQ"), _c(0, a), out)
    inf = _c(np.inf, a)
    return select(_or(compare(ax, inf, "EQ"), compare(ay, inf, "EQ")), inf, out)  # hypot(inf, nan) = inf


def _logaddexp(base2: bool) -> Callable:
    def impl(a, b):
        m = hlo.maximum(a, b)
        d = hlo.negate(hlo.abs(hlo.subtract(a, b)))
        if base2:
            tail = hlo.divide(hlo.log_plus_one(hlo.power(_c(2, a), d)), _c(math.log(2), a))
            same = hlo.add(a, _c(1, a))
        else:
            tail = hlo.log_plus_one(hlo.exponential(d))
            same = hlo.add(a, _c(math.log(2), a))
        # Equal operands (infinities included, where a - b is NaN) add log(2) exactly.
        return select(compare(a, b, "EQ"), same, hlo.add(m, tail))
    return impl


def _heaviside(x: Any, h0: Any) -> Any:
    zero = _c(0, x)
    out = select(compare(x, zero, "LT"), zero, select(compare(x, zero, "GT"), _c(1, x), h0))
    return select(_nan(x), x, out)


def _ldexp(x: Any, n: Any) -> Any:
    # x * 2**n in two halves, so that 2**(n/2) stays finite where x * 2**n is.
    half = hlo.shift_right_arithmetic(n, constant_like(1, n)) if dtype_of(n).kind == "i" else \
        hlo.shift_right_logical(n, constant_like(1, n))
    rest = hlo.subtract(n, half)
    two = _c(2, x)
    scale = lambda k: hlo.power(two, convert(k, dtype_of(x)))   # noqa: E731
    return hlo.multiply(hlo.multiply(x, scale(half)), scale(rest))


def _shift_right(x: Any, n: Any) -> Any:
    return hlo.shift_right_logical(x, n) if _is_unsigned(x) else hlo.shift_right_arithmetic(x, n)


def _comparison(direction: str) -> Callable:
    return lambda a, b: compare(a, b, direction)


def _logical(opcode: str) -> Callable:
    return lambda a, b: bind(opcode, _truth(a), _truth(b))


# --- unary implementations --------------------------------------------------------------

def _abs(x: Any) -> Any:
    return x if _is_unsigned(x) or dtype_of(x) == BOOL else hlo.abs(x)


def _sign(x: Any) -> Any:
    if _is_unsigned(x):
        return convert(compare(x, _c(0, x), "NE"), dtype_of(x))
    return hlo.sign(x)


def _float_only(impl: Callable) -> Callable:
    """An implementation that is the identity on integers (floor, ceil, rint of an int)."""
    return lambda x: impl(x) if _is_float(x) else x


def _scaled(factor: float, op: Callable | None = None) -> Callable:
    """x ↦ op(x) * factor (log2 = log * 1/ln2, deg2rad = x * pi/180, ...)."""
    def impl(x):
        return hlo.multiply(op(x) if op else x, _c(factor, x))
    return impl


def _arcsin(x: Any) -> Any:
    one = _c(1, x)
    root = hlo.sqrt(hlo.multiply(hlo.subtract(one, x), hlo.add(one, x)))
    return hlo.multiply(_c(2, x), hlo.atan2(x, hlo.add(one, root)))


def _arccos(x: Any) -> Any:
    one = _c(1, x)
    root = hlo.sqrt(hlo.multiply(hlo.subtract(one, x), hlo.add(one, x)))
    out = hlo.multiply(_c(2, x), hlo.atan2(root, hlo.add(one, x)))
    return select(compare(x, _c(-1, x), "EQ"), _c(np.pi, x), out)   # atan2(0, 0) would give 0


def _with_sign_of(x: Any, magnitude: Any) -> Any:
    return select(compare(x, _c(0, x), "LT"), hlo.negate(magnitude), magnitude)


def _sinh(x: Any) -> Any:
    # Near 0 from expm1 (no cancellation): sinh a = (e + e / (e + 1)) / 2 with e = expm1(a).
    a = hlo.abs(x)
    e = hlo.exponential_minus_one(a)
    small = hlo.multiply(_c(0.5, x), hlo.add(e, hlo.divide(e, hlo.add(e, _c(1, x)))))
    large = hlo.multiply(_c(0.5, x), hlo.subtract(hlo.exponential(a), hlo.exponential(hlo.negate(a))))
    return _with_sign_of(x, select(compare(a, _c(1, x), "LT"), small, large))


def _cosh(x: Any) -> Any:
    a = hlo.abs(x)
    return hlo.multiply(_c(0.5, x), hlo.add(hlo.exponential(a), hlo.exponential(hlo.negate(a))))


def _large_threshold(x: Any) -> float:
    """Beyond this, 1 + a² == a² in x's dtype (and a² may overflow): asinh a = log(2a)."""
    return 1.0 / math.sqrt(np.finfo(dtype_of(x)).eps)


def _arcsinh(x: Any) -> Any:
    a = hlo.abs(x)
    one = _c(1, x)
    a2 = hlo.multiply(a, a)
    moderate = hlo.log_plus_one(hlo.add(a, hlo.divide(a2, hlo.add(one, hlo.sqrt(hlo.add(one, a2))))))
    large = hlo.add(hlo.log(a), _c(math.log(2), x))
    return _with_sign_of(x, select(compare(a, _c(_large_threshold(x), x), "GT"), large, moderate))


def _arccosh(x: Any) -> Any:
    one = _c(1, x)
    t = hlo.subtract(x, one)   # near 1, log1p(t + sqrt(t (x + 1))) keeps its digits
    moderate = hlo.log_plus_one(hlo.add(t, hlo.sqrt(hlo.multiply(t, hlo.add(x, one)))))
    large = hlo.add(hlo.log(x), _c(math.log(2), x))
    return select(compare(x, _c(_large_threshold(x), x), "GT"), large, moderate)


def _arctanh(x: Any) -> Any:
    one = _c(1, x)
    return hlo.multiply(_c(0.5, x), hlo.log_plus_one(hlo.divide(hlo.multiply(_c(2, x), x), hlo.subtract(one, x))))


def _isnan(x: Any) -> Any:
    return _nan(x) if _is_float(x) else full(False, BOOL, shape_of(x))


def _isinf(x: Any) -> Any:
    if not _is_float(x):
        return full(False, BOOL, shape_of(x))
    return compare(hlo.abs(x), _c(np.inf, x), "EQ")


def _isfinite(x: Any) -> Any:
    return hlo.is_finite(x) if _is_float(x) else full(True, BOOL, shape_of(x))


def _modf(x: Any) -> tuple[Any, Any]:
    whole = _trunc(x)
    frac = select(compare(hlo.abs(x), _c(np.inf, x), "EQ"), _copysign(_c(0, x), x), hlo.subtract(x, whole))
    return frac, whole


# --- the table ----------------------------------------------------------------------------

LN2, LN10 = math.log(2), math.log(10)

# Binary ufuncs.
add = _ufunc("add", np.add, hlo.add)
subtract = _ufunc("subtract", np.subtract, hlo.subtract)
multiply = _ufunc("multiply", np.multiply, hlo.multiply)
divide = _ufunc("divide", np.divide, hlo.divide, aliases=("true_divide",))
floor_divide = _ufunc("floor_divide", np.floor_divide, lambda a, b: _divmod(a, b)[0])
remainder = _ufunc("remainder", np.remainder, lambda a, b: _divmod(a, b)[1], aliases=("mod",))
divmod = _ufunc("divmod", np.divmod, _divmod)
fmod = _ufunc("fmod", np.fmod, _fmod)
power = _ufunc("power", np.power, _power, aliases=("pow",))
float_power = _ufunc("float_power", np.float_power, _power)
maximum = _ufunc("maximum", np.maximum, hlo.maximum)
minimum = _ufunc("minimum", np.minimum, hlo.minimum)
fmax = _ufunc("fmax", np.fmax, _fmax_fmin("max"))
fmin = _ufunc("fmin", np.fmin, _fmax_fmin("min"))
arctan2 = _ufunc("arctan2", np.arctan2, hlo.atan2, aliases=("atan2",))
hypot = _ufunc("hypot", np.hypot, _hypot)
copysign = _ufunc("copysign", np.copysign, _copysign)
heaviside = _ufunc("heaviside", np.heaviside, _heaviside)
logaddexp = _ufunc("logaddexp", np.logaddexp, _logaddexp(False))
logaddexp2 = _ufunc("logaddexp2", np.logaddexp2, _logaddexp(True))
bitwise_and = _ufunc("bitwise_and", np.bitwise_and, lambda a, b: bind("and", a, b))
bitwise_or = _ufunc("bitwise_or", np.bitwise_or, lambda a, b: bind("or", a, b))
bitwise_xor = _ufunc("bitwise_xor", np.bitwise_xor, lambda a, b: bind("xor", a, b))
left_shift = _ufunc("left_shift", np.left_shift, hlo.shift_left, aliases=("bitwise_left_shift",))
right_shift = _ufunc("right_shift", np.right_shift, _shift_right, aliases=("bitwise_right_shift",))
logical_and = _ufunc("logical_and", np.logical_and, _logical("and"))
logical_or = _ufunc("logical_or", np.logical_or, _logical("or"))
logical_xor = _ufunc("logical_xor", np.logical_xor, _logical("xor"))
equal = _ufunc("equal", np.equal, _comparison("EQ"))
not_equal = _ufunc("not_equal", np.not_equal, _comparison("NE"))
less = _ufunc("less", np.less, _comparison("LT"))
less_equal = _ufunc("less_equal", np.less_equal, _comparison("LE"))
greater = _ufunc("greater", np.greater, _comparison("GT"))
greater_equal = _ufunc("greater_equal", np.greater_equal, _comparison("GE"))

# Unary ufuncs.
negative = _ufunc("negative", np.negative, hlo.negate)
positive = _ufunc("positive", np.positive, lambda x: x)
absolute = _ufunc("absolute", np.absolute, _abs, aliases=("abs",))
fabs = _ufunc("fabs", np.fabs, _abs)
sign = _ufunc("sign", np.sign, _sign)
signbit = _ufunc("signbit", np.signbit, _signbit)
exp = _ufunc("exp", np.exp, hlo.exponential)
exp2 = _ufunc("exp2", np.exp2, lambda x: hlo.power(_c(2, x), x))
expm1 = _ufunc("expm1", np.expm1, hlo.exponential_minus_one)
log = _ufunc("log", np.log, hlo.log)
log2 = _ufunc("log2", np.log2, _scaled(1 / LN2, hlo.log))
log10 = _ufunc("log10", np.log10, _scaled(1 / LN10, hlo.log))
log1p = _ufunc("log1p", np.log1p, hlo.log_plus_one)
sqrt = _ufunc("sqrt", np.sqrt, hlo.sqrt)
cbrt = _ufunc("cbrt", np.cbrt, hlo.cbrt)
square = _ufunc("square", np.square, lambda x: hlo.multiply(x, x))
reciprocal = _ufunc("reciprocal", np.reciprocal, lambda x: hlo.divide(_c(1, x), x))
sin = _ufunc("sin", np.sin, hlo.sine)
cos = _ufunc("cos", np.cos, hlo.cosine)
tan = _ufunc("tan", np.tan, hlo.tan)
arcsin = _ufunc("arcsin", np.arcsin, _arcsin, aliases=("asin",))
arccos = _ufunc("arccos", np.arccos, _arccos, aliases=("acos",))
arctan = _ufunc("arctan", np.arctan, lambda x: hlo.atan2(x, _c(1, x)), aliases=("atan",))
sinh = _ufunc("sinh", np.sinh, _sinh)
cosh = _ufunc("cosh", np.cosh, _cosh)
tanh = _ufunc("tanh", np.tanh, hlo.tanh)
arcsinh = _ufunc("arcsinh", np.arcsinh, _arcsinh, aliases=("asinh",))
arccosh = _ufunc("arccosh", np.arccosh, _arccosh, aliases=("acosh",))
arctanh = _ufunc("arctanh", np.arctanh, _arctanh, aliases=("atanh",))
deg2rad = _ufunc("deg2rad", np.deg2rad, _scaled(math.pi / 180), aliases=("radians",))
rad2deg = _ufunc("rad2deg", np.rad2deg, _scaled(180 / math.pi), aliases=("degrees",))
floor = _ufunc("floor", np.floor, _float_only(hlo.floor))
ceil = _ufunc("ceil", np.ceil, _float_only(hlo.ceil))
trunc = _ufunc("trunc", np.trunc, _trunc, aliases=("fix",))
rint = _ufunc("rint", np.rint, _float_only(hlo.round_nearest_even))
isnan = _ufunc("isnan", np.isnan, _isnan)
isinf = _ufunc("isinf", np.isinf, _isinf)
isfinite = _ufunc("isfinite", np.isfinite, _isfinite)
modf = _ufunc("modf", np.modf, _modf)
logical_not = _ufunc("logical_not", np.logical_not,
                     lambda x: compare(x, _c(0, x), "EQ") if dtype_of(x) != BOOL else _not(x))
invert = _ufunc("invert", np.invert, _not, aliases=("bitwise_not", "bitwise_invert"))


@export
def ldexp(x1, x2):
    """x1 * 2**x2 (x2 an integer array)."""
    return apply_ufunc("ldexp", np.ldexp, _ldexp, (x1, x2), promote=False)


# --- functions that are not ufuncs -------------------------------------------------------

@export(aliases=("around", "round_"))
def round(a, decimals: int = 0):
    """Round half to even, to `decimals` decimal places (NumPy's x * 10**d, rint, / 10**d)."""
    a = operand("round", a)
    dt = dtype_of(a)
    if decimals == 0 or (not is_float(dt) and decimals > 0):
        return rint(a) if is_float(dt) else a
    if is_float(dt):
        factor = 10.0 ** abs(decimals)
        if decimals > 0:
            return divide(rint(multiply(a, factor)), factor)
        return multiply(rint(divide(a, factor)), factor)
    factor = 10 ** -decimals   # integers to tens, hundreds, ...: through float64, as NumPy
    return convert(multiply(rint(divide(a, float(factor))), float(factor)), dt)


@export
def clip(a, a_min=None, a_max=None, *, min=None, max=None):
    """min(max(a, a_min), a_max); either bound may be None."""
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    if lo is None and hi is None:
        raise ValueError("pyxla.numpy.clip: one of a_min and a_max must be given")
    out = operand("clip", a)
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


@export
def where(condition, x=None, y=None):
    """x where condition holds, else y (broadcast together, dtypes promoted)."""
    if x is None and y is None:
        from .indexing import nonzero
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("pyxla.numpy.where takes either one or three arguments")
    cond, xv, yv = (operand("where", v, i) for i, v in enumerate((condition, x, y)))
    dt = result_type(xv, yv)
    shape = broadcast_shapes("where", shape_of(cond), shape_of(xv), shape_of(yv))
    cond = _truth(np.asarray(cond) if is_python_scalar(cond) else cond)
    out = select(broadcast_to(cond, shape, "where"), broadcast_to(convert(xv, dt), shape, "where"),
                 broadcast_to(convert(yv, dt), shape, "where"))
    return mark_weak(out, is_weak(xv) and is_weak(yv))


@export
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default: the dtype's max), -inf -> neginf (its min)."""
    x = operand("nan_to_num", x)
    dt = dtype_of(x)
    if not is_float(dt):
        return x
    info = np.finfo(dt)
    out = where(isnan(x), convert(nan, dt), x)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    out = where(equal(x, np.inf), convert(big, dt), out)
    return where(equal(x, -np.inf), convert(small, dt), out)


@export
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    x = operand("sinc", x)
    dt = result_type(x, 1.0)
    if not is_float(dt):
        dt = np.dtype(np.float64)
    px = multiply(convert(x, dt), math.pi)
    safe = where(equal(px, 0), 1.0, px)
    return where(equal(px, 0), 1.0, divide(sin(safe), safe))


@export
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b|, elementwise (infinities equal only to themselves)."""
    dt = result_type(a, b, 1.0)
    a, b = convert(operand("isclose", a), dt), convert(operand("isclose", b), dt)
    close = less_equal(absolute(subtract(a, b)), add(atol, multiply(rtol, absolute(b))))
    both_inf_equal = logical_and(equal(a, b), isinf(a))
    out = logical_or(logical_and(close, isfinite(b)), both_inf_equal)
    if equal_nan:
        out = logical_or(out, logical_and(isnan(a), isnan(b)))
    return out


@export
def real(x):
    """The real part: pyxla arrays are real, so `x` itself."""
    return operand("real", x)


@export
def imag(x):
    """The imaginary part of a real array: zeros."""
    x = operand("imag", x)
    return full(0, dtype_of(x), shape_of(x))


@export(aliases=("conj",))
def conjugate(x):
    return operand("conjugate", x)

