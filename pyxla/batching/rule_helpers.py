"""What the batching rules share: the batch size, moving and adding the batch dimension.

A batched value carries its examples along one dimension (its batch dimension, an int);
an unbatched value (batch dimension None) is the same for every example. Rules put the
batch dimension of what they emit first (dimension 0), so that each rule only has to
shift the dimension numbers of its opcode by one.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import lax
from ..frontend.tracing import shape_of
from ..hlo.shape import ArrayShape, Shape, TupleShape

BatchDim = Any   # int | None for an array; a tuple of them for a tuple value


class BatchingError(NotImplementedError):
    """A form of an opcode a rule cannot batch (a batched reduction init value, ...)."""


def flat_dims(dims: Any) -> list[int | None]:
    """The batch dimensions of every array inside (possibly nested) tuples of them."""
    if isinstance(dims, (tuple, list)):
        return [d for e in dims for d in flat_dims(e)]
    return [dims]


def is_batched(dims: Any) -> bool:
    return any(d is not None for d in flat_dims(dims))


def dims_of(value: Any) -> tuple[int, ...]:
    shape = shape_of(value)
    assert isinstance(shape, ArrayShape), shape
    return shape.dims


def batch_size(values: Sequence[Any], dims: Sequence[Any]) -> int:
    """The number of examples, read from the first batched array among `values`."""
    for v, d in zip(values, dims):
        if isinstance(v, tuple):
            if is_batched(d):
                return batch_size(list(v), list(d))
        elif d is not None:
            return dims_of(v)[d]
    raise AssertionError("batch_size of values none of which is batched")


def move_axis(x: Any, src: int, dst: int) -> Any:
    """`x` with its dimension `src` moved to position `dst`."""
    rank = len(dims_of(x))
    src, dst = src % rank, dst % rank
    if src == dst:
        return x
    perm = [d for d in range(rank) if d != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)


def to_front(x: Any, d: int | None, size: int) -> Any:
    """`x` with its batch dimension first; an unbatched `x` broadcast to `size` examples."""
    if d is None:
        dims = dims_of(x)
        return lax.broadcast_in_dim(x, (size, *dims), tuple(range(1, len(dims) + 1)))
    return move_axis(x, d, 0)


def front_or_none(x: Any, d: int | None) -> Any:
    """`x` with its batch dimension first, or unchanged when it has none."""
    return x if d is None else move_axis(x, d, 0)


def batched_shape(shape: Shape, d: Any, size: int) -> Shape:
    """The shape of a value of per-example `shape` with batch dimension(s) `d` (first)."""
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(batched_shape(s, e, size) for s, e in zip(shape.elements, d)))
    assert isinstance(shape, ArrayShape)
    return shape if d is None else ArrayShape(shape.dtype, (size, *shape.dims))


def with_batch(shape: Shape, size: int) -> Shape:
    """`shape` (an array or a tuple of arrays) with a leading batch dimension everywhere."""
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(with_batch(s, size) for s in shape.elements))
    assert isinstance(shape, ArrayShape)
    return ArrayShape(shape.dtype, (size, *shape.dims))


def shifted(dims: Sequence[int], by: int = 1) -> tuple[int, ...]:
    """Dimension numbers of a per-example array, in the array with `by` leading dims added."""
    return tuple(int(d) + by for d in dims)


def all_front(values: Sequence[Any], dims: Sequence[int | None], size: int) -> list[Any]:
    """Every array among `values` batched, batch dimension first."""
    return [to_front(v, d, size) for v, d in zip(values, dims)]


def result_dims(shape: Shape, d: int | None) -> Any:
    """`d` for every array of a result of `shape` (a tuple of them for a tuple)."""
    if isinstance(shape, TupleShape):
        return tuple(result_dims(s, d) for s in shape.elements)
    return d
