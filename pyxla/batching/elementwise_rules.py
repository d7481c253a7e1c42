"""Batching rules for elementwise opcodes and data movement (broadcast, reshape, transpose,
slice, concatenate, pad, reverse).

Elementwise opcodes broadcast their unbatched operands to the batch (so every operand has
the result's batched shape); data movement shifts its dimension numbers by one past the
batch dimension, which the rules put first.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import lax
from ..autodiff.staging import semantic_attrs
from ..frontend.tracing import bind
from ..hlo.attributes import PadDim, SliceDim
from ..hlo.instruction import HloInstruction
from ..hlo.ops.registry import REGISTRY
from ..hlo.shape import ArrayShape
from ..hlo.types import PRED
from .interpreter import BATCH_RULES
from .rule_helpers import all_front, batch_size, dims_of, shifted, to_front


def _out(instr: HloInstruction, size: int) -> ArrayShape:
    shape = instr.shape
    assert isinstance(shape, ArrayShape)
    return ArrayShape(shape.dtype, (size, *shape.dims))


def _to_result_shape(value: Any, d: int | None, size: int, dims: tuple[int, ...]) -> Any:
    """An operand of an elementwise op as an array of the batched result's dimensions (a
    scalar operand of clamp or select broadcast along)."""
    x = to_front(value, d, size)
    if dims_of(x)[1:] == dims:
        return x
    return lax.broadcast_in_dim(x, (size, *dims), (0,))


def elementwise_rule(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    out = _out(instr, size)
    if instr.opcode == "bitcast-convert":   # may add or drop a trailing dimension: batch first is fine
        return bind("bitcast-convert", to_front(values[0], dims[0], size), shape=out), 0
    ops = [_to_result_shape(v, d, size, out.dims[1:]) for v, d in zip(values, dims)]
    return bind(instr.opcode, *ops, shape=out, **semantic_attrs(instr)), 0


for _opcode, _op in REGISTRY.items():
    if _op.fusion_kind == "elementwise" and _opcode != "constant":
        BATCH_RULES[_opcode] = elementwise_rule
BATCH_RULES["copy"] = elementwise_rule


def _shift_dims_rule(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    """broadcast, transpose, reverse: `dimensions` shifted past the batch dimension (kept
    first, mapped to itself where the attribute is a mapping)."""
    size = batch_size(values, dims)
    x = to_front(values[0], dims[0], size)
    moved = shifted(instr.attrs["dimensions"])
    new = moved if instr.opcode == "reverse" else (0, *moved)
    return bind(instr.opcode, x, shape=_out(instr, size), dimensions=new), 0


for _opcode in ("broadcast", "transpose", "reverse"):
    BATCH_RULES[_opcode] = _shift_dims_rule


def _reshape(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    return bind("reshape", to_front(values[0], dims[0], size), shape=_out(instr, size)), 0


def _slice(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    spec = (SliceDim(0, size, 1), *instr.attrs["slice"])
    return bind("slice", to_front(values[0], dims[0], size), shape=_out(instr, size), slice=spec), 0


def _concatenate(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    return bind("concatenate", *all_front(values, dims, size), shape=_out(instr, size),
                dimensions=shifted(instr.attrs["dimensions"])), 0


def _pad(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    (x, value), (xd, vd) = values, dims
    config = (PadDim(0, 0, 0), *instr.attrs["padding"])
    out = _out(instr, size)
    if vd is None:
        return bind("pad", to_front(x, xd, size), value, shape=out, padding=config), 0
    # A padding value per example: pad with a placeholder, then choose each example's value
    # wherever a mask of the operand's positions, padded with false, says padding went.
    zero = np.zeros((), out.dtype.np_dtype)
    padded = bind("pad", to_front(x, xd, size), zero, shape=out, padding=config)
    inside = lax.full(instr.operands[0].shape.dims, True, PRED)
    mask = bind("pad", inside, np.array(False), shape=ArrayShape(PRED, out.dims[1:]), padding=instr.attrs["padding"])
    fill = lax.broadcast_in_dim(to_front(value, vd, size), out.dims, (0,))
    return lax.select(lax.broadcast_in_dim(mask, out.dims, tuple(range(1, len(out.dims)))), padded, fill), 0


BATCH_RULES["reshape"] = _reshape
BATCH_RULES["slice"] = _slice
BATCH_RULES["concatenate"] = _concatenate
BATCH_RULES["pad"] = _pad
