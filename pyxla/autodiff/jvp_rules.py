"""JVP rules: the tangent of each HLO opcode's result, written in pyxla.lax.

A rule is `rule(instr, primals, tangents, out) -> tangent`: `instr` is the staged
instruction (its shapes and attributes), `primals` its operands' values, `tangents` theirs
(None: zero, at least one is not None), `out` the primal result. The result must be linear
in the tangents, with each tangent reaching it only through the linear operations whose
transposes transpose_rules.py knows (add, subtract, negate, multiply or divide by a primal
value, select, convert, the data-movement ops, sum reductions, dot). Rules follow JAX's
conventions: max/min split the derivative evenly between tied operands, abs has slope 1 at
0, clamp passes none at its bounds, sign/floor/ceil/round have zero derivative.

A rule raises MissingRule for a form it does not handle (then the result is poisoned, see
forward.py).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from .. import lax
from .. import numpy as pnp
from ..frontend.tracing import bind, shape_of
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape
from ..hlo.types import S32
from .rule_helpers import (
    MissingRule,
    add_all,
    add_computation,
    array_shape,
    broadcast_to,
    full_like,
    gather_chosen,
    instantiate,
    overwrite_computation,
    reducer_kind,
    running_product_tangent,
    scalar,
    scatter_windows,
    window_views,
    with_ignored_parameters,
    zeros,
)
from .staging import semantic_attrs

Rule = Callable[[HloInstruction, list[Any], list[Any], Any], Any]
JVP_RULES: dict[str, Rule] = {}


def defjvp(opcode: str, *partials: Callable[..., Any] | None) -> None:
    """A rule from one function per operand, `partial(t, out, *primals)`: that operand's
    contribution to the tangent (None: the operand has none)."""
    def rule(instr, primals, tangents, out):
        return add_all([p(t, out, *primals) for p, t in zip(partials, tangents)
                        if p is not None and t is not None])
    JVP_RULES[opcode] = rule


def defzero(*opcodes: str) -> None:
    """Opcodes whose result is piecewise constant: zero tangent."""
    for opcode in opcodes:
        JVP_RULES[opcode] = lambda instr, primals, tangents, out: None


def deflinear(opcode: str, *positions: int) -> None:
    """Opcodes linear in the operands at `positions` (the others, indices, pass as they are):
    the tangent is the same opcode applied to the operands' tangents."""
    def rule(instr, primals, tangents, out):
        ops = [instantiate(tangents[i], instr.operands[i].shape) if i in positions else primals[i]
               for i in range(len(primals))]
        return bind(instr.opcode, *ops, shape=instr.shape, **semantic_attrs(instr))
    JVP_RULES[opcode] = rule


# --- arithmetic -----------------------------------------------------------------------------

defjvp("add", lambda t, out, x, y: t, lambda t, out, x, y: t)


def _subtract(instr, primals, tangents, out):
    t_x, t_y = tangents
    if t_x is not None and t_y is not None:
        return lax.sub(t_x, t_y)
    return t_x if t_y is None else lax.neg(t_y)


JVP_RULES["subtract"] = _subtract
defjvp("multiply", lambda t, out, x, y: lax.mul(t, y), lambda t, out, x, y: lax.mul(x, t))
defjvp("divide", lambda t, out, x, y: lax.div(t, y), lambda t, out, x, y: lax.mul(t, lax.neg(lax.div(out, y))))
defjvp("negate", lambda t, out, x: lax.neg(t))


def _balanced_eq(x: Any, z: Any, y: Any) -> Any:
    """1 where x is the result z and y is not, 0.5 where both are, else 0 (JAX's convention
    for max and min: tied operands share the derivative)."""
    return lax.div(lax.select(lax.eq(x, z), full_like(z, 1), full_like(z, 0)),
                   lax.select(lax.eq(y, z), full_like(z, 2), full_like(z, 1)))


for _opcode in ("maximum", "minimum"):
    defjvp(_opcode, lambda t, out, x, y: lax.mul(t, _balanced_eq(x, out, y)),
           lambda t, out, x, y: lax.mul(t, _balanced_eq(y, out, x)))


def _replace_zero(x: Any) -> Any:
    return lax.select(lax.eq(x, full_like(x, 0)), full_like(x, 1), x)


def _pow_base(t, out, x, y):
    # y * x^(y-1), with x^(0-1) read as x^1 so that y == 0 gives 0 rather than 0 * inf.
    exponent = lax.select(lax.eq(y, full_like(y, 0)), full_like(y, 1), lax.sub(y, full_like(y, 1)))
    return lax.mul(t, lax.mul(y, lax.pow(x, exponent)))


