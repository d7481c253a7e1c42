"""Data-movement opcodes: constant, parameter, broadcast, reshape, transpose, slice,
concatenate, pad, reverse, iota, copy, bitcast, tuple and get-tuple-element.

Each output element of these ops is one operand element (or a literal, or a padding
value), so their evaluation is NumPy indexing and never arithmetic: values, NaN payloads
and subnormals pass through bit for bit. Only `bitcast` looks at layouts, because it
reinterprets the physical buffer; everything else works on logical row-major values.

The small checkers at the top (`expect_array`, `dimension_list`, ...) are shared with
indexing.py, whose ops validate the same kinds of attributes.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ...errors import EvaluationError, ShapeError
from ..dims import DimExpr
from ..shape import ArrayShape, Shape, TupleShape
from .registry import OpDef, register, require_declared

# --- shared checkers ------------------------------------------------------------------

def expect_array(opcode: str, shape: Shape, what: str = "operand") -> ArrayShape:
    if not isinstance(shape, ArrayShape):
        raise ShapeError(f"{opcode}: {what} must be an array, got {shape.to_text(False)}")
    return shape


def expect_attr(opcode: str, attrs: dict, name: str) -> Any:
    if name not in attrs:
        raise ShapeError(f"{opcode} needs the attribute {name}=")
    return attrs[name]


def int_list(opcode: str, attrs: dict, name: str, default: tuple | None = None) -> tuple[int, ...]:
    """Attribute `name` as a tuple of ints; required unless a default is given."""
    value = attrs.get(name, default) if default is not None else expect_attr(opcode, attrs, name)
    # Sizes (slice_sizes, dynamic_slice_sizes) may be symbolic (dims.py); dimension numbers are
    # checked as ints by dimension_list.
    return tuple(v if isinstance(v, DimExpr) else int(v) for v in value)   # type: ignore[misc]


def dimension_list(opcode: str, name: str, dims: Iterable[int], rank: int,
                   ascending: bool = False) -> tuple[int, ...]:
    """`dims` checked as dimension numbers of a rank-`rank` array: in range, no repeats,
    and ascending when the opcode requires it."""
    dims = tuple(int(d) for d in dims)
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{opcode}: {name}={{{_join(dims)}}} names dimension {d}, "
                             f"outside [0, {rank})")
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{opcode}: {name}={{{_join(dims)}}} repeats a dimension")
    if ascending and list(dims) != sorted(dims):
        raise ShapeError(f"{opcode}: {name}={{{_join(dims)}}} must be in ascending order")
    return dims


def expect_same_dtype(opcode: str, want: ArrayShape, got: ArrayShape, what: str) -> None:
    if got.dtype != want.dtype:
        raise ShapeError(f"{opcode}: {what} has element type {got.dtype}, expected {want.dtype}")


def declared_array(opcode: str, declared: Shape | None) -> ArrayShape:
    return expect_array(opcode, require_declared(opcode, declared), "result")


def _join(values) -> str:
    return ",".join(str(v) for v in values)


# --- constant and parameter -----------------------------------------------------------

def literal_problem(literal: Any, shape: Shape) -> str | None:
    """Why `literal` cannot be the value of a constant of `shape`, or None when it fits.

    The shape rule only sees attributes, so the verifier (or the parser) calls this
    through the record's extra["check_instruction"] to compare a constant's literal
    with its declared shape.
    """
    if isinstance(shape, TupleShape):
        if not isinstance(literal, tuple) or len(literal) != len(shape.elements):
            return f"literal is not a tuple of {len(shape.elements)} elements"
        for i, (lit, s) in enumerate(zip(literal, shape.elements)):
            problem = literal_problem(lit, s)
            if problem:
                return f"element {i}: {problem}"
        return None
    if not isinstance(shape, ArrayShape):
        return f"a constant cannot have shape {shape.to_text(False)}"
    if not isinstance(literal, np.ndarray):
        return f"literal is a {type(literal).__name__}, not an array"
    if literal.shape != shape.dims:
        return f"literal has dimensions {list(literal.shape)}, the shape says {list(shape.dims)}"
    if literal.dtype != shape.dtype.np_dtype:
        return f"literal is stored as {literal.dtype}, {shape.dtype} needs {shape.dtype.np_dtype}"
    return None


def _check_constant(instr) -> None:
    problem = literal_problem(instr.literal, instr.shape)
    if problem:
        raise ShapeError(f"constant {instr.shape.to_text(False)}: {problem}")


def _constant_shape(operands, attrs, declared):
    return require_declared("constant", declared)


def _read_only(value):
    """The literal as a read-only view: evaluation must never write into a module's constant."""
    if isinstance(value, tuple):
        return tuple(_read_only(v) for v in value)
    view = value.view()
    view.flags.writeable = False
    return view


