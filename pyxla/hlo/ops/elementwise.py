"""Elementwise opcodes: unary and binary math, compare, select, clamp and conversions.

Every output element depends only on the same-index element of each operand, so one
evaluate function serves a whole array or a batch of lanes (scalar computations such as
reducers run on arrays of lanes), and operands broadcast as NumPy broadcasts them.

The values are XLA CPU's (corpus README, "XLA CPU behaviour"):
- f32/f64 arithmetic reads subnormal operands as zero and flushes subnormal results
  (numeric.widen / numeric.narrow); bit operations (negate, abs, select) keep them.
- f16/bf16 arithmetic runs in f32 and is rounded back to the narrow type.
- Transcendental functions are computed in float64 and rounded once: NumPy's float32
  loops are only accurate to a few ulp, and NumPy has no erf at all (scipy's is used).
- Integer arithmetic wraps; division by zero, INT_MIN / -1 and shifts by the bit width or
  more have the results XLA defines for them.

Each opcode of the UNARY and BINARY tables is one `Elementwise` entry: the element kinds it
accepts and its computation per kind. compare, select, clamp, convert, bitcast-convert and
reduce-precision have attributes or operand roles of their own and are registered below
the tables. `OpDef.extra` carries what a code generator wants to know: the accepted kinds,
the NumPy function where one fits, whether the op is transcendental or a pure bit op.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ...errors import ShapeError
from ..shape import ArrayShape, Shape, describe_shape
from ..types import PRED, ElementType, from_numpy_dtype, integer_limits
from .numeric import convert_elements, narrow, signed_bits, unsigned_bits, widen
from .registry import OpDef, register, require_declared

if TYPE_CHECKING:
    from ..evaluator import EvalContext
    from ..instruction import HloInstruction

# --- element kinds ----------------------------------------------------------------------

FLOAT = frozenset({"float"})
SIGNED = frozenset({"signed"})
INTEGER = frozenset({"signed", "unsigned"})
LOGICAL = INTEGER | {"pred"}          # and, or, xor, not
NUMERIC = INTEGER | FLOAT
ANY = NUMERIC | {"pred"}


def _kind_group(etype: ElementType) -> str:
    """Which computation of an entry applies: "float", "int" (signed or unsigned) or "pred"."""
    return "int" if etype.is_integral else etype.kind


def _kinds_text(kinds: frozenset) -> str:
    return "/".join(sorted(kinds))


# --- shape rules shared by the whole family ---------------------------------------------

def _arrays(opcode: str, shapes: list[Shape]) -> list[ArrayShape]:
    arrays: list[ArrayShape] = []
    for i, s in enumerate(shapes):
        if not isinstance(s, ArrayShape):
            raise ShapeError(f"{opcode}: operand {i} must be an array, got {s.to_text(False)}")
        arrays.append(s)
    return arrays


def _check_kind(opcode: str, etype: ElementType, accepts: frozenset, what: str = "operands") -> None:
    if etype.kind not in accepts:
        raise ShapeError(f"{opcode}: {what} of element type {etype.name} are not accepted "
                         f"(takes {_kinds_text(accepts)})")


def _check_same(opcode: str, shapes: list[ArrayShape], roles: list[str]) -> None:
    """That the operands named by `roles` have one element type and one set of dims."""
    first, first_role = shapes[0], roles[0]
    for s, role in zip(shapes[1:], roles[1:]):
        if s.dtype != first.dtype:
            raise ShapeError(f"{opcode}: element types differ: {first_role} is {first.to_text(False)}, "
                             f"{role} is {s.to_text(False)}")
        if s.dims != first.dims:
            raise ShapeError(f"{opcode}: dimensions differ: {first_role} is {describe_shape(first)}, "
                             f"{role} is {describe_shape(s)}")


def _result(opcode: str, inferred: ArrayShape, declared: Shape | None) -> Shape:
    """The inferred result, or the declared one (with its layout) when it agrees."""
    if declared is None:
        return inferred
    if not inferred.compatible(declared):
        raise ShapeError(f"{opcode}: the result is {describe_shape(inferred)}, "
                         f"but {describe_shape(declared)} is declared")
    return declared


def _operand_roles(n: int) -> list[str]:
    return ["operand"] if n == 1 else ["lhs", "rhs"] if n == 2 else [f"operand {i}" for i in range(n)]


# --- the table entry ----------------------------------------------------------------------

@dataclass(frozen=True)
class Elementwise:
    """One elementwise opcode.

    `compute` maps a kind group ("float", "int", "pred") to fn(etype, *operands) -> array,
    where etype is the operands' element type; the result is in the result's storage dtype.
    `accepts` may be narrower than the groups (abs and sign take signed integers only).
    """
    accepts: frozenset
    compute: dict[str, Callable]
    doc: str
    result: ElementType | None = None    # a fixed result element type (is-finite -> pred)
    facts: dict = field(default_factory=dict)

    def shape(self, opcode: str) -> Callable:
        def rule(operand_shapes, attrs, declared):
            shapes = _arrays(opcode, operand_shapes)
            _check_same(opcode, shapes, _operand_roles(len(shapes)))
            _check_kind(opcode, shapes[0].dtype, self.accepts)
            return _result(opcode, ArrayShape(self.result or shapes[0].dtype, shapes[0].dims), declared)
        return rule

    def evaluate(self, instr: HloInstruction, operands: Sequence[Any], ctx: EvalContext) -> np.ndarray:
        xs = [np.asarray(x) for x in operands]
        etype = from_numpy_dtype(xs[0].dtype)
        with np.errstate(all="ignore"):   # inf, NaN and wrap-around are results here, not accidents
            return np.asarray(self.compute[_kind_group(etype)](etype, *xs))


# How float math is computed, as `compute` functions.

def float_arith(fn: Callable) -> Callable:
    """fn as XLA CPU does float arithmetic: DAZ operands, f16/bf16 in f32, FTZ and rounding.
    For operations IEEE rounds correctly (add, sqrt, floor, ...) f32 gives XLA's exact bits."""
    def apply(etype, *xs):
        return narrow(fn(*[widen(x) for x in xs]), etype)
    return apply


