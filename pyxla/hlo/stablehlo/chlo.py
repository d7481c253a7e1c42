"""The `chlo` ops JAX emits, lowered to HLO as XLA's chlo legalisation does.

  chlo.erf                  -> erf
  chlo.erfc                 -> 1 - x*P(x^2) for |x| < 1, else exp(-x^2)/|x| * P or R(1/x^2) (XLA's f32 forms)
  chlo.erf_inv              -> Giles' single-precision polynomial in w = -log1p(-x^2), +-inf at +-1
  chlo.lgamma, chlo.digamma -> the Lanczos approximation (g = 7) with reflection below 1/2
  chlo.square               -> x * x;  chlo.tan -> tan;  chlo.sinh, cosh, asin, acos, atan, asinh,
                               acosh, atanh -> their textbook formulas in exp/log/sqrt/atan2
  chlo.is_inf, is_pos_inf, is_neg_inf -> compare with inf
  chlo.top_k(%x, k = K)     -> topk k=K largest=true (values, s32 indices)

f16 and bf16 operands compute in f32 and convert back, as XLA does. The polynomials are the
single-precision ones for f64 too (about 1e-7 relative there; XLA has f64 forms).
"""
from __future__ import annotations

import math

from ..instruction import HloInstruction
from ..shape import ArrayShape, TupleShape
from ..types import F32, PRED
from .converter import Emitter, handles, result_shape
from .optree import Op

_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354,
            12.507343278686904814458936853, -0.13857109526572011689554707,
            9.984369578019570859563e-6, 1.50563273514931155834e-7)
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS_G = 7.0
_ERF_INV_SMALL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERF_INV_LARGE = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                  -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
_ERF_SMALL = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3, -2.685381193529856e-2,
              1.128358514861418e-1, -3.761262582423300e-1, 1.128379165726710e0)
_ERFC_P = (2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1,
           6.210004621745983e-1, -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1,
           5.638259427386472e-1)
_ERFC_R = (-1.047766399936249e1, 1.297719955372516e1, -7.495518717768503e0, 2.921019019210786e0,
           -1.015265279202700e0, 4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1)


class X:
    """An array value in expressions: arithmetic builds HLO; numbers become broadcast constants."""

    def __init__(self, em: Emitter, instr: HloInstruction):
        self.em, self.instr = em, instr
        shape = instr.shape
        assert isinstance(shape, ArrayShape)
        self.shape = shape

    def const(self, value: float) -> X:
        b = self.em.b
        scalar = b.constant(value, self.shape.dtype)
        return X(self.em, b.op("broadcast", scalar, shape=self.shape, dimensions=()))

    def _x(self, other) -> X:
        return other if isinstance(other, X) else self.const(other)

    def op(self, opcode: str, *others, shape=None) -> X:
        operands = [self.instr] + [self._x(o).instr for o in others]
        return X(self.em, self.em.b.op(opcode, *operands, shape=shape or self.shape))

    def __add__(self, o): return self.op("add", o)
    def __radd__(self, o): return self._x(o).op("add", self)
    def __sub__(self, o): return self.op("subtract", o)
    def __rsub__(self, o): return self._x(o).op("subtract", self)
    def __mul__(self, o): return self.op("multiply", o)
    def __rmul__(self, o): return self._x(o).op("multiply", self)
    def __truediv__(self, o): return self.op("divide", o)
    def __rtruediv__(self, o): return self._x(o).op("divide", self)
    def __neg__(self): return self.op("negate")

    def cmp(self, direction: str, o) -> X:
        pred = ArrayShape(PRED, self.shape.dims)
        return X(self.em, self.em.b.op("compare", self.instr, self._x(o).instr, shape=pred, direction=direction))

    def __lt__(self, o): return self.cmp("LT", o)
    def __le__(self, o): return self.cmp("LE", o)
    def __gt__(self, o): return self.cmp("GT", o)
    def eq(self, o): return self.cmp("EQ", o)

    def f(self, opcode: str) -> X:
        return self.op(opcode)

    def select(self, a, b) -> X:
        """self is a predicate: where(self, a, b)."""
        a_x = a if isinstance(a, X) else b.const(a) if isinstance(b, X) else None
        b_x = b if isinstance(b, X) else a_x.const(b) if a_x is not None else None
        assert a_x is not None and b_x is not None
        return X(self.em, self.em.b.op("select", self.instr, a_x.instr, b_x.instr, shape=a_x.shape))


def _horner(w: X, coefficients) -> X:
    p = w.const(coefficients[0])
    for c in coefficients[1:]:
        p = p * w + c
    return p


def _f32_op(em: Emitter, op: Op, arg: HloInstruction, body) -> list[HloInstruction]:
    """body(X) on arg, in f32 for the narrow float types."""
    shape = arg.shape
    assert isinstance(shape, ArrayShape)
    wide = shape.dtype.name in ("f16", "bf16") or shape.dtype.bits < 16
    x = X(em, arg)
    if wide:
        x = x.op("convert", shape=ArrayShape(F32, shape.dims))
    y = body(x)
    if wide:
        y = y.op("convert", shape=shape)
    return [y.instr]


