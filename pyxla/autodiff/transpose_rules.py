"""Transpose rules: the cotangents of a linear instruction's operands from its result's.

A rule is `rule(instr, ct, args) -> [cotangent per operand]`: `ct` is the cotangent of the
result (an array), `args` the operands, each either a `Linear` marker (the operand depends
on the tangents and wants a cotangent) or its value (a residual: a primal value, an index).
A rule returns None for operands that get no cotangent. Only the opcodes that JVP rules
apply to tangents appear here; written after JAX's transpose rules.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.tracing import bind, shape_of
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape, Shape
from .rule_helpers import (
    WINDOW_CHOOSERS,
    add_computation,
    array_shape,
    clamp_indices,
    gather_chosen,
    lowest_for,
    reducer_kind,
    scalar,
    scatter_windows,
    select_choice,
    zeros,
)
from .staging import semantic_attrs


class Linear:
    """An operand that depends on the tangents: the transpose gives it a cotangent."""

    __slots__ = ("shape",)

    def __init__(self, shape: Shape):
        self.shape = shape


def is_linear(x: Any) -> bool:
    return isinstance(x, Linear)


Rule = Callable[[HloInstruction, Any, list[Any]], list[Any]]
TRANSPOSE_RULES: dict[str, Rule] = {}


def _rule(*opcodes: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for opcode in opcodes:
            TRANSPOSE_RULES[opcode] = fn
        return fn
    return register


def _nonlinear(instr: HloInstruction, what: str) -> NotImplementedError:
    return NotImplementedError(f"transpose of HLO opcode '{instr.opcode}' ({instr.describe()}): {what}; "
                               "the tangent program is not linear, which is a bug in a JVP rule")


def _operand(instr: HloInstruction, i: int) -> ArrayShape:
    return array_shape(instr.operands[i].shape)


# --- arithmetic -----------------------------------------------------------------------------

@_rule("add")
def _add(instr, ct, args):
    return [ct if is_linear(a) else None for a in args]


@_rule("subtract")
def _subtract(instr, ct, args):
    x, y = args
    return [ct if is_linear(x) else None, lax.neg(ct) if is_linear(y) else None]


@_rule("negate")
def _negate(instr, ct, args):
    return [lax.neg(ct)]


@_rule("multiply")
def _multiply(instr, ct, args):
    x, y = args
    if is_linear(x) and is_linear(y):
        raise _nonlinear(instr, "both factors depend on the tangents")
    return [lax.mul(ct, y), None] if is_linear(x) else [None, lax.mul(x, ct)]


@_rule("divide")
def _divide(instr, ct, args):
    x, y = args
    if is_linear(y):
        raise _nonlinear(instr, "the divisor depends on the tangents")
    return [lax.div(ct, y), None]


@_rule("convert")
def _convert(instr, ct, args):
    return [lax.convert_element_type(ct, _operand(instr, 0).dtype)]


@_rule("copy")
def _copy(instr, ct, args):
    return [ct]


@_rule("reduce-precision")
def _reduce_precision(instr, ct, args):
    return [bind("reduce-precision", ct, **semantic_attrs(instr))]


@_rule("select")
def _select(instr, ct, args):
    pred, on_true, on_false = args
    if is_linear(pred):
        raise _nonlinear(instr, "the predicate depends on the tangents")
    zero = lax.full_like(ct, 0)
    return [None, lax.select(pred, ct, zero) if is_linear(on_true) else None,
            lax.select(pred, zero, ct) if is_linear(on_false) else None]


# --- data movement ---------------------------------------------------------------------------

@_rule("broadcast")
def _broadcast(instr, ct, args):
    operand, result = _operand(instr, 0), array_shape(instr.shape)
    dims = list(instr.attrs.get("dimensions", ()))
    summed = [d for d in range(result.rank) if d not in dims]
    r = lax.reduce_sum(ct, summed) if summed else ct
    order = sorted(dims)
    r = lax.transpose(r, [order.index(d) for d in dims])
    stretched = [i for i, d in enumerate(dims) if operand.dims[i] != result.dims[d]]
    if stretched:
        r = lax.reduce_sum(r, stretched)
    return [lax.reshape(r, operand.dims)]


@_rule("reshape")
def _reshape(instr, ct, args):
    return [lax.reshape(ct, _operand(instr, 0).dims)]


@_rule("transpose")
def _transpose(instr, ct, args):
    perm = list(instr.attrs["dimensions"])
    return [lax.transpose(ct, list(np.argsort(perm)))]


@_rule("reverse")
def _reverse(instr, ct, args):
    return [lax.rev(ct, instr.attrs["dimensions"])]


@_rule("slice")
def _slice(instr, ct, args):
    operand, result = _operand(instr, 0), array_shape(instr.shape)
    pads = []
    for sd, size_in, size_out in zip(instr.attrs["slice"], operand.dims, result.dims):
        last = sd.start + (size_out - 1) * sd.stride + 1 if size_out > 0 else sd.start
        pads.append((sd.start, size_in - last, sd.stride - 1 if size_out > 1 else 0))
    return [lax.pad(ct, scalar(0, instr.shape), pads)]


@_rule("pad")
def _pad(instr, ct, args):
    operand, padding_value = args
    config = instr.attrs["padding"]
    unpadded = lax.pad(ct, scalar(0, instr.shape), [(-p.low, -p.high, 0) for p in config])
    dims = shape_of(unpadded).dims
    t_operand = lax.slice(unpadded, [0] * len(dims), dims, [p.interior + 1 for p in config])
    t_value = None
    if is_linear(padding_value):
        everything = tuple(range(len(dims)))
        t_value = lax.sub(lax.reduce_sum(ct, everything), lax.reduce_sum(t_operand, everything))
    return [t_operand if is_linear(operand) else None, t_value]


@_rule("concatenate")
def _concatenate(instr, ct, args):
    dim = instr.attrs["dimensions"][0]
    out, start = [], 0
    for i, a in enumerate(args):
        size = _operand(instr, i).dims[dim]
        out.append(lax.slice_in_dim(ct, start, start + size, 1, dim) if is_linear(a) else None)
        start += size
    return out


@_rule("dynamic-slice")
def _dynamic_slice(instr, ct, args):
    operand, *starts = args
    if any(is_linear(s) for s in starts):
        raise _nonlinear(instr, "a start index depends on the tangents")
    return [bind("dynamic-update-slice", zeros(instr.operands[0].shape), ct, *starts)] + [None] * len(starts)


@_rule("dynamic-update-slice")
def _dynamic_update_slice(instr, ct, args):
    operand, update, *starts = args
    if any(is_linear(s) for s in starts):
        raise _nonlinear(instr, "a start index depends on the tangents")
    update_shape = _operand(instr, 1)
    t_operand = bind("dynamic-update-slice", ct, zeros(update_shape), *starts) if is_linear(operand) else None
    t_update = (bind("dynamic-slice", ct, *starts, dynamic_slice_sizes=update_shape.dims)
                if is_linear(update) else None)
    return [t_operand, t_update] + [None] * len(starts)


# --- gather and scatter ----------------------------------------------------------------------

@_rule("gather")
def _gather(instr, ct, args):
    """scatter-add of the cotangent into zeros. gather clamps each slice into bounds (XLA),
    scatter would skip it: the indices are clamped first so that both read the same place."""
    operand, indices = args
    if is_linear(indices):
        raise _nonlinear(instr, "the indices depend on the tangents")
    a = instr.attrs
    op_shape = _operand(instr, 0)
    ivd = a["index_vector_dim"]
    sizes = a["slice_sizes"]
    bounds = [op_shape.dims[d] - sizes[d] for d in a["start_index_map"]]
    clamped = clamp_indices(indices, ivd, bounds)
    attrs = {"update_window_dims": a["offset_dims"], "inserted_window_dims": a["collapsed_slice_dims"],
             "scatter_dims_to_operand_dims": a["start_index_map"], "index_vector_dim": ivd,
             "to_apply": add_computation(op_shape.dtype)}
    if a.get("operand_batching_dims"):
        attrs["input_batching_dims"] = a["operand_batching_dims"]
        attrs["scatter_indices_batching_dims"] = a["start_indices_batching_dims"]
    if a.get("indices_are_sorted"):
        attrs["indices_are_sorted"] = True
    return [bind("scatter", zeros(op_shape), clamped, ct, shape=op_shape, **attrs), None]


def _gathered_updates(instr: HloInstruction, ct: Any, indices: Any) -> Any:
    """The cotangent of scatter's updates: the windows of `ct` they were added to, zero for
    windows that scatter skipped as out of bounds."""
    gathered, fits = scatter_windows(instr, ct, indices)
    return lax.select(fits, gathered, lax.full_like(gathered, 0))


@_rule("scatter")
def _scatter(instr, ct, args):
    if len(args) != 3:
        raise NotImplementedError("transpose of a scatter of several arrays is not implemented")
    operand, indices, updates = args
    if is_linear(indices):
        raise _nonlinear(instr, "the indices depend on the tangents")
    if reducer_kind(instr.attrs["to_apply"]) != "add":
        raise NotImplementedError(f"transpose of HLO opcode 'scatter' ({instr.describe()}) is implemented "
                                  "for scatters that add (the JVP of one that overwrites adds)")
    t_operand = ct if is_linear(operand) else None
    t_updates = _gathered_updates(instr, ct, indices) if is_linear(updates) else None
    return [t_operand, None, t_updates]


# --- reductions and contractions --------------------------------------------------------------

@_rule("reduce")
def _reduce(instr, ct, args):
    if len(args) != 2 or reducer_kind(instr.attrs["to_apply"]) != "add":
        raise NotImplementedError(f"transpose of HLO opcode 'reduce' ({instr.describe()}) is implemented "
                                  "for sums only")
    operand, init = args
    shape = _operand(instr, 0)
    dims = set(instr.attrs["dimensions"])
    kept = [d for d in range(shape.rank) if d not in dims]
    t_operand = lax.broadcast_in_dim(ct, shape.dims, kept) if is_linear(operand) else None
    t_init = lax.reduce_sum(ct, tuple(range(len(kept)))) if is_linear(init) else None
    return [t_operand, t_init]


def _remaining(rank: int, *removed: Sequence[int]) -> list[int]:
    gone = {d for r in removed for d in r}
    return [d for d in range(rank) if d not in gone]


def _ranges_like(*lists: Sequence[int]) -> list[list[int]]:
    out, start = [], 0
    for x in lists:
        out.append(list(range(start, start + len(x))))
        start += len(x)
    return out


def _dot_transpose_lhs(ct: Any, x_shape: ArrayShape, y: Any, y_shape: ArrayShape, dn, swap_ans: bool) -> Any:
    """The cotangent of dot_general's lhs `x` (JAX's _dot_general_transpose_lhs)."""
    (x_contract, y_contract), (x_batch, y_batch) = dn
    x_kept = _remaining(x_shape.rank, x_contract, x_batch)
    y_kept = _remaining(y_shape.rank, y_contract, y_batch)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    ct_type = array_shape(shape_of(ct)).dtype
    if y_shape.dtype != ct_type:
        y = lax.convert_element_type(y, ct_type)
    product = lax.dot_general(ct, y, ((ans_y, y_kept), (ans_batch, list(y_batch))))
    x_contract_sorted_by_y = [x_contract[i] for i in np.argsort(y_contract)]
    out_axes = np.argsort(list(x_batch) + x_kept + x_contract_sorted_by_y)
    return lax.convert_element_type(lax.transpose(product, list(out_axes)), x_shape.dtype)


@_rule("dot")
def _dot(instr, ct, args):
    x, y = args
    if is_linear(x) and is_linear(y):
        raise _nonlinear(instr, "both factors depend on the tangents")
    a = instr.attrs
    xc, yc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
    xb, yb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    x_shape, y_shape = _operand(instr, 0), _operand(instr, 1)
    if is_linear(x):
        return [_dot_transpose_lhs(ct, x_shape, y, y_shape, ((xc, yc), (xb, yb)), False), None]
    return [None, _dot_transpose_lhs(ct, y_shape, x, x_shape, ((yc, xc), (yb, xb)), True)]


# --- windows and convolutions (after JAX's convolution.py and windowed_reductions.py) -----------

def _dilated_shape(shape: Sequence[int], dilation: Sequence[int]) -> list[int]:
    return [0 if n == 0 else 1 + d * (n - 1) for n, d in zip(shape, dilation)]


def _vjp_lhs_padding(in_shape, window, strides, out_shape, padding, lhs_dilation, rhs_dilation) -> list:
    """The padding of the convolution that gives a windowed op's input cotangent."""
    lhs_d = _dilated_shape(in_shape, lhs_dilation)
    rhs_d = _dilated_shape(window, rhs_dilation)
    out_d = _dilated_shape(out_shape, strides)
    before = [r - lo - 1 for r, (lo, _) in zip(rhs_d, padding)]
    return [(b, lhs + r - 1 - o - b) for b, lhs, r, o in zip(before, lhs_d, rhs_d, out_d)]


