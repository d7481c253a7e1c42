"""Opcodes defined by an expansion into other opcodes, as XLA's own expanders define them.

- map applies a scalar computation to every element: its expansion is that computation's
  instructions over whole arrays (XLA's MapInliner), so it may hold elementwise operations
  and constants only.
- stochastic-convert rounds floats to signed integers up or down by comparing the
  fraction with a random unsigned integer (XLA's StochasticConvertDecomposer, step for step).
The evaluator evaluates the expansion (expansion.evaluate_expanded), so both backends share
one definition.
"""
from __future__ import annotations

from typing import Any

from ...errors import ShapeError
from ..expansion import Emitter, evaluate_expanded
from ..shape import ArrayShape
from ..types import F32
from .registry import OpDef, op_def, register, require_declared
from .shape_ops import expect_array

# --- map ---------------------------------------------------------------------------------

def _map_shape(operands, attrs, declared):
    comp = attrs.get("to_apply")
    if comp is None:
        raise ShapeError("map needs the attribute to_apply=")
    arrays = [expect_array("map", s, f"operand {i}") for i, s in enumerate(operands)]
    if not arrays:
        raise ShapeError("map takes at least one operand")
    dims = arrays[0].dims
    if any(a.dims != dims for a in arrays):
        raise ShapeError("map operands must have the same dimensions, got "
                         + ", ".join(a.to_text(False) for a in arrays))
    if "dimensions" in attrs and tuple(attrs["dimensions"]) != tuple(range(len(dims))):
        raise ShapeError(f"map's dimensions= must be every dimension in order, 0..{len(dims) - 1}")
    params = comp.parameter_shapes()
    if len(params) != len(arrays):
        raise ShapeError(f"map's computation {comp.name} takes {len(params)} parameters, "
                         f"given {len(arrays)} operands")
    for i, (p, a) in enumerate(zip(params, arrays)):
        if not (isinstance(p, ArrayShape) and p.rank == 0 and p.dtype == a.dtype):
            raise ShapeError(f"map's computation {comp.name} parameter {i} is {p.to_text(False)}, "
                             f"expected {a.dtype}[]")
    result = comp.result_shape
    if not (isinstance(result, ArrayShape) and result.rank == 0):
        raise ShapeError(f"map's computation {comp.name} must return a scalar, returns {result.to_text(False)}")
    return ArrayShape(result.dtype, dims)


def _expand_map(instr, emit: Emitter):
    return _inline_over_arrays(instr.attrs["to_apply"], list(instr.operands), emit, instr.array_shape.dims)


def _inline_over_arrays(comp, args: list, emit: Emitter, dims: tuple[int, ...]):
    """The value of scalar computation `comp` on arrays of `dims`: each elementwise
    instruction over the arrays, a constant broadcast, tuples kept as Python tuples, a call
    inlined, and a conditional's branches all computed and chosen by select (XLA's
    ConditionalToSelect, which is what makes a map of a conditional run as a kernel)."""
    values: dict[int, Any] = {}
    for inner in comp.post_order():
        ops = [values[id(op)] for op in inner.operands]
        if inner.opcode == "parameter":
            value = args[inner.parameter_number]
        elif inner.opcode == "constant" and isinstance(inner.shape, ArrayShape):
            value = emit.constant(inner.literal, ArrayShape(inner.array_shape.dtype, dims))
        elif inner.opcode == "tuple":
            value = tuple(ops)
        elif inner.opcode == "get-tuple-element":
            value = ops[0][inner.attrs["index"]]
        elif inner.opcode == "call":
            value = _inline_over_arrays(inner.attrs["to_apply"], ops, emit, dims)
        elif inner.opcode == "conditional":
            value = _conditional_as_select(inner, ops, emit, dims)
        elif op_def(inner.opcode).fusion_kind == "elementwise" and not inner.called_computations():
            attrs = {k: v for k, v in inner.attrs.items() if k != "control-predecessors"}
            value = emit.op(inner.opcode, *ops, shape=ArrayShape(inner.array_shape.dtype, dims), **attrs)
        else:
            raise NotImplementedError(f"map: the mapped computation {comp.name} holds {inner.opcode}; "
                                      "only elementwise operations, constants, tuples, calls and "
                                      "conditionals can be mapped")
        values[id(inner)] = value
    return values[id(comp.root)]


