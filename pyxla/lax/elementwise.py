"""Elementwise operations: arithmetic, math functions, bit operations, comparisons,
select, clamp and conversions.

Operands must share an element type (weakly typed Python scalars take it) and are
broadcast NumPy-style with explicit `broadcast` instructions, so JAX's lax code (equal
shapes, scalar literals) and NumPy-shaped code both work. Results follow XLA's semantics:
integer division by zero, NaN-propagating max/min, shifts past the bit width, and so on.
"""
from __future__ import annotations

import builtins
import enum
from typing import Any

from ..frontend.shape_poly import broadcast_dims
from ..frontend.tracing import bind
from ..hlo.shape import ArrayShape
from ..hlo.types import PRED
from ._values import aval, convert, element_type, op_error, unify_types, weakly
from .shapes import broadcast_to_rank_of, full_like


def broadcast_together(opcode: str, operands: list[Any]) -> list[Any]:
    """The operands broadcast to their common NumPy-style shape."""
    shapes = [aval(x).dims for x in operands]
    common = broadcast_dims(*shapes)
    if common is None:
        raise op_error(opcode, operands, "shapes do not broadcast together")
    return [x if s == common else broadcast_to_rank_of(x, common) for x, s in zip(operands, shapes)]


def elementwise(opcode: str, *operands: Any, **attrs) -> Any:
    """`opcode` applied to operands of one type and one shape (weak scalars adapted)."""
    ops = broadcast_together(opcode, unify_types(opcode, operands))
    return weakly(bind(opcode, *ops, **attrs), operands)