def _constant_evaluate(instr, operands, ctx):
    return _read_only(instr.literal)


def _parameter_shape(operands, attrs, declared):
    return require_declared("parameter", declared)


def _parameter_evaluate(instr, operands, ctx):
    raise EvaluationError(f"{instr.describe()}: parameters are bound by the evaluator, "
                          "not evaluated as instructions")


# A constant's element i is its literal's element i: fused into a consumer it is read at
# the consumer's own index, exactly like an elementwise producer, so it is "elementwise".
register(OpDef("constant", "elementwise", _constant_shape, _constant_evaluate, arity=0,
               doc="A literal value.", extra={"check_instruction": _check_constant}))

# A parameter is a computation's input buffer; nothing can be fused into it: "opaque".
register(OpDef("parameter", "opaque", _parameter_shape, _parameter_evaluate, arity=0,
               doc="The computation's argument number parameter_number."))


# --- tuple and get-tuple-element ------------------------------------------------------

def _tuple_shape(operands, attrs, declared):
    return TupleShape(tuple(operands))


def _get_tuple_element_shape(operands, attrs, declared):
    (operand,) = operands
    if not isinstance(operand, TupleShape):
        raise ShapeError(f"get-tuple-element: operand must be a tuple, got {operand.to_text(False)}")
    index = int(expect_attr("get-tuple-element", attrs, "index"))
    if not 0 <= index < len(operand.elements):
        raise ShapeError(f"get-tuple-element: index={index} is outside a tuple of "
                         f"{len(operand.elements)} elements")
    return operand.elements[index]


# Tuples group buffers; they compute no elements. Fusing through them is a multi-output
# decision, not a per-element one, so both are "opaque" to the fusion kinds.
register(OpDef("tuple", "opaque", _tuple_shape, lambda instr, ops, ctx: tuple(ops),
               arity=(0, None), doc="Groups its operands into one tuple value."))

register(OpDef("get-tuple-element", "opaque", _get_tuple_element_shape,
               lambda instr, ops, ctx: ops[0][instr.attrs["index"]],
               arity=1, required_attrs=("index",), doc="Element `index` of a tuple."))


# --- broadcast --------------------------------------------------------------------------

def _broadcast_shape(operands, attrs, declared):
    operand = expect_array("broadcast", operands[0])
    result = declared_array("broadcast", declared)
    expect_same_dtype("broadcast", operand, result, "the result")
    dims = int_list("broadcast", attrs, "dimensions")
    if len(dims) != operand.rank:
        raise ShapeError(f"broadcast: dimensions={{{_join(dims)}}} must map each of the "
                         f"{operand.rank} operand dimensions to a result dimension")
    dimension_list("broadcast", "dimensions", dims, result.rank)
    for i, d in enumerate(dims):
        if operand.dims[i] != result.dims[d]:
            raise ShapeError(f"broadcast: operand dimension {i} has size {operand.dims[i]}, "
                             f"but result dimension {d} has size {result.dims[d]}")
    return result


def _broadcast_evaluate(instr, operands, ctx):
    (x,) = operands
    dims = tuple(instr.attrs["dimensions"])
    result_dims = instr.shape.dims
    # Order the operand's axes as their result dimensions are ordered, give every other
    # result dimension a size-1 axis, and let NumPy repeat along those.
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    aligned = np.transpose(x, order)
    expanded = [1] * len(result_dims)
    for i in order:
        expanded[dims[i]] = result_dims[dims[i]]
    return np.broadcast_to(aligned.reshape(expanded), result_dims)


register(OpDef("broadcast", "broadcast", _broadcast_shape, _broadcast_evaluate, arity=1,
               required_attrs=("dimensions",),
               doc="Operand dimension i becomes result dimension dimensions[i]; the others repeat."))


# --- reshape, transpose, copy, reverse ---------------------------------------------------

def _reshape_shape(operands, attrs, declared):
    operand = expect_array("reshape", operands[0])
    result = declared_array("reshape", declared)
    expect_same_dtype("reshape", operand, result, "the result")
    if operand.size != result.size:
        raise ShapeError(f"reshape: {operand.to_text(False)} has {operand.size} elements, "
                         f"{result.to_text(False)} has {result.size}")
    return result


def _transpose_shape(operands, attrs, declared):
    operand = expect_array("transpose", operands[0])
    perm = int_list("transpose", attrs, "dimensions")
    if len(perm) != operand.rank:
        raise ShapeError(f"transpose: dimensions={{{_join(perm)}}} is not a permutation of "
                         f"{operand.rank} dimensions")
    dimension_list("transpose", "dimensions", perm, operand.rank)
    return ArrayShape(operand.dtype, tuple(operand.dims[p] for p in perm))