def _vjp_rhs_padding(in_shape, window, strides, out_shape, padding, lhs_dilation, rhs_dilation) -> list:
    """The padding of the convolution that gives a convolution's kernel cotangent."""
    lhs_d = _dilated_shape(in_shape, lhs_dilation)
    rhs_d = _dilated_shape(window, rhs_dilation)
    out_d = _dilated_shape(out_shape, strides)
    return [(lo, (o - lhs) + (r - lo - 1)) for (lo, _), lhs, r, o in zip(padding, lhs_d, rhs_d, out_d)]


def _window_chooser(instr: HloInstruction, ct: Any, args: list[Any]) -> list[Any]:
    """The pair reduction of the windowed max/min JVP: each window's cotangent goes to the
    element it chose, which is select_and_scatter_add's job."""
    values, tangents, _, _ = args
    ct_values, ct_tangents = ct
    if is_linear(values) or ct_values is not None or ct_tangents is None:
        raise _nonlinear(instr, "the chosen values depend on the tangents")
    window = instr.attrs["window"]
    scattered = lax.select_and_scatter_add(ct_tangents, values, WINDOW_CHOOSERS[instr.attrs["to_apply"]],
                                           [w.size for w in window], [w.stride for w in window],
                                           [(w.pad_low, w.pad_high) for w in window])
    return [None, scattered, None, None]