def _unary(opcode: str, name: str, doc: str):
    def op(x: Any) -> Any:
        return elementwise(opcode, x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


def _binary(opcode: str, name: str, doc: str):
    def op(x: Any, y: Any) -> Any:
        return elementwise(opcode, x, y)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


# --- arithmetic -------------------------------------------------------------------------

add = _binary("add", "add", "x + y.")
sub = _binary("subtract", "sub", "x - y.")
mul = _binary("multiply", "mul", "x * y.")
div = _binary("divide", "div", "x / y; integers truncate toward zero (x / 0 is -1, or all ones unsigned).")
rem = _binary("remainder", "rem", "The remainder of x / y with the sign of x (C's fmod); x % 0 is x for integers.")
pow = _binary("power", "pow", "x ** y.")
max = _binary("maximum", "max", "The larger of x and y; NaN if either is NaN.")
min = _binary("minimum", "min", "The smaller of x and y; NaN if either is NaN.")
atan2 = _binary("atan2", "atan2", "The angle of the point (y=x, x=y) in radians: atan2(x, y).")

neg = _unary("negate", "neg", "-x.")
abs = _unary("abs", "abs", "|x|.")
sign = _unary("sign", "sign", "-1, 0 or 1 by the sign of x (floats keep -0 and NaN).")


def square(x: Any) -> Any:
    return mul(x, x)


def reciprocal(x: Any) -> Any:
    return div(1, x)


def integer_pow(x: Any, y: int) -> Any:
    """x ** y for a static integer y, by repeated squaring (as JAX lowers it)."""
    y = int(y)
    if y == 0:
        return full_like(x, 1)
    base, result, n = x, None, builtins.abs(y)
    while n:
        if n & 1:
            result = base if result is None else mul(result, base)
        n >>= 1
        if n:
            base = mul(base, base)
    return result if y > 0 else div(1, result)


# --- math functions ---------------------------------------------------------------------

exp = _unary("exponential", "exp", "e ** x.")
expm1 = _unary("exponential-minus-one", "expm1", "e ** x - 1, accurate near 0.")
log = _unary("log", "log", "The natural logarithm.")
log1p = _unary("log-plus-one", "log1p", "log(1 + x), accurate near 0.")
sqrt = _unary("sqrt", "sqrt", "The square root.")
rsqrt = _unary("rsqrt", "rsqrt", "1 / sqrt(x).")
cbrt = _unary("cbrt", "cbrt", "The cube root.")
sin = _unary("sine", "sin", "The sine (radians).")
cos = _unary("cosine", "cos", "The cosine (radians).")
tan = _unary("tan", "tan", "The tangent (radians).")
tanh = _unary("tanh", "tanh", "The hyperbolic tangent.")
logistic = _unary("logistic", "logistic", "1 / (1 + e ** -x).")
erf = _unary("erf", "erf", "The error function.")
floor = _unary("floor", "floor", "Rounds toward -inf.")
ceil = _unary("ceil", "ceil", "Rounds toward +inf.")


class RoundingMethod(enum.IntEnum):
    """How `round` breaks ties (JAX's enum)."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def round(x: Any, rounding_method: RoundingMethod | int = RoundingMethod.AWAY_FROM_ZERO) -> Any:
    """Rounds to the nearest integer; ties away from zero or to even."""
    method = RoundingMethod(rounding_method)
    return elementwise("round-nearest-afz" if method is RoundingMethod.AWAY_FROM_ZERO else "round-nearest-even", x)


def is_finite(x: Any) -> Any:
    """Whether each element is neither infinite nor NaN."""
    return bind("is-finite", unify_types("is-finite", [x])[0])


# --- bit operations -----------------------------------------------------------------------

bitwise_and = _binary("and", "bitwise_and", "x & y (logical and on pred).")
bitwise_or = _binary("or", "bitwise_or", "x | y (logical or on pred).")
bitwise_xor = _binary("xor", "bitwise_xor", "x ^ y (logical xor on pred).")
bitwise_not = _unary("not", "bitwise_not", "~x (logical not on pred).")
shift_left = _binary("shift-left", "shift_left", "x << y; 0 when y >= the bit width.")
shift_right_arithmetic = _binary("shift-right-arithmetic", "shift_right_arithmetic",
                                 "x >> y filling with the sign bit.")
shift_right_logical = _binary("shift-right-logical", "shift_right_logical",
                              "x >> y filling with zeros; 0 when y >= the bit width.")
population_count = _unary("popcnt", "population_count", "The number of set bits.")
clz = _unary("count-leading-zeros", "clz", "The number of leading zero bits.")


# --- comparisons, select, clamp ---------------------------------------------------------

def compare(x: Any, y: Any, direction: str, compare_type: str | None = None) -> Any:
    """XLA's compare; `compare_type` TOTALORDER orders floats by IEEE total order."""
    ops = broadcast_together("compare", unify_types("compare", [x, y]))
    attrs = {"direction": direction}
    if compare_type is not None:
        attrs["type"] = compare_type
    return bind("compare", *ops, **attrs)


def _comparison(direction: str, name: str):
    def op(x: Any, y: Any) -> Any:
        return compare(x, y, direction)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"x {direction} y, elementwise, as pred (NaN compares unequal to everything)."
    return op


eq = _comparison("EQ", "eq")
ne = _comparison("NE", "ne")
lt = _comparison("LT", "lt")
le = _comparison("LE", "le")
gt = _comparison("GT", "gt")
ge = _comparison("GE", "ge")


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """on_true where pred holds, else on_false."""
    on_true, on_false = unify_types("select", [on_true, on_false])
    pred, on_true, on_false = broadcast_together("select", [pred, on_true, on_false])
    return bind("select", pred, on_true, on_false)


def select_n(which: Any, *cases: Any) -> Any:
    """cases[which]: `which` is a pred (two cases) or an integer index."""
    if len(cases) == 1:
        return cases[0]
    if aval(which).dtype.is_pred:
        if len(cases) != 2:
            raise op_error("select", [which, *cases], "a pred selector chooses between exactly two cases")
        return select(which, cases[1], cases[0])
    # A balanced tree of selects on the index bits would be shorter; a chain is clearer.
    result = cases[-1]
    for i in range(len(cases) - 2, -1, -1):
        result = select(le(which, i), cases[i], result)
    return result


def clamp(min: Any, x: Any, max: Any) -> Any:
    """x limited to [min, max] (scalars or x's shape)."""
    lo, x, hi = unify_types("clamp", [min, x, max])
    lo, x, hi = broadcast_together("clamp", [lo, x, hi])
    return bind("clamp", lo, x, hi)


# --- conversions ------------------------------------------------------------------------

def convert_element_type(operand: Any, new_dtype: Any) -> Any:
    """`operand` as `new_dtype`: floats to integers saturate (NaN -> 0), integers wrap,
    floats round to nearest even."""
    return convert(operand, element_type(new_dtype))


def bitcast_convert_type(operand: Any, new_dtype: Any) -> Any:
    """The bits of `operand` read as `new_dtype`; a narrower type adds a minor dimension,
    a wider one removes it (little-endian)."""
    a = aval(operand)
    t = element_type(new_dtype)
    if t.bits == a.dtype.bits:
        dims = a.dims
    elif t.bits < a.dtype.bits:
        dims = a.dims + (a.dtype.bits // t.bits,)
    else:
        ratio = t.bits // a.dtype.bits
        if not a.dims or a.dims[-1] != ratio:
            raise op_error("bitcast-convert", [operand], f"converting to the wider {t} needs a last "
                                                         f"dimension of {ratio}")
        dims = a.dims[:-1]
    return bind("bitcast-convert", operand, shape=ArrayShape(t, dims))


def reduce_precision(operand: Any, exponent_bits: int, mantissa_bits: int) -> Any:
    """`operand` rounded to a float format with the given exponent and mantissa widths."""
    return bind("reduce-precision", operand, exponent_bits=int(exponent_bits), mantissa_bits=int(mantissa_bits))


def logical_pred(x: Any) -> Any:
    """`x` as pred (nonzero is true); pred stays as it is."""
    return x if aval(x).dtype == PRED else ne(x, 0)