def _pow_exponent(t, out, x, y):
    # log(x) * x^y, with log(0) read as 0 (JAX's convention).
    return lax.mul(t, lax.mul(lax.log(_replace_zero(x)), out))


defjvp("power", _pow_base, _pow_exponent)
defjvp("remainder", lambda t, out, x, y: t,
       lambda t, out, x, y: lax.mul(t, lax.neg(lax.mul(lax.sign(lax.div(x, y)),
                                                       lax.floor(lax.abs(lax.div(x, y)))))))


def _atan2_denominator(x: Any, y: Any) -> Any:
    return lax.add(lax.mul(x, x), lax.mul(y, y))


defjvp("atan2", lambda t, out, x, y: lax.mul(t, lax.div(y, _atan2_denominator(x, y))),
       lambda t, out, x, y: lax.mul(t, lax.neg(lax.div(x, _atan2_denominator(x, y)))))

# --- math functions -------------------------------------------------------------------------

defjvp("exponential", lambda t, out, x: lax.mul(t, out))
defjvp("exponential-minus-one", lambda t, out, x: lax.mul(t, lax.add(out, 1)))
defjvp("log", lambda t, out, x: lax.div(t, x))
defjvp("log-plus-one", lambda t, out, x: lax.div(t, lax.add(x, 1)))
defjvp("tanh", lambda t, out, x: lax.mul(t, lax.sub(1, lax.mul(out, out))))
defjvp("logistic", lambda t, out, x: lax.mul(t, lax.mul(out, lax.sub(1, out))))
defjvp("sqrt", lambda t, out, x: lax.mul(t, lax.div(0.5, out)))
defjvp("rsqrt", lambda t, out, x: lax.mul(t, lax.mul(-0.5, lax.div(out, x))))
defjvp("cbrt", lambda t, out, x: lax.mul(t, lax.div(1 / 3, lax.mul(out, out))))
defjvp("sine", lambda t, out, x: lax.mul(t, lax.cos(x)))
defjvp("cosine", lambda t, out, x: lax.mul(t, lax.neg(lax.sin(x))))
defjvp("tan", lambda t, out, x: lax.mul(t, lax.add(1, lax.mul(out, out))))
defjvp("erf", lambda t, out, x: lax.mul(t, lax.mul(2 / math.sqrt(math.pi), lax.exp(lax.neg(lax.mul(x, x))))))
defjvp("abs", lambda t, out, x: lax.select(lax.ge(x, full_like(x, 0)), t, lax.neg(t)))
defzero("sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even")

# --- select, clamp, conversions -------------------------------------------------------------


def _select(instr, primals, tangents, out):
    _, t_true, t_false = tangents
    return lax.select(primals[0], instantiate(t_true, instr.shape), instantiate(t_false, instr.shape))


JVP_RULES["select"] = _select


def _clamp(instr, primals, tangents, out):
    lo, x, hi = primals
    t_lo, t_x, t_hi = tangents
    zero = full_like(out, 0)
    terms = []
    if t_lo is not None:   # the lower bound is the result where it exceeds x (and is below hi)
        terms.append(lax.select(lax.bitwise_and(lax.gt(lo, x), lax.lt(lo, hi)), broadcast_to(t_lo, instr.shape), zero))
    if t_x is not None:
        terms.append(lax.select(lax.bitwise_and(lax.gt(x, lo), lax.lt(x, hi)), t_x, zero))
    if t_hi is not None:
        terms.append(lax.select(lax.lt(hi, x), broadcast_to(t_hi, instr.shape), zero))
    return add_all(terms)


JVP_RULES["clamp"] = _clamp


def _convert(instr, primals, tangents, out):
    source, target = array_shape(instr.operands[0].shape).dtype, array_shape(instr.shape).dtype
    if not (source.is_float and target.is_float):
        return None   # to or from integers: piecewise constant
    return lax.convert_element_type(tangents[0], target)


JVP_RULES["convert"] = _convert
deflinear("copy", 0)
deflinear("reduce-precision", 0)


def _opt_barrier(instr, primals, tangents, out):
    """The tangents pass by (the barrier only keeps optimisations from moving primal values)."""
    return tangents[0]


JVP_RULES["opt-barrier"] = _opt_barrier

# --- data movement ---------------------------------------------------------------------------

for _opcode in ("broadcast", "reshape", "transpose", "slice", "reverse", "dynamic-slice", "gather"):
    deflinear(_opcode, 0)