@_rule("reduce-window")
def _reduce_window(instr, ct, args):
    if instr.attrs["to_apply"] in WINDOW_CHOOSERS:
        return _window_chooser(instr, ct, args)
    operand, init = args
    if is_linear(init) or reducer_kind(instr.attrs["to_apply"]) != "add":
        raise NotImplementedError(f"transpose of HLO opcode 'reduce-window' ({instr.describe()}) is "
                                  "implemented for window sums of the operand only")
    window = instr.attrs["window"]
    if any(w.reversal for w in window):
        raise NotImplementedError(f"transpose of a reversed window ({instr.describe()}) is not implemented")
    in_shape = _operand(instr, 0).dims
    sizes, strides = [w.size for w in window], [w.stride for w in window]
    base, dilation = [w.lhs_dilate for w in window], [w.rhs_dilate for w in window]
    pads = _vjp_lhs_padding(in_shape, sizes, strides, array_shape(instr.shape).dims,
                            [(w.pad_low, w.pad_high) for w in window], base, dilation)
    padded = lax.pad(ct, scalar(0, instr.shape), [(lo, hi, s - 1) for (lo, hi), s in zip(pads, strides)])
    return [lax.reduce_window_sum(padded, sizes, base, [(0, 0)] * len(in_shape), None, dilation), None]


