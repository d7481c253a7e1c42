"""The algebraic simplifier: local rewrites that make a program cheaper and never change a value.

Every rule is exact in IEEE arithmetic: identities that fail for NaN, infinities or signed
zeros are applied to integers only (x * 0 -> 0), or in the form that is exact (x + (-0.0)
-> x, x - 0.0 -> x). Rules are filed by opcode in `RULES` and run by the rewrite driver.
Subnormal operands are the one exception: XLA on CPU flushes them in arithmetic, and a rule
that removes an arithmetic op (x * 1 -> x) keeps a subnormal x as it is.
"""
from __future__ import annotations

import numpy as np

from ..hlo.attributes import SliceDim
from ..hlo.instruction import HloInstruction, uniform_value
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from ..hlo.types import ElementType
from .dot_canonicalizer import is_canonical
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

RULES = RuleTable("algebraic")


# --- what rules ask of operands --------------------------------------------------------------

def is_value(instr: HloInstruction, value: bool | int | float, negative_zero: bool | None = None) -> bool:
    v = uniform_value(instr)
    if v is None:
        return False
    if v.dtype == np.bool_:
        return bool(v) == bool(value)
    if float(v) != float(value):
        return False
    if negative_zero is not None and float(value) == 0 and np.asarray(v).dtype.kind == "f":
        return bool(np.signbit(np.float64(v))) == negative_zero
    return True


def is_float(instr: HloInstruction) -> bool:
    return isinstance(instr.shape, ArrayShape) and instr.shape.dtype.is_float


def is_integral(instr: HloInstruction) -> bool:
    return isinstance(instr.shape, ArrayShape) and (instr.shape.dtype.is_integral or instr.shape.dtype.is_pred)


def all_ones(instr: HloInstruction) -> bool | int:
    """The all-bits-set value of an integer or pred type."""
    dt = instr.array_shape.dtype
    if dt.is_pred:
        return True
    return -1 if dt.is_signed else (1 << dt.bits) - 1


def same_dims(a: HloInstruction, b: HloInstruction) -> bool:
    return a.array_shape.dims == b.array_shape.dims


def fill(ctx: RewriteContext, like: HloInstruction, value: bool | int | float | np.ndarray) -> HloInstruction:
    """broadcast(constant(value)) of `like`'s shape."""
    shape = like.array_shape
    c = ctx.constant(value, ArrayShape(shape.dtype, ()), like=like)
    if shape.rank == 0:
        return c
    return ctx.add("broadcast", [c], shape, {"dimensions": ()}, like=like)


def commuted(instr: HloInstruction) -> tuple[tuple[HloInstruction, HloInstruction], ...]:
    """(x, c) pairs to try for a commutative binary op: both operand orders."""
    a, b = instr.operands
    return ((a, b), (b, a))


# --- additive and multiplicative identities -----------------------------------------------

