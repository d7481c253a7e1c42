"""The elemental emitter: LLVM IR for the value of one element of an instruction.

`value(instr, index)` returns the IR value of `instr` at the multi-index `index` (a tuple of
i64 values), computed from its operands' elements. Data movement is index arithmetic
(broadcast drops dimensions, transpose permutes them, slice scales and shifts them), so a
fused kernel never materialises an intermediate array. Values are remembered per
(instruction, index) within a loop body, so a value used twice is computed once.

Semantics follow the evaluator (XLA on CPU): integer division and shifts are guarded
against undefined behaviour, float->int conversion saturates, maximum/minimum propagate NaN,
subnormals are flushed by the MXCSR setting the entry function makes.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

import llvmlite.ir as ir

from ...hlo.instruction import HloInstruction, uniform_value
from ...hlo.shape import ArrayShape, default_layout
from ...hlo.types import ElementType
from .fast_math import fast_binary, fast_unary, power_by_roots, root_exponent
from .indices import delinearize, linear_index
from .ir_types import F32, F64, I1, I32, alloca_in_entry, compute_type, etype, i64, storage_type, to_compute, to_storage


class Unsupported(NotImplementedError):
    """The CPU backend cannot emit this instruction (yet)."""


# float opcode -> (LLVM intrinsic, libm name for f32, libm name for f64); intrinsics first.
# Transcendentals with an inline form (llvm/fast_math.py) are emitted by it instead.
FLOAT_UNARY_CALLS = {
    "sqrt": ("llvm.sqrt", None, None),
    "floor": ("llvm.floor", None, None),
    "ceil": ("llvm.ceil", None, None),
    "round-nearest-afz": ("llvm.round", None, None),
    "round-nearest-even": ("llvm.roundeven", None, None),
    "abs": ("llvm.fabs", None, None),
    "cbrt": (None, "cbrtf", "cbrt"),
}
FLOAT_BINARY_CALLS = {
    "power": ("llvm.pow", None, None),
    "maximum": ("llvm.maximum", None, None),
    "minimum": ("llvm.minimum", None, None),
    "remainder": (None, "fmodf", "fmod"),
}
COMPARE_FLOAT = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


@cache
def register_rules() -> None:
    """Import the modules that add their opcodes' rules to RULES (they import this one)."""
    from . import bits, convolution, indexing, windows  # noqa: F401