deflinear("pad", 0, 1)
deflinear("dynamic-update-slice", 0, 1)


def _concatenate(instr, primals, tangents, out):
    ops = [instantiate(t, o.shape) for t, o in zip(tangents, instr.operands)]
    return bind("concatenate", *ops, shape=instr.shape, **semantic_attrs(instr))


JVP_RULES["concatenate"] = _concatenate


def _scatter(instr, primals, tangents, out):
    """scatter that adds: linear in the operand and the updates. scatter that overwrites:
    each position's tangent is that of the value written there last, found by scattering
    the updates' ids the same way (JAX's rule)."""
    if len(primals) != 3:
        raise MissingRule
    kind = reducer_kind(instr.attrs["to_apply"])
    _, indices, _ = primals
    t_operand, _, t_updates = tangents
    op_shape, upd_shape = array_shape(instr.operands[0].shape), array_shape(instr.operands[2].shape)
    attrs = semantic_attrs(instr)
    if kind == "add":
        return bind("scatter", instantiate(t_operand, op_shape), indices, instantiate(t_updates, upd_shape),
                    shape=instr.shape, **attrs)
    if kind in ("maximum", "minimum"):
        return _scatter_extremal(instr, primals, tangents, out)
    if kind != "second":
        raise MissingRule
    scatter_dims = [d for d in range(upd_shape.rank) if d not in attrs["update_window_dims"]]
    positions = [upd_shape.dims[d] for d in scatter_dims]
    ids = lax.add(lax.reshape(lax.iota(S32, math.prod(positions)), positions), 1)
    ids = lax.broadcast_in_dim(ids, upd_shape.dims, scatter_dims)
    written = bind("scatter", lax.full(op_shape.dims, 0, S32), indices, ids, shape=ArrayShape(S32, op_shape.dims),
                   **{**attrs, "to_apply": overwrite_computation(S32)})
    terms = []
    if t_operand is not None:   # positions no update wrote keep the operand's tangent
        terms.append(lax.select(lax.eq(written, lax.full_like(written, 0)), t_operand, zeros(op_shape)))
    if t_updates is not None:   # each update's tangent where it was the last one written
        read_back, _ = scatter_windows(instr, written, indices)
        kept = lax.select(lax.eq(read_back, ids), t_updates, zeros(upd_shape))
        terms.append(bind("scatter", zeros(op_shape), indices, kept, shape=instr.shape,
                          **{**attrs, "to_apply": add_computation(op_shape.dtype)}))
    return add_all(terms)


JVP_RULES["scatter"] = _scatter


def _scatter_extremal(instr, primals, tangents, out):
    """scatter that keeps the max (min): the derivative is shared evenly among the values
    equal to the result, the operand's and the updates' (JAX's rule)."""
    operand, indices, updates = primals
    t_operand, _, t_updates = tangents
    op_shape, upd_shape = array_shape(instr.operands[0].shape), array_shape(instr.operands[2].shape)
    attrs = {**semantic_attrs(instr), "to_apply": add_computation(op_shape.dtype)}
    read_back, fits = scatter_windows(instr, out, indices)
    won = lax.bitwise_and(fits, lax.eq(updates, read_back))
    kept = lax.eq(operand, out)
    ones, none = full_like(out, 1), zeros(op_shape)
    count = lax.add(bind("scatter", none, indices, lax.select(won, full_like(updates, 1), zeros(upd_shape)),
                         shape=instr.shape, **attrs), lax.select(kept, ones, none))
    terms = []
    if t_operand is not None:
        terms.append(lax.select(kept, t_operand, none))
    if t_updates is not None:
        terms.append(bind("scatter", none, indices, lax.select(won, t_updates, zeros(upd_shape)), shape=instr.shape,
                          **attrs))
    return lax.div(add_all(terms), lax.max(count, ones))

# --- reductions and contractions --------------------------------------------------------------


