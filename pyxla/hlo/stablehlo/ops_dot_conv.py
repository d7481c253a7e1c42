"""dot_general, dot, convolution, gather and scatter: the ops with dimension-number attributes.

  dot_general batching_dims = [0] x [0], contracting_dims = [2] x [1]
      -> dot lhs_batch_dims={0} rhs_batch_dims={0} lhs_contracting_dims={2} rhs_contracting_dims={1}
  convolution dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = .., pad = ..}
      -> convolution dim_labels=b01f_01io->b01f window={size=.. stride=.. pad=..}
  gather / scatter #stablehlo.gather<...> / #stablehlo.scatter<...> fields
      -> gather / scatter with the same field names (scatter's region is to_apply)
"""
from __future__ import annotations

from typing import Any

from ..attributes import ConvDimensionNumbers, WindowDim
from ..instruction import HloInstruction
from ..shape import ArrayShape, TupleShape
from .converter import Emitter, attr, handles, result_shape
from .ops_basic import bools, ints
from .optree import DialectAttr, Op

_GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                  "start_indices_batching_dims", "start_index_map")
_SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                   "scatter_indices_batching_dims", "scatter_dims_to_operand_dims")


def _dialect_fields(em: Emitter, op: Op, name: str) -> dict:
    value = attr(em, op, name)
    if not isinstance(value, DialectAttr) or value.fields is None:
        raise em.error(op, f"'{op.name}' attribute '{name}' must be #stablehlo.<...> with fields")
    return value.fields


@handles("stablehlo.dot_general")
def dot_general(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if "dot_dimension_numbers" in op.attrs:
        f = _dialect_fields(em, op, "dot_dimension_numbers")
        lb, rb = ints(f.get("lhs_batching_dimensions", [])), ints(f.get("rhs_batching_dimensions", []))
        lc, rc = ints(f.get("lhs_contracting_dimensions", [])), ints(f.get("rhs_contracting_dimensions", []))
    else:
        lb, rb = (ints(v) for v in op.attrs.get("batching_dims", ([], [])))
        lc, rc = (ints(v) for v in op.attrs.get("contracting_dims", ([], [])))
    return [em.b.op("dot", *args, shape=result_shape(em, op), lhs_batch_dims=lb, rhs_batch_dims=rb,
                    lhs_contracting_dims=lc, rhs_contracting_dims=rc)]


@handles("stablehlo.dot")
def dot(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    lhs = args[0].shape
    assert isinstance(lhs, ArrayShape)
    return [em.b.op("dot", *args, shape=result_shape(em, op), lhs_contracting_dims=(lhs.rank - 1,),
                    rhs_contracting_dims=(0,))]


def _labels(em: Emitter, op: Op) -> ConvDimensionNumbers:
    value = op.attrs.get("dim_numbers", op.attrs.get("dimension_numbers"))
    if isinstance(value, DialectAttr):   # #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>
        body = value.body.replace("raw", "").replace(" ", "")
        lhs_rhs, out = body.split("->")
        lhs, rhs = lhs_rhs.split("]x[")
        parts = [lhs.strip("[]").split(","), rhs.strip("[]").split(","), out.strip("[]").split(",")]
    elif isinstance(value, tuple) and len(value) == 3:
        parts = [[str(x) for x in p] for p in value]
    else:
        raise em.error(op, "convolution needs dim_numbers = [..]x[..]->[..]")
    text = "".join(parts[0]) + "_" + "".join(parts[1]) + "->" + "".join(parts[2])
    return ConvDimensionNumbers.from_labels(text)


def _window_fields(em: Emitter, op: Op, rank: int) -> dict[str, list]:
    """stride/pad/lhs_dilate/rhs_dilate/reverse per spatial dimension, pretty or generic."""
    w = op.attrs.get("window")
    if isinstance(w, dict):
        src = {"stride": w.get("stride"), "pad": w.get("pad"), "lhs": w.get("lhs_dilate"),
               "rhs": w.get("rhs_dilate"), "rev": w.get("reverse")}
    else:
        src = {"stride": op.attrs.get("window_strides"), "pad": op.attrs.get("padding"),
               "lhs": op.attrs.get("lhs_dilation"), "rhs": op.attrs.get("rhs_dilation"),
               "rev": op.attrs.get("window_reversal")}
    pads = ints(src["pad"]) if src["pad"] is not None and not isinstance(src["pad"], list) else None
    pad_pairs = ([tuple(p) for p in src["pad"]] if isinstance(src["pad"], list)
                 else [(pads[2 * i], pads[2 * i + 1]) for i in range(rank)] if pads else [(0, 0)] * rank)
    return {"stride": list(ints(src["stride"])) if src["stride"] is not None else [1] * rank,
            "pad": pad_pairs,
            "lhs": list(ints(src["lhs"])) if src["lhs"] is not None else [1] * rank,
            "rhs": list(ints(src["rhs"])) if src["rhs"] is not None else [1] * rank,
            "rev": list(bools(src["rev"])) if src["rev"] is not None else [False] * rank}


@handles("stablehlo.convolution")
def convolution(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    dn = _labels(em, op)
    kernel = args[1].shape
    assert isinstance(kernel, ArrayShape)
    rank = len(dn.kernel_spatial)
    f = _window_fields(em, op, rank)
    window = tuple(WindowDim(size=kernel.dims[dn.kernel_spatial[i]], stride=f["stride"][i],
                             pad_low=f["pad"][i][0], pad_high=f["pad"][i][1], lhs_dilate=f["lhs"][i],
                             rhs_dilate=f["rhs"][i], reversal=f["rev"][i]) for i in range(rank))
    return [em.b.op("convolution", *args, shape=result_shape(em, op), dim_labels=dn, window=window,
                    feature_group_count=int(op.attrs.get("feature_group_count", 1)),
                    batch_group_count=int(op.attrs.get("batch_group_count", 1)))]


@handles("stablehlo.gather")
def gather(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    f = _dialect_fields(em, op, "dimension_numbers")
    kw: dict[str, Any] = {name: ints(f.get(name, [])) for name in _GATHER_FIELDS}
    kw["index_vector_dim"] = int(f["index_vector_dim"])
    kw["slice_sizes"] = ints(attr(em, op, "slice_sizes"))
    kw["indices_are_sorted"] = bool(op.attrs.get("indices_are_sorted", False))
    return [em.b.op("gather", *args, shape=result_shape(em, op), attrs=kw)]


@handles("stablehlo.scatter")
def scatter(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    f = _dialect_fields(em, op, "scatter_dimension_numbers")
    kw: dict[str, Any] = {name: ints(f.get(name, [])) for name in _SCATTER_FIELDS}
    kw["index_vector_dim"] = int(f["index_vector_dim"])
    kw["indices_are_sorted"] = bool(op.attrs.get("indices_are_sorted", False))
    kw["unique_indices"] = bool(op.attrs.get("unique_indices", False))
    if len(op.regions) != 1:
        raise em.error(op, "scatter needs one update region")
    to_apply = em.scalar_region(op.regions[0], "scatter_update", op)
    n = op.num_results
    shape = result_shape(em, op) if n == 1 else TupleShape(tuple(op.result_types))
    kw["to_apply"] = to_apply
    out = em.b.op("scatter", *args, shape=shape, attrs=kw)
    return [out] if n == 1 else em.unpack(out)