class ElementalEmitter:
    def __init__(self, builder: ir.IRBuilder, module: ir.Module,
                 read_parameter: Callable[[HloInstruction, tuple], ir.Value],
                 read_constant: Callable[[HloInstruction, tuple], ir.Value]):
        register_rules()
        self.b = builder
        self.module = module
        self.read_parameter = read_parameter
        self.read_constant = read_constant
        self.scopes: list[dict] = [{}]
        self.float_flags: tuple[str, ...] = ()   # fast-math flags on float add/multiply
        # Instructions computed by other kernels: read from their buffers, never recomputed.
        self.buffer_reads: dict[int, Callable[[tuple], ir.Value]] = {}
        # Per windowed instruction, the dimensions whose windows are known to lie inside the
        # input at the current output positions (ops/windows.py: a pool's interior): no checks.
        self.window_inside: dict[int, frozenset[int]] = {}

    # --- memo scopes: a value computed inside a loop is not visible after it ------------
    def push_scope(self) -> None:
        self.scopes.append({})

    def pop_scope(self) -> None:
        self.scopes.pop()

    def value(self, instr: HloInstruction, index: tuple) -> ir.Value:
        key = (id(instr), tuple(id(v) for v in index))
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        if id(instr) in self.buffer_reads:
            result = self.buffer_reads[id(instr)](index)
            self.scopes[-1][key] = result
            return result
        rule = RULES.get(instr.opcode)
        if rule is None:
            raise Unsupported(f"the CPU backend cannot emit {instr.opcode} inside a kernel yet "
                              f"({instr.describe()})")
        result = rule(self, instr, index)
        if isinstance(instr.shape, ArrayShape) and instr.shape.dtype.computes_in_f32 \
                and instr.opcode not in ("parameter", "constant"):
            # every HLO op rounds its result to its own type; f32 is only how it is computed
            t = instr.shape.dtype
            result = to_compute(self.b, to_storage(self.b, result, t), t)
        self.scopes[-1][key] = result
        return result

    def operand(self, instr: HloInstruction, i: int, index: tuple) -> ir.Value:
        return self.value(instr.operands[i], index)

    # --- calls ----------------------------------------------------------------------------
    def intrinsic(self, name: str, ty: ir.Type, args: list[ir.Value]) -> ir.Value:
        fnty = ir.FunctionType(ty, [a.type for a in args])
        fn = self.module.declare_intrinsic(name, [ty], fnty)
        return self.b.call(fn, args)

    def libm(self, name: str, ty: ir.Type, args: list[ir.Value]) -> ir.Value:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * len(args)), name=name)
        return self.b.call(fn, args)

    def float_call(self, table: dict, opcode: str, ty: ir.Type, args: list[ir.Value]) -> ir.Value:
        intrinsic, f32_name, f64_name = table[opcode]
        if intrinsic:
            return self.intrinsic(intrinsic, ty, args)
        return self.libm(f32_name if ty == F32 else f64_name, ty, args)

    def scalar_computation(self, comp, args: list[ir.Value], reassociate: bool = False) -> list[ir.Value]:
        """A scalar computation (a reducer) applied to `args`; its results as a list.

        `reassociate` lets LLVM reorder float additions and multiplications (a reduction's
        accumulation may then be vectorised with several partial sums, as XLA's CPU
        reductions are; the order of a reduction is unspecified in HLO)."""
        bound = {p.parameter_number: a for p, a in zip(comp.parameters, args)}
        inner = ElementalEmitter(self.b, self.module, lambda p, idx: bound[p.parameter_number],
                                 self.read_constant)
        inner.float_flags = ("reassoc", "nsz") if reassociate else ()
        root = comp.root
        if root.opcode == "tuple":
            return [inner.value(r, ()) for r in root.operands]
        return [inner.value(root, ())]


def _const(ty: ir.Type, value) -> ir.Constant:
    return ir.Constant(ty, value)


# --- leaves ------------------------------------------------------------------------------------

def _parameter(e: ElementalEmitter, instr, index):
    return e.read_parameter(instr, index)


def _constant(e: ElementalEmitter, instr, index):
    return e.read_constant(instr, index)


def _iota(e: ElementalEmitter, instr, index):
    i = index[instr.attrs["iota_dimension"]]
    return _from_i64(e.b, i, etype(instr))


def _from_i64(b: ir.IRBuilder, v: ir.Value, t: ElementType) -> ir.Value:
    ty = compute_type(t)
    if t.is_float:
        return b.sitofp(v, ty)
    if t.is_pred:
        return b.icmp_unsigned("!=", v, i64(0))
    return b.trunc(v, ty) if ty.width < 64 else v


# --- elementwise -------------------------------------------------------------------------------

def _unary(e: ElementalEmitter, instr, index):
    b = e.b
    x = e.operand(instr, 0, index)
    t = etype(instr.operands[0])
    op = instr.opcode
    ty = compute_type(t)
    if t.is_float:
        fast = fast_unary(op, ty)
        if fast:
            return fast(e, x)
        if op in FLOAT_UNARY_CALLS:
            return e.float_call(FLOAT_UNARY_CALLS, op, ty, [x])
        if op == "negate":
            return b.fneg(x)
        if op == "rsqrt":
            return b.fdiv(_const(ty, 1.0), e.intrinsic("llvm.sqrt", ty, [x]))
        if op == "sign":
            zero = _const(ty, 0.0)
            sign = e.intrinsic("llvm.copysign", ty, [_const(ty, 1.0), x])
            is_zero_or_nan = b.fcmp_unordered("ueq", x, zero)
            return b.select(is_zero_or_nan, x, sign)   # keeps +-0 and NaN
        if op == "is-finite":
            return b.fcmp_ordered("one", e.intrinsic("llvm.fabs", ty, [x]), _const(ty, float("inf")))
    else:
        if op == "negate":
            return b.neg(x)
        if op == "not":
            return b.not_(x)
        if op == "abs":
            return b.select(b.icmp_signed("<", x, _const(ty, 0)), b.neg(x), x)
        if op == "sign":
            zero = _const(ty, 0)
            pos = b.zext(b.icmp_signed(">", x, zero), ty)
            neg = b.zext(b.icmp_signed("<", x, zero), ty)
            return b.sub(pos, neg)
        if op == "popcnt":
            return e.intrinsic("llvm.ctpop", ty, [x])
        if op == "count-leading-zeros":
            fn = e.module.declare_intrinsic("llvm.ctlz", [ty], ir.FunctionType(ty, [ty, I1]))
            return b.call(fn, [x, _const(I1, 0)])
    raise Unsupported(f"the CPU backend cannot emit {op} on {t}")


