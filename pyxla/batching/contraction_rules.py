"""Batching rules for dot, convolution, cholesky and triangular-solve.

cholesky, triangular-solve: the batch dimension moved first is one more leading batch
dimension of the matrices (an unbatched operand broadcast along).

dot: both operands batched -> one more batch dimension (the first); one operand batched ->
its batch dimension is a free dimension of the product, moved first afterwards.

convolution (JAX's approach): the batch is folded into a dimension the convolution already
has. Only the input batched -> the input's batch dimension (B*N images); only the kernel ->
the kernel's output features (B*O, each example's filters inside their feature group);
both -> feature groups (B*G groups: each example's input features meet only its own
filters). Convolutions with batch groups (batch_group_count > 1, the kernel gradient of a
grouped convolution) are refused.
"""
from __future__ import annotations

from typing import Any

from .. import lax
from ..autodiff.staging import semantic_attrs
from ..frontend.tracing import bind
from ..hlo.attributes import ConvDimensionNumbers
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape
from .interpreter import BATCH_RULES
from .rule_helpers import BatchingError, batch_size, dims_of, move_axis, shifted, to_front


def _dot(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    (lhs, rhs), (ld, rd) = values, dims
    a = instr.attrs
    lb, rb = a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ())
    lc, rc = a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ())
    attrs = dict(semantic_attrs(instr))
    out_dims = list(instr.shape.dims)
    if ld is not None and rd is not None:
        lhs, rhs = to_front(lhs, ld, size), to_front(rhs, rd, size)
        attrs.update(lhs_batch_dims=(0, *shifted(lb)), rhs_batch_dims=(0, *shifted(rb)),
                     lhs_contracting_dims=shifted(lc), rhs_contracting_dims=shifted(rc))
        at = 0
    elif ld is not None:
        lhs = to_front(lhs, ld, size)
        attrs.update(lhs_batch_dims=shifted(lb), lhs_contracting_dims=shifted(lc))
        at = len(lb)   # the first of the lhs's free dimensions
    else:
        rhs = to_front(rhs, rd, size)
        attrs.update(rhs_batch_dims=shifted(rb), rhs_contracting_dims=shifted(rc))
        at = len(lb) + (instr.operands[0].shape.rank - len(lb) - len(lc))   # first of the rhs's free ones
    out_dims.insert(at, size)
    out = bind("dot", lhs, rhs, shape=ArrayShape(instr.shape.dtype, tuple(out_dims)), **attrs)
    return move_axis(out, at, 0), 0


def _merge(x: Any, at: int) -> Any:
    """`x` with dimensions `at` and `at + 1` merged into one (the first one outer)."""
    d = list(dims_of(x))
    return lax.reshape(x, (*d[:at], d[at] * d[at + 1], *d[at + 2:]))


def _split(x: Any, at: int, sizes: tuple[int, ...]) -> Any:
    """`x` with dimension `at` split into dimensions of `sizes` (the first outer)."""
    d = list(dims_of(x))
    return lax.reshape(x, (*d[:at], *sizes, *d[at + 1:]))


def _convolve(instr: HloInstruction, lhs: Any, rhs: Any, scale_dim: int, size: int, groups: int) -> Any:
    dims = list(instr.shape.dims)
    dims[scale_dim] *= size
    attrs = {**semantic_attrs(instr), "feature_group_count": groups}
    return bind("convolution", lhs, rhs, shape=ArrayShape(instr.shape.dtype, tuple(dims)), **attrs)


def _kernel_batched(w: Any, ko: int, size: int, groups: int) -> Any:
    """A batched kernel (batch first) with the examples' filters folded into its output
    features, inside each feature group: (G, B, O/G) order."""
    w = move_axis(w, 0, ko)                                    # [..., B, O, ...]
    o = dims_of(w)[ko + 1]
    w = _split(w, ko + 1, (groups, o // groups))               # [..., B, G, O/G, ...]
    w = move_axis(w, ko, ko + 1)                               # [..., G, B, O/G, ...]
    return _merge(_merge(w, ko), ko)


def _convolution(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    (lhs, rhs), (ld, rd) = values, dims
    dn: ConvDimensionNumbers = instr.attrs["dim_labels"]
    groups = instr.attrs.get("feature_group_count", 1)
    if instr.attrs.get("batch_group_count", 1) != 1:
        raise BatchingError(f"vmap of HLO opcode 'convolution' with batch_group_count > 1 is not implemented"
                            f" (the value traced at {instr.source_location()})")
    of = dn.output_feature
    if rd is None:   # the examples become more images
        x = _merge(move_axis(to_front(lhs, ld, size), 0, dn.input_batch), dn.input_batch)
        out = _convolve(instr, x, rhs, dn.output_batch, size, groups)
        return move_axis(_split(out, dn.output_batch, (size, dims_of(out)[dn.output_batch] // size)),
                         dn.output_batch, 0), 0
    w = to_front(rhs, rd, size)
    n_out = dims_of(w)[dn.kernel_output_feature + 1]
    if ld is None:   # the examples' filters become more output features
        out = _convolve(instr, lhs, _kernel_batched(w, dn.kernel_output_feature, size, groups), of, size, groups)
        out = _split(out, of, (groups, size, n_out // groups))    # [..., G, B, O/G, ...]
        return _merge(move_axis(out, of + 1, 0), of + 1), 0
    # both: each example's input features form their own feature groups
    x = _merge(move_axis(to_front(lhs, ld, size), 0, dn.input_feature), dn.input_feature)
    w = _merge(move_axis(w, 0, dn.kernel_output_feature), dn.kernel_output_feature)
    out = _convolve(instr, x, w, of, size, groups * size)
    return move_axis(_split(out, of, (size, n_out)), of, 0), 0


BATCH_RULES["dot"] = _dot
BATCH_RULES["convolution"] = _convolution


def _leading_batch(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    size = batch_size(values, dims)
    shape = instr.shape
    assert isinstance(shape, ArrayShape)
    operands = [to_front(v, d, size) for v, d in zip(values, dims)]
    return bind(instr.opcode, *operands, shape=ArrayShape(shape.dtype, (size, *shape.dims)),
                **semantic_attrs(instr)), 0


BATCH_RULES["cholesky"] = _leading_batch
BATCH_RULES["triangular-solve"] = _leading_batch