@RULES.rule("add")
def add_zero(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    for x, c in commuted(instr):
        if is_integral(instr) and is_value(c, 0):
            return x
        if is_float(instr) and is_value(c, 0, negative_zero=True):   # x + (-0) == x, also for x = +-0
            return x
    return None


@RULES.rule("subtract")
def subtract_zero(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, c = instr.operands
    if is_value(c, 0, negative_zero=False if is_float(instr) else None):   # x - (+0) == x
        return x
    return None


@RULES.rule("subtract")
def subtract_self_integer(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, y = instr.operands
    if x is y and is_integral(instr) and not instr.array_shape.dtype.is_pred:
        return fill(ctx, instr, 0)
    return None


@RULES.rule("add")
def add_negated(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    for x, n in commuted(instr):
        if n.opcode == "negate":   # x + (-y) == x - y, bit for bit
            return ctx.add("subtract", [x, n.operands[0]], instr.shape, like=instr)
    return None


@RULES.rule("subtract")
def subtract_negated(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, n = instr.operands
    if n.opcode == "negate":
        return ctx.add("add", [x, n.operands[0]], instr.shape, like=instr)
    return None


@RULES.rule("multiply")
def multiply_one(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    for x, c in commuted(instr):
        if is_value(c, 1):
            return x
    return None


@RULES.rule("multiply")
def multiply_zero_integer(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    if not is_integral(instr):   # NaN * 0, inf * 0 and -x * 0 forbid this for floats
        return None
    for _x, c in commuted(instr):
        if is_value(c, 0):
            return c if same_dims(c, instr) else fill(ctx, instr, 0)
    return None


@RULES.rule("multiply")
def multiply_minus_one(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    if not is_float(instr):   # -INT_MIN overflows the same way, but keep integers literal
        return None
    for x, c in commuted(instr):
        if is_value(c, -1):
            return ctx.add("negate", [x], instr.shape, like=instr)
    return None


@RULES.rule("divide")
def divide_one(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, c = instr.operands
    return x if is_value(c, 1) else None


@RULES.rule("divide")
def divide_by_power_of_two(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """x / 2^k == x * 2^-k exactly when both 2^k and 2^-k are normal numbers of the type."""
    x, c = instr.operands
    if not is_float(instr):
        return None
    v = uniform_value(c)
    if v is None or not np.isfinite(float(v)) or float(v) == 0:
        return None
    mantissa, exponent = np.frexp(abs(float(v)))
    if mantissa != 0.5:
        return None
    reciprocal = np.asarray(1.0 / float(v)).astype(instr.array_shape.dtype.np_dtype)
    info = np.finfo(np.float32 if instr.array_shape.dtype.bits <= 32 else np.float64)
    if not (info.tiny <= abs(float(reciprocal)) <= info.max) or float(reciprocal) * float(v) != 1.0:
        return None
    return ctx.add("multiply", [x, fill(ctx, c, reciprocal)], instr.shape, like=instr)


@RULES.rule("power")
def power_small_integer(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, c = instr.operands
    if not is_float(instr):
        return None
    if is_value(c, 1):
        return x
    if is_value(c, 0):   # pow(x, 0) == 1 for every x, NaN included
        return fill(ctx, instr, 1)
    if is_value(c, 2):
        return ctx.add("multiply", [x, x], instr.shape, like=instr)
    if is_value(c, -1):
        return ctx.add("divide", [fill(ctx, instr, 1), x], instr.shape, like=instr)
    return None


# --- involutions and idempotent pairs ----------------------------------------------------

@RULES.rule("negate", "not")
def double_inverse(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    return x.operands[0] if x.opcode == instr.opcode else None


IDEMPOTENT = ("abs", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "sign")


@RULES.rule(*IDEMPOTENT)
def idempotent_twice(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    return x if x.opcode == instr.opcode else None


@RULES.rule("floor", "ceil", "round-nearest-afz", "round-nearest-even")
def rounding_of_rounded(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """floor(ceil(x)) == ceil(x): a value already integral is left alone by any rounding."""
    (x,) = instr.operands
    return x if x.opcode in ("floor", "ceil", "round-nearest-afz", "round-nearest-even") else None


@RULES.rule("abs")
def abs_of_negate(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if x.opcode == "negate":
        return ctx.add("abs", [x.operands[0]], instr.shape, like=instr)
    return None


@RULES.rule("maximum", "minimum", "and", "or")
def idempotent_binary(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, y = instr.operands
    return x if x is y else None


# --- bitwise and logical -------------------------------------------------------------------

@RULES.rule("and")
def and_constants(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    if not is_integral(instr):
        return None
    for x, c in commuted(instr):
        if is_value(c, all_ones(instr)):
            return x
        if is_value(c, 0):
            return c if same_dims(c, instr) else fill(ctx, instr, 0)
    return None


@RULES.rule("or")
def or_constants(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    if not is_integral(instr):
        return None
    for x, c in commuted(instr):
        if is_value(c, 0):
            return x
        if is_value(c, all_ones(instr)):
            return c if same_dims(c, instr) else fill(ctx, instr, all_ones(instr))
    return None


@RULES.rule("xor")
def xor_zero(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    for x, c in commuted(instr):
        if is_integral(instr) and is_value(c, 0):
            return x
    return None


@RULES.rule("compare")
def compare_self_integer(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x, y = instr.operands
    if x is not y or not is_integral(x):
        return None
    result = instr.attrs["direction"] in ("EQ", "LE", "GE")
    return fill(ctx, instr, result)


@RULES.rule("select")
def select_known(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    p, a, b = instr.operands
    if a is b:
        return a
    v = uniform_value(p)
    if v is not None and same_dims(a, instr) and same_dims(b, instr):
        return a if bool(v) else b
    return None


# --- conversions -----------------------------------------------------------------------------

@RULES.rule("convert")
def convert_to_same_type(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    return x if x.shape.compatible(instr.shape) else None


def _widening_is_lossless(src, mid) -> bool:
    """Every value of `src` is exactly representable in `mid`."""
    if src.is_float and mid.is_float:
        return mid.bits > src.bits and not (src.name == "bf16" and mid.name == "f16")
    if (src.is_integral or src.is_pred) and mid.is_float:
        mantissa = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}[mid.name]
        return src.is_pred or src.bits - (1 if src.is_signed else 0) <= mantissa
    if src.is_pred and mid.is_integral:
        return True
    if src.is_integral and mid.is_integral:
        if src.is_signed == mid.is_signed:
            return mid.bits >= src.bits
        return src.is_unsigned and mid.bits > src.bits
    return False


@RULES.rule("convert")
def convert_round_trip(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """convert(convert(x, wider), original) == x when the widening loses nothing."""
    (mid,) = instr.operands
    if mid.opcode != "convert":
        return None
    (x,) = mid.operands
    if x.shape.compatible(instr.shape) and _widening_is_lossless(x.array_shape.dtype, mid.array_shape.dtype):
        return x
    return None


# --- data movement ----------------------------------------------------------------------------

@RULES.rule("reshape", "bitcast", "copy")
def same_shape_no_op(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if not x.shape.compatible(instr.shape):
        return None
    if instr.opcode in ("bitcast", "copy") and x.array_shape.minor_to_major != instr.array_shape.minor_to_major:
        return None   # a layout change: a later bitcast may depend on it
    return x


@RULES.rule("reshape")
def reshape_of_reshape(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if x.opcode == "reshape":
        return ctx.add("reshape", [x.operands[0]], instr.shape, like=instr)
    return None


@RULES.rule("reshape", "transpose", "slice", "reverse")
def movement_of_scalar_broadcast(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Reshaping, transposing, slicing or reversing a splat is a smaller splat."""
    (x,) = instr.operands
    if x.opcode == "broadcast" and x.operands[0].array_shape.rank == 0:
        return ctx.add("broadcast", [x.operands[0]], instr.shape, {"dimensions": ()}, like=instr)
    return None


@RULES.rule("transpose")
def identity_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    dims = tuple(instr.attrs["dimensions"])
    return x if dims == tuple(range(len(dims))) else None


@RULES.rule("transpose")
def transpose_of_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if x.opcode != "transpose":
        return None
    inner, outer = x.attrs["dimensions"], instr.attrs["dimensions"]
    composed = tuple(inner[d] for d in outer)
    if composed == tuple(range(len(composed))):
        return x.operands[0]
    return ctx.add("transpose", [x.operands[0]], instr.shape, {"dimensions": composed}, like=instr)


@RULES.rule("broadcast")
def identity_broadcast(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    dims = tuple(instr.attrs["dimensions"])
    if same_dims(x, instr) and dims == tuple(range(len(dims))):
        return x
    return None


@RULES.rule("broadcast")
def broadcast_of_broadcast(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if x.opcode != "broadcast":
        return None
    outer = instr.attrs["dimensions"]
    composed = tuple(outer[d] for d in x.attrs["dimensions"])
    return ctx.add("broadcast", [x.operands[0]], instr.shape, {"dimensions": composed}, like=instr)


@RULES.rule("slice")
def full_slice(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    return x if same_dims(x, instr) else None


@RULES.rule("slice")
def slice_of_slice(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Element k of slice(slice(x)) is x[inner.start + (outer.start + k*outer.stride) * inner.stride]."""
    (x,) = instr.operands
    if x.opcode != "slice":
        return None
    composed = []
    for inner, outer, count in zip(x.attrs["slice"], instr.attrs["slice"], instr.array_shape.dims):
        start = inner.start + outer.start * inner.stride
        stride = inner.stride * outer.stride
        composed.append(SliceDim(start, start + (count - 1) * stride + 1 if count else start, stride))
    return ctx.add("slice", [x.operands[0]], instr.shape, {"slice": tuple(composed)}, like=instr)


@RULES.rule("slice")
def slice_of_concatenate(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """A slice that lies inside one operand of a concatenate is a slice of that operand."""
    (x,) = instr.operands
    if x.opcode != "concatenate":
        return None
    (axis,) = x.attrs["dimensions"]
    s = instr.attrs["slice"][axis]
    offset = 0
    for operand in x.operands:
        size = operand.array_shape.dims[axis]
        if offset <= s.start and s.limit <= offset + size:
            spec = list(instr.attrs["slice"])
            spec[axis] = SliceDim(s.start - offset, s.limit - offset, s.stride)
            return ctx.add("slice", [operand], instr.shape, {"slice": tuple(spec)}, like=instr)
        offset += size
    return None


@RULES.rule("pad")
def no_op_pad(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    x = instr.operands[0]
    if all(p.low == 0 and p.high == 0 and p.interior == 0 for p in instr.attrs["padding"]):
        return x
    return None


@RULES.rule("reverse")
def trivial_reverse(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (x,) = instr.operands
    if all(x.array_shape.dims[d] <= 1 for d in instr.attrs["dimensions"]):
        return x
    if x.opcode == "reverse" and sorted(x.attrs["dimensions"]) == sorted(instr.attrs["dimensions"]):
        return x.operands[0]
    return None


@RULES.rule("concatenate")
def concatenate_trivial(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    (axis,) = instr.attrs["dimensions"]
    kept = [o for o in instr.operands if o.array_shape.dims[axis] > 0]
    if len(kept) == 1:
        return kept[0]
    if len(kept) < len(instr.operands) and kept:
        return ctx.add("concatenate", kept, instr.shape, {"dimensions": (axis,)}, like=instr)
    return None


@RULES.rule("concatenate")
def concatenate_flatten(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """concatenate(concatenate(a, b), c) along one dimension is concatenate(a, b, c): a
    DenseNet block's features, concatenated one layer at a time, become one concatenate
    whose elements each read one operand instead of passing every level."""
    (axis,) = instr.attrs["dimensions"]
    if not any(o.opcode == "concatenate" and tuple(o.attrs["dimensions"]) == (axis,) for o in instr.operands):
        return None
    flat = []
    for o in instr.operands:
        inner = o.opcode == "concatenate" and tuple(o.attrs["dimensions"]) == (axis,)
        flat.extend(o.operands if inner else [o])
    return ctx.add("concatenate", flat, instr.shape, {"dimensions": (axis,)}, like=instr)


@RULES.rule("dynamic-slice")
def dynamic_slice_constant_starts(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """With constant starts, the clamping XLA does at run time can be done now: a static slice."""
    x, *starts = instr.operands
    values = [uniform_value(s) for s in starts]
    if any(v is None for v in values):
        return None
    sizes = instr.attrs["dynamic_slice_sizes"]
    spec = []
    for v, size, dim in zip(values, sizes, x.array_shape.dims):
        start = int(min(max(int(v), 0), dim - size))
        spec.append(SliceDim(start, start + size, 1))
    return ctx.add("slice", [x], instr.shape, {"slice": tuple(spec)}, like=instr)


# --- elementwise ops on broadcasts -----------------------------------------------------------

UNARY_ELEMENTWISE = ("abs", "negate", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one",
                     "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "logistic", "erf", "floor", "ceil",
                     "round-nearest-afz", "round-nearest-even", "not", "is-finite", "convert", "popcnt",
                     "count-leading-zeros")
BINARY_ELEMENTWISE = ("add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum", "minimum",
                      "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical", "compare")


@RULES.rule(*UNARY_ELEMENTWISE)
def unary_of_broadcast(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """f(broadcast(x)) == broadcast(f(x)), computed on the smaller array."""
    (b,) = instr.operands
    if b.opcode != "broadcast" or b.operands[0].array_shape.size >= b.array_shape.size:
        return None
    x = b.operands[0]
    inner = ctx.add(instr.opcode, [x], ArrayShape(instr.array_shape.dtype, x.array_shape.dims),
                    dict(instr.semantic_attrs()), like=instr)
    return ctx.add("broadcast", [inner], instr.shape, {"dimensions": b.attrs["dimensions"]}, like=instr)


@RULES.rule(*BINARY_ELEMENTWISE)
def binary_of_broadcasts(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """op(broadcast(a), broadcast(b)) with the same mapping == broadcast(op(a, b))."""
    a, b = instr.operands
    if a.opcode != "broadcast" or b.opcode != "broadcast":
        return None
    if a.attrs["dimensions"] != b.attrs["dimensions"] or not same_dims(a.operands[0], b.operands[0]):
        return None
    x, y = a.operands[0], b.operands[0]
    inner = ctx.add(instr.opcode, [x, y], ArrayShape(instr.array_shape.dtype, x.array_shape.dims),
                    dict(instr.semantic_attrs()), like=instr)
    return ctx.add("broadcast", [inner], instr.shape, {"dimensions": a.attrs["dimensions"]}, like=instr)


# --- reductions and dots -------------------------------------------------------------------------

# reducer opcode -> test that the init value is its identity
_IDENTITIES = {
    "add": lambda v, dt: float(v) == 0,
    "multiply": lambda v, dt: float(v) == 1,
    "maximum": lambda v, dt: (dt.is_float and float(v) == -np.inf) or
                             (not dt.is_float and v == (np.iinfo(dt.np_dtype).min if dt.is_integral else False)),
    "minimum": lambda v, dt: (dt.is_float and float(v) == np.inf) or
                             (not dt.is_float and v == (np.iinfo(dt.np_dtype).max if dt.is_integral else True)),
    "or": lambda v, dt: not bool(v) if dt.is_pred else int(v) == 0,
    "and": lambda v, dt: bool(v) if dt.is_pred else int(v) == all_ones_of(dt),
}


def all_ones_of(dt: ElementType) -> int:
    return -1 if dt.is_signed else (1 << dt.bits) - 1


def _reducer_opcode(comp) -> str | None:
    """The binary opcode a reducer computation applies to its two parameters, if that is all it does."""
    root = comp.root
    params = comp.parameters
    if len(params) != 2 or len(comp.instructions) != 3 or len(root.operands) != 2:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return root.opcode


@RULES.rule("reduce")
def reduce_of_unit_dims(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """Reducing only dimensions of size 1 with the reducer's identity as init is a reshape."""
    if len(instr.operands) != 2:
        return None
    x, init = instr.operands
    dims = instr.attrs["dimensions"]
    if any(x.array_shape.dims[d] != 1 for d in dims):
        return None
    opcode = _reducer_opcode(instr.attrs["to_apply"])
    v = uniform_value(init)
    if opcode not in _IDENTITIES or v is None or not _IDENTITIES[opcode](v, init.array_shape.dtype):
        return None
    return ctx.add("reshape", [x], instr.shape, like=instr)


@RULES.rule("dot")
def dot_of_transpose(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """dot(transpose(a), b): contract over a's own dimensions instead, when the free
    dimensions keep their order (so the result needs no transpose)."""
    attrs = instr.attrs
    for side in (0, 1):
        t = instr.operands[side]
        if t.opcode != "transpose":
            continue
        perm = t.attrs["dimensions"]
        prefix = "lhs" if side == 0 else "rhs"
        batch = attrs.get(f"{prefix}_batch_dims", ())
        contract = attrs.get(f"{prefix}_contracting_dims", ())
        free = [d for d in range(t.array_shape.rank) if d not in batch and d not in contract]
        mapped_free = [perm[d] for d in free]
        if mapped_free != sorted(mapped_free):
            continue
        new_attrs = dict(attrs)
        new_attrs[f"{prefix}_batch_dims"] = tuple(perm[d] for d in batch)
        new_attrs[f"{prefix}_contracting_dims"] = tuple(perm[d] for d in contract)
        if not batch:
            new_attrs.pop(f"{prefix}_batch_dims", None)
        operands = list(instr.operands)
        operands[side] = t.operands[0]
        if not is_canonical(operands[0].array_shape, operands[1].array_shape, new_attrs):
            continue   # the canonicalizer would put the transpose back
        return ctx.add("dot", operands, instr.shape, new_attrs, like=instr)
    return None


@RULES.rule("transpose")
def transpose_of_dot(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """transpose(dot(a, b)) of two matrices, the result's two dimensions swapped, is
    dot(b, a): the product is written in the order it is wanted, with no transpose kernel
    after it (a weight's gradient, dW = x^T g, comes from reverse mode as (g^T x)^T)."""
    (d,) = instr.operands
    if d.opcode != "dot" or tuple(instr.attrs["dimensions"]) != (1, 0) or len(d.users) != 1:
        return None
    a, b = d.operands
    attrs = d.attrs
    if attrs.get("lhs_batch_dims") or attrs.get("rhs_batch_dims") or a.array_shape.rank != 2 \
            or b.array_shape.rank != 2 or set(attrs) - {"lhs_contracting_dims", "rhs_contracting_dims",
                                                       "lhs_batch_dims", "rhs_batch_dims", "metadata"}:
        return None
    swapped = {"lhs_contracting_dims": tuple(attrs["rhs_contracting_dims"]),
               "rhs_contracting_dims": tuple(attrs["lhs_contracting_dims"])}
    if not is_canonical(b.array_shape, a.array_shape, swapped):
        return None
    return ctx.add("dot", [b, a], instr.shape, swapped, like=instr)


@hlo_pass("algebraic-simplifier")
def algebraic_simplifier(module: HloModule) -> bool:
    """Exact algebraic rewrites: identities, no-op movement, folded pairs (see RULES)."""
    return apply_rules(module, RULES)