def _binary(e: ElementalEmitter, instr, index):
    b = e.b
    x = e.operand(instr, 0, index)
    y = e.operand(instr, 1, index)
    t = etype(instr.operands[0])
    op = instr.opcode
    ty = compute_type(t)
    if t.is_float:
        if op in ("add", "multiply") and e.float_flags:
            return (b.fadd if op == "add" else b.fmul)(x, y, flags=e.float_flags)
        simple = {"add": b.fadd, "subtract": b.fsub, "multiply": b.fmul, "divide": b.fdiv}
        if op in simple:
            return simple[op](x, y)
        if op == "power" and root_exponent(exponent := uniform_value(instr.operands[1])):
            return power_by_roots(e, x, float(exponent))
        fast = fast_binary(op, ty)
        if fast:
            return fast(e, x, y)
        if op in FLOAT_BINARY_CALLS:
            return e.float_call(FLOAT_BINARY_CALLS, op, ty, [x, y])
    elif t.is_pred:
        logical = {"and": b.and_, "or": b.or_, "xor": b.xor, "add": b.or_, "maximum": b.or_,
                   "multiply": b.and_, "minimum": b.and_}
        if op in logical:
            return logical[op](x, y)
    else:
        signed = t.is_signed
        simple = {"add": b.add, "subtract": b.sub, "multiply": b.mul, "and": b.and_, "or": b.or_, "xor": b.xor}
        if op in simple:
            return simple[op](x, y)
        if op in ("maximum", "minimum"):
            cmp = (b.icmp_signed if signed else b.icmp_unsigned)(">" if op == "maximum" else "<", x, y)
            return b.select(cmp, x, y)
        if op in ("divide", "remainder"):
            return _integer_division(b, op, x, y, t)
        if op in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
            return _shift(b, op, x, y, t)
        if op == "power":
            return _integer_power(b, x, y, t)
    raise Unsupported(f"the CPU backend cannot emit {op} on {t}")


def _integer_division(b: ir.IRBuilder, op: str, x, y, t: ElementType):
    """XLA: x/0 = -1 (all ones), x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0; no UB."""
    ty = compute_type(t)
    zero, one = _const(ty, 0), _const(ty, 1)
    by_zero = b.icmp_unsigned("==", y, zero)
    if t.is_signed:
        int_min = _const(ty, -(1 << (t.bits - 1)))
        overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, _const(ty, -1)))
        safe_y = b.select(b.or_(by_zero, overflow), one, y)
        if op == "divide":
            q = b.sdiv(x, safe_y)
            return b.select(by_zero, _const(ty, -1), b.select(overflow, int_min, q))
        r = b.srem(x, safe_y)
        return b.select(by_zero, x, b.select(overflow, zero, r))
    safe_y = b.select(by_zero, one, y)
    if op == "divide":
        return b.select(by_zero, _const(ty, -1), b.udiv(x, safe_y))
    return b.select(by_zero, x, b.urem(x, safe_y))


