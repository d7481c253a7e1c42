"""f32 transcendentals as inline IR (range reduction + polynomials), so loops that use them
vectorise: a call to libm's expf or tanhf keeps a loop scalar.

Accuracy (tested against NumPy float64 over the whole range, special values included): exp
and log within 2 ulp, logistic within 3, tanh within 5 (the rational form near 0). The polynomials are the classic Cephes ones (exp,
log) and the rational minimax form Eigen and XLA use for tanh.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .ir_types import F32, I32

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
            5.0000001201e-1)
LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
            -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
TANH_NUM = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
            1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
TANH_CLAMP = 7.90531110763549805   # bounds the rational form's argument (used below 0.625 only)


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _horner(b: ir.IRBuilder, x, coefficients) -> ir.Value:
    acc = _c(coefficients[0])
    for c in coefficients[1:]:
        acc = b.fadd(b.fmul(acc, x), _c(c))
    return acc


def _min(e, a, b_):
    return e.intrinsic("llvm.minnum", F32, [a, b_])


def _max(e, a, b_):
    return e.intrinsic("llvm.maxnum", F32, [a, b_])


def _pow2(b: ir.IRBuilder, n_i32) -> ir.Value:
    """2**n as f32 for n in [-126, 127], built from the exponent bits."""
    return b.bitcast(b.shl(b.add(n_i32, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)


def exp_f32(e, x) -> ir.Value:
    b = e.b
    xc = _max(e, _min(e, x, _c(88.72283935546875)), _c(-104.0))
    fx = e.intrinsic("llvm.floor", F32, [b.fadd(b.fmul(xc, _c(LOG2E)), _c(0.5))])
    r = b.fsub(b.fsub(xc, b.fmul(fx, _c(LN2_HI))), b.fmul(fx, _c(LN2_LO)))
    z = b.fmul(r, r)
    y = b.fadd(b.fadd(b.fmul(_horner(b, r, EXP_POLY), z), r), _c(1.0))
    n = b.fptosi(fx, I32)
    half = b.ashr(n, ir.Constant(I32, 1))   # 2**n in two steps: n reaches 128 near the top
    clamp = ir.Constant(I32, -126)
    half_c = b.select(b.icmp_signed("<", half, clamp), clamp, half)
    rest = b.sub(n, half_c)
    rest_c = b.select(b.icmp_signed("<", rest, clamp), clamp, rest)
    y = b.fmul(b.fmul(y, _pow2(b, half_c)), _pow2(b, rest_c))
    y = b.select(b.fcmp_ordered(">", x, _c(88.72283935546875)), _c(float("inf")), y)
    y = b.select(b.fcmp_ordered("<", x, _c(-103.0)), _c(0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def log_f32(e, x) -> ir.Value:
    b = e.b
    bits = b.bitcast(x, I32)
    exponent = b.sub(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 126))
    mantissa = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, 0x007FFFFF)), ir.Constant(I32, 0x3F000000)), F32)
    small = b.fcmp_ordered("<", mantissa, _c(0.707106781186547524))
    exponent = b.sub(exponent, b.zext(small, I32))
    m = b.fsub(b.select(small, b.fadd(mantissa, mantissa), mantissa), _c(1.0))
    ef = b.sitofp(exponent, F32)
    z = b.fmul(m, m)
    y = b.fmul(b.fmul(_horner(b, m, LOG_POLY), m), z)
    y = b.fadd(y, b.fmul(ef, _c(LN2_LO)))
    y = b.fsub(y, b.fmul(z, _c(0.5)))
    result = b.fadd(b.fadd(m, y), b.fmul(ef, _c(LN2_HI)))
    # special values: log(+-0 or subnormal) = -inf (DAZ), log(x<0) = NaN, log(inf) = inf, NaN stays
    tiny = b.fcmp_ordered("<", x, _c(1.1754943508222875e-38))
    result = b.select(tiny, _c(float("-inf")), result)
    result = b.select(b.fcmp_ordered("<", x, _c(0.0)), _c(float("nan")), result)
    result = b.select(b.fcmp_ordered("==", x, _c(float("inf"))), x, result)
    return b.select(b.fcmp_unordered("uno", x, x), x, result)


def tanh_f32(e, x) -> ir.Value:
    """Near zero the rational form (no cancellation); away from it 1 - 2 / (exp(2|x|) + 1),
    whose error is exp's, with the sign put back."""
    b = e.b
    xc = _max(e, _min(e, x, _c(TANH_CLAMP)), _c(-TANH_CLAMP))
    x2 = b.fmul(xc, xc)
    rational = b.fdiv(b.fmul(xc, _horner(b, x2, TANH_NUM)), _horner(b, x2, TANH_DEN))
    ax = e.intrinsic("llvm.fabs", F32, [x])   # exp(2|x|) reaches inf for large |x|: the result is then 1
    far = b.fsub(_c(1.0), b.fdiv(_c(2.0), b.fadd(exp_f32(e, b.fadd(ax, ax)), _c(1.0))))
    far = e.intrinsic("llvm.copysign", F32, [far, x])
    result = b.select(b.fcmp_ordered("<", ax, _c(0.625)), rational, far)
    tiny = b.fcmp_ordered("<", e.intrinsic("llvm.fabs", F32, [x]), _c(0.0004))
    result = b.select(tiny, x, result)   # tanh(x) == x to f32 precision; keeps -0
    return b.select(b.fcmp_unordered("uno", x, x), x, result)


def logistic_f32(e, x) -> ir.Value:
    """1 / (1 + exp(-x)): exp(-x) overflows to inf for very negative x, giving 0 exactly."""
    b = e.b
    return b.fdiv(_c(1.0), b.fadd(_c(1.0), exp_f32(e, b.fneg(x))))


FAST_F32 = {"exponential": exp_f32, "log": log_f32, "tanh": tanh_f32, "logistic": logistic_f32}