def _reduce(instr, primals, tangents, out):
    if len(primals) != 2:
        raise MissingRule   # variadic reductions (argmax's value and index pairs)
    kind = reducer_kind(instr.attrs["to_apply"])
    (x, _), (t_x, t_init) = primals, tangents
    dims = tuple(instr.attrs["dimensions"])
    if kind == "add":
        total = None
        if t_x is not None:
            total = bind("reduce", t_x, scalar(0, instr.shape), shape=instr.shape, **semantic_attrs(instr))
        if t_init is not None:
            total = add_all([total, broadcast_to(t_init, instr.shape)])
        return total
    if kind == "multiply" and t_init is None:
        return _product_tangent(x, t_x, dims, array_shape(instr.operands[0].shape).dims)
    if kind in ("maximum", "minimum") and t_init is None:
        # The derivative goes to the elements equal to the result, shared evenly among ties.
        rank = len(array_shape(instr.operands[0].shape).dims)
        kept = [d for d in range(rank) if d not in dims]
        chosen = lax.eq(x, lax.broadcast_in_dim(out, array_shape(instr.operands[0].shape).dims, kept))
        chosen = lax.convert_element_type(chosen, array_shape(instr.shape).dtype)
        return lax.div(lax.reduce_sum(lax.mul(t_x, chosen), dims), lax.reduce_sum(chosen, dims))
    raise MissingRule


JVP_RULES["reduce"] = _reduce