def _integer_power(b: ir.IRBuilder, x, y, t: ElementType):
    """XLA's EmitIntegerPow: six square-and-multiply steps (exponent bits above the sixth
    are ignored), wrapping products; an exponent negative as a signed number gives 1 for
    base 1 and 0 otherwise."""
    ty = compute_type(t)
    one = _const(ty, 1)
    acc, power, bits = one, x, y
    for _ in range(6):
        odd = b.trunc(b.and_(bits, one), ir.IntType(1))
        acc = b.select(odd, b.mul(acc, power), acc)
        power, bits = b.mul(power, power), b.lshr(bits, one)
    negative = b.icmp_signed("<", y, _const(ty, 0))
    base_is_one = b.zext(b.icmp_unsigned("==", x, one), ty)
    return b.select(negative, base_is_one, acc)


def _shift(b: ir.IRBuilder, op: str, x, y, t: ElementType):
    """Amounts are read as unsigned; >= the width gives 0 (or the sign fill)."""
    ty = compute_type(t)
    too_far = b.icmp_unsigned(">=", y, _const(ty, t.bits))
    safe = b.select(too_far, _const(ty, 0), y)
    if op == "shift-left":
        return b.select(too_far, _const(ty, 0), b.shl(x, safe))
    if op == "shift-right-logical":
        return b.select(too_far, _const(ty, 0), b.lshr(x, safe))
    return b.ashr(x, b.select(too_far, _const(ty, t.bits - 1), y))


def _compare(e: ElementalEmitter, instr, index):
    b = e.b
    x = e.operand(instr, 0, index)
    y = e.operand(instr, 1, index)
    t = etype(instr.operands[0])
    d = instr.attrs["direction"]
    if t.is_float:
        if instr.attrs.get("type") == "TOTALORDER":
            x, y = total_order_key(b, x, t), total_order_key(b, y, t)
            return b.icmp_signed(COMPARE_FLOAT[d], x, y)
        if d == "NE":
            return b.fcmp_unordered("!=", x, y)
        return b.fcmp_ordered(COMPARE_FLOAT[d], x, y)
    if t.is_signed:
        return b.icmp_signed(COMPARE_FLOAT[d], x, y)
    return b.icmp_unsigned(COMPARE_FLOAT[d], x, y)


def total_order_key(b: ir.IRBuilder, x, t: ElementType):
    """An integer that orders floats by IEEE total order: flip the magnitude bits of negatives."""
    ity = ir.IntType(64 if t.bits == 64 else 32)
    bits = b.bitcast(x, ity)
    mask = b.lshr(b.ashr(bits, _const(ity, ity.width - 1)), _const(ity, 1))
    return b.xor(bits, mask)


def _select(e: ElementalEmitter, instr, index):
    p = e.operand(instr, 0, index if instr.operands[0].shape.rank else ())
    return e.b.select(p, e.operand(instr, 1, index), e.operand(instr, 2, index))


def _clamp(e: ElementalEmitter, instr, index):
    lo_i, x_i, hi_i = instr.operands
    lo = e.value(lo_i, index if lo_i.shape.rank else ())
    hi = e.value(hi_i, index if hi_i.shape.rank else ())
    x = e.value(x_i, index)
    t = etype(instr)
    b = e.b
    if t.is_float:
        return e.intrinsic("llvm.minimum", compute_type(t), [e.intrinsic("llvm.maximum", compute_type(t), [x, lo]), hi])
    cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned
    above = b.select(cmp("<", x, lo), lo, x)
    return b.select(cmp(">", above, hi), hi, above)


def _convert(e: ElementalEmitter, instr, index):
    x = e.operand(instr, 0, index)
    return convert(e, x, etype(instr.operands[0]), etype(instr))


