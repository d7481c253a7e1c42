"""The vocabulary the inline transcendentals are written in: float operations on one LLVM
float type (f32 or f64), its integer twin of the same width, and its bit layout.

Everything here is straight-line IR (arithmetic, bit operations, selects and intrinsics
that LLVM has vector forms of), so a loop built from it vectorises.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .ir_types import F32, F64, I32, I64


class FloatOps:
    """IR builders for one float type: `FloatOps(e, F64).add(a, b)` and so on."""

    def __init__(self, e, ty: ir.Type):
        self.e, self.b, self.ty = e, e.b, ty
        wide = ty == F64
        self.ity = I64 if wide else I32
        self.mantissa_bits = 52 if wide else 23
        self.bias = 1023 if wide else 127
        self.min_exponent = -1022 if wide else -126   # smallest normal power of two
        self.tiny = 2.2250738585072014e-308 if wide else 1.1754943508222875e-38

    # --- constants and arithmetic -----------------------------------------------------------
    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, v)

    def i(self, v: int) -> ir.Constant:
        return ir.Constant(self.ity, v)

    def add(self, a, b_):
        return self.b.fadd(a, b_)

    def sub(self, a, b_):
        return self.b.fsub(a, b_)

    def mul(self, a, b_):
        return self.b.fmul(a, b_)

    def div(self, a, b_):
        return self.b.fdiv(a, b_)

    def neg(self, a):
        return self.b.fneg(a)

    def horner(self, x, coefficients) -> ir.Value:
        """The polynomial with `coefficients` (highest degree first) at x; a coefficient may
        be an IR value (selected per lane) or a number."""
        acc = self._value(coefficients[0])
        for k in coefficients[1:]:
            acc = self.mul_add(acc, x, self._value(k))
        return acc

    def mul_add(self, a, b_, c):
        """a * b + c, one fused multiply-add where the host has a fast one (llvm.fmuladd:
        LLVM keeps the two operations otherwise): half the instructions of a Horner step."""
        return self.call("llvm.fmuladd", a, b_, c)

    def _value(self, v):
        return v if isinstance(v, ir.Value) else self.c(v)

    def pick(self, cond, when_true: tuple, when_false: tuple) -> list:
        """Per-lane choice between two coefficient lists of the same length (so one Horner
        evaluation serves two intervals)."""
        return [self.select(cond, self._value(a), self._value(b_)) for a, b_ in zip(when_true, when_false)]

    # --- intrinsics ------------------------------------------------------------------------------
    def call(self, name: str, *args) -> ir.Value:
        return self.e.intrinsic(name, self.ty, list(args))

    def fabs(self, x):
        return self.call("llvm.fabs", x)

    def copysign(self, magnitude, sign):
        return self.call("llvm.copysign", magnitude, sign)

    def floor(self, x):
        return self.call("llvm.floor", x)

    def trunc(self, x):
        return self.call("llvm.trunc", x)

    def rint(self, x):
        return self.call("llvm.roundeven", x)

    def min(self, a, b_):
        """minnum: a NaN operand gives the other one (callers restore NaN at the end)."""
        return self.call("llvm.minnum", a, b_)

    def max(self, a, b_):
        return self.call("llvm.maxnum", a, b_)

    def clamp(self, x, lo: float, hi: float):
        return self.max(self.min(x, self.c(hi)), self.c(lo))

    # --- comparisons and selects -----------------------------------------------------------
    def lt(self, a, b_):
        return self.b.fcmp_ordered("<", a, self._value(b_))

    def le(self, a, b_):
        return self.b.fcmp_ordered("<=", a, self._value(b_))

    def gt(self, a, b_):
        return self.b.fcmp_ordered(">", a, self._value(b_))

    def ge(self, a, b_):
        return self.b.fcmp_ordered(">=", a, self._value(b_))

    def eq(self, a, b_):
        return self.b.fcmp_ordered("==", a, self._value(b_))

    def is_nan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def select(self, cond, a, b_):
        return self.b.select(cond, self._value(a), self._value(b_))

    def keep_nan(self, x, result):
        """NaN in, the same NaN out (minnum/maxnum clamps would otherwise swallow it)."""
        return self.select(self.is_nan(x), x, result)

    def keep_zero(self, x, result):
        """f(+-0) = +-0 for odd functions through 0 (and DAZ inputs, which compare equal to 0)."""
        return self.select(self.eq(x, 0.0), self.copysign(self.c(0.0), x), result)

    # --- bits --------------------------------------------------------------------------------------
    def bits(self, x):
        return self.b.bitcast(x, self.ity)

    def from_bits(self, n):
        return self.b.bitcast(n, self.ty)

    def to_int(self, x):
        """A float holding an integer as the integer type (fptosi)."""
        return self.b.fptosi(x, self.ity)

    def pow2(self, n):
        """2**n for an integer n of the normal exponent range, from the exponent bits."""
        return self.from_bits(self.b.shl(self.b.add(n, self.i(self.bias)), self.i(self.mantissa_bits)))

    def scale(self, y, n):
        """y * 2**n in two steps, so n may reach one past the largest exponent or the
        subnormal range (whose results FTZ flushes to zero)."""
        b = self.b
        low = self.i(self.min_exponent)
        half = b.ashr(n, self.i(1))
        half = b.select(b.icmp_signed("<", half, low), low, half)
        rest = b.sub(n, half)
        rest = b.select(b.icmp_signed("<", rest, low), low, rest)
        return self.mul(self.mul(y, self.pow2(half)), self.pow2(rest))


def two_sum(m: FloatOps, a, b_):
    """a + b as an unevaluated pair (sum, error), exact whatever the magnitudes (Knuth)."""
    s = m.add(a, b_)
    bb = m.sub(s, a)
    err = m.add(m.sub(a, m.sub(s, bb)), m.sub(b_, bb))
    return s, err


def widened(fn64):
    """An f32 function computed by the f64 one and rounded once: for the functions whose
    f32 form would need extra-precise steps (pow's y*log x, the range reduction of sin),
    f64 arithmetic is the simple exact-enough route, still vectorised (half the lanes)."""
    def f32(e, *args):
        wide = [e.b.fpext(a, F64) for a in args]
        return e.b.fptrunc(fn64(FloatOps(e, F64), *wide), F32)
    f32.__name__ = fn64.__name__ + "_via_f64"
    return f32
