"""The registry's shape rules on symbolic dimensions (dims.py): what a shape polymorphic trace
builds, op by op, with the result shapes it must get, and the verifier accepting the module."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.errors import ShapeError, VerifierError
from pyxla.hlo import evaluate_module, verify_module
from pyxla.hlo.attributes import ConvDimensionNumbers, PadDim, SliceDim, WindowDim
from pyxla.hlo.builder import HloBuilder, scalar_computation
from pyxla.hlo.dims import DimExpr, InconclusiveDimensionOperation, Symbol
from pyxla.hlo.shape import ArrayShape, TupleShape
from pyxla.hlo.types import F32, PRED, S32

B = DimExpr.symbol(Symbol("b"))
S = DimExpr.symbol(Symbol("s"))
ADD = scalar_computation("add", F32)


def arr(*dims, dtype=F32) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))


def dims_of(instr):
    return instr.array_shape.dims


def test_elementwise_compare_select_convert_and_transcendentals():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 32), "x")
    y = b.parameter(arr(B, 32), "y")
    s = b.op("add", x, y)
    for opcode in ("exponential", "log", "tanh", "negate", "sqrt", "logistic"):
        assert dims_of(b.op(opcode, s)) == (B, 32)
    c = b.op("compare", x, y, direction="LT")
    assert c.shape == arr(B, 32, dtype=PRED)
    sel = b.op("select", c, x, y)
    conv = b.op("convert", sel, shape=arr(B, 32, dtype=S32))
    clamp = b.op("clamp", b.op("broadcast", b.constant(0.0, F32), shape=arr(B, 32), dimensions=()), x, y)
    assert dims_of(conv) == (B, 32) and dims_of(clamp) == (B, 32)
    verify_module(b.module(b.tuple(sel, conv, clamp)))


def test_mismatched_symbolic_operands_are_shape_errors():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 32), "x")
    y = b.parameter(arr(S, 32), "y")
    with pytest.raises(ShapeError, match=r"lhs is f32\[b,32\], rhs is f32\[s,32\]"):
        b.op("add", x, y)


def test_broadcast_reshape_transpose_iota():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 32), "x")
    row = b.parameter(arr(32), "row")
    wide = b.op("broadcast", row, shape=arr(B, 32), dimensions=(1,))
    flat = b.op("reshape", x, shape=arr(32 * B))
    back = b.op("reshape", flat, shape=arr(B, 8, 4))
    t = b.op("transpose", back, dimensions=(2, 0, 1))
    assert dims_of(t) == (4, B, 8)
    ramp = b.op("iota", shape=arr(B, 32, dtype=S32), iota_dimension=0)
    assert dims_of(ramp) == (B, 32)
    with pytest.raises(Exception, match="elements"):
        b.op("reshape", x, shape=arr(S, 32))
    verify_module(b.module(b.tuple(wide, t, ramp)))


def test_dot_reduce_and_reduce_window():
    b = HloBuilder("f")
    x = b.parameter(arr(B, S, 8), "x")
    w = b.parameter(arr(8, 4), "w")
    y = b.op("dot", x, w, lhs_contracting_dims=(2,), rhs_contracting_dims=(0,))
    assert dims_of(y) == (B, S, 4)
    bmm = b.op("dot", x, x, lhs_batch_dims=(0,), rhs_batch_dims=(0,), lhs_contracting_dims=(2,),
               rhs_contracting_dims=(2,))
    assert dims_of(bmm) == (B, S, S)
    total = b.op("reduce", x, b.constant(0.0, F32), dimensions=(1,), to_apply=ADD)
    assert dims_of(total) == (B, 8)
    cumsum = b.op("reduce-window", x, b.constant(0.0, F32), to_apply=ADD,
                  window=(WindowDim(1), WindowDim(S, pad_low=S - 1), WindowDim(1)))
    assert dims_of(cumsum) == (B, S, 8)
    pooled = b.op("reduce-window", x, b.constant(0.0, F32), to_apply=ADD,
                  window=(WindowDim(1), WindowDim(3, 1, 1, 1), WindowDim(2, 2)))
    assert dims_of(pooled) == (B, S, 4)
    verify_module(b.module(b.tuple(y, bmm, total, cumsum, pooled)))


def test_concatenate_slice_pad():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 3), "x")
    y = b.parameter(arr(S, 3), "y")
    both = b.op("concatenate", x, y, x, dimensions=(0,))
    assert dims_of(both) == (2 * B + S, 3)
    tail = b.op("slice", x, slice=(SliceDim(1, B), SliceDim(0, 3)))
    assert dims_of(tail) == (B - 1, 3)
    last = b.op("slice", x, slice=(SliceDim(B - 1, B), SliceDim(0, 3, 2)))
    assert dims_of(last) == (1, 2)
    padded = b.op("pad", x, b.constant(0.0, F32), padding=(PadDim(1, 2, 1), PadDim(0, B)))
    assert dims_of(padded) == (2 * B + 2, B + 3)
    verify_module(b.module(b.tuple(both, tail, last, padded)))


def test_dynamic_slices_and_gather():
    b2 = DimExpr.symbol(Symbol("b", 2))
    b = HloBuilder("f")
    x = b.parameter(arr(b2, 4), "x")
    i = b.parameter(arr(dtype=S32), "i")
    zero = b.constant(0, S32)
    window = b.op("dynamic-slice", x, i, zero, dynamic_slice_sizes=(2, 4))
    whole = b.op("dynamic-slice", x, i, zero, dynamic_slice_sizes=(b2, 2))
    assert dims_of(window) == (2, 4) and dims_of(whole) == (b2, 2)
    updated = b.op("dynamic-update-slice", x, window, i, zero)
    assert dims_of(updated) == (b2, 4)
    table = b.parameter(arr(10, 4), "table")
    ids = b.parameter(arr(b2, dtype=S32), "ids")
    rows = b.op("gather", table, ids, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                index_vector_dim=1, slice_sizes=(1, 4))
    assert dims_of(rows) == (b2, 4)
    with pytest.raises(InconclusiveDimensionOperation, match="b"):
        b.op("dynamic-slice", b.parameter(arr(B, 4), "y"), i, zero, dynamic_slice_sizes=(2, 4))
    verify_module(b.module(b.tuple(window, whole, updated, rows)))


def test_convolution_with_a_symbolic_batch_and_sort():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 3, 8, 8), "x")
    k = b.parameter(arr(4, 3, 3, 3), "k")
    y = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf01_oi01->bf01"),
             window=(WindowDim(3, 2), WindowDim(3, 1, 1, 1)))
    assert dims_of(y) == (B, 4, 3, 8)
    nhwc = b.parameter(arr(B, 8, 8, 3), "nhwc")
    hwio = b.parameter(arr(3, 3, 3, 4), "hwio")
    z = b.op("convolution", nhwc, hwio, dim_labels=ConvDimensionNumbers.from_labels("b01f_01io->b01f"),
             window=(WindowDim(3, 1, 1, 1), WindowDim(3, 1, 1, 1)))
    assert dims_of(z) == (B, 8, 8, 4)
    less = HloBuilder("less")
    p0, p1 = less.parameter(arr(), "p0"), less.parameter(arr(), "p1")
    comparator = less.build(less.op("compare", p0, p1, direction="LT"))
    ordered = b.op("sort", x, dimensions=(1,), to_apply=comparator)
    assert dims_of(ordered) == (B, 3, 8, 8)
    verify_module(b.module(b.tuple(y, z, ordered)))


def test_get_dimension_size_tuples_and_the_verifier_comparing_symbolic_shapes():
    b = HloBuilder("f")
    x = b.parameter(arr(B, 3), "x")
    n = b.op("get-dimension-size", x, dimensions=(0,))
    assert n.shape == arr(dtype=S32)
    t = b.tuple(x, n)
    assert t.shape == TupleShape((arr(B, 3), arr(dtype=S32)))
    g = b.op("get-tuple-element", t, index=0)
    module = b.module(b.op("negate", g))
    verify_module(module)
    module.entry.root.shape = arr(S, 3)   # a different symbol: the verifier names the mismatch
    with pytest.raises(VerifierError, match=r"the result is f32\[b,3\], but f32\[s,3\] is declared"):
        verify_module(module)
    # the evaluator runs a static module's get-dimension-size as the static size
    static = HloBuilder("g")
    y = static.parameter(arr(5, 3), "y")
    assert int(evaluate_module(static.module(static.op("get-dimension-size", y, dimensions=(0,))),
                               [np.ones((5, 3), np.float32)])) == 5