def _product_tangent(x: Any, t: Any, dims: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The tangent of a product over `dims`: the sum of each tangent times the product of the
    other elements, which is the product of the elements before it and of those after it
    (running products, so that zeros need no division)."""
    kept = [d for d in range(len(shape)) if d not in dims]
    flat = [shape[d] for d in kept] + [math.prod(shape[d] for d in dims)]
    x, t = (lax.reshape(lax.transpose(v, kept + list(dims)), flat) for v in (x, t))
    last = len(flat) - 1
    ones = lax.full(flat[:-1] + [1], 1, array_shape(shape_of(x)).dtype)
    before = lax.cumprod(lax.concatenate([ones, lax.slice_in_dim(x, 0, flat[-1] - 1, 1, last)], last), last)
    after = lax.cumprod(lax.concatenate([lax.slice_in_dim(x, 1, flat[-1], 1, last), ones], last), last, reverse=True)
    return lax.reduce_sum(lax.mul(t, lax.mul(before, after)), (last,))


def _bilinear(instr, primals, tangents, out):
    """A product linear in each operand (dot, convolution): t_x * y + x * t_y."""
    attrs = semantic_attrs(instr)
    (x, y), (t_x, t_y) = primals, tangents
    return add_all([None if t_x is None else bind(instr.opcode, t_x, y, shape=instr.shape, **attrs),
                    None if t_y is None else bind(instr.opcode, x, t_y, shape=instr.shape, **attrs)])


JVP_RULES["dot"] = _bilinear


def _convolution(instr, primals, tangents, out):
    """Bilinear; reversed windows are a convolution with the kernel's reversed spatial
    dimensions, written so, since the transpose rule knows unreversed windows only."""
    window = instr.attrs["window"]
    if not any(w.reversal for w in window):
        return _bilinear(instr, primals, tangents, out)
    spatial = instr.attrs["dim_labels"].kernel_spatial
    flipped = tuple(spatial[k] for k, w in enumerate(window) if w.reversal)
    attrs = {**semantic_attrs(instr), "window": tuple(dataclasses.replace(w, reversal=False) for w in window)}
    (x, y), (t_x, t_y) = primals, tangents
    return add_all([None if t_x is None else bind("convolution", t_x, lax.rev(y, flipped), shape=instr.shape, **attrs),
                    None if t_y is None else bind("convolution", x, lax.rev(t_y, flipped), shape=instr.shape, **attrs)])


JVP_RULES["convolution"] = _convolution


# Windows with more positions than this get no rule for products and dilated max/min: their
# rules emit a few instructions per window position.
MAX_WINDOW_POSITIONS = 64


def _reduce_window(instr, primals, tangents, out):
    """Window sums (sum pooling, cumsum) are linear. Window max/min (max pooling) take the
    tangent of the element each window chooses, by reducing (value, tangent) pairs (JAX's
    select_and_gather_add); the first of tied elements is chosen, as select_and_scatter does.
    Dilated max/min windows and window products go position by position through the window
    (cumprod by a scan of pairs instead)."""
    if len(primals) != 2 or tangents[1] is not None:
        raise MissingRule
    kind = reducer_kind(instr.attrs["to_apply"])
    if kind == "add":
        return bind("reduce-window", tangents[0], scalar(0, instr.shape), shape=instr.shape, **semantic_attrs(instr))
    window = instr.attrs["window"]
    dilated = any(w.lhs_dilate != 1 or w.rhs_dilate != 1 for w in window)
    if kind in ("maximum", "minimum") and not dilated:
        return gather_chosen(primals[0], tangents[0], lax.ge if kind == "maximum" else lax.le, window, primals[1])
    scan_axis = _running_axis(array_shape(instr.operands[0].shape).dims, window)
    if kind == "multiply" and scan_axis is not None:
        reverse = window[scan_axis].pad_high > 0
        tangent = running_product_tangent(primals[0], tangents[0], scan_axis, reverse)
        return lax.mul(tangent, broadcast_to(primals[1], instr.shape))
    if kind not in ("maximum", "minimum", "multiply") or math.prod(w.size for w in window) > MAX_WINDOW_POSITIONS:
        raise MissingRule
    xs = window_views(primals[0], primals[1], window)
    ts = window_views(tangents[0], scalar(0, instr.shape), window)
    if kind == "multiply":
        return lax.mul(_product_rule(xs, ts), broadcast_to(primals[1], instr.shape))
    return _chosen_by_position(xs, ts, lax.gt if kind == "maximum" else lax.lt)


def _running_axis(dims: tuple[int, ...], window: Any) -> int | None:
    """The axis of a running reduction (cumprod: a window of the whole axis, padded on one
    side to end at each element, stride 1), or None for another window."""
    long = [d for d, w in enumerate(window) if w.size > 1]
    if len(long) != 1 or any(w.stride != 1 or w.lhs_dilate != 1 or w.rhs_dilate != 1 for w in window):
        return None
    axis = long[0]
    n, w = dims[axis], window[axis]
    if w.size != n or (w.pad_low, w.pad_high) not in ((n - 1, 0), (0, n - 1)):
        return None
    others = [v for d, v in enumerate(window) if d != axis]
    return axis if all(v.pad_low == 0 and v.pad_high == 0 for v in others) else None


def _product_rule(xs: list[Any], ts: list[Any]) -> Any:
    """sum_k t_k * prod_{j != k} x_j, the products of the others as the products before and
    after each position (no division, so zeros are fine)."""
    before = [None] * len(xs)
    after = [None] * len(xs)
    for k in range(1, len(xs)):
        before[k] = xs[k - 1] if before[k - 1] is None else lax.mul(before[k - 1], xs[k - 1])
    for k in range(len(xs) - 2, -1, -1):
        after[k] = xs[k + 1] if after[k + 1] is None else lax.mul(after[k + 1], xs[k + 1])
    terms = []
    for t, b, a in zip(ts, before, after):
        others = a if b is None else b if a is None else lax.mul(b, a)
        terms.append(t if others is None else lax.mul(t, others))
    return add_all(terms)


def _chosen_by_position(xs: list[Any], ts: list[Any], better: Any) -> Any:
    """The tangent at the element each window chooses, the first of ties (a later position
    replaces the choice only when strictly `better`)."""
    best, tangent = xs[0], ts[0]
    for x, t in zip(xs[1:], ts[1:]):
        take = better(x, best)
        best, tangent = lax.select(take, x, best), lax.select(take, t, tangent)
    return tangent


JVP_RULES["reduce-window"] = _reduce_window


def _select_and_scatter(instr, primals, tangents, out):
    """Linear in the scattered source; the operand only chooses where (zero derivative)."""
    _, t_source, t_init = tangents
    if t_init is not None or reducer_kind(instr.attrs["scatter"]) != "add":
        raise MissingRule
    if t_source is None:
        return None
    return bind("select-and-scatter", primals[0], t_source, scalar(0, instr.shape), shape=instr.shape,
                **semantic_attrs(instr))


JVP_RULES["select-and-scatter"] = _select_and_scatter


def _sort(instr, primals, tangents, out):
    """Each tangent permuted as its operand was: the operands sorted again with an index
    operand along (the comparator ignoring it) give the permutation (JAX's rule)."""
    dim = instr.attrs["dimensions"][0]
    dims = array_shape(instr.operands[0].shape).dims
    comparator = with_ignored_parameters(instr.attrs["to_apply"], [ArrayShape(S32, ())] * 2)
    index = lax.broadcasted_iota(S32, dims, dim)
    attrs = {**semantic_attrs(instr), "to_apply": comparator}
    *_, permutation = bind("sort", *primals, index, **attrs)
    permuted = [None if t is None else pnp.take_along_axis(t, permutation, dim) for t in tangents]
    return permuted[0] if len(permuted) == 1 else tuple(permuted)


JVP_RULES["sort"] = _sort


def _topk(instr, primals, tangents, out):
    """The tangents of the entries chosen, at their indices along the last dimension."""
    _, indices = out
    return pnp.take_along_axis(tangents[0], indices, -1), None


JVP_RULES["topk"] = _topk