def convert(e: ElementalEmitter, x, src: ElementType, dst: ElementType):
    b = e.b
    sty, dty = compute_type(src), compute_type(dst)
    if src.is_pred:
        if dst.is_pred:
            return x
        return b.uitofp(x, dty) if dst.is_float else b.zext(x, dty)
    if dst.is_pred:
        if src.is_float:
            return b.fcmp_unordered("!=", x, _const(sty, 0.0))
        return b.icmp_unsigned("!=", x, _const(sty, 0))
    if src.is_float and dst.is_float:
        if sty == dty:
            # f32 -> narrower float rounding happens on store; the way back is exact
            return x
        if dst.name == "f16" or dst.bits < 16:
            # f64 -> f16 and the 8- and 4-bit floats round once (XLA does for the latter, as
            # ml_dtypes' scalar conversion does); bf16 rounds through f32, as XLA does
            return f64_to_f32_round_to_odd(e, x)
        return b.fpext(x, dty) if dty == F64 else b.fptrunc(x, dty)
    if src.is_float:
        name = "llvm.fptosi.sat" if dst.is_signed else "llvm.fptoui.sat"
        fn = e.module.declare_intrinsic(name, [dty, sty], ir.FunctionType(dty, [sty]))
        return b.call(fn, [x])
    if dst.is_float:
        return b.sitofp(x, dty) if src.is_signed else b.uitofp(x, dty)
    if dty.width < sty.width:
        return b.trunc(x, dty)
    if dty.width > sty.width:
        return b.sext(x, dty) if src.is_signed else b.zext(x, dty)
    return x



def f64_to_f32_round_to_odd(e: ElementalEmitter, x: ir.Value) -> ir.Value:
    """An f64 as f32 rounded to odd (toward zero, then the last bit set when inexact), for an
    f16, 8- or 4-bit float result, which is computed in f32 and rounded on store: rounding to
    nearest f32 here and again on store would round twice (a value just off a midpoint lands
    on it, then goes to even). Rounding to odd keeps the f32's extra bits honest, so the
    store's one rounding to nearest even is the f64's own (f32 has 13 bits more than f16). NaN and values
    f32 holds exactly are kept; an overflow becomes f32's largest odd value, which the store
    rounds to infinity as the f64 would."""
    b = e.b
    t = b.fptrunc(x, F32)
    back = b.fpext(t, F64)
    bits = b.bitcast(t, I32)
    beyond = b.fcmp_ordered(">", e.intrinsic("llvm.fabs", F64, [back]), e.intrinsic("llvm.fabs", F64, [x]))
    bits = b.select(beyond, b.sub(bits, ir.Constant(I32, 1)), bits)   # one step toward zero
    inexact = b.fcmp_ordered("!=", back, x)
    return b.bitcast(b.select(inexact, b.or_(bits, ir.Constant(I32, 1)), bits), F32)


def _broadcast(e, instr, index):
    return e.operand(instr, 0, tuple(index[d] for d in instr.attrs["dimensions"]))


def common_factors(a: tuple, b: tuple) -> list[tuple[slice, slice]]:
    """The shortest runs of dimensions of `a` and of `b` whose extents multiply to the same
    product, in order (XLA's common factors): a reshape maps each run of `b` to the run of
    `a` beside it and no index crosses runs. One run of everything when an extent is 0."""
    if 0 in a or 0 in b:
        return [(slice(0, len(a)), slice(0, len(b)))]
    runs, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        i0, j0, pa, pb = i, j, 1, 1
        if i < len(a):
            pa, i = a[i], i + 1
        if j < len(b):
            pb, j = b[j], j + 1
        while pa != pb:   # the products over all dimensions are equal, so the smaller side has more
            if pa < pb:
                pa, i = pa * a[i], i + 1
            else:
                pb, j = pb * b[j], j + 1
        runs.append((slice(i0, i), slice(j0, j)))
    return runs


def _reshape(e, instr, index):
    """Each run of common factors is linearised and delinearised on its own. Where the
    source side of a run is one dimension (a reshape that splits dimensions, as a split into
    heads does) its index is the run's flat index: multiplies and adds, no division, which
    would hide the access pattern from LLVM's vectoriser (and cost time to run); a run that
    merges dimensions divides only its own flat index."""
    src = instr.operands[0].shape.dims
    dst = instr.shape.dims
    src_index: list = []
    for s, d in common_factors(src, dst):
        flat = linear_index(e.b, index[d], dst[d], default_layout(len(dst[d])))
        if sum(n != 1 for n in src[s]) <= 1:
            src_index += [flat if n != 1 else i64(0) for n in src[s]]
        else:
            src_index += delinearize(e.b, flat, src[s], default_layout(len(src[s])))
    return e.operand(instr, 0, tuple(src_index))


