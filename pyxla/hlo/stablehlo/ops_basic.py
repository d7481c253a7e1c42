"""Elementwise ops, constants and the ops that move data without an index array.

  stablehlo.X (unary and binary math, bit ops)  -> X with '_' as '-' (log_plus_one -> log-plus-one)
  compare GT, a, b, FLOAT                       -> compare direction=GT (type=TOTALORDER kept)
  convert / bitcast_convert / reduce_precision  -> convert / bitcast-convert / reduce-precision
  constant dense<..>                            -> constant
  broadcast_in_dim dims = [..]                  -> broadcast dimensions={..}
  reshape, transpose, reverse, slice, pad, concatenate, iota, dynamic_slice,
  dynamic_update_slice, get_tuple_element, tuple -> their HLO namesakes
"""
from __future__ import annotations

import re

from ..attributes import PadDim, SliceDim
from ..instruction import HloInstruction
from ..shape import ArrayShape
from .converter import Emitter, array_result, attr, handles, result_shape
from .dense import DenseError, dense_array
from .optree import Dense, DenseArray, DialectAttr, Op

UNARY = """abs cbrt ceil cosine exponential exponential_minus_one floor is_finite log log_plus_one
logistic negate not popcnt round_nearest_afz round_nearest_even rsqrt sign sine sqrt tan tanh
count_leading_zeros""".split()
BINARY = """add subtract multiply divide remainder maximum minimum power atan2 and or xor shift_left
shift_right_arithmetic shift_right_logical""".split()
_DIRECTIONS = {"EQ", "NE", "LT", "LE", "GT", "GE"}
_COMPARE_TYPES = {"FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED", "NOTYPE"}


def ints(value, what: str = "a list of integers") -> tuple[int, ...]:
    """`[1, 2]`, `array<i64: 1, 2>`, `dense<[1, 2]>`: a tuple of ints."""
    if isinstance(value, DenseArray):
        value = list(value.values)
    if isinstance(value, Dense):
        found = [int(v) for v in re.findall(r"-?\d+", value.body)]
        size = value.type.size if isinstance(value.type, ArrayShape) else len(found)
        value = found * size if len(found) == 1 else found   # a splat
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                         for v in value):
        raise ValueError(f"expected {what}, found {value!r}")
    return tuple(value)


def bools(value) -> tuple[bool, ...]:
    if isinstance(value, DenseArray):
        value = list(value.values)
    return tuple(bool(v) for v in value)


def enum_word(value) -> str:
    """`#stablehlo<comparison_direction GT>` or a bare `GT` -> 'GT'."""
    if isinstance(value, DialectAttr):
        return value.body.split()[-1]
    return str(value)


