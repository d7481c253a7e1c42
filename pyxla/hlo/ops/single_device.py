"""Opcodes of multi-device programs and of XLA's dynamic shapes, on pyxla's one device.

pyxla runs a program on one replica and one partition, with static shapes, so:
- replica-id and partition-id are 0; all-reduce, reduce-scatter and all-gather over one
  replica give their operand (a group of one device reduces, scatters and gathers nothing);
- domain (a sharding boundary), add-dependency (an ordering edge) and after-all (a token
  joining others) carry their first operand, or a token;
- get-dimension-size is the static size; set-dimension-size leaves the (static) array as is;
- real of a real number is the number, imag is zero.
Each has an expansion (expansion.py) into constants and its operand, which is how the
compiling backends run it.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..dims import DimExpr, upper_bound
from ..shape import ArrayShape, TokenShape, TupleShape
from ..types import S32, U32
from .registry import OpDef, register
from .shape_ops import dimension_list, expect_array, int_list

_COLLECTIVE_ATTRS = ("replica_groups", "channel_id", "use_global_device_ids", "constrain_layout")


def _first_operand(instr, emit):
    return instr.operands[0]


def _zero_id(instr, emit):
    return emit.constant(0, instr.array_shape)


for _opcode in ("replica-id", "partition-id"):
    register(OpDef(_opcode, "opaque", lambda operands, attrs, declared: ArrayShape(U32, ()),
                   lambda instr, ops, ctx: np.zeros((), np.uint32), arity=0,
                   doc="The device's replica (partition) number: 0 on pyxla's one device.",
                   extra={"expand": _zero_id}))


def _identity_shape(opcode: str):
    def shape(operands, attrs, declared):
        if len(operands) == 1:
            return operands[0]
        return TupleShape(tuple(operands))
    return shape


def _identity_evaluate(instr, ops, ctx):
    return ops[0] if len(ops) == 1 else tuple(ops)


def _identity_expand(instr, emit):
    if len(instr.operands) == 1:
        return instr.operands[0]
    return emit.op("tuple", *instr.operands, shape=instr.shape)


register(OpDef("all-reduce", "opaque", _identity_shape("all-reduce"), _identity_evaluate, arity=(1, None),
               required_attrs=("to_apply",), optional_attrs=_COLLECTIVE_ATTRS,
               doc="Reduces each operand across the replicas of a group: itself, with one replica.",
               extra={"expand": _identity_expand}))


def _scatter_gather_shape(opcode: str):
    def shape(operands, attrs, declared):
        (operand,) = operands
        operand = expect_array(opcode, operand)
        dims = dimension_list(opcode, "dimensions", int_list(opcode, attrs, "dimensions"), operand.rank)
        if len(dims) != 1:
            raise ShapeError(f"{opcode} takes one dimension, got dimensions={{{','.join(map(str, dims))}}}")
        return operand
    return shape


register(OpDef("reduce-scatter", "opaque", _scatter_gather_shape("reduce-scatter"), _identity_evaluate, arity=1,
               required_attrs=("to_apply", "dimensions"), optional_attrs=_COLLECTIVE_ATTRS,
               doc="Reduces across replicas, each keeping a slice: the whole operand, with one replica.",
               extra={"expand": _identity_expand}))

register(OpDef("all-gather", "opaque", _scatter_gather_shape("all-gather"), _identity_evaluate, arity=1,
               required_attrs=("dimensions",), optional_attrs=_COLLECTIVE_ATTRS,
               doc="Concatenates the replicas' operands: the operand, with one replica.",
               extra={"expand": _identity_expand}))

register(OpDef("domain", "opaque", lambda operands, attrs, declared: operands[0],
               lambda instr, ops, ctx: ops[0], arity=1, optional_attrs=("domain",),
               doc="A sharding-domain boundary: its operand.", extra={"expand": _first_operand}))


def _add_dependency_shape(operands, attrs, declared):
    if not isinstance(operands[1], TokenShape):
        raise ShapeError(f"add-dependency's second operand must be a token, got {operands[1].to_text(False)}")
    return operands[0]


register(OpDef("add-dependency", "opaque", _add_dependency_shape, lambda instr, ops, ctx: ops[0], arity=2,
               doc="Its first operand, ordered after the token.", extra={"expand": _first_operand}))


def _after_all_shape(operands, attrs, declared):
    for s in operands:
        if not isinstance(s, TokenShape):
            raise ShapeError(f"after-all joins tokens, got {s.to_text(False)}")
    return TokenShape()


register(OpDef("after-all", "opaque", _after_all_shape, lambda instr, ops, ctx: (), arity=(0, None),
               doc="A token ordered after every operand token."))


# --- dynamic sizes, on static shapes ----------------------------------------------------

def _dimension(opcode: str, operand, attrs) -> int:
    operand = expect_array(opcode, operand)
    dims = int_list(opcode, attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"{opcode} takes one dimension, got {len(dims)}")
    dimension_list(opcode, "dimensions", dims, operand.rank)
    return dims[0]


def _get_size_shape(operands, attrs, declared):
    _dimension("get-dimension-size", operands[0], attrs)
    return ArrayShape(S32, ())


def _get_size(instr) -> int:
    return instr.operands[0].array_shape.dims[instr.attrs["dimensions"][0]]


register(OpDef("get-dimension-size", "opaque", _get_size_shape,
               lambda instr, ops, ctx: np.array(_get_size(instr), np.int32), arity=1,
               required_attrs=("dimensions",),
               doc="The size of one dimension, as s32[].",
               extra={"expand": lambda instr, emit: emit.constant(_get_size(instr), instr.array_shape)}))


def _set_size_shape(operands, attrs, declared):
    d = _dimension("set-dimension-size", operands[0], attrs)
    size = operands[1]
    if not (isinstance(size, ArrayShape) and size.rank == 0 and size.dtype == S32):
        raise ShapeError(f"set-dimension-size takes an s32[] size, got {size.to_text(False)}")
    operand = operands[0]
    # Written as XLA does, the result marks dimension d dynamic, bounded by the operand's size:
    # `f32[<=20,20] set-dimension-size(f32[20,20] a, s), dimensions={0}`.
    if (isinstance(declared, ArrayShape) and declared.dtype == operand.dtype and declared.rank == operand.rank
            and all(a == b for k, (a, b) in enumerate(zip(declared.dims, operand.dims)) if k != d)
            and isinstance(declared.dims[d], DimExpr)
            and upper_bound(declared.dims[d]) == upper_bound(operand.dims[d])):
        return declared
    return operand


register(OpDef("set-dimension-size", "opaque", _set_size_shape, lambda instr, ops, ctx: ops[0], arity=2,
               required_attrs=("dimensions",),
               doc="Marks a dimension's dynamic size; on static shapes, the operand as it is.",
               extra={"expand": _first_operand}))


# --- real and imag of real numbers -------------------------------------------------------

def _real_part_shape(opcode: str):
    def shape(operands, attrs, declared):
        operand = expect_array(opcode, operands[0])
        if not operand.dtype.is_float:
            raise ShapeError(f"{opcode} takes a floating-point operand (pyxla has no complex types), "
                             f"got {operand.dtype}")
        return operand
    return shape


register(OpDef("real", "elementwise", _real_part_shape("real"), lambda instr, ops, ctx: ops[0], arity=1,
               doc="The real part: a real number itself.", extra={"expand": _first_operand}))

register(OpDef("imag", "elementwise", _real_part_shape("imag"),
               lambda instr, ops, ctx: np.zeros_like(ops[0]), arity=1,
               doc="The imaginary part of a real number: zero.",
               extra={"expand": lambda instr, emit: emit.constant(0, instr.array_shape)}))