def float_transcendental(fn: Callable) -> Callable:
    """fn computed in float64 and rounded once to the result type (more accurate than
    NumPy's float32 loops; XLA's own functions are a few ulp off, within the tolerances)."""
    def apply(etype, *xs):
        return narrow(fn(*[widen(x).astype(np.float64) for x in xs]), etype)
    return apply


def _same(fn: Callable) -> Callable:
    """fn on the stored values as they are (integers wrap, pred is bool)."""
    return lambda etype, *xs: fn(*xs)


def _scipy_special(name: str) -> Callable:
    """scipy.special's function `name`, imported on its first use: importing scipy.special
    took half of `import pyxla` (150 of 290 ms), for two ops the evaluator rarely meets."""
    def fn(*xs):
        import scipy.special
        return getattr(scipy.special, name)(*xs)
    fn.__name__ = name
    return fn


def _math(fn, doc, transcendental=True) -> Elementwise:
    compute = float_transcendental(fn) if transcendental else float_arith(fn)
    return Elementwise(FLOAT, {"float": compute}, doc,
                       facts={"numpy": fn, "transcendental": transcendental})


# --- unary computations -------------------------------------------------------------------

def _sign_bit(x: np.ndarray):
    return unsigned_bits(x).dtype.type(1 << (8 * x.dtype.itemsize - 1))


def _float_abs(etype, x):
    if etype.bits < 16:
        return _through_f32(np.abs, etype, x)
    return (unsigned_bits(x) & ~_sign_bit(x)).view(x.dtype)


def _float_negate(etype, x):
    if etype.bits < 16:
        return _through_f32(np.negative, etype, x)
    return (unsigned_bits(x) ^ _sign_bit(x)).view(x.dtype)


def _through_f32(fn, etype, x):
    """A sign operation on an 8- or 4-bit float, computed in f32 as the CPU backend does:
    its sign bit is not always the byte's top bit (f4e2m1fn), and the fnuz types have no
    negative zero (-0 is +0) and one NaN."""
    return narrow(fn(x.astype(np.float32)), etype)


