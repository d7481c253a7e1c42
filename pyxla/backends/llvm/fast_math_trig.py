"""sin, cos and tan (range reduction + kernel polynomials) and atan2, as inline IR.

Range reduction finds x = n*pi/2 + r with |r| <= pi/4 and the quadrant n mod 4:
- f64, |x| < 2**20 * pi/2: Cody-Waite with pi/2 in three 31-bit parts and a tail (n*part is
  exact for n < 2**22), the remainder kept as a double-double (hi, lo).
- f64 beyond, and every f32 argument: a Payne-Hanek reduction written without big-integer
  arithmetic. x = m * 2**k with an integer mantissa m, and x*2/pi mod 4 = m * T(k) mod 4
  where T(k) = (2**k * 2/pi) mod 4 is tabulated per exponent, split in chunks short enough
  that m * chunk is exact in f64. The integer parts of the exact products are dropped
  mod 4 and the fractions summed (in a double-double for f64). The tables are built at
  import from 1280 bits of 2/pi; the loads they need are gathers, so the loop stays
  vectorised. f32 is reduced and evaluated in f64 and rounded once.
Kernels: FreeBSD msun's minimax sin/cos polynomials on [-pi/4, pi/4] for f64 (with the
remainder's low part folded in), Taylor polynomials in f64 for f32 results.
atan2 reduces to atan(t), |t| <= tan(pi/8), by atan(a/b) = pi/4 + atan((a-b)/(a+b)), and
uses msun's atan polynomial; f32 atan2 runs in f64.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import llvmlite.ir as ir

from .fast_math_ir import FloatOps, two_sum
from .ir_types import F64, I32, I64

# 2/pi to 1280 bits: enough for the largest f64 exponent (2**1023) plus 150 bits of fraction.
TWO_OVER_PI_HEX = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921c"
    "fe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980f"
    "ef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f78a5292ea6bfb5fb11f8d5d08"
    "56033046fc7b6babf0cfbc209af4361d")
TWO_OVER_PI = Fraction(int(TWO_OVER_PI_HEX, 16), 2 ** (4 * len(TWO_OVER_PI_HEX)))

# Cody-Waite: pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_3T, each of the first three 31 bits wide.
PIO2_1 = 1.57079632673412561417e+00
PIO2_2 = 6.07710050630396597660e-11
PIO2_3 = 2.02226624871116645580e-21
PIO2_3T = 8.47842766036889956997e-32
CODY_WAITE_LIMIT = 1647099.0   # 2**20 * pi/2: n stays below 2**21
PIO2_HI = 1.5707963267948966      # pi/2 as a double-double
PIO2_LO = 6.123233995736766e-17
# msun __kernel_sin / __kernel_cos: sin r = r + r^3*S(r^2), cos r = 1 - r^2/2 + r^4*C(r^2)
SIN_F64 = (1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06,
           -1.98412698298579493134e-04, 8.33333333332248946124e-03, -1.66666666666666324348e-01)
COS_F64 = (-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07,
           2.48015872894767294178e-05, -1.38888888888741095749e-03, 4.16666666666666019037e-02)
# For f32 results a Taylor series in f64 suffices (truncation below 1e-10 relative).
SIN_TAYLOR = tuple(((-1) ** k) / math.factorial(2 * k + 1) for k in range(5, 0, -1))
COS_TAYLOR = tuple(((-1) ** k) / math.factorial(2 * k) for k in range(6, 1, -1))
# msun atan on |t| <= 7/16: atan t = t - t^3*A(t^2)
ATAN = (1.62858201153657823623e-02, -3.65315727442169155270e-02, 4.97687799461593236017e-02,
        -5.83357013379057348645e-02, 6.66107313738753120669e-02, -7.69187620504482999495e-02,
        9.09088713343650656196e-02, -1.11111104054623557880e-01, 1.42857142725034663711e-01,
        -1.99999999998764832476e-01, 3.33333333333329318027e-01)
TAN_PI_8 = 0.41421356237309503


# --- the per-exponent tables of (2**k * 2/pi) mod 4 -------------------------------------------

def _chunks(v: Fraction, count: int, width: int) -> list[float]:
    """v as `count` doubles of at most `width` significant bits each, leading first (the
    last one rounded)."""
    out = []
    for i in range(count):
        if v == 0:
            out.append(0.0)
            continue
        if i == count - 1:
            out.append(float(v))
            break
        lead = math.floor(math.log2(v))
        if Fraction(2) ** lead > v:
            lead -= 1
        unit = Fraction(2) ** (lead - width + 1)
        chunk = (v / unit).__floor__() * unit
        out.append(float(chunk))
        v -= chunk
    return out


@cache
def reduction_table(first_k: int, last_k: int, count: int, width: int) -> tuple[tuple[float, ...], ...]:
    """Per chunk index, the chunk of T(k) = (2**k * 2/pi) mod 4 for k in [first_k, last_k]."""
    rows = []
    for k in range(first_k, last_k + 1):
        v = TWO_OVER_PI * Fraction(2) ** k
        v -= 4 * (v / 4).__floor__()
        rows.append(_chunks(v, count, width))
    return tuple(zip(*rows))


def _table(e, name: str, values) -> ir.GlobalVariable:
    table = e.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(F64, len(values))
        table = ir.GlobalVariable(e.module, ty, name)
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(ty, list(values))
    return table


def _load(e, table, index):
    ptr = e.b.gep(table, [ir.Constant(I64, 0), index], inbounds=True)
    return e.b.load(ptr)


def _frac_mod4(m: FloatOps, p):
    """An exact product split into its integer part mod 4 (as a float) and its fraction."""
    n = m.rint(p)
    return m.sub(n, m.mul(m.floor(m.mul(n, m.c(0.25))), m.c(4.0))), m.sub(p, n)


# f32 arguments: x = mant * 2**(E - 150), mant < 2**24; chunks of 28 bits keep mant*chunk exact.
F32_TABLE = (-150, 105, 3, 28)


def reduce_f32_in_f64(m: FloatOps, x32):
    """(r, quadrant as i32) for an f32 x, computed in f64 from the per-exponent table."""
    e, b = m.e, m.b
    bits = b.bitcast(x32, I32)
    biased = b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF))
    mant = b.or_(b.and_(bits, ir.Constant(I32, 0x7FFFFF)), ir.Constant(I32, 0x800000))
    mant = b.select(b.icmp_unsigned("==", biased, ir.Constant(I32, 0)), ir.Constant(I32, 0), mant)   # DAZ
    mant = m.b.sitofp(mant, F64)
    mant = m.select(b.icmp_signed("<", bits, ir.Constant(I32, 0)), m.neg(mant), mant)
    index = b.zext(b.sub(biased, ir.Constant(I32, 1)), I64)   # biased 0 (zero) reads row 0: mant is 0
    index = b.select(b.icmp_unsigned("==", biased, ir.Constant(I32, 0)), ir.Constant(I64, 0), index)
    first_k, last_k, count, width = F32_TABLE
    chunks = reduction_table(first_k + 1, last_k, count, width)   # row i holds k = i - 149
    t = [_load(e, _table(e, f"pyxla.two_over_pi.f32.{j}", chunks[j]), index) for j in range(count)]
    n0, f = _frac_mod4(m, m.mul(mant, t[0]))
    f = m.add(m.add(f, m.mul(mant, t[1])), m.mul(mant, t[2]))
    n1 = m.rint(f)
    f = m.sub(f, n1)
    quadrant = b.fptosi(m.add(n0, n1), I32)
    return m.mul(f, m.c(PIO2_HI)), quadrant


# f64 arguments beyond the Cody-Waite limit: biased exponent >= 1043; x = mant * 2**(E - 1075)
# with mant split as hi * 2**26 + lo, both < 2**27; chunks of 26 bits keep every product exact.
F64_FIRST_BIASED = 1043
F64_CHUNKS = 6


def _split(m: FloatOps, a):
    """Veltkamp: a = hi + lo with 26-bit halves, so products of halves are exact."""
    c = m.mul(a, m.c(134217729.0))
    hi = m.sub(c, m.sub(c, a))
    return hi, m.sub(a, hi)


def _times_pio2(m: FloatOps, hi, lo):
    """(hi + lo) * pi/2 as a double-double (Dekker's product)."""
    p = m.mul(hi, m.c(PIO2_HI))
    ah, al = _split(m, hi)
    bh, bl = _split(m, m.c(PIO2_HI))
    err = m.add(m.add(m.add(m.sub(m.mul(ah, bh), p), m.mul(ah, bl)), m.mul(al, bh)), m.mul(al, bl))
    tail = m.add(err, m.add(m.mul(hi, m.c(PIO2_LO)), m.mul(lo, m.c(PIO2_HI))))
    r = m.add(p, tail)
    return r, m.sub(tail, m.sub(r, p))


def _reduce_f64_huge(m: FloatOps, x):
    e, b = m.e, m.b
    bits = m.bits(x)
    biased = b.and_(b.lshr(bits, m.i(52)), m.i(0x7FF))
    mant = b.or_(b.and_(bits, m.i((1 << 52) - 1)), m.i(1 << 52))
    hi = m.b.sitofp(b.lshr(mant, m.i(26)), F64)
    lo = m.b.sitofp(b.and_(mant, m.i((1 << 26) - 1)), F64)
    negative = b.icmp_signed("<", bits, m.i(0))
    hi, lo = m.select(negative, m.neg(hi), hi), m.select(negative, m.neg(lo), lo)
    index = b.sub(biased, m.i(F64_FIRST_BIASED))
    index = b.select(b.icmp_signed("<", index, m.i(0)), m.i(0), index)   # moderate lanes: unused
    first_k = F64_FIRST_BIASED - 1075
    chunks = reduction_table(first_k, 2047 - 1075 + 26, F64_CHUNKS, 26)   # 2047: inf/NaN lanes
    tables = [_table(e, f"pyxla.two_over_pi.f64.{j}", chunks[j]) for j in range(F64_CHUNKS)]
    index_hi = b.add(index, m.i(26))   # hi carries 2**26: T(k + 26)
    products = []
    for j in range(F64_CHUNKS):
        products.append(m.mul(hi, _load(e, tables[j], index_hi)))
        products.append(m.mul(lo, _load(e, tables[j], index)))
    quadrant, acc_hi, acc_lo = m.c(0.0), m.c(0.0), m.c(0.0)
    for k, p in enumerate(products):
        if k < 4:   # only the two leading chunks reach integers
            n, p = _frac_mod4(m, p)
            quadrant = m.add(quadrant, n)
        acc_hi, err = two_sum(m, acc_hi, p)
        acc_lo = m.add(acc_lo, err)
    n = m.rint(acc_hi)
    acc_hi, err = two_sum(m, m.sub(acc_hi, n), acc_lo)
    r_hi, r_lo = _times_pio2(m, acc_hi, err)
    return r_hi, r_lo, b.trunc(m.to_int(m.add(quadrant, n)), I32)


def reduce_f64(m: FloatOps, x):
    """(r_hi, r_lo, quadrant as i32) with x = quadrant*pi/2 + r_hi + r_lo."""
    b = m.b
    fn = m.rint(m.mul(m.clamp(x, -CODY_WAITE_LIMIT, CODY_WAITE_LIMIT), m.c(2 / math.pi)))
    hi = m.sub(x, m.mul(fn, m.c(PIO2_1)))   # exact: fn*PIO2_1 fits 53 bits, x is near it
    hi, lo = two_sum(m, hi, m.neg(m.mul(fn, m.c(PIO2_2))))
    hi, err = two_sum(m, hi, m.neg(m.mul(fn, m.c(PIO2_3))))
    lo = m.sub(m.add(lo, err), m.mul(fn, m.c(PIO2_3T)))
    r_hi = m.add(hi, lo)
    r_lo = m.sub(lo, m.sub(r_hi, hi))
    quadrant = b.trunc(m.to_int(fn), I32)
    far_hi, far_lo, far_q = _reduce_f64_huge(m, x)
    far = m.ge(m.fabs(x), CODY_WAITE_LIMIT)
    return m.select(far, far_hi, r_hi), m.select(far, far_lo, r_lo), b.select(far, far_q, quadrant)


# --- kernels ---------------------------------------------------------------------------------------

def _kernels_f64(m: FloatOps, r, lo):
    """(sin, cos) of r + lo, |r| <= pi/4, lo a few ulp of r (msun's kernels)."""
    z = m.mul(r, r)
    v = m.mul(z, r)
    s = m.horner(z, SIN_F64[:-1])
    # sin: r + (v*S1 + (z*(v*s_rest) - ... )): the small terms first, lo*cos(r) ~ lo*(1 - z/2)
    sin = m.add(r, m.add(m.mul(v, m.add(m.c(SIN_F64[-1]), m.mul(z, s))),
                         m.mul(lo, m.sub(m.c(1.0), m.mul(z, m.c(0.5))))))
    hz = m.mul(z, m.c(0.5))
    w = m.sub(m.c(1.0), hz)
    tail = m.sub(m.mul(m.mul(z, z), m.horner(z, COS_F64)), m.mul(r, lo))
    cos = m.add(w, m.add(m.sub(m.sub(m.c(1.0), w), hz), tail))
    return sin, cos


def _kernels_taylor(m: FloatOps, r):
    z = m.mul(r, r)
    sin = m.add(r, m.mul(m.mul(r, z), m.horner(z, SIN_TAYLOR)))
    cos = m.add(m.c(1.0), m.mul(z, m.horner(z, COS_TAYLOR + (-0.5,))))
    return sin, cos


def _by_quadrant(m: FloatOps, quadrant, sin, cos, want: str):
    """sin, cos or tan of x from those of r and x's quadrant (cos x = sin(x + pi/2))."""
    b = m.b
    one, two = ir.Constant(I32, 1), ir.Constant(I32, 2)
    if want == "tan":
        odd = b.icmp_unsigned("!=", b.and_(quadrant, one), ir.Constant(I32, 0))
        return m.select(odd, m.neg(m.div(cos, sin)), m.div(sin, cos))
    if want == "cos":
        quadrant = b.add(quadrant, one)
    odd = b.icmp_unsigned("!=", b.and_(quadrant, one), ir.Constant(I32, 0))
    negative = b.icmp_unsigned("!=", b.and_(quadrant, two), ir.Constant(I32, 0))
    value = m.select(odd, cos, sin)
    return m.select(negative, m.neg(value), value)


def _trig_f64(want: str):
    def fn(e, x):
        m = FloatOps(e, F64)
        r, lo, quadrant = reduce_f64(m, x)
        sin, cos = _kernels_f64(m, r, lo)
        result = _by_quadrant(m, quadrant, sin, cos, want)
        if want != "cos":
            result = m.keep_zero(x, result)
        return m.select(m.eq(m.fabs(x), float("inf")), m.c(float("nan")), m.keep_nan(x, result))
    fn.__name__ = f"{want}_f64"
    return fn


def _trig_f32(want: str):
    def fn(e, x):
        m = FloatOps(e, F64)
        r, quadrant = reduce_f32_in_f64(m, x)
        sin, cos = _kernels_taylor(m, r)
        result = e.b.fptrunc(_by_quadrant(m, quadrant, sin, cos, want), x.type)
        m32 = FloatOps(e, x.type)
        if want != "cos":
            result = m32.keep_zero(x, result)
        inf = m32.eq(m32.fabs(x), float("inf"))
        return m32.select(inf, m32.c(float("nan")), m32.keep_nan(x, result))
    fn.__name__ = f"{want}_f32"
    return fn


sin_f32, cos_f32, tan_f32 = _trig_f32("sin"), _trig_f32("cos"), _trig_f32("tan")
sin_f64, cos_f64, tan_f64 = _trig_f64("sin"), _trig_f64("cos"), _trig_f64("tan")


# --- atan2 -------------------------------------------------------------------------------------------

def atan2(m: FloatOps, y, x):
    """atan2 with C's quadrants and signed zeros (NumPy's arctan2)."""
    ay, ax = m.fabs(y), m.fabs(x)
    num, den = m.min(ay, ax), m.max(ay, ax)
    far = m.gt(num, m.mul(den, m.c(TAN_PI_8)))
    t = m.select(far, m.div(m.sub(num, den), m.add(num, den)), m.div(num, den))
    z = m.mul(t, t)
    a = m.sub(t, m.mul(m.mul(t, z), m.horner(z, ATAN)))
    a = m.add(m.select(far, m.c(math.pi / 4), m.c(0.0)), a)
    a = m.select(m.gt(ay, ax), m.sub(m.c(math.pi / 2), a), a)
    x_negative = m.lt(m.copysign(m.c(1.0), x), 0.0)   # -0 counts as negative
    a = m.select(x_negative, m.sub(m.c(math.pi), a), a)
    # 0/0 and inf/inf: the quadrant's angle directly
    both_zero = m.b.and_(m.eq(ay, 0.0), m.eq(ax, 0.0))
    a = m.select(both_zero, m.select(x_negative, m.c(math.pi), m.c(0.0)), a)
    both_inf = m.b.and_(m.eq(ay, float("inf")), m.eq(ax, float("inf")))
    a = m.select(both_inf, m.select(x_negative, m.c(3 * math.pi / 4), m.c(math.pi / 4)), a)
    a = m.copysign(a, y)
    nan = m.b.or_(m.is_nan(x), m.is_nan(y))
    return m.select(nan, m.add(x, y), a)