def _bitcast(e, instr, index):
    src = instr.operands[0].shape
    dst = instr.shape
    if src.dims == dst.dims and src.minor_to_major == dst.minor_to_major:
        value = e.operand(instr, 0, index)
    else:
        flat = linear_index(e.b, index, dst.dims, dst.minor_to_major)
        value = e.operand(instr, 0, delinearize(e.b, flat, src.dims, src.minor_to_major))
    if src.dtype != dst.dtype:   # the same bits as another type (optimized HLO's comparators do this)
        b = e.b
        value = to_compute(b, b.bitcast(to_storage(b, value, src.dtype), storage_type(dst.dtype)), dst.dtype)
    return value


def _transpose(e, instr, index):
    perm = instr.attrs["dimensions"]
    src = [None] * len(perm)
    for i, p in enumerate(perm):
        src[p] = index[i]
    return e.operand(instr, 0, tuple(src))


def _slice(e, instr, index):
    b = e.b
    src = tuple(b.add(b.mul(i, i64(s.stride)), i64(s.start)) if (s.stride != 1 or s.start) else i
                for i, s in zip(index, instr.attrs["slice"]))
    return e.operand(instr, 0, src)


def _reverse(e, instr, index):
    dims = instr.attrs["dimensions"]
    shape = instr.shape.dims
    return e.operand(instr, 0, tuple(e.b.sub(i64(shape[d] - 1), i) if d in dims else i
                                     for d, i in enumerate(index)))


def _copy(e, instr, index):
    return e.operand(instr, 0, index)


def _pad(e, instr, index):
    b = e.b
    operand = instr.operands[0].shape
    valid = ir.Constant(I1, 1)
    src = []
    for i, p, n in zip(index, instr.attrs["padding"], operand.dims):
        shifted = b.sub(i, i64(p.low))
        step = p.interior + 1
        pos = b.sdiv(shifted, i64(step)) if step != 1 else shifted
        ok = b.and_(b.icmp_signed(">=", shifted, i64(0)), b.icmp_signed("<", pos, i64(n)))
        if step != 1:
            ok = b.and_(ok, b.icmp_signed("==", b.srem(shifted, i64(step)), i64(0)))
        valid = b.and_(valid, ok)
        src.append(clamp_index(b, pos, n))
    inside = e.operand(instr, 0, tuple(src))
    return b.select(valid, inside, e.value(instr.operands[1], ()))


def clamp_index(b: ir.IRBuilder, i: ir.Value, n: int) -> ir.Value:
    """i forced into [0, n-1], so a load whose value a select discards stays in bounds."""
    if n <= 1:
        return i64(0)
    low = b.select(b.icmp_signed("<", i, i64(0)), i64(0), i)
    return b.select(b.icmp_signed(">", low, i64(n - 1)), i64(n - 1), low)


def _concatenate(e, instr, index):
    b = e.b
    (axis,) = instr.attrs["dimensions"]
    offset = 0
    result = None
    for op in instr.operands:
        size = op.shape.dims[axis]
        if size == 0:
            continue
        local = list(index)
        local[axis] = clamp_index(b, b.sub(index[axis], i64(offset)), size)
        v = e.value(op, tuple(local))
        if result is None:
            result = v
        else:
            result = b.select(b.icmp_signed(">=", index[axis], i64(offset)), v, result)
        offset += size
    return result


def _reduce(e: ElementalEmitter, instr, index):
    """Reduce one output element: a loop over the reduced dimensions, folding in order."""
    results = emit_reduction_loop(e, instr, index)
    return results[0] if len(results) == 1 else results   # a variadic reduce (argmax): one per output


def _get_tuple_element(e: ElementalEmitter, instr, index):
    values = e.value(instr.operands[0], index)
    if not isinstance(values, list):
        raise Unsupported(f"the CPU backend reads tuple elements only of variadic reductions ({instr.describe()})")
    return values[instr.attrs["index"]]