def _float_sign(x):
    # copysign(x != 0, x): ±1, ±0 keep their sign, NaN stays NaN.
    return np.where(np.isnan(x), x, np.copysign((x != 0).astype(x.dtype), x))


def _round_half_away(x):
    truncated = np.trunc(x)
    away = np.abs(x - truncated) >= 0.5        # x - trunc(x) is exact; NaN for ±inf, so no step
    return np.where(away, truncated + np.copysign(x.dtype.type(1), x), truncated)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _popcount(etype, x):
    return np.bitwise_count(unsigned_bits(x)).astype(etype.np_dtype)


def _count_leading_zeros(etype, x):
    # Smear the highest set bit into every lower bit; the zeros left above it are the count.
    v = unsigned_bits(x).copy()
    shift = 1
    while shift < etype.bits:
        v |= v >> v.dtype.type(shift)
        shift *= 2
    return (etype.bits - np.bitwise_count(v)).astype(etype.np_dtype)


UNARY: dict[str, Elementwise] = {
    "abs": Elementwise(SIGNED | FLOAT, {"float": _float_abs, "int": _same(np.abs)},
                       "|x|; clears the sign bit of floats (keeps subnormals); abs(INT_MIN) = INT_MIN.",
                       facts={"numpy": np.abs, "bit_op": True}),
    "negate": Elementwise(NUMERIC, {"float": _float_negate, "int": _same(np.negative)},
                          "-x; flips the sign bit of floats; integers wrap.",
                          facts={"numpy": np.negative, "bit_op": True}),
    "sign": Elementwise(SIGNED | FLOAT, {"float": float_arith(_float_sign), "int": _same(np.sign)},
                        "-1/0/1; floats keep ±0 and NaN.", facts={"numpy": np.sign}),
    "not": Elementwise(LOGICAL, {"pred": _same(np.logical_not), "int": _same(np.invert)},
                       "Logical not of pred, bitwise not of integers.",
                       facts={"numpy": np.invert, "bit_op": True}),
    "popcnt": Elementwise(INTEGER, {"int": _popcount}, "Number of set bits of the bit pattern.",
                          facts={"numpy": np.bitwise_count, "bit_op": True}),
    "count-leading-zeros": Elementwise(INTEGER, {"int": _count_leading_zeros},
                                       "Leading zero bits of the bit pattern (the width for 0).",
                                       facts={"bit_op": True}),
    "is-finite": Elementwise(FLOAT, {"float": lambda etype, x: np.isfinite(widen(x))},
                             "Neither inf nor NaN.", result=PRED, facts={"numpy": np.isfinite}),
    "exponential": _math(np.exp, "e**x."),
    "exponential-minus-one": _math(np.expm1, "e**x - 1, accurate near 0."),
    "log": _math(np.log, "Natural logarithm."),
    "log-plus-one": _math(np.log1p, "log(1 + x), accurate near 0."),
    "sqrt": _math(np.sqrt, "Square root (correctly rounded).", transcendental=False),
    "rsqrt": _math(_rsqrt, "1 / sqrt(x)."),
    "cbrt": _math(np.cbrt, "Cube root (odd: cbrt(-x) = -cbrt(x))."),
    "sine": _math(np.sin, "sin(x)."),
    "cosine": _math(np.cos, "cos(x)."),
    "tan": _math(np.tan, "tan(x)."),
    "tanh": _math(np.tanh, "tanh(x)."),
    # expit chooses exp(x) / (1 + exp(x)) for negative x, so it neither overflows nor cancels.
    "logistic": _math(_scipy_special("expit"), "1 / (1 + e**-x), computed stably."),
    "erf": _math(_scipy_special("erf"), "The error function."),
    "floor": _math(np.floor, "Round toward -inf.", transcendental=False),
    "ceil": _math(np.ceil, "Round toward +inf.", transcendental=False),
    "round-nearest-afz": _math(_round_half_away, "Round to nearest, halves away from zero.",
                               transcendental=False),
    "round-nearest-even": _math(np.rint, "Round to nearest, halves to even.", transcendental=False),
}