def _unary(body):
    def convert(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
        return _f32_op(em, op, args[0], body)
    return convert


def erf_inv(x: X) -> X:
    w = -((-(x * x)).f("log-plus-one"))
    small = w < 5.0
    w = small.select(w - 2.5, w.f("sqrt") - 3.0)
    p = small.select(w.const(_ERF_INV_SMALL[0]), w.const(_ERF_INV_LARGE[0]))
    for a, b in zip(_ERF_INV_SMALL[1:], _ERF_INV_LARGE[1:]):
        p = small.select(w.const(a), w.const(b)) + p * w
    return x.f("abs").eq(1.0).select(x * math.inf, p * x)


def erfc(x: X) -> X:
    abs_x = x.f("abs")
    x2 = x * x
    small = 1.0 - x * _horner(x2, _ERF_SMALL)
    z = -x2
    y = z.f("exponential") * (1.0 / abs_x)
    w = 1.0 / x2
    p = (abs_x < 2.0).select(_horner(w, _ERFC_P), _horner(w, _ERFC_R))
    y = (z < -88.72283905206835).select(0.0, y * p)
    large = (x < 0.0).select(2.0 - y, y)
    return (abs_x < 1.0).select(small, large)


def _lanczos_z(x: X) -> tuple[X, X]:
    reflect = x < 0.5
    return reflect, reflect.select(-x, x - 1.0)


def lgamma(x: X) -> X:
    reflect, z = _lanczos_z(x)
    acc = z.const(_LANCZOS_BASE)
    for i, c in enumerate(_LANCZOS):
        acc = acc + c / (z + float(i + 1))
    t = z + (_LANCZOS_G + 0.5)
    log_t = math.log(_LANCZOS_G + 0.5) + (z / (_LANCZOS_G + 0.5)).f("log-plus-one")
    log_y = acc.f("log") + 0.5 * math.log(2 * math.pi) + (z + 0.5 - t / log_t) * log_t
    abs_x = x.f("abs")
    frac = abs_x - abs_x.f("floor")
    reduced = (frac > 0.5).select(1.0 - frac, frac)
    denom = (reduced * math.pi).f("sine").f("log")
    finite = denom.op("is-finite", shape=ArrayShape(PRED, x.shape.dims))
    reflection = finite.select(math.log(math.pi) - denom - log_y, -denom)
    result = reflect.select(reflection, log_y)
    return abs_x.eq(math.inf).select(x.const(math.inf), result)


def digamma(x: X) -> X:
    reflect, z = _lanczos_z(x)
    num = z.const(0.0)
    denom = z.const(_LANCZOS_BASE)
    for i, c in enumerate(_LANCZOS):
        t = z + float(i + 1)
        num = num - c / (t * t)
        denom = denom + c / t
    t = z + (_LANCZOS_G + 0.5)
    log_t = math.log(_LANCZOS_G + 0.5) + (z / (_LANCZOS_G + 0.5)).f("log-plus-one")
    y = log_t + num / denom - _LANCZOS_G / t
    reduced = x + (x + 0.5).f("floor").f("abs")
    reflection = y - math.pi * (reduced * math.pi).f("cosine") / (reduced * math.pi).f("sine")
    result = reflect.select(reflection, y)
    pole = X(x.em, x.em.b.op("and", (x <= 0.0).instr, x.eq(x.f("floor")).instr, shape=(x <= 0.0).shape))
    return pole.select(x.const(math.nan), result)


_FORMULAS = {
    "chlo.erf_inv": erf_inv, "chlo.erfc": erfc, "chlo.lgamma": lgamma, "chlo.digamma": digamma,
    "chlo.sinh": lambda x: (x.f("exponential") - (-x).f("exponential")) * 0.5,
    "chlo.cosh": lambda x: (x.f("exponential") + (-x).f("exponential")) * 0.5,
    "chlo.asin": lambda x: 2.0 * x.op("atan2", 1.0 + (1.0 - x * x).f("sqrt")),
    "chlo.acos": lambda x: 2.0 * (1.0 - x * x).f("sqrt").op("atan2", 1.0 + x),
    "chlo.atan": lambda x: x.op("atan2", 1.0),
    "chlo.asinh": lambda x: x.f("sign") * (x.f("abs") + (x * x + 1.0).f("sqrt")).f("log"),
    "chlo.acosh": lambda x: (x + ((x + 1.0) * (x - 1.0)).f("sqrt")).f("log"),
    "chlo.atanh": lambda x: ((1.0 + x).f("log") - (1.0 - x).f("log")) * 0.5,
}
for _name, _body in _FORMULAS.items():
    handles(_name)(_unary(_body))


@handles("chlo.erf", "chlo.tan")
def erf(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    return [em.b.op(op.name.split(".")[1], args[0], shape=result_shape(em, op))]


@handles("chlo.square")
def square(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    return [em.b.op("multiply", args[0], args[0], shape=result_shape(em, op))]


@handles("chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf")
def is_inf(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    x = X(em, args[0])
    if op.name == "chlo.is_inf":
        return [x.f("abs").eq(math.inf).instr]
    return [x.eq(math.inf if op.name == "chlo.is_pos_inf" else -math.inf).instr]


@handles("chlo.top_k")
def top_k(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    k = op.attrs.get("k")
    if not isinstance(k, int):
        raise em.error(op, "top_k needs 'k = <int>'")
    shape = TupleShape(tuple(op.result_types))
    return em.unpack(em.b.op("topk", args[0], shape=shape, k=k, largest=True))
