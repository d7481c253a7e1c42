"""Sequence and optional values: SequenceConstruct, SequenceEmpty, SequenceAt,
SequenceInsert, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence,
SequenceMap, Optional, OptionalHasElement, OptionalGetElement.

pyxla traces arrays only, so a sequence is resolved when the model is imported: it is a
Python list holding one value (a NumPy array or a traced array) per element, and its length
is known. Positions that index a sequence must therefore be known too (an input that gives
one is compiled for by value). An optional value is its content, or None when empty (as an
omitted input is).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import NodeContext, converter
from .common import axis_of, ints, shape_of, xp_of


def _sequence(ctx: NodeContext, value: Any, what: str = "input_sequence") -> list:
    if not isinstance(value, list):
        raise ctx.error(f"{what} is {'missing' if value is None else 'a tensor'}, not a sequence")
    return value


def _position(ctx: NodeContext, position: Any, length: int, inserting: bool) -> int:
    """A known position made non-negative; from -length to length - 1 (to length when
    inserting, where the end appends)."""
    values = ints(ctx, position, "position")
    if len(values) != 1:
        raise ctx.error(f"position has {len(values)} values, not 1")
    p = values[0]
    limit = length + 1 if inserting else length
    if not -length <= p < limit:
        raise ctx.error(f"position {p} is out of range for a sequence of length {length}")
    return p + length if p < 0 else p


def _same_dtype(ctx: NodeContext, items: list, what: str) -> None:
    dtypes = {np.dtype(v.dtype) for v in items}
    if len(dtypes) > 1:
        raise ctx.error(f"{what} mix element types {sorted(str(d) for d in dtypes)}")


@converter("SequenceConstruct", since=11)
def sequence_construct(ctx: NodeContext, *tensors):
    items = list(tensors)
    _same_dtype(ctx, items, "the inputs")
    return items


@converter("SequenceEmpty", since=11)
def sequence_empty(ctx: NodeContext):
    ctx.attr("dtype")           # an empty list has no elements to give a type
    return []


@converter("SequenceAt", since=11)
def sequence_at(ctx: NodeContext, seq, position):
    seq = _sequence(ctx, seq)
    return seq[_position(ctx, position, len(seq), inserting=False)]


@converter("SequenceInsert", since=11)
def sequence_insert(ctx: NodeContext, seq, tensor, position=None):
    seq = _sequence(ctx, seq)
    at = len(seq) if position is None else _position(ctx, position, len(seq), inserting=True)
    out = seq[:at] + [tensor] + seq[at:]
    _same_dtype(ctx, out, "the sequence and the inserted tensor")
    return out


@converter("SequenceErase", since=11)
def sequence_erase(ctx: NodeContext, seq, position=None):
    seq = _sequence(ctx, seq)
    if not seq:
        raise ctx.error("erasing from an empty sequence")
    at = len(seq) - 1 if position is None else _position(ctx, position, len(seq), inserting=False)
    return seq[:at] + seq[at + 1:]


@converter("SequenceLength", since=11)
def sequence_length(ctx: NodeContext, seq):
    return np.asarray(len(_sequence(ctx, seq)), np.int64)


@converter("SplitToSequence", since=11)
def split_to_sequence(ctx: NodeContext, x, split=None):
    dims = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(dims))
    keepdims = int(ctx.attr("keepdims", 1))
    length = dims[axis]
    index = [slice(None)] * len(dims)
    if split is None:
        # pieces of one element along the axis, dropped unless keepdims
        out = []
        for i in range(length):
            index[axis] = slice(i, i + 1) if keepdims else i
            out.append(x[tuple(index)])
        return out
    sizes = ints(ctx, split, "split")
    if any(s < 0 for s in sizes):
        raise ctx.error(f"split {sizes} has a negative size")
    if len(shape_of(split)) == 0:
        piece = sizes[0]
        if piece == 0:
            raise ctx.error("a split size of 0")
        sizes = [min(piece, length - start) for start in range(0, length, piece)]
    elif sum(sizes) != length:
        raise ctx.error(f"split sizes {sizes} do not add up to the axis size {length}")
    out, start = [], 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        out.append(x[tuple(index)])
        start += size
    return out


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(ctx: NodeContext, seq):
    seq = _sequence(ctx, seq)
    axis = ctx.attr("axis")
    if axis is None:
        raise ctx.error("needs attribute 'axis'")
    new_axis = int(ctx.attr("new_axis", 0))
    if not seq:
        raise ctx.error("concatenating an empty sequence")
    _same_dtype(ctx, seq, "the sequence's elements")
    rank = len(shape_of(seq[0]))
    xp = xp_of(ctx, *seq)
    if new_axis:
        return xp.stack(seq, axis=axis_of(ctx, axis, rank + 1))
    return xp.concatenate(seq, axis=axis_of(ctx, axis, rank))


@converter("SequenceMap", since=17)
def sequence_map(ctx: NodeContext, seq, *additional):
    """The body once per element of the first sequence; sequences among the other inputs
    give their element at the same position, tensors are passed whole."""
    body = ctx.attr("body")
    seq = _sequence(ctx, seq)
    for k, extra in enumerate(additional):
        if isinstance(extra, list) and len(extra) != len(seq):
            raise ctx.error(f"additional input {k} has {len(extra)} elements, input_sequence {len(seq)}")
    names = [i.name for i in body.input]
    if len(names) != 1 + len(additional):
        raise ctx.error(f"the body takes {len(names)} inputs, the node gives {1 + len(additional)}")
    outputs: list[list] = [[] for _ in body.output]
    for i, item in enumerate(seq):
        values = [item] + [extra[i] if isinstance(extra, list) else extra for extra in additional]
        results = ctx.importer.run_subgraph(body, dict(zip(names, values)), ctx.scope,
                                            where=f"node {ctx.name!r} ({ctx.op_type}) body, element {i}")
        for acc, value in zip(outputs, results):
            acc.append(value)
    return tuple(outputs)


@converter("Optional", since=15)
def optional(ctx: NodeContext, value=None):
    ctx.attr("type")            # the type of an empty optional; no value carries it
    return value


@converter("OptionalHasElement", since=15)
def optional_has_element(ctx: NodeContext, value=None):
    return np.asarray(value is not None)


@converter("OptionalGetElement", since=15)
def optional_get_element(ctx: NodeContext, value):
    if value is None:
        raise ctx.error("the optional is empty")
    return value