# --- binary computations ------------------------------------------------------------------

def _float_maximum(a, b):
    # llvm.maximum, which XLA emits: NaN wins and -0 < +0 (np.maximum returns either zero).
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a), b, a), np.maximum(a, b))


def _float_minimum(a, b):
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a), a, b), np.minimum(a, b))


def _division_guards(etype, x, y):
    """(y == 0, INT_MIN / -1, a divisor safe for NumPy): the cases XLA defines itself."""
    by_zero = y == 0
    overflow = (x == integer_limits(etype)[0]) & (y == -1) if etype.is_signed else np.False_
    return by_zero, overflow, np.where(by_zero | overflow, 1, y)


def _int_divide(etype, x, y):
    # Truncating division; x / 0 is all ones (-1 signed, max unsigned); INT_MIN / -1 = INT_MIN.
    by_zero, overflow, safe = _division_guards(etype, x, y)
    quotient = (x - np.fmod(x, safe)) // safe      # exact division: floor and truncation agree
    all_ones = np.invert(np.zeros((), etype.np_dtype))
    return np.where(by_zero, all_ones, np.where(overflow, x, quotient))


def _int_remainder(etype, x, y):
    # C's %: the sign of the dividend; x % 0 = x; INT_MIN % -1 = 0.
    by_zero, overflow, safe = _division_guards(etype, x, y)
    return np.where(by_zero, x, np.where(overflow, 0, np.fmod(x, safe)))


def _int_power(etype, base, exponent):
    # XLA's EmitIntegerPow: six unrolled square-and-multiply steps (exponent bits above the
    # sixth are ignored), products wrap; an exponent negative as a *signed* number gives
    # 1 for base 1 and 0 otherwise, whatever the signedness of the type.
    acc = np.ones(np.broadcast_shapes(base.shape, exponent.shape), unsigned_bits(base).dtype)
    power, bits = unsigned_bits(base), unsigned_bits(exponent)
    for _ in range(6):
        acc = np.where(bits & 1, acc * power, acc)
        power, bits = power * power, bits >> 1
    negative = signed_bits(exponent) < 0
    return np.where(negative, (base == 1).astype(etype.np_dtype), acc.view(etype.np_dtype))


def _shift(direction: str) -> Callable:
    """A shift whose amount is read as unsigned; amounts >= the width give 0, or the sign
    fill for arithmetic shifts (which shift the signed pattern, also of unsigned types)."""
    def apply(etype, x, amount):
        amount = unsigned_bits(amount)
        in_range = amount < etype.bits
        amount = np.where(in_range, amount, 0)
        if direction == "arithmetic":
            signed = signed_bits(x)
            shifted = signed >> amount.astype(signed.dtype)
            saturated = np.where(signed < 0, signed.dtype.type(-1), signed.dtype.type(0))
            return np.where(in_range, shifted, saturated).view(etype.np_dtype)
        bits = unsigned_bits(x)
        shifted = bits << amount if direction == "left" else bits >> amount
        return np.where(in_range, shifted, 0).astype(bits.dtype).view(etype.np_dtype)
    return apply


def _integer_or_pred(int_fn, pred_fn, doc: str, accepts=ANY, float_fn=None) -> Elementwise:
    compute = {"int": _same(int_fn), "pred": _same(pred_fn)}
    if float_fn is not None:
        compute["float"] = float_arith(float_fn)
    return Elementwise(accepts, compute, doc, facts={"numpy": int_fn})


