"""Contractions: matmul (`@`), dot, vdot, inner, outer, tensordot and einsum.

All of them become HLO `dot` (XLA's DotGeneral: batch dims, then lhs free dims, then rhs
free dims), plus transposes, reshapes and reductions around it. Operands are promoted to
their common dtype first, which is also the result's dtype, as in NumPy.
"""
from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..frontend.shape_poly import broadcast_dims
from ..frontend.tracing import Tracer, bind
from .core import (
    broadcast_to,
    convert,
    export,
    fail,
    normalize_axis,
    operand,
    reshape_to,
    result_type,
    shape_of,
    transpose_to,
)


def _array(name: str, a: Any) -> Any:
    a = operand(name, a)
    return np.asarray(a) if not isinstance(a, (Tracer, np.ndarray)) else a


def dot_general(name: str, a: Any, b: Any, contracting: tuple[Sequence[int], Sequence[int]],
                batch: tuple[Sequence[int], Sequence[int]] = ((), ())) -> Any:
    """HLO dot of a and b in their common dtype; result dims: batch, a's free, b's free."""
    sa, sb = shape_of(a), shape_of(b)
    for kind, (da, db) in (("contracting", contracting), ("batch", batch)):
        for i, j in zip(da, db):
            if sa[i] != sb[j]:
                raise fail(name, f"shapes {sa} and {sb} are not aligned: {kind} dimension {i} of the "
                           f"first has size {sa[i]}, dimension {j} of the second has size {sb[j]}")
    dt = result_type(a, b)
    return bind("dot", convert(a, dt), convert(b, dt),
                lhs_batch_dims=tuple(batch[0]), rhs_batch_dims=tuple(batch[1]),
                lhs_contracting_dims=tuple(contracting[0]), rhs_contracting_dims=tuple(contracting[1]))


@export
def matmul(x1, x2):
    """Matrix product with NumPy's rules: 1-D operands are promoted to matrices (and the
    added dimension removed again), leading dimensions broadcast as a batch."""
    a, b = _array("matmul", x1), _array("matmul", x2)
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise ValueError("pyxla.numpy.matmul: input operand does not have enough dimensions (0-d)")
    a2 = reshape_to(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape_to(b, sb + (1,)) if len(sb) == 1 else b
    sa2, sb2 = shape_of(a2), shape_of(b2)
    if sa2[-1] != sb2[-2]:
        raise fail("matmul", f"operands with shapes {sa} and {sb} have a mismatch in their core "
                   f"dimension (size {sa2[-1]} is different from {sb2[-2]})")
    if len(sb2) == 2:
        # A plain matrix on the right: contract without broadcasting it over a's batch.
        out = dot_general("matmul", a2, b2, ((len(sa2) - 1,), (0,)))
    else:
        common = broadcast_dims(sa2[:-2], sb2[:-2])
        if common is None:
            raise fail("matmul", f"the batch dimensions of operands with shapes {sa} and {sb} cannot "
                       "be broadcast together")
        batch = common
        a2 = broadcast_to(a2, batch + sa2[-2:], "matmul")
        b2 = broadcast_to(b2, batch + sb2[-2:], "matmul")
        nb = len(batch)
        out = dot_general("matmul", a2, b2, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    dims = list(shape_of(out))
    if len(sb) == 1:
        dims.pop(-1)
    if len(sa) == 1:
        dims.pop(-2 if len(sb) > 1 else -1)
    return reshape_to(out, dims)


@export
def dot(a, b):
    """np.dot: a product for scalars, a sum over a's last axis and b's second-to-last otherwise."""
    from .elementwise import multiply
    a, b = _array("dot", a), _array("dot", b)
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        return multiply(a, b)
    return dot_general("dot", a, b, ((len(sa) - 1,), (max(len(sb) - 2, 0),)))


@export
def vdot(a, b):
    from .manipulation import ravel
    return dot(ravel(a), ravel(b))


@export
def inner(a, b):
    """Sum over the last axes of a and b."""
    from .elementwise import multiply
    a, b = _array("inner", a), _array("inner", b)
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        return multiply(a, b)
    return dot_general("inner", a, b, ((len(sa) - 1,), (len(sb) - 1,)))


@export
def outer(a, b):
    from .elementwise import multiply
    from .manipulation import ravel
    a, b = ravel(a), ravel(b)
    return multiply(reshape_to(a, (shape_of(a)[0], 1)), reshape_to(b, (1, shape_of(b)[0])))


@export
def tensordot(a, b, axes=2):
    """Sum over a's `axes[0]` and b's `axes[1]` (an int n: a's last n and b's first n)."""
    a, b = _array("tensordot", a), _array("tensordot", b)
    sa, sb = shape_of(a), shape_of(b)
    if np.ndim(axes) == 0:
        n = int(axes)
        axes_a, axes_b = list(range(len(sa) - n, len(sa))), list(range(n))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if np.ndim(axes_a) == 0 else list(axes_a)
        axes_b = [axes_b] if np.ndim(axes_b) == 0 else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError("pyxla.numpy.tensordot: shape-mismatch for sum (different numbers of axes)")
    axes_a = [normalize_axis("tensordot", x, len(sa)) for x in axes_a]
    axes_b = [normalize_axis("tensordot", x, len(sb)) for x in axes_b]
    return dot_general("tensordot", a, b, (axes_a, axes_b))


# --- einsum -----------------------------------------------------------------------------------

def _parse_einsum(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """Each operand's labels and the output's, one character per dimension; '...' becomes
    labels of its own (aligned from the right across operands, as broadcasting aligns)."""
    subscripts = subscripts.replace(" ", "")
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"pyxla.numpy.einsum: {len(terms)} operand subscripts for {len(shapes)} operands")
    used = set(subscripts)
    spare = (c for c in string.ascii_uppercase + string.ascii_lowercase + "".join(map(chr, range(0x100, 0x200)))
             if c not in used)
    ellipsis_rank = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t), default=0)
    ellipsis = "".join(next(spare) for _ in range(ellipsis_rank))
    labels = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            k = len(shape) - (len(term) - 3)
            term = term.replace("...", ellipsis[ellipsis_rank - k:] if k else "")
        for c in term:
            if not c.isalpha() and c not in ellipsis:
                raise ValueError(f"pyxla.numpy.einsum: invalid subscript {c!r} in {subscripts!r}")
        if len(term) != len(shape):
            raise ValueError(f"pyxla.numpy.einsum: subscripts {term!r} do not match an operand of "
                             f"dimension {len(shape)}")
        labels.append(term)
    if arrow:
        output = output.replace("...", ellipsis)
    else:   # implicit output: broadcast labels, then the labels that appear once, sorted
        counts = {c: sum(t.count(c) for t in labels) for c in set("".join(labels))}
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ellipsis))
    for c in output:
        if not any(c in t for t in labels):
            raise ValueError(f"pyxla.numpy.einsum: output subscript {c!r} appears in no operand")
    return labels, output