def _reshape_axis_into(src: int, dst: int, x: Any) -> Any:
    """`x` with dimension `src` merged into dimension `dst` (numbered without `src`), as its
    major part."""
    dims = list(array_shape(shape_of(x)).dims)
    perm = [i for i in range(len(dims)) if i != src]
    perm.insert(dst, src)
    new_shape = [n for i, n in enumerate(dims) if i != src]
    new_shape[dst] *= dims[src]
    return lax.reshape(x, new_shape, perm)


def _reshape_axis_out_of(src: int, size1: int, x: Any) -> Any:
    """`x` with dimension `src` split into (size1, rest)."""
    dims = list(array_shape(shape_of(x)).dims)
    dims[src:src + 1] = [size1, dims[src] // size1]
    return lax.reshape(x, dims)


def _conv_geometry(instr: HloInstruction):
    labels, window = instr.attrs["dim_labels"], instr.attrs["window"]
    specs = ((labels.input_batch, labels.input_feature, *labels.input_spatial),
             (labels.kernel_output_feature, labels.kernel_input_feature, *labels.kernel_spatial),
             (labels.output_batch, labels.output_feature, *labels.output_spatial))
    return (specs, [w.stride for w in window], [(w.pad_low, w.pad_high) for w in window],
            [w.lhs_dilate for w in window], [w.rhs_dilate for w in window],
            instr.attrs.get("feature_group_count", 1), instr.attrs.get("batch_group_count", 1))


def _swap(spec: Sequence[int]) -> tuple[int, ...]:
    return (spec[1], spec[0], *spec[2:])


def _same_type(x: Any, like: Any) -> Any:
    t = array_shape(shape_of(like)).dtype
    return x if array_shape(shape_of(x)).dtype == t else lax.convert_element_type(x, t)


def _conv_transpose_lhs(instr: HloInstruction, ct: Any, rhs: Any) -> Any:
    (lhs_spec, rhs_spec, out_spec), strides, padding, lhs_dil, rhs_dil, groups, batch_groups = _conv_geometry(instr)
    lhs_shape, rhs_shape = _operand(instr, 0), _operand(instr, 1)
    rhs = _same_type(rhs, ct)
    if groups > 1:
        rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], _reshape_axis_out_of(rhs_spec[0], groups, rhs))
    elif batch_groups > 1:
        rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], _reshape_axis_out_of(rhs_spec[0], batch_groups, rhs))
        groups = batch_groups
    pads = _vjp_lhs_padding([lhs_shape.dims[d] for d in lhs_spec[2:]], [rhs_shape.dims[d] for d in rhs_spec[2:]],
                            strides, [array_shape(instr.shape).dims[d] for d in out_spec[2:]], padding,
                            lhs_dil, rhs_dil)
    out = lax.conv_general_dilated(
        ct, lax.rev(rhs, rhs_spec[2:]), window_strides=lhs_dil, padding=pads, lhs_dilation=strides,
        rhs_dilation=rhs_dil, dimension_numbers=lax.ConvDimensionNumbers(out_spec, _swap(rhs_spec), lhs_spec),
        feature_group_count=groups)
    if batch_groups > 1:
        out = _reshape_axis_into(lhs_spec[1], lhs_spec[0], _reshape_axis_out_of(lhs_spec[1], batch_groups, out))
    return lax.convert_element_type(out, lhs_shape.dtype)


