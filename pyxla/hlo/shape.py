"""HLO shapes: arrays (element type, static dimensions, layout), tuples and the token.

A layout is XLA's minor_to_major list. It never changes a logical value, except
through `bitcast`, which reinterprets the physical buffer; `None` means the default
row-major layout (minor_to_major = rank-1, ..., 0).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

from .dims import Dim, DimExpr, dim, upper_bound
from .types import ElementType


class Shape:
    is_array = False
    is_tuple = False
    is_token = False

    def to_text(self, with_layout: bool = True) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_text()

    def compatible(self, other: Shape) -> bool:
        """Equal ignoring layouts: the logical type of a value."""
        raise NotImplementedError

    def without_layout(self) -> Shape:
        raise NotImplementedError


def _dim_text(d: Dim) -> str:
    """XLA's text for a dimension: its size, or `?` / `<=bound` for a symbolic one."""
    if not isinstance(d, DimExpr):
        return str(d)
    bound = upper_bound(d)
    return "?" if bound is None else f"<={bound}"


def element_strides(shape: ArrayShape) -> list[int]:
    """Elements between neighbours along each logical dimension of `shape`'s buffer."""
    strides = [0] * shape.rank
    step = 1
    for d in shape.minor_to_major:
        strides[d] = step
        step *= shape.dims[d]
    return strides


def default_layout(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 1, -1, -1))


@dataclass(frozen=True)
class ArrayShape(Shape):
    dtype: ElementType
    # Each entry is an int, or a DimExpr for a symbolic size (dims.py). DimExprs act as ints
    # in shape arithmetic and comparisons, so shape rules are written (and typed) for ints;
    # only static shapes reach buffer assignment and the backends.
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None = None

    is_array = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(dim(d) for d in self.dims))
        if self.layout is not None:
            object.__setattr__(self, "layout", tuple(int(d) for d in self.layout))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return prod(self.dims)

    @property
    def is_static(self) -> bool:
        """No dimension is symbolic."""
        return not any(isinstance(d, DimExpr) for d in self.dims)

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        return self.layout if self.layout is not None else default_layout(self.rank)

    @property
    def is_row_major(self) -> bool:
        """Laid out in the default order: the last dimension minor-most."""
        return self.minor_to_major == default_layout(self.rank)

    @property
    def byte_size(self) -> int:
        return self.size * self.dtype.bytes

    def to_text(self, with_layout: bool = True) -> str:
        text = f"{self.dtype.name}[{','.join(_dim_text(d) for d in self.dims)}]"
        if with_layout and self.rank > 0:
            text += "{" + ",".join(str(d) for d in self.minor_to_major) + "}"
        return text

    def compatible(self, other: Shape) -> bool:
        return isinstance(other, ArrayShape) and other.dtype == self.dtype and other.dims == self.dims

    def without_layout(self) -> ArrayShape:
        return ArrayShape(self.dtype, self.dims)

    def with_dtype(self, dtype: ElementType) -> ArrayShape:
        return ArrayShape(dtype, self.dims, self.layout)

    def with_dims(self, dims: Iterable[int]) -> ArrayShape:
        return ArrayShape(self.dtype, tuple(dims))


@dataclass(frozen=True)
class TupleShape(Shape):
    elements: tuple[Shape, ...]

    is_tuple = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", tuple(self.elements))

    def to_text(self, with_layout: bool = True) -> str:
        parts = []
        for i, e in enumerate(self.elements):
            # XLA numbers long tuples every fifth element; its parser skips the comments.
            prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
            parts.append(prefix + e.to_text(with_layout))
        return "(" + ", ".join(parts) + ")"

    def compatible(self, other: Shape) -> bool:
        return (isinstance(other, TupleShape) and len(other.elements) == len(self.elements)
                and all(a.compatible(b) for a, b in zip(self.elements, other.elements)))

    def without_layout(self) -> TupleShape:
        return TupleShape(tuple(e.without_layout() for e in self.elements))

    def leaves(self) -> list[Shape]:
        """The non-tuple shapes inside, depth first (arrays and tokens)."""
        out: list[Shape] = []
        for e in self.elements:
            out.extend(e.leaves() if isinstance(e, TupleShape) else [e])
        return out


@dataclass(frozen=True)
class TokenShape(Shape):
    is_token = True

    def to_text(self, with_layout: bool = True) -> str:
        return "token[]"

    def compatible(self, other: Shape) -> bool:
        return isinstance(other, TokenShape)

    def without_layout(self) -> TokenShape:
        return self


def array(dtype: ElementType, *dims: int) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))


def scalar(dtype: ElementType) -> ArrayShape:
    return ArrayShape(dtype, ())


def describe_shape(shape: Shape) -> str:
    """The shape for a message: as in the text without layouts, but symbolic dimensions by
    their expressions (`f32[2*b,32]`), which the text's `?` and `<=N` do not tell apart."""
    if isinstance(shape, ArrayShape):
        return f"{shape.dtype.name}[{','.join(str(d).replace(' ', '') for d in shape.dims)}]"
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(describe_shape(e) for e in shape.elements) + ")"
    return shape.to_text(False)


def flatten_shape(shape: Shape) -> list[Shape]:
    """The non-tuple leaves of `shape`, depth first (how tuple results are flattened)."""
    if isinstance(shape, TupleShape):
        out = []
        for e in shape.elements:
            out.extend(flatten_shape(e))
        return out
    return [shape]