BINARY: dict[str, Elementwise] = {
    # On pred XLA computes add and maximum as or, multiply and minimum as and.
    "add": _integer_or_pred(np.add, np.logical_or, "x + y; integers wrap; or on pred.",
                            float_fn=np.add),
    "multiply": _integer_or_pred(np.multiply, np.logical_and,
                                 "x * y; integers wrap; and on pred.", float_fn=np.multiply),
    "maximum": _integer_or_pred(np.maximum, np.logical_or,
                                "max; NaN propagates, -0 < +0; or on pred.", float_fn=_float_maximum),
    "minimum": _integer_or_pred(np.minimum, np.logical_and,
                                "min; NaN propagates, -0 < +0; and on pred.", float_fn=_float_minimum),
    "and": _integer_or_pred(np.bitwise_and, np.logical_and, "Bitwise/logical and.", LOGICAL),
    "or": _integer_or_pred(np.bitwise_or, np.logical_or, "Bitwise/logical or.", LOGICAL),
    "xor": _integer_or_pred(np.bitwise_xor, np.logical_xor, "Bitwise/logical xor.", LOGICAL),
    "subtract": Elementwise(NUMERIC, {"float": float_arith(np.subtract), "int": _same(np.subtract)},
                            "x - y; integers wrap.", facts={"numpy": np.subtract}),
    "divide": Elementwise(NUMERIC, {"float": float_arith(np.divide), "int": _int_divide},
                          "x / y; integers truncate, x/0 = -1 (all ones), INT_MIN/-1 = INT_MIN.",
                          facts={"numpy": np.divide}),
    "remainder": Elementwise(NUMERIC, {"float": float_arith(np.fmod), "int": _int_remainder},
                             "C fmod / %: sign of x; integer x%0 = x, INT_MIN%-1 = 0.",
                             facts={"numpy": np.fmod}),
    "power": Elementwise(NUMERIC, {"float": float_transcendental(np.power), "int": _int_power},
                         "x**y (C pow for floats; XLA's square-and-multiply for integers).",
                         facts={"numpy": np.power, "transcendental": True}),
    "atan2": Elementwise(FLOAT, {"float": float_transcendental(np.arctan2)},
                         "atan2(y, x) with C's signed-zero quadrants.",
                         facts={"numpy": np.arctan2, "transcendental": True}),
    "shift-left": Elementwise(INTEGER, {"int": _shift("left")}, "x << y; 0 when y >= width.",
                              facts={"numpy": np.left_shift, "bit_op": True}),
    "shift-right-logical": Elementwise(INTEGER, {"int": _shift("logical")},
                                       "Unsigned x >> y; 0 when y >= width.",
                                       facts={"numpy": np.right_shift, "bit_op": True}),
    "shift-right-arithmetic": Elementwise(INTEGER, {"int": _shift("arithmetic")},
                                          "Signed x >> y; the sign fill when y >= width.",
                                          facts={"numpy": np.right_shift, "bit_op": True}),
}


def _register_table(table: dict[str, Elementwise], arity: int) -> None:
    for opcode, entry in table.items():
        facts = {"accepts": entry.accepts, "transcendental": False, "bit_op": False, **entry.facts}
        register(OpDef(opcode, "elementwise", entry.shape(opcode), entry.evaluate, arity=arity,
                       doc=entry.doc, extra=facts))


_register_table(UNARY, 1)
_register_table(BINARY, 2)


# --- compare --------------------------------------------------------------------------------

COMPARISONS: dict[str, Callable] = {
    "EQ": np.equal, "NE": np.not_equal, "LT": np.less,
    "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
}
# The comparison types XLA allows for each element kind.
COMPARISON_TYPES: dict[str, frozenset] = {
    "FLOAT": FLOAT, "TOTALORDER": FLOAT, "SIGNED": SIGNED, "UNSIGNED": frozenset({"unsigned", "pred"}),
}


def _compare_shape(operand_shapes, attrs, declared):
    shapes = _arrays("compare", operand_shapes)
    _check_same("compare", shapes, ["lhs", "rhs"])
    direction = attrs.get("direction")
    if direction not in COMPARISONS:
        raise ShapeError(f"compare: direction={direction} is not one of {', '.join(COMPARISONS)}")
    kind = attrs.get("type")
    if kind is not None:
        if kind not in COMPARISON_TYPES:
            raise ShapeError(f"compare: type={kind} is not one of {', '.join(COMPARISON_TYPES)}")
        _check_kind("compare", shapes[0].dtype, COMPARISON_TYPES[kind], f"type={kind} comparisons")
    return _result("compare", ArrayShape(PRED, shapes[0].dims), declared)