def _conditional_as_select(inner, ops: list, emit: Emitter, dims: tuple[int, ...]):
    from .control import branch_computations
    selector, *branch_args = ops
    branches = [_inline_over_arrays(c, [a], emit, dims)
                for c, a in zip(branch_computations(inner.attrs), branch_args)]
    if "branch_computations" not in inner.attrs:   # pred: true picks the first
        return _select_leaves(emit, selector, branches[0], branches[1])
    chosen = branches[-1]   # an index out of range runs the last branch
    for i in reversed(range(len(branches) - 1)):
        is_i = emit.compare("EQ", selector, emit.constant(i, selector.array_shape))
        chosen = _select_leaves(emit, is_i, branches[i], chosen)
    return chosen


def _select_leaves(emit: Emitter, pred, a, b):
    if isinstance(a, tuple):
        return tuple(_select_leaves(emit, pred, x, y) for x, y in zip(a, b))
    return emit.select(pred, a, b)


register(OpDef("map", "opaque", _map_shape, evaluate_expanded, arity=(1, None),
               required_attrs=("to_apply",), optional_attrs=("dimensions",),
               doc="A scalar computation applied to every element of the operands.",
               extra={"expand": _expand_map}))


# --- stochastic-convert ------------------------------------------------------------------

def _stochastic_convert_shape(operands, attrs, declared):
    operand = expect_array("stochastic-convert", operands[0])
    random = expect_array("stochastic-convert", operands[1], "random operand")
    result = expect_array("stochastic-convert", require_declared("stochastic-convert", declared), "result")
    if not operand.dtype.is_float:
        raise ShapeError(f"stochastic-convert converts a float operand, got {operand.dtype}")
    if not (random.dtype.is_unsigned and random.dtype.bits == operand.dtype.bits):
        raise ShapeError(f"stochastic-convert's random operand must be an unsigned integer as wide as "
                         f"{operand.dtype}, got {random.dtype}")
    if random.dims != operand.dims or result.dims != operand.dims:
        raise ShapeError("stochastic-convert's operands and result must have the same dimensions")
    if not (result.dtype.is_integral and not result.dtype.is_unsigned):
        raise ShapeError(f"stochastic-convert converts to a signed integer type (as XLA), got {result.dtype}")
    return ArrayShape(result.dtype, operand.dims)


def _expand_stochastic_convert(instr, emit: Emitter):
    x, random = instr.operands
    shape, to = x.array_shape, instr.array_shape.dtype
    negative = emit.compare("LT", emit.unary("sign", x), emit.constant(0, shape))
    magnitude = emit.unary("abs", x)
    truncated = emit.unary("floor", magnitude)
    fraction = emit.binary("subtract", magnitude, truncated)
    if shape.dtype.name == "f16":   # 2^16 does not fit f16
        fraction = emit.unary("convert", fraction, F32)
    scale = emit.constant(2.0 ** random.array_shape.dtype.bits, fraction.array_shape)
    fixed = emit.unary("convert", emit.binary("multiply", fraction, scale), random.array_shape.dtype)
    round_up = emit.compare("LT", random, fixed)
    rounded = emit.unary("convert", truncated, to)
    rounded = emit.select(round_up, emit.binary("add", rounded, emit.constant(1, rounded.array_shape)), rounded)
    result = emit.select(negative, emit.unary("negate", rounded), rounded)
    least, greatest = -(1 << (to.bits - 1)), (1 << (to.bits - 1)) - 1
    for direction, bound in (("LE", least), ("GE", greatest)):
        beyond = emit.compare(direction, x, emit.constant(float(bound), shape))
        result = emit.select(beyond, emit.constant(bound, result.array_shape), result)
    return result


register(OpDef("stochastic-convert", "elementwise", _stochastic_convert_shape, evaluate_expanded, arity=2,
               doc="Float to signed integer, rounding up when the random operand is below the fraction.",
               extra={"expand": _expand_stochastic_convert}))