def _same_shape(opcode):
    def rule(operands, attrs, declared):
        return expect_array(opcode, operands[0])
    return rule


def _reverse_shape(operands, attrs, declared):
    operand = expect_array("reverse", operands[0])
    dimension_list("reverse", "dimensions", int_list("reverse", attrs, "dimensions"), operand.rank)
    return operand


register(OpDef("reshape", "injective", _reshape_shape,
               lambda instr, ops, ctx: np.reshape(ops[0], instr.shape.dims), arity=1,
               doc="The same elements in row-major order with new dimensions."))

register(OpDef("transpose", "injective", _transpose_shape,
               lambda instr, ops, ctx: np.transpose(ops[0], instr.attrs["dimensions"]), arity=1,
               required_attrs=("dimensions",),
               doc="Result dimension i is operand dimension dimensions[i]."))

# copy changes only the layout, so its logical value is the operand itself.
register(OpDef("copy", "injective", _same_shape("copy"), lambda instr, ops, ctx: ops[0], arity=1,
               doc="The operand, possibly in another layout."))

register(OpDef("reverse", "injective", _reverse_shape,
               lambda instr, ops, ctx: np.flip(ops[0], tuple(instr.attrs["dimensions"])), arity=1,
               required_attrs=("dimensions",), doc="Reverses the order of elements along dimensions."))


# --- slice ----------------------------------------------------------------------------