def _take_diagonal(x: Any, labels: str) -> tuple[Any, str]:
    """Repeated labels within one operand ('ii') reduced to their diagonal."""
    from .indexing import getitem
    from .manipulation import moveaxis
    while True:
        repeated = next((c for c in labels if labels.count(c) > 1), None)
        if repeated is None:
            return x, labels
        i = labels.index(repeated)
        j = labels.index(repeated, i + 1)
        x = moveaxis(x, (i, j), (-2, -1))
        n = shape_of(x)[-1]
        steps = np.arange(n)
        x = getitem(x, (Ellipsis, steps, steps))
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + repeated


def _sum_labels(x: Any, labels: str, drop: set[str]) -> tuple[Any, str]:
    from .reductions import sum as total
    axes = tuple(k for k, c in enumerate(labels) if c in drop)
    if not axes:
        return x, labels
    return total(x, axes), "".join(c for c in labels if c not in drop)


@export
def einsum(subscripts, *operands, optimize=None, precision=None, dtype=None):
    """Einstein summation, e.g. einsum('bij,bjk->bik', a, b), contracted pairwise left to
    right with HLO dot (labels needed later or in the output are batch dims)."""
    if not isinstance(subscripts, str):
        raise NotImplementedError("pyxla.numpy.einsum: only the subscripts-string form is supported")
    arrays = [_array("einsum", a) for a in operands]
    labels, output = _parse_einsum(subscripts, [shape_of(a) for a in arrays])
    dt = result_type(*arrays) if dtype is None else np.dtype(dtype)
    sizes: dict[str, int] = {}
    for t, a in zip(labels, arrays):
        for c, n in zip(t, shape_of(a)):
            known = sizes.get(c, 1)
            if n != 1 and known not in (1, n):
                raise fail("einsum", f"operands could not be broadcast together: label {c!r} has "
                           f"sizes {known} and {n}")
            sizes[c] = n if known == 1 else known
    prepared = []
    for k, (t, a) in enumerate(zip(labels, arrays)):
        a = broadcast_to(convert(a, dt), [sizes[c] for c in t], "einsum")
        a, t = _take_diagonal(a, t)
        elsewhere = set(output).union(*(labels[j] for j in range(len(labels)) if j != k))
        a, t = _sum_labels(a, t, {c for c in t if c not in elsewhere})
        prepared.append((a, t))
    acc, acc_labels = prepared[0]
    for k in range(1, len(prepared)):
        b, b_labels = prepared[k]
        later = set(output).union(*(t for _, t in prepared[k + 1:]))
        shared = [c for c in acc_labels if c in b_labels]
        batch = [c for c in shared if c in later]
        contract = [c for c in shared if c not in later]
        acc = dot_general("einsum", acc, b,
                          ([acc_labels.index(c) for c in contract], [b_labels.index(c) for c in contract]),
                          ([acc_labels.index(c) for c in batch], [b_labels.index(c) for c in batch]))
        acc_labels = ("".join(batch) + "".join(c for c in acc_labels if c not in shared)
                      + "".join(c for c in b_labels if c not in shared))
    acc, acc_labels = _sum_labels(acc, acc_labels, set(acc_labels) - set(output))
    return transpose_to(acc, [acc_labels.index(c) for c in output])
