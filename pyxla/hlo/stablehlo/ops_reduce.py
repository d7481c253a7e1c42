"""Ops with a reducer or comparator region: reduce, reduce_window, select_and_scatter, sort.

  reduce(%x init: %c) applies stablehlo.add across dimensions = [1]
      -> reduce(x, c), dimensions={1}, to_apply=(a, b) -> add(a, b)
  reduce(%x init: %c), (%i init: %j) across dimensions = [1] ... reducer(%a: t, %b: t) (%c: t, %d: t) {..}
      -> a variadic reduce whose reducer takes (a, c, b, d): the accumulators, then the inputs
  "stablehlo.reduce_window" / "stablehlo.select_and_scatter" window_dimensions, window_strides,
  base_dilations, window_dilations, padding -> window={size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=..}
  "stablehlo.sort" dimension, is_stable, comparator -> sort dimensions={d}, is_stable, to_apply
"""
from __future__ import annotations

from ..attributes import WindowDim
from ..builder import scalar_computation
from ..computation import HloComputation
from ..instruction import HloInstruction
from ..shape import ArrayShape, TupleShape
from .converter import Emitter, attr, handles, result_shape
from .ops_basic import ints
from .optree import Op


def _reducer(em: Emitter, op: Op, inits: list[HloInstruction]) -> HloComputation:
    if "applies" in op.keywords:
        i = op.keywords.index("applies")
        if i + 1 >= len(op.keywords):
            raise em.error(op, "'applies' needs an op name")
        name = op.keywords[i + 1]
        if not name.startswith("stablehlo.") or len(inits) != 1:
            raise em.error(op, f"'applies {name}' needs a stablehlo binary op and one operand")
        shape = inits[0].shape
        assert isinstance(shape, ArrayShape)
        return scalar_computation(name.split(".", 1)[1].replace("_", "-"), shape.dtype)
    if len(op.regions) != 1:
        raise em.error(op, f"'{op.name}' needs a reducer region or 'applies'")
    return em.scalar_region(op.regions[0], "reducer", op)


def _tupled(em: Emitter, op: Op, opcode: str, args: list[HloInstruction], **kw) -> list[HloInstruction]:
    n = op.num_results
    shape = result_shape(em, op) if n == 1 else TupleShape(tuple(op.result_types))
    out = em.b.op(opcode, *args, shape=shape, **kw)
    return [out] if n == 1 else em.unpack(out)


@handles("stablehlo.reduce")
def reduce(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    half = len(args) // 2
    to_apply = _reducer(em, op, args[half:])
    dims = ints(attr(em, op, "dimensions"))
    return _tupled(em, op, "reduce", args, dimensions=dims, to_apply=to_apply)


def _window(em: Emitter, op: Op, rank: int) -> tuple[WindowDim, ...]:
    sizes = ints(attr(em, op, "window_dimensions"))
    strides = ints(op.attrs.get("window_strides", [1] * rank))
    base = ints(op.attrs.get("base_dilations", [1] * rank))
    win = ints(op.attrs.get("window_dilations", [1] * rank))
    pads = ints(op.attrs.get("padding", [0] * (2 * rank)))
    if len(pads) == 1:
        pads = pads * (2 * rank)
    return tuple(WindowDim(size=sizes[i], stride=strides[i], pad_low=pads[2 * i], pad_high=pads[2 * i + 1],
                           lhs_dilate=base[i], rhs_dilate=win[i]) for i in range(rank))


@handles("stablehlo.reduce_window")
def reduce_window(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    half = len(args) // 2
    shape = args[0].shape
    assert isinstance(shape, ArrayShape)
    to_apply = _reducer(em, op, args[half:])
    return _tupled(em, op, "reduce-window", args, window=_window(em, op, shape.rank), to_apply=to_apply)


@handles("stablehlo.select_and_scatter")
def select_and_scatter(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if len(op.regions) != 2:
        raise em.error(op, "select_and_scatter needs a select and a scatter region")
    shape = args[0].shape
    assert isinstance(shape, ArrayShape)
    select = em.scalar_region(op.regions[0], "select", op)
    scatter = em.scalar_region(op.regions[1], "scatter", op)
    return [em.b.op("select-and-scatter", *args, shape=result_shape(em, op),
                    window=_window(em, op, shape.rank), select=select, scatter=scatter)]


@handles("stablehlo.sort")
def sort(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if len(op.regions) != 1:
        raise em.error(op, "sort needs a comparator region")
    comparator = em.scalar_region(op.regions[0], "compare", op)
    dim = int(op.attrs.get("dimension", -1))
    shape = args[0].shape
    assert isinstance(shape, ArrayShape)
    if dim < 0:
        dim += shape.rank
    return _tupled(em, op, "sort", args, dimensions=(dim,), is_stable=bool(op.attrs.get("is_stable", False)),
                   to_apply=comparator)