def _total_order_key(x):
    """Integers ordered as the floats' total order: -NaN < -inf < ... < -0 < +0 < ... < NaN.
    Negative floats grow more negative with their magnitude bits, so those bits are flipped."""
    s = signed_bits(x)
    magnitude_mask = s.dtype.type(np.iinfo(s.dtype).max)
    return s ^ ((s >> s.dtype.type(8 * s.dtype.itemsize - 1)) & magnitude_mask)


def _compare_evaluate(instr, operands, ctx):
    a, b = (np.asarray(x) for x in operands)
    etype = from_numpy_dtype(a.dtype)
    if etype.is_float:
        if instr.attrs.get("type") == "TOTALORDER":
            if etype.bits < 16:   # ordered as their f32 values, as the CPU backend compares them
                a, b = a.astype(np.float32), b.astype(np.float32)
            a, b = _total_order_key(a), _total_order_key(b)
        else:   # IEEE: NaN unordered, -0 == +0, and DAZ like any float instruction
            a, b = widen(a), widen(b)
    return np.asarray(COMPARISONS[instr.attrs["direction"]](a, b))


register(OpDef("compare", "elementwise", _compare_shape, _compare_evaluate, arity=2,
               required_attrs=("direction",), optional_attrs=("type",),
               doc="Elementwise comparison -> pred; IEEE for floats unless type=TOTALORDER.",
               extra={"accepts": ANY, "numpy": COMPARISONS, "transcendental": False, "bit_op": False}))


# --- select and clamp --------------------------------------------------------------------

def _select_shape(operand_shapes, attrs, declared):
    pred, on_true, on_false = _arrays("select", operand_shapes)
    _check_same("select", [on_true, on_false], ["on_true", "on_false"])
    if pred.dtype != PRED:
        raise ShapeError(f"select: the predicate must be pred, got {pred.to_text(False)}")
    if pred.dims != on_true.dims:
        raise ShapeError(f"select: the predicate {pred.to_text(False)} must have the dimensions "
                         f"of the operands {on_true.to_text(False)}")
    return _result("select", ArrayShape(on_true.dtype, on_true.dims), declared)


def _select_evaluate(instr, operands, ctx):
    pred, on_true, on_false = (np.asarray(x) for x in operands)
    return np.asarray(np.where(pred, on_true, on_false))   # a bit op: subnormals pass through


register(OpDef("select", "elementwise", _select_shape, _select_evaluate, arity=3,
               doc="pred ? on_true : on_false, element by element (pred has the operands' dims).",
               extra={"accepts": ANY, "numpy": np.where, "transcendental": False, "bit_op": True}))


def _clamp_shape(operand_shapes, attrs, declared):
    low, x, high = _arrays("clamp", operand_shapes)
    _check_kind("clamp", x.dtype, NUMERIC)
    for bound, role in ((low, "min"), (high, "max")):
        if bound.dtype != x.dtype:
            raise ShapeError(f"clamp: {role} {bound.to_text(False)} must have the operand's "
                             f"element type {x.dtype.name}")
        if bound.dims not in ((), x.dims):
            raise ShapeError(f"clamp: {role} {bound.to_text(False)} must be a scalar or have the "
                             f"operand's dimensions {list(x.dims)}")
    return _result("clamp", ArrayShape(x.dtype, x.dims), declared)


def _clamp_evaluate(instr, operands, ctx):
    low, x, high = (np.asarray(v) for v in operands)
    etype = from_numpy_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if etype.is_float:   # min(high, max(low, x)) with maximum's NaN and signed-zero rules
            low, x, high = widen(low), widen(x), widen(high)
            return narrow(_float_minimum(high, _float_maximum(low, x)), etype)
        return np.asarray(np.minimum(high, np.maximum(low, x)))


register(OpDef("clamp", "elementwise", _clamp_shape, _clamp_evaluate, arity=3,
               doc="min(max, maximum(min, operand)); min and max may be scalars.",
               extra={"accepts": NUMERIC, "numpy": np.clip, "transcendental": False, "bit_op": False}))


