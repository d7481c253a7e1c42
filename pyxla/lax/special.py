"""Special functions XLA expands into elementwise operations: erf_inv.

Each is written on the other lax functions, the way XLA's CHLO legalisation expands it, so
it traces into ordinary HLO (no opcode of its own) and runs eagerly on the evaluator.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo.types import BF16, F16, F32, F64
from ._values import aval, op_error
from .elementwise import abs, add, convert_element_type, eq, log1p, lt, mul, neg, select, sqrt, sub

# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): the single- and
# double-precision polynomials in w = -log(1 - x^2), with XLA's coefficients, highest
# degree first.
_F32_W_LT_5 = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
               -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_F32_W_GE_5 = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
_F64_W_LT_6_25 = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
    1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
    6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693, 1.6536545626831027356)
_F64_W_LT_16 = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
    1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
    2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
    6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
    -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
    3.0838856104922207635)
_F64_W_GE_16 = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
    -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
    2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
    -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
    1.0103004648645343977, 4.8499064014085844221)


def erf_inv(x: Any) -> Any:
    """The inverse error function, elementwise: erf_inv(erf(x)) = x, erf_inv(±1) = ±inf,
    NaN outside [-1, 1].

    XLA's expansion (Giles' polynomials; f16 and bf16 compute in f32). The float32
    polynomial rounds once per step, as XLA's FMA does; with XLA's log1p this gives XLA's
    bits, with pyxla's log1p (up to 2 ulp of XLA's) within 2 ulp of them.
    """
    t = aval(x).dtype
    if t in (F16, BF16):
        return convert_element_type(erf_inv(convert_element_type(x, F32)), t)
    if t not in (F32, F64):
        raise op_error("erf_inv", [x], "the operand must be a floating-point array")
    dt = t.np_dtype

    def c(v: float) -> Any:
        return np.array(v, dt)

    w = neg(log1p(mul(x, neg(x))))
    if t == F32:
        lt5 = lt(w, c(5.0))
        w = select(lt5, sub(w, c(2.5)), sub(sqrt(w), c(3.0)))
        # Each Horner step rounds once, as XLA's compiled code (one FMA) does: the product of
        # two float32 is exact in float64, and the float64 sum rounds to float32 (rounding
        # twice differs from FMA's once with a probability of about 2**-29).
        w64 = convert_element_type(w, F64)
        p = select(lt5, c(_F32_W_LT_5[0]), c(_F32_W_GE_5[0]))
        for lo, hi in zip(_F32_W_LT_5[1:], _F32_W_GE_5[1:]):
            coef = select(lt5, np.float64(np.float32(lo)), np.float64(np.float32(hi)))
            p = convert_element_type(add(mul(convert_element_type(p, F64), w64), coef), F32)
    else:
        lt625 = lt(w, c(6.25))
        lt16 = lt(w, c(16.0))

        def coefficient(i: int) -> Any:
            v = c(_F64_W_LT_6_25[i])
            if i < 19:
                v = select(lt625, v, c(_F64_W_LT_16[i]))
            if i < 17:
                v = select(lt16, v, c(_F64_W_GE_16[i]))
            return v

        w = select(lt625, sub(w, c(3.125)), sub(sqrt(w), select(lt16, c(3.25), c(5.0))))
        p = coefficient(0)
        for i in range(1, 17):
            p = add(coefficient(i), mul(p, w))
        for i in range(17, 19):
            p = select(lt16, add(coefficient(i), mul(p, w)), p)
        for i in range(19, 23):
            p = select(lt625, add(coefficient(i), mul(p, w)), p)
    return select(eq(abs(x), c(1.0)), mul(x, c(np.inf)), mul(p, x))
