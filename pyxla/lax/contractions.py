"""Contractions: dot, dot_general and conv_general_dilated (HLO dot and convolution).

`preferred_element_type` becomes the declared result type of the HLO instruction (bf16
operands accumulating into f32, s8 into s32), as JAX lowers it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import TraceError
from ..frontend.tracing import bind, where
from ..hlo.attributes import ConvDimensionNumbers as HloConvDimensions
from ..hlo.attributes import WindowDim
from ._values import aval, element_type, inferred_shape, op_error, unify_types
from ._windows import dilated, ints_or_ones, padtype_to_pads

DotDimensionNumbers = tuple[tuple[Sequence[int], Sequence[int]], tuple[Sequence[int], Sequence[int]]]


def _preferred(preferred_element_type: Any):
    return None if preferred_element_type is None else element_type(preferred_element_type)


def dot_general(lhs: Any, rhs: Any, dimension_numbers: DotDimensionNumbers, precision: Any = None,
                preferred_element_type: Any = None) -> Any:
    """XLA's DotGeneral: dimension_numbers = ((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch)); the result has the batch, then lhs free, then rhs free dims."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = unify_types("dot", [lhs, rhs])
    attrs = {"lhs_batch_dims": tuple(int(d) for d in lb), "rhs_batch_dims": tuple(int(d) for d in rb),
             "lhs_contracting_dims": tuple(int(d) for d in lc), "rhs_contracting_dims": tuple(int(d) for d in rc)}
    attrs = {k: v for k, v in attrs.items() if v}   # HLO text leaves empty lists out
    shape = inferred_shape("dot", [lhs, rhs], attrs, _preferred(preferred_element_type))
    return bind("dot", lhs, rhs, shape=shape, **attrs)


def dot(lhs: Any, rhs: Any, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Vector/matrix products: lhs's last dimension contracts with rhs's first."""
    lv, rv = aval(lhs), aval(rhs)
    if lv.rank not in (1, 2) or rv.rank not in (1, 2):
        raise op_error("dot", [lhs, rhs], "lax.dot takes vectors and matrices; use dot_general for "
                                          "higher ranks")
    return dot_general(lhs, rhs, (((lv.rank - 1,), (0,)), ((), ())), precision, preferred_element_type)


# --- convolution ------------------------------------------------------------------------

class ConvDimensionNumbers(NamedTuple):
    """JAX's convolution dimension numbers: each spec lists dimension indices as
    (batch, feature, spatial...) for lhs and out, (out feature, in feature, spatial...) for rhs."""
    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]


def _specs_from_strings(lhs: str, rhs: str, out: str) -> ConvDimensionNumbers:
    """('NHWC', 'HWIO', 'NHWC') -> index specs; spatial dims are matched by letter, in the
    order they appear in the kernel spec (JAX's rule)."""
    if not (len(lhs) == len(rhs) == len(out)):
        raise TraceError(f"convolution dimension_numbers {(lhs, rhs, out)} must have equal lengths{where()}")
    for spec, (a, b) in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
        if len(set(spec)) != len(spec) or a not in spec or b not in spec:
            raise TraceError(f"convolution dimension spec {spec!r} must name {a} and {b} once each{where()}")
    spatial = [c for c in rhs if c not in "OI"]
    for spec in (lhs, out):
        if sorted(c for c in spec if c not in "NC") != sorted(spatial):
            raise TraceError(f"convolution dimension spec {spec!r} must have the spatial dimensions "
                             f"{''.join(spatial)} of the kernel spec {rhs!r}{where()}")
    return ConvDimensionNumbers(
        (lhs.index("N"), lhs.index("C")) + tuple(lhs.index(c) for c in spatial),
        (rhs.index("O"), rhs.index("I")) + tuple(rhs.index(c) for c in spatial),
        (out.index("N"), out.index("C")) + tuple(out.index(c) for c in spatial))


def conv_dimension_numbers(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                           dimension_numbers: Any) -> ConvDimensionNumbers:
    """Dimension numbers from None (NCHW / OIHW / NCHW), three spec strings or a ConvDimensionNumbers."""
    rank = len(lhs_shape)
    if dimension_numbers is None:
        default = tuple(range(rank))
        return ConvDimensionNumbers(default, default, default)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    lhs, rhs, out = dimension_numbers
    if all(isinstance(s, str) for s in (lhs, rhs, out)):
        return _specs_from_strings(lhs, rhs, out)
    return ConvDimensionNumbers(tuple(lhs), tuple(rhs), tuple(out))


def conv_general_dilated(lhs: Any, rhs: Any, window_strides: Sequence[int], padding: Any,
                         lhs_dilation: Sequence[int] | None = None, rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: Any = None, feature_group_count: int = 1,
                         batch_group_count: int = 1, precision: Any = None,
                         preferred_element_type: Any = None) -> Any:
    """A general convolution with JAX's signature, lowered to HLO convolution.

    padding: 'SAME', 'SAME_LOWER', 'VALID' or one (low, high) pair per spatial dimension;
    lhs_dilation is the input (base) dilation, rhs_dilation the kernel (window) dilation.
    """
    lhs, rhs = unify_types("convolution", [lhs, rhs])
    lv, rv = aval(lhs), aval(rhs)
    if lv.rank != rv.rank or lv.rank < 3:
        raise op_error("convolution", [lhs, rhs], "input and kernel need the same rank, with at least "
                                                  "one spatial dimension")
    dn = conv_dimension_numbers(lv.dims, rv.dims, dimension_numbers)
    n = lv.rank - 2
    strides = ints_or_ones(window_strides, n)
    lhs_dilation = ints_or_ones(lhs_dilation, n)
    rhs_dilation = ints_or_ones(rhs_dilation, n)
    in_spatial = [lv.dims[d] for d in dn.lhs_spec[2:]]
    kernel_spatial = [rv.dims[d] for d in dn.rhs_spec[2:]]
    if isinstance(padding, str):   # JAX sizes 'SAME' from the undilated input and the dilated kernel
        pads = padtype_to_pads(in_spatial, [dilated(k, d) for k, d in zip(kernel_spatial, rhs_dilation)],
                               strides, padding)
    else:
        pads = padtype_to_pads(in_spatial, kernel_spatial, strides, padding)
    if not (len(strides) == len(lhs_dilation) == len(rhs_dilation) == n):
        raise op_error("convolution", [lhs, rhs], f"window_strides and dilations need {n} entries each")
    window = tuple(WindowDim(size=k, stride=int(s), pad_low=lo, pad_high=hi, lhs_dilate=int(ld), rhs_dilate=int(rd))
                   for k, s, (lo, hi), ld, rd in zip(kernel_spatial, strides, pads, lhs_dilation, rhs_dilation))
    labels = HloConvDimensions(
        input_batch=dn.lhs_spec[0], input_feature=dn.lhs_spec[1], input_spatial=tuple(dn.lhs_spec[2:]),
        kernel_input_feature=dn.rhs_spec[1], kernel_output_feature=dn.rhs_spec[0],
        kernel_spatial=tuple(dn.rhs_spec[2:]),
        output_batch=dn.out_spec[0], output_feature=dn.out_spec[1], output_spatial=tuple(dn.out_spec[2:]))
    attrs = {"window": window, "dim_labels": labels}
    if feature_group_count != 1:
        attrs["feature_group_count"] = int(feature_group_count)
    if batch_group_count != 1:
        attrs["batch_group_count"] = int(batch_group_count)
    shape = inferred_shape("convolution", [lhs, rhs], attrs, _preferred(preferred_element_type))
    return bind("convolution", lhs, rhs, shape=shape, **attrs)