def _conv_transpose_rhs(instr: HloInstruction, ct: Any, lhs: Any) -> Any:
    (lhs_spec, rhs_spec, out_spec), strides, padding, lhs_dil, rhs_dil, groups, batch_groups = _conv_geometry(instr)
    lhs_shape, rhs_shape = _operand(instr, 0), _operand(instr, 1)
    lhs = _same_type(lhs, ct)
    if batch_groups > 1:
        groups, batch_groups = batch_groups, 1
    elif groups > 1:
        groups, batch_groups = 1, groups
    pads = _vjp_rhs_padding([lhs_shape.dims[d] for d in lhs_spec[2:]], [rhs_shape.dims[d] for d in rhs_spec[2:]],
                            strides, [array_shape(instr.shape).dims[d] for d in out_spec[2:]], padding,
                            lhs_dil, rhs_dil)
    out = lax.conv_general_dilated(
        lhs, ct, window_strides=rhs_dil, padding=pads, lhs_dilation=lhs_dil, rhs_dilation=strides,
        dimension_numbers=lax.ConvDimensionNumbers(_swap(lhs_spec), _swap(out_spec), _swap(rhs_spec)),
        feature_group_count=groups, batch_group_count=batch_groups)
    return lax.convert_element_type(out, rhs_shape.dtype)


@_rule("convolution")
def _convolution(instr, ct, args):
    lhs, rhs = args
    if is_linear(lhs) and is_linear(rhs):
        raise _nonlinear(instr, "both operands depend on the tangents")
    if is_linear(lhs):
        return [_conv_transpose_lhs(instr, ct, rhs), None]
    return [None, _conv_transpose_rhs(instr, ct, lhs)]


@_rule("select-and-scatter")
def _select_and_scatter(instr, ct, args):
    """Each window's source element received the cotangent of the element it was added to."""
    operand, source, init = args
    chooses = select_choice(instr.attrs["select"])
    if is_linear(operand) or is_linear(init) or chooses is None or reducer_kind(instr.attrs["scatter"]) != "add":
        raise NotImplementedError(f"transpose of HLO opcode 'select-and-scatter' ({instr.describe()}) is "
                                  "implemented for the source of a scatter that adds, chosen by a comparison")
    window = instr.attrs["window"]
    return [None, gather_chosen(operand, ct, chooses, window, lowest_for(chooses, _operand(instr, 0).dtype)), None]