def emit_reduction_loop(e: ElementalEmitter, instr: HloInstruction, index: tuple, span=None) -> list[ir.Value]:
    """The reduction of one output element; with span = (k, begin, end), of the part of it
    whose flat index over the first k reduced dimensions is in [begin, end) (a partial
    result, for a reduction split across threads)."""
    from .loops import for_range, for_span  # loops builds on this module
    n = len(instr.operands) // 2
    operand_shape: ArrayShape = instr.operands[0].shape
    reduced = sorted(instr.attrs["dimensions"])
    kept = [d for d in range(operand_shape.rank) if d not in reduced]
    b = e.b
    inits = [e.value(instr.operands[n + k], ()) for k in range(n)]
    accs = [alloca_in_entry(b, v.type) for v in inits]
    for acc, v in zip(accs, inits):
        b.store(v, acc)
    comp = instr.attrs["to_apply"]

    def body(inner_index):
        full = [None] * operand_shape.rank
        for d, i in zip(kept, index):
            full[d] = i
        for d, i in zip(reduced, inner_index):
            full[d] = i
        elems = [e.value(instr.operands[k], tuple(full)) for k in range(n)]
        current = [b.load(acc) for acc in accs]
        results = e.scalar_computation(comp, current + elems, reassociate=n == 1)
        for acc, r in zip(accs, results):
            b.store(r, acc)

    e.push_scope()
    extents = [operand_shape.dims[d] for d in reduced]
    if span is None:
        for_range(b, extents, body)
    else:
        for_span(b, extents, *span, body)
    e.pop_scope()
    return [b.load(acc) for acc in accs]


def _dot(e: ElementalEmitter, instr, index):
    """One element of a dot: a loop over the contracting dimensions (the fallback where no
    BLAS call fits: integer and 16-bit types, non-canonical forms)."""
    from .loops import for_range
    b = e.b
    lhs, rhs = instr.operands
    a = instr.attrs
    lb, rb = a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ())
    lc, rc = a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ())
    lfree = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
    out_t = etype(instr)
    ty = compute_type(out_t)
    acc = alloca_in_entry(b, ty)
    b.store(ir.Constant(ty, 0.0 if out_t.is_float else 0), acc)
    nb = len(lb)

    def body(k):
        li = [None] * lhs.shape.rank
        ri = [None] * rhs.shape.rank
        for j, (dl, dr) in enumerate(zip(lb, rb)):
            li[dl] = ri[dr] = index[j]
        for j, d in enumerate(lfree):
            li[d] = index[nb + j]
        for j, d in enumerate(rfree):
            ri[d] = index[nb + len(lfree) + j]
        for j, (dl, dr) in enumerate(zip(lc, rc)):
            li[dl] = ri[dr] = k[j]
        x = convert(e, e.value(lhs, tuple(li)), etype(lhs), out_t)
        y = convert(e, e.value(rhs, tuple(ri)), etype(rhs), out_t)
        cur = b.load(acc)
        if out_t.is_pred:   # i1 add is XOR: XLA's pred dot is an OR of ANDs
            b.store(b.or_(cur, b.and_(x, y)), acc)
        elif out_t.is_float:
            b.store(b.fadd(cur, b.fmul(x, y)), acc)
        else:
            b.store(b.add(cur, b.mul(x, y)), acc)

    e.push_scope()
    for_range(b, [lhs.shape.dims[d] for d in lc], body)
    e.pop_scope()
    return b.load(acc)


RULES: dict[str, Callable] = {
    "dot": _dot,
    "parameter": _parameter,
    "constant": _constant,
    "iota": _iota,
    "compare": _compare,
    "select": _select,
    "clamp": _clamp,
    "convert": _convert,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "bitcast": _bitcast,
    "transpose": _transpose,
    "slice": _slice,
    "reverse": _reverse,
    "copy": _copy,
    "pad": _pad,
    "concatenate": _concatenate,
    "reduce": _reduce,
    "get-tuple-element": _get_tuple_element,
}
for _op in ("abs", "negate", "sign", "not", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
            "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "logistic", "erf", "floor", "ceil",
            "round-nearest-afz", "round-nearest-even", "is-finite", "popcnt", "count-leading-zeros"):
    RULES[_op] = _unary
for _op in ("add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum", "minimum", "and",
            "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical"):
    RULES[_op] = _binary
