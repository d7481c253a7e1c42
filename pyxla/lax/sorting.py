"""Sorting: sort (several operands, lexicographic keys), sort_key_val and top_k.

The default comparator is JAX's: keys compare in IEEE total order after NaN is made one
positive NaN and -0 becomes +0, so NaN sorts last (as in NumPy) and -0 ties with +0.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import TraceError
from ..frontend.tracing import bind, where
from ..hlo.types import ElementType
from ._values import aval, canonical_axis, scalar_computation, unify_types
from .elementwise import bitwise_and, bitwise_or, compare, eq, ne, select


def _canonical_float(x: Any, t: ElementType) -> Any:
    """x with -0 as +0 and every NaN as one positive NaN: total order then matches NumPy's sort."""
    zero = np.zeros((), t.np_dtype)
    x = select(eq(x, zero), zero, x)
    return select(ne(x, x), np.array(np.nan, t.np_dtype), x)


def _key_compare(x: Any, y: Any, t: ElementType, direction: str) -> Any:
    if t.is_float:
        return compare(_canonical_float(x, t), _canonical_float(y, t), direction, "TOTALORDER")
    return compare(x, y, direction)


def _lexicographic_less(types: Sequence[ElementType], num_keys: int) -> Callable:
    """Comparator over interleaved (lhs_0, rhs_0, lhs_1, rhs_1, ...): lhs < rhs by the first
    num_keys operands, earlier keys deciding."""
    def less(*params):
        result = None
        for k in reversed(range(num_keys)):
            x, y, t = params[2 * k], params[2 * k + 1], types[k]
            key_less = _key_compare(x, y, t, "LT")
            result = key_less if result is None else bitwise_or(
                key_less, bitwise_and(_key_compare(x, y, t, "EQ"), result))
        return result
    return less


def _user_less(comparator: Callable, n: int) -> Callable:
    """A user comparator(lhs, rhs) on scalars (tuples of them for several operands) as a
    comparator over interleaved parameters."""
    def less(*params):
        lhs, rhs = params[0::2], params[1::2]
        return comparator(lhs[0], rhs[0]) if n == 1 else comparator(tuple(lhs), tuple(rhs))
    return less


def sort(operand: Any, dimension: int = -1, is_stable: bool = True, num_keys: int = 1, *,
         comparator: Callable | None = None) -> Any:
    """Sorts `operand` (an array, or a sequence of same-shape arrays sorted together by the
    first `num_keys`) along `dimension`.

    `comparator(lhs, rhs)` (a pyxla extension) replaces the default order: it gets scalars,
    or tuples of scalars for several operands, and says whether lhs sorts before rhs; it
    may use only its arguments.
    """
    single = not isinstance(operand, (tuple, list))
    operands = [operand] if single else list(operand)
    if not operands:
        raise TraceError(f"sort needs at least one operand{where()}")
    if not 1 <= num_keys <= len(operands):
        raise TraceError(f"sort: num_keys={num_keys} must be between 1 and the number of operands "
                         f"({len(operands)}){where()}")
    types = [aval(x).dtype for x in operands]
    dimension = canonical_axis("sort", dimension, aval(operands[0]).rank)
    less = _lexicographic_less(types, num_keys) if comparator is None else _user_less(comparator, len(operands))
    comp = scalar_computation(less, [t for t in types for _ in range(2)], "comparator")
    out = bind("sort", *operands, dimensions=(dimension,), is_stable=bool(is_stable), to_apply=comp)
    return out if single else tuple(out)


def sort_key_val(keys: Any, values: Any, dimension: int = -1, is_stable: bool = True) -> tuple[Any, Any]:
    """`keys` sorted along `dimension`, and `values` permuted the same way."""
    return sort((keys, values), dimension, is_stable, num_keys=1)


def top_k(operand: Any, k: int) -> tuple[Any, Any]:
    """The k largest entries along the last dimension, in descending order, and their s32
    indices (ties: the lower index first)."""
    (operand,) = unify_types("topk", [operand])
    return bind("topk", operand, k=int(k), largest=True)