def _slice_shape(operands, attrs, declared):
    operand = expect_array("slice", operands[0])
    spec = expect_attr("slice", attrs, "slice")
    if len(spec) != operand.rank:
        raise ShapeError(f"slice: {len(spec)} ranges given for an operand of rank {operand.rank}")
    dims = []
    for d, (s, size) in enumerate(zip(spec, operand.dims)):
        if s.stride < 1:
            raise ShapeError(f"slice: dimension {d} has stride {s.stride}, must be at least 1")
        if not 0 <= s.start <= s.limit <= size:
            raise ShapeError(f"slice: dimension {d} range [{s.start}:{s.limit}] does not fit "
                             f"0 <= start <= limit <= {size}")
        dims.append(-(-(s.limit - s.start) // s.stride))
    return ArrayShape(operand.dtype, tuple(dims))


def _slice_evaluate(instr, operands, ctx):
    return operands[0][tuple(slice(s.start, s.limit, s.stride) for s in instr.attrs["slice"])]


register(OpDef("slice", "injective", _slice_shape, _slice_evaluate, arity=1, required_attrs=("slice",),
               doc="Elements start, start+stride, ... below limit in each dimension."))


# --- concatenate --------------------------------------------------------------------------

def _concat_dimension(attrs) -> int:
    dims = int_list("concatenate", attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"concatenate: dimensions={{{_join(dims)}}} must name exactly one dimension")
    return dims[0]


def _concatenate_shape(operands, attrs, declared):
    first = expect_array("concatenate", operands[0], "operand 0")
    d = _concat_dimension(attrs)
    if not 0 <= d < first.rank:
        raise ShapeError(f"concatenate: dimension {d} is outside operands of rank {first.rank}")
    total = 0
    for i, s in enumerate(operands):
        s = expect_array("concatenate", s, f"operand {i}")
        expect_same_dtype("concatenate", first, s, f"operand {i}")
        if s.rank != first.rank or any(a != b for k, (a, b) in enumerate(zip(s.dims, first.dims)) if k != d):
            raise ShapeError(f"concatenate: operand {i} {s.to_text(False)} does not match operand 0 "
                             f"{first.to_text(False)} outside dimension {d}")
        total += s.dims[d]
    dims = list(first.dims)
    dims[d] = total
    return ArrayShape(first.dtype, tuple(dims))


register(OpDef("concatenate", "injective", _concatenate_shape,
               lambda instr, ops, ctx: np.concatenate(ops, axis=_concat_dimension(instr.attrs)),
               arity=(1, None), required_attrs=("dimensions",),
               doc="Joins the operands along one dimension."))


# --- pad ------------------------------------------------------------------------------------

def _padded_size(size: int, p) -> int:
    return p.low + p.high + size + max(size - 1, 0) * p.interior


def _pad_shape(operands, attrs, declared):
    operand = expect_array("pad", operands[0])
    value = expect_array("pad", operands[1], "padding value")
    expect_same_dtype("pad", operand, value, "the padding value")
    if value.rank != 0:
        raise ShapeError(f"pad: the padding value must be a scalar, got {value.to_text(False)}")
    padding = expect_attr("pad", attrs, "padding")
    if len(padding) != operand.rank:
        raise ShapeError(f"pad: {len(padding)} paddings given for an operand of rank {operand.rank}")
    dims = []
    for d, (p, size) in enumerate(zip(padding, operand.dims)):
        if p.interior < 0:
            raise ShapeError(f"pad: dimension {d} has negative interior padding {p.interior}")
        padded = _padded_size(size, p)
        if padded < 0:
            raise ShapeError(f"pad: dimension {d} of size {size} padded {p.low}_{p.high}_{p.interior} "
                             f"has negative size {padded}")
        dims.append(padded)
    return ArrayShape(operand.dtype, tuple(dims))


def _pad_evaluate(instr, operands, ctx):
    x, value = operands
    padding = instr.attrs["padding"]
    # Pad with the non-negative parts of low/high first, then crop the negative parts:
    # negative edge padding removes elements of the interior-padded operand.
    grown = [_padded_size(size, p) - min(p.low, 0) - min(p.high, 0) for p, size in zip(padding, x.shape)]
    out = np.full(grown, value, dtype=x.dtype)
    place = tuple(slice(max(p.low, 0), max(p.low, 0) + max(size - 1, 0) * (p.interior + 1) + (size > 0),
                        p.interior + 1) for p, size in zip(padding, x.shape))
    out[place] = x
    crop = tuple(slice(-min(p.low, 0), g + min(p.high, 0)) for p, g in zip(padding, grown))
    return out[crop]


register(OpDef("pad", "injective", _pad_shape, _pad_evaluate, arity=2, required_attrs=("padding",),
               doc="Edge (low/high, negative crops) and interior padding with a scalar value."))


# --- iota -------------------------------------------------------------------------------------

def _iota_shape(operands, attrs, declared):
    result = declared_array("iota", declared)
    if result.dtype.is_pred:
        raise ShapeError("iota: the element type must be numeric, not pred")
    if result.rank == 0:
        raise ShapeError("iota: the result must have at least one dimension")
    d = int(expect_attr("iota", attrs, "iota_dimension"))
    if not 0 <= d < result.rank:
        raise ShapeError(f"iota: iota_dimension={d} is outside a result of rank {result.rank}")
    return result


def _iota_evaluate(instr, operands, ctx):
    shape = instr.shape
    d = instr.attrs["iota_dimension"]
    if shape.size == 0:   # f32[1000000000000,0]: no ramp to count
        return np.zeros(shape.dims, shape.dtype.np_dtype)
    # Counted in int64 and converted like XLA converts an index to the element type
    # (floats round to nearest, narrow integers wrap).
    ramp = np.arange(shape.dims[d], dtype=np.int64).astype(shape.dtype.np_dtype)
    along = [1] * shape.rank
    along[d] = shape.dims[d]
    return np.broadcast_to(ramp.reshape(along), shape.dims)


register(OpDef("iota", "broadcast", _iota_shape, _iota_evaluate, arity=0,
               required_attrs=("iota_dimension",),
               doc="Element index along iota_dimension, converted to the element type."))


# --- bitcast ----------------------------------------------------------------------------------

def _bitcast_shape(operands, attrs, declared):
    operand = expect_array("bitcast", operands[0])
    result = declared_array("bitcast", declared)
    if operand.size != result.size or operand.dtype.bits != result.dtype.bits:
        raise ShapeError(f"bitcast: {operand.to_text(False)} and {result.to_text(False)} do not have "
                         "the same number of elements of the same width")
    return result


def to_physical(x: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The buffer of logical array `x` laid out in `shape`'s layout, as a flat array."""
    major_to_minor = tuple(reversed(shape.minor_to_major))
    return np.ascontiguousarray(np.transpose(x, major_to_minor)).reshape(-1)


def from_physical(buffer: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The logical array whose buffer in `shape`'s layout is the flat array `buffer`."""
    major_to_minor = tuple(reversed(shape.minor_to_major))
    physical = buffer.reshape([shape.dims[d] for d in major_to_minor])
    return np.transpose(physical, np.argsort(major_to_minor))


def _bitcast_evaluate(instr, operands, ctx):
    source = instr.operands[0].shape
    if source.rank == 0 and instr.shape.rank == 0:
        # A scalar reinterpreted (e.g. in a sort comparator): elementwise, so that a
        # scalar computation evaluated on arrays of lanes works.
        return operands[0].view(instr.shape.dtype.np_dtype)
    buffer = to_physical(operands[0], source)
    if source.dtype != instr.shape.dtype:
        buffer = buffer.view(instr.shape.dtype.np_dtype)
    return from_physical(buffer, instr.shape)


register(OpDef("bitcast", "injective", _bitcast_shape, _bitcast_evaluate, arity=1,
               doc="Reinterprets the operand's physical buffer in the result's shape and layout."))