# --- convert, bitcast-convert, reduce-precision --------------------------------------------

def _declared_dtype(opcode: str, operand_shapes, declared) -> tuple[ArrayShape, ElementType]:
    (x,) = _arrays(opcode, operand_shapes)
    declared = require_declared(opcode, declared)
    if not isinstance(declared, ArrayShape):
        raise ShapeError(f"{opcode}: the result must be an array, got {declared.to_text(False)}")
    return x, declared.dtype


def _convert_shape(operand_shapes, attrs, declared):
    x, dtype = _declared_dtype("convert", operand_shapes, declared)
    return _result("convert", ArrayShape(dtype, x.dims), declared)


def _convert_evaluate(instr, operands, ctx):
    x = np.asarray(operands[0])
    with np.errstate(all="ignore"):
        return np.asarray(convert_elements(x, from_numpy_dtype(x.dtype), instr.shape.dtype))


register(OpDef("convert", "elementwise", _convert_shape, _convert_evaluate, arity=1,
               doc="Value conversion to the declared element type (float->int saturates, "
                   "int->int wraps, rounding to nearest even).",
               extra={"accepts": ANY, "transcendental": False, "bit_op": False}))


def _bitcast_convert_shape(operand_shapes, attrs, declared):
    x, dtype = _declared_dtype("bitcast-convert", operand_shapes, declared)
    for etype in (x.dtype, dtype):
        if etype.is_pred:
            raise ShapeError("bitcast-convert: pred has no defined bit pattern to reinterpret")
    src, dst = x.dtype.bits, dtype.bits
    if src == dst:
        dims = x.dims
    elif src > dst:   # each element becomes src/dst narrow elements along a new minor dim
        dims = x.dims + (src // dst,)
    else:             # the minor dim holds the dst/src pieces of one wide element
        if not x.dims or x.dims[-1] != dst // src:
            raise ShapeError(f"bitcast-convert: {x.to_text(False)} to {dtype.name} needs a minor-most "
                             f"dimension of {dst // src}")
        dims = x.dims[:-1]
    return _result("bitcast-convert", ArrayShape(dtype, dims), declared)


def _bitcast_convert_evaluate(instr, operands, ctx):
    if sys.byteorder != "little":
        raise NotImplementedError("bitcast-convert between widths on a big-endian host")
    x = np.asarray(operands[0], order="C")   # (np.ascontiguousarray would make a scalar 1-d)
    src, dst = from_numpy_dtype(x.dtype), instr.shape.dtype
    dtype = dst.np_dtype
    if src.bits == dst.bits:
        return x.view(dtype)   # sub-byte types: the same low bits of each byte
    if min(src.bits, dst.bits) < 8:
        return _bitcast_sub_byte(x, src, dst)
    if x.dtype.itemsize > dtype.itemsize:   # little-endian: piece [..., 0] is the lowest byte
        return x[..., np.newaxis].view(dtype)
    return x.view(dtype)[..., 0]


def _bitcast_sub_byte(x: np.ndarray, src: ElementType, dst: ElementType) -> np.ndarray:
    """bitcast-convert where one side is narrower than a byte: the pieces are cut from (or
    joined into) the bit patterns with shifts, piece [..., 0] holding the lowest bits. A
    2- or 4-bit element is stored one per byte in its low bits (ml_dtypes' layout)."""
    def pattern(a, bits):   # the bit patterns of a, as uint64
        return (unsigned_bits(a).astype(np.uint64) & np.uint64((1 << bits) - 1))

    def of_pattern(p, t):   # the elements of type t whose bit patterns are p
        container = np.dtype(f"u{t.np_dtype.itemsize}")
        return p.astype(container).view(t.np_dtype)

    bits = pattern(x, src.bits)
    if src.bits > dst.bits:
        shifts = np.arange(src.bits // dst.bits, dtype=np.uint64) * np.uint64(dst.bits)
        return of_pattern((bits[..., np.newaxis] >> shifts) & np.uint64((1 << dst.bits) - 1), dst)
    shifts = np.arange(dst.bits // src.bits, dtype=np.uint64) * np.uint64(src.bits)
    return of_pattern(np.bitwise_or.reduce(bits << shifts, axis=-1), dst)


register(OpDef("bitcast-convert", "elementwise", _bitcast_convert_shape, _bitcast_convert_evaluate,
               arity=1, doc="Reinterprets the bits as the declared element type (little-endian "
                            "pieces along a minor dimension when the widths differ).",
               extra={"accepts": NUMERIC, "transcendental": False, "bit_op": True,
                      "changes_rank_when_widths_differ": True}))


def _reduce_precision_shape(operand_shapes, attrs, declared):
    (x,) = _arrays("reduce-precision", operand_shapes)
    _check_kind("reduce-precision", x.dtype, FLOAT)
    for name, least in (("exponent_bits", 1), ("mantissa_bits", 0)):
        value = attrs.get(name)
        if not isinstance(value, int) or value < least:
            raise ShapeError(f"reduce-precision: {name} must be an integer >= {least}, got {value!r}")
    return _result("reduce-precision", ArrayShape(x.dtype, x.dims), declared)


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """x rounded to a float format of the given widths and back, as XLA's ReducePrecision
    does it on the bit pattern: mantissa rounded to nearest even, then exponents too large
    become ±inf and exponents too small (including the target's subnormals) ±0; NaN
    stays NaN (becomes inf when no mantissa bits are kept)."""
    bits = unsigned_bits(x)
    word = bits.dtype.type
    nbits = 8 * x.dtype.itemsize
    src_mantissa = ml_dtypes.finfo(x.dtype).nmant   # (np.finfo does not know bf16)
    src_exponent = nbits - 1 - src_mantissa
    sign_mask = 1 << (nbits - 1)
    exponent_mask = ((1 << src_exponent) - 1) << src_mantissa
    is_nan = (bits & word(sign_mask ^ ((1 << nbits) - 1))) > word(exponent_mask)

    if mantissa_bits < src_mantissa:
        dropped = src_mantissa - mantissa_bits
        last_kept = (bits >> word(dropped)) & word(1)
        bias = last_kept + word((1 << (dropped - 1)) - 1)     # 0111... plus one on an odd last bit
        bits = (bits + bias) & word(((1 << nbits) - 1) ^ ((1 << dropped) - 1))

    if exponent_bits < src_exponent:
        src_bias = (1 << (src_exponent - 1)) - 1
        dest_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & word(exponent_mask)
        signed_zero = bits & word(sign_mask)
        bits = np.where(exponent > word((src_bias + dest_bias) << src_mantissa),
                        signed_zero | word(exponent_mask), bits)
        bits = np.where(exponent <= word((src_bias - dest_bias) << src_mantissa), signed_zero, bits)

    result = np.asarray(bits).view(x.dtype)
    nan_result = x if mantissa_bits > 0 else np.full_like(x, np.inf)
    return np.where(is_nan, nan_result, result)


def _reduce_precision_evaluate(instr, operands, ctx):
    x = np.asarray(operands[0])
    etype = from_numpy_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if etype.bits < 16:
            # The 8- and 4-bit floats are not IEEE layouts (fn, fnuz): rounded as their f32
            # values, then stored back, as the CPU backend computes them.
            rounded = reduce_precision(x.astype(np.float32), instr.attrs["exponent_bits"],
                                       instr.attrs["mantissa_bits"])
            return np.asarray(narrow(rounded, etype))
        return np.asarray(reduce_precision(x, instr.attrs["exponent_bits"], instr.attrs["mantissa_bits"]))


register(OpDef("reduce-precision", "elementwise", _reduce_precision_shape, _reduce_precision_evaluate,
               arity=1, required_attrs=("exponent_bits", "mantissa_bits"),
               doc="Rounds to a narrower float format and back (RNE; overflow -> inf, "
                   "underflow -> 0).",
               extra={"accepts": FLOAT, "transcendental": False, "bit_op": True}))