def _unary(hlo: str):
    def convert(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
        return [em.b.op(hlo, *args, shape=result_shape(em, op))]
    return convert


for _name in UNARY + BINARY + ["clamp", "convert", "bitcast_convert", "tuple"]:
    handles(f"stablehlo.{_name}")(_unary(_name.replace("_", "-")))


@handles("stablehlo.select")
def select(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    """A scalar predicate picks whole arrays: broadcast it, as XLA's legalisation does."""
    out = array_result(em, op)
    pred = args[0]
    if isinstance(pred.shape, ArrayShape) and pred.shape.rank == 0 and out.rank:
        pred = em.b.op("broadcast", pred, shape=ArrayShape(pred.shape.dtype, out.dims), dimensions=())
    return [em.b.op("select", pred, *args[1:], shape=out)]


@handles("stablehlo.compare")
def compare(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    words = [w for w in op.keywords if w in _DIRECTIONS]
    direction = words[0] if words else enum_word(attr(em, op, "comparison_direction"))
    types = [w for w in op.keywords if w in _COMPARE_TYPES]
    ctype = types[0] if types else enum_word(op.attrs.get("compare_type", "NOTYPE"))
    attrs = {"direction": direction}
    if ctype == "TOTALORDER":
        attrs["type"] = "TOTALORDER"
    return [em.b.op("compare", *args, shape=result_shape(em, op), attrs=attrs)]


@handles("stablehlo.reduce_precision")
def reduce_precision(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if "format" in op.attrs:
        m = re.fullmatch(r"e(\d+)m(\d+)", str(op.attrs["format"]))
        if not m:
            raise em.error(op, f"reduce_precision format {op.attrs['format']!r} is not eNmM")
        exp, man = int(m.group(1)), int(m.group(2))
    else:
        exp, man = attr(em, op, "exponent_bits"), attr(em, op, "mantissa_bits")
    return [em.b.op("reduce-precision", *args, shape=result_shape(em, op), exponent_bits=exp,
                    mantissa_bits=man)]


@handles("stablehlo.constant")
def constant(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    value = attr(em, op, "value")
    shape = array_result(em, op)
    if not isinstance(value, Dense):
        raise em.error(op, "a constant needs a dense<...> value")
    if value.type is not None and value.type != shape:
        shape = value.type if isinstance(value.type, ArrayShape) else shape
    try:
        arr = dense_array(value.body, shape)
    except DenseError as e:
        raise em.error(value.pos + len("dense<") + e.offset, str(e)) from None
    return [em.b.constant(arr, shape.dtype)]


@handles("stablehlo.broadcast_in_dim")
def broadcast_in_dim(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    dims = ints(op.attrs.get("dims", op.attrs.get("broadcast_dimensions")))
    out = array_result(em, op)
    x = args[0]
    shape = x.shape
    assert isinstance(shape, ArrayShape)
    keep = [i for i, d in enumerate(dims) if shape.dims[i] == out.dims[d]]
    if len(keep) != len(dims):   # size-1 dimensions that expand: HLO's broadcast cannot, drop them
        bad = [i for i in range(len(dims)) if i not in keep and shape.dims[i] != 1]
        if bad:
            raise em.error(op, f"broadcast_in_dim: operand dimension {bad[0]} does not fit the result")
        x = em.b.op("reshape", x, shape=ArrayShape(shape.dtype, tuple(shape.dims[i] for i in keep)))
        dims = tuple(dims[i] for i in keep)
    return [em.b.op("broadcast", x, shape=out, dimensions=dims)]


@handles("stablehlo.reshape")
def reshape(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    return [em.b.op("reshape", *args, shape=result_shape(em, op))]


@handles("stablehlo.transpose", "stablehlo.reverse")
def transpose(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    dims = ints(op.attrs.get("dims", op.attrs.get("permutation", op.attrs.get("dimensions"))))
    return [em.b.op(op.name.split(".")[1], *args, shape=result_shape(em, op), dimensions=dims)]


@handles("stablehlo.concatenate")
def concatenate(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    dim = op.attrs.get("dim", op.attrs.get("dimension"))
    return [em.b.op("concatenate", *args, shape=result_shape(em, op), dimensions=ints(dim))]


@handles("stablehlo.iota")
def iota(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    dim = op.attrs.get("dim", op.attrs.get("iota_dimension"))
    return [em.b.op("iota", shape=result_shape(em, op), iota_dimension=ints(dim)[0])]


@handles("stablehlo.slice")
def slice_(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if op.raw:   # pretty: [0:2, 1:5:2]
        dims = []
        for part in op.raw[0].split(","):
            nums = [int(v) for v in part.strip().split(":")]
            if len(nums) not in (2, 3):
                raise em.error(op, f"slice range {part.strip()!r} is not start:limit[:stride]")
            dims.append(SliceDim(*nums))
    else:
        starts, limits = ints(attr(em, op, "start_indices")), ints(attr(em, op, "limit_indices"))
        strides = ints(op.attrs.get("strides", [1] * len(starts)))
        dims = [SliceDim(s, lim, st) for s, lim, st in zip(starts, limits, strides)]
    return [em.b.op("slice", *args, shape=result_shape(em, op), slice=tuple(dims))]


@handles("stablehlo.pad")
def pad(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    low = ints(op.attrs.get("low", op.attrs.get("edge_padding_low")))
    high = ints(op.attrs.get("high", op.attrs.get("edge_padding_high")))
    interior = ints(op.attrs.get("interior", op.attrs.get("interior_padding", [0] * len(low))))
    padding = tuple(PadDim(lo, hi, it) for lo, hi, it in zip(low, high, interior))
    return [em.b.op("pad", *args, shape=result_shape(em, op), padding=padding)]


@handles("stablehlo.dynamic_slice")
def dynamic_slice(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    sizes = ints(op.attrs.get("sizes", op.attrs.get("slice_sizes")))
    return [em.b.op("dynamic-slice", *args, shape=result_shape(em, op), dynamic_slice_sizes=sizes)]


@handles("stablehlo.dynamic_update_slice")
def dynamic_update_slice(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    return [em.b.op("dynamic-update-slice", *args, shape=result_shape(em, op))]


@handles("stablehlo.get_tuple_element")
def get_tuple_element(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    index = int(op.raw[0]) if op.raw else ints(op.attrs.get("index"))[0]   # pretty: %t[0]
    return [em.b.op("get-tuple-element", *args, shape=result_shape(em, op), index=index)]
