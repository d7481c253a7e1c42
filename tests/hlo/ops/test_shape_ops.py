"""Data-movement opcodes (shape_ops.py) against hand-written NumPy references.

References index element by element (np.indices, explicit loops) rather than calling the
NumPy function the implementation uses, so a wrong axis order or offset shows up.
Data movement is exact: results are compared bit for bit.
"""
import numpy as np
import pytest

from pyxla.errors import EvaluationError, ShapeError, VerifierError
from pyxla.hlo import (
    BF16,
    F16,
    F32,
    F64,
    PRED,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    ArrayShape,
    HloBuilder,
    PadDim,
    SliceDim,
    TupleShape,
    array,
    evaluate_module,
    from_numpy_dtype,
    op_def,
    scalar,
    verify_module,
)
from pyxla.hlo.ops.shape_ops import literal_problem

DTYPES = [F32, BF16, F16, F64, S8, U16, S32, S64, PRED]


# --- helpers (test_indexing.py uses them too) --------------------------------------------

def random_array(rng, etype, dims):
    """Fresh random values of `etype`: wide normals for floats, the full range for integers."""
    dims = tuple(dims)
    if etype.is_pred:
        return rng.random(dims) < 0.5
    if etype.is_float:
        return (rng.standard_normal(dims) * 100).astype(etype.np_dtype)
    info = np.iinfo(etype.np_dtype)
    return rng.integers(info.min, info.max, size=dims, endpoint=True, dtype=etype.np_dtype)


def run_op(opcode, operands, shape=None, layouts=None, **attrs):
    """Evaluate one `opcode` instruction whose operands are parameters bound to `operands`.

    The module is verified first, so every call also checks the shape rule against the
    result shape. `layouts` gives the parameters' minor_to_major (None = row-major)."""
    b = HloBuilder(opcode.replace("-", "_"))
    layouts = layouts or [None] * len(operands)
    params = [b.parameter(ArrayShape(from_numpy_dtype(np.asarray(v).dtype), np.shape(v), layout))
              for v, layout in zip(operands, layouts)]
    module = b.module(b.op(opcode, *params, shape=shape, **attrs))
    verify_module(module)
    return evaluate_module(module, list(operands))


def assert_identical(actual, expected):
    """Same dtype, same shape, same bits (NaN payloads, -0 and subnormals included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def shape_error(opcode, operand_shapes, declared=None, match=None, **attrs):
    with pytest.raises(ShapeError, match=match):
        op_def(opcode).shape(operand_shapes, attrs, declared)


# --- constant, parameter, tuple -------------------------------------------------------------

@pytest.mark.parametrize("etype", DTYPES, ids=str)
def test_constant_evaluates_to_its_literal_read_only(rng, etype):
    literal = random_array(rng, etype, (3, 2))
    b = HloBuilder("c")
    module = b.module(b.constant(literal, etype))
    verify_module(module)
    value = evaluate_module(module, [])
    assert_identical(value, literal)
    with pytest.raises(ValueError):
        value[0, 0] = value[1, 1]     # nothing may write into a module's constant


def test_constant_literal_must_match_declared_shape(rng):
    literal = random_array(rng, F32, (2, 3))
    assert literal_problem(literal, array(F32, 2, 3)) is None
    assert "dimensions" in literal_problem(literal, array(F32, 3, 2))
    assert "stored as" in literal_problem(literal, array(F64, 2, 3))
    assert "tuple" in literal_problem(literal, TupleShape((array(F32, 2, 3),)))
    assert literal_problem((literal, literal[0]), TupleShape((array(F32, 2, 3), array(F32, 3)))) is None
    b = HloBuilder("c")
    const = b.constant(literal)
    const.shape = array(F32, 6)
    with pytest.raises(VerifierError, match="literal has dimensions"):
        verify_module(b.module(const))
    shape_error("constant", [], None, match="result shape")


def test_parameter_is_bound_by_the_evaluator_not_evaluated():
    b = HloBuilder("p")
    p = b.parameter(array(F32, 2), "x")
    with pytest.raises(EvaluationError, match="bound by the evaluator"):
        op_def("parameter").evaluate(p, [], None)
    shape_error("parameter", [], None, match="result shape")


def test_tuple_and_get_tuple_element(rng):
    x, y = random_array(rng, F32, (2, 3)), random_array(rng, S8, (4,))
    b = HloBuilder("t")
    px, py = b.parameter(array(F32, 2, 3), "x"), b.parameter(array(S8, 4), "y")
    inner = b.op("tuple", px, py)
    nested = b.op("tuple", inner, px)
    picked = b.op("get-tuple-element", b.op("get-tuple-element", nested, index=0), index=1)
    module = b.module(b.op("tuple", picked, nested))
    verify_module(module)
    got = evaluate_module(module, [x, y])
    assert_identical(got[0], y)
    assert_identical(got[1][0][0], x)
    assert_identical(got[1][1], x)
    tup = TupleShape((array(F32, 2), array(S8, 1)))
    shape_error("get-tuple-element", [tup], index=2, match="outside")
    shape_error("get-tuple-element", [array(F32, 2)], index=0, match="must be a tuple")


# --- broadcast -----------------------------------------------------------------------------

@pytest.mark.parametrize("operand_dims,result_dims,dimensions", [
    ((), (2, 3), ()),                       # scalar splat
    ((3,), (2, 3, 4), (1,)),                # rank expansion
    ((3, 1), (3, 1, 5), (0, 1)),            # size-1 kept
    ((4, 3), (3, 2, 4), (2, 0)),            # operand dims in a different order (transposing)
    ((0, 2), (2, 0, 3), (1, 0)),            # zero-size
    ((5,), (5,), (0,)),                     # identity
])
@pytest.mark.parametrize("etype", [F32, BF16, S16, PRED], ids=str)
def test_broadcast(rng, etype, operand_dims, result_dims, dimensions):
    x = random_array(rng, etype, operand_dims)
    got = run_op("broadcast", [x], shape=ArrayShape(etype, result_dims), dimensions=dimensions)
    index = np.indices(result_dims, dtype=np.int64)
    expected = x[tuple(index[d] for d in dimensions)] if dimensions else np.full(result_dims, x)
    assert_identical(got, expected)


def test_broadcast_shape_errors():
    shape_error("broadcast", [array(F32, 3)], None, dimensions=(0,), match="result shape")
    shape_error("broadcast", [array(F32, 3)], array(F32, 2, 3), dimensions=(0,), match="size 3")
    shape_error("broadcast", [array(F32, 3)], array(F32, 2, 3), dimensions=(), match="each of")
    shape_error("broadcast", [array(F32, 3)], array(F32, 2, 3), dimensions=(2,), match="outside")
    shape_error("broadcast", [array(F32, 3, 3)], array(F32, 3, 3), dimensions=(1, 1), match="repeats")
    shape_error("broadcast", [array(F32, 3)], array(S32, 2, 3), dimensions=(1,), match="element type")


# --- reshape, transpose, copy, reverse --------------------------------------------------------

@pytest.mark.parametrize("operand_dims,result_dims", [
    ((2, 3, 4), (6, 4)), ((24,), (2, 1, 3, 4)), ((), (1, 1)), ((1, 1), ()), ((0, 5), (5, 0, 2)),
])
@pytest.mark.parametrize("etype", [F32, F16, U8, PRED], ids=str)
def test_reshape_keeps_row_major_order(rng, etype, operand_dims, result_dims):
    x = random_array(rng, etype, operand_dims)
    got = run_op("reshape", [x], shape=ArrayShape(etype, result_dims))
    flat = [x[i] for i in np.ndindex(*operand_dims)]            # row-major reading order
    expected = np.array(flat, dtype=x.dtype).reshape(result_dims)
    assert_identical(got, expected)


def test_reshape_shape_errors():
    shape_error("reshape", [array(F32, 2, 3)], array(F32, 5), match="6 elements")
    shape_error("reshape", [array(F32, 2, 3)], array(S32, 6), match="element type")
    shape_error("reshape", [array(F32, 2, 3)], None, match="result shape")


@pytest.mark.parametrize("dims,perm", [
    ((3, 5), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 1, 3, 4), (3, 1, 0, 2)), ((4, 0, 2), (1, 2, 0)), ((7,), (0,)),
])
@pytest.mark.parametrize("etype", [F32, BF16, S64], ids=str)
def test_transpose(rng, etype, dims, perm):
    x = random_array(rng, etype, dims)
    got = run_op("transpose", [x], dimensions=perm)
    result_dims = tuple(dims[p] for p in perm)
    index = np.indices(result_dims, dtype=np.int64)
    source = [None] * len(dims)
    for k, p in enumerate(perm):
        source[p] = index[k]        # result dimension k walks operand dimension perm[k]
    assert_identical(got, x[tuple(source)])


def test_transpose_shape_errors():
    shape_error("transpose", [array(F32, 2, 3)], dimensions=(0,), match="permutation")
    shape_error("transpose", [array(F32, 2, 3)], dimensions=(0, 0), match="repeats")
    shape_error("transpose", [array(F32, 2, 3)], dimensions=(0, 2), match="outside")


def test_copy_is_the_identity_whatever_the_layouts(rng):
    x = random_array(rng, F32, (4, 5))
    x[0, 0], x[0, 1], x[0, 2] = np.nan, -0.0, np.float32(1e-42)
    got = run_op("copy", [x], shape=ArrayShape(F32, (4, 5), (0, 1)), layouts=[(1, 0)])
    assert_identical(got, x)


@pytest.mark.parametrize("dims,reversed_dims", [((5,), (0,)), ((3, 4), (1,)), ((2, 3, 4), (0, 2)), ((3, 0), (0, 1)), ((2, 3), ())])
def test_reverse(rng, dims, reversed_dims):
    x = random_array(rng, S32, dims)
    got = run_op("reverse", [x], dimensions=reversed_dims)
    index = np.indices(dims, dtype=np.int64)
    source = tuple(dims[d] - 1 - index[d] if d in reversed_dims else index[d] for d in range(len(dims)))
    assert_identical(got, x[source])
    shape_error("reverse", [array(F32, 2)], dimensions=(1,), match="outside")


# --- slice and concatenate ---------------------------------------------------------------

@pytest.mark.parametrize("dims,spec", [
    ((10,), [(2, 9, 3)]),
    ((7, 9), [(0, 7, 2), (1, 9, 3)]),
    ((4, 5, 6), [(1, 3, 1), (0, 5, 4), (5, 6, 1)]),
    ((4, 5), [(2, 2, 1), (0, 5, 2)]),       # empty range
    ((3, 1), [(0, 3, 5), (0, 1, 1)]),       # stride beyond the range
])
@pytest.mark.parametrize("etype", [F32, U8], ids=str)
def test_slice(rng, etype, dims, spec):
    x = random_array(rng, etype, dims)
    got = run_op("slice", [x], slice=tuple(SliceDim(*s) for s in spec))
    positions = [np.arange(start, limit, stride) for start, limit, stride in spec]
    assert_identical(got, x[np.ix_(*positions)])


def test_slice_shape_errors():
    def bad(spec, match, dims=(5, 4)):
        shape_error("slice", [array(F32, *dims)], slice=tuple(SliceDim(*s) for s in spec), match=match)
    bad([(0, 5, 1)], "rank")
    bad([(0, 6, 1), (0, 4, 1)], "does not fit")
    bad([(3, 2, 1), (0, 4, 1)], "does not fit")
    bad([(-1, 2, 1), (0, 4, 1)], "does not fit")
    bad([(0, 5, 0), (0, 4, 1)], "stride")


@pytest.mark.parametrize("pieces,axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 5)], 1), ([(2, 0, 3), (2, 4, 3)], 1), ([(3,)], 0),
    ([(1, 2, 2), (1, 2, 1), (1, 2, 3)], 2),
])
@pytest.mark.parametrize("etype", [F32, S32, PRED], ids=str)
def test_concatenate(rng, etype, pieces, axis):
    xs = [random_array(rng, etype, p) for p in pieces]
    got = run_op("concatenate", xs, dimensions=(axis,))
    total = list(pieces[0])
    total[axis] = sum(p[axis] for p in pieces)
    expected = np.empty(total, dtype=xs[0].dtype)
    at = 0
    for x in xs:
        where = [slice(None)] * len(total)
        where[axis] = slice(at, at + x.shape[axis])
        expected[tuple(where)] = x
        at += x.shape[axis]
    assert_identical(got, expected)


def test_concatenate_shape_errors():
    shape_error("concatenate", [array(F32, 2, 3), array(F32, 3, 3)], dimensions=(1,), match="outside dimension 1")
    shape_error("concatenate", [array(F32, 2, 3), array(S32, 2, 3)], dimensions=(0,), match="element type")
    shape_error("concatenate", [array(F32, 2, 3), array(F32, 2, 3, 1)], dimensions=(0,), match="does not match")
    shape_error("concatenate", [array(F32, 2, 3)], dimensions=(2,), match="outside")
    shape_error("concatenate", [array(F32, 2, 3)], dimensions=(0, 1), match="exactly one")
    shape_error("concatenate", [scalar(F32)], dimensions=(0,), match="outside")


# --- pad -------------------------------------------------------------------------------------

def pad_reference(x, value, padding):
    """Each operand element at low + j * (interior + 1); everything else the padding value."""
    dims = [p.low + p.high + n + max(n - 1, 0) * p.interior for p, n in zip(padding, x.shape)]
    out = np.full(dims, value, dtype=x.dtype)
    for j in np.ndindex(*x.shape):
        at = tuple(p.low + i * (p.interior + 1) for p, i in zip(padding, j))
        if all(0 <= a < n for a, n in zip(at, dims)):
            out[at] = x[j]
    return out


@pytest.mark.parametrize("dims,pads", [
    ((5,), [(1, 2, 0)]),
    ((6, 7), [(1, 2, 0), (0, 0, 1)]),
    ((7, 5), [(-1, 1, 1), (2, -2, 0)]),         # negative pads crop
    ((4,), [(-3, -2, 2)]),                     # crop into the interior padding
    ((3, 4), [(-2, -1, 0), (0, -4, 0)]),         # cropped to nothing
    ((0, 3), [(2, 1, 3), (0, 0, 2)]),           # zero-size operand
    ((1, 2, 3), [(0, 1, 5), (1, 0, 1), (-1, 0, 1)]),
    ((), []),
])
@pytest.mark.parametrize("etype", [F32, S32, BF16], ids=str)
def test_pad(rng, etype, dims, pads):
    x = random_array(rng, etype, dims)
    value = random_array(rng, etype, ())
    padding = tuple(PadDim(*p) for p in pads)
    got = run_op("pad", [x, value], padding=padding)
    assert_identical(got, pad_reference(x, value, padding))


def test_pad_shape_errors():
    def bad(dims, pads, match, value=scalar(F32)):   # noqa: B008  (a shape: immutable)
        shape_error("pad", [array(F32, *dims), value], padding=tuple(PadDim(*p) for p in pads), match=match)
    bad((3,), [(0, 0, -1)], "negative interior")
    bad((3,), [(-2, -2, 0)], "negative size")
    bad((3,), [(0, 0, 0), (0, 0, 0)], "rank")
    bad((3,), [(0, 0, 0)], "element type", value=scalar(S32))
    bad((3,), [(0, 0, 0)], "scalar", value=array(F32, 1))


# --- iota ------------------------------------------------------------------------------------

@pytest.mark.parametrize("etype,dims,d", [
    (S32, (10,), 0), (S32, (3, 4), 0), (S32, (3, 4), 1), (F32, (2, 3, 5), 2), (U8, (300,), 0),
    (F16, (2, 2100), 1), (BF16, (300, 2), 0), (S64, (0, 4), 1), (U32, (1, 1, 6), 2),
])
def test_iota(etype, dims, d):
    b = HloBuilder("iota")
    module = b.module(b.op("iota", shape=ArrayShape(etype, dims), iota_dimension=d))
    verify_module(module)
    got = evaluate_module(module, [])
    # Index counted exactly, converted to the element type (floats round, u8 wraps).
    expected = np.indices(dims, dtype=np.int64)[d].astype(etype.np_dtype)
    assert_identical(got, expected)


def test_iota_shape_errors():
    shape_error("iota", [], array(S32, 3), iota_dimension=1, match="outside")
    shape_error("iota", [], scalar(S32), iota_dimension=0, match="at least one")
    shape_error("iota", [], array(PRED, 3), iota_dimension=0, match="numeric")
    shape_error("iota", [], None, iota_dimension=0, match="result shape")


# --- bitcast ------------------------------------------------------------------------------------

def physical_positions(dims, minor_to_major):
    """For every logical index, its element offset in a buffer laid out minor_to_major."""
    strides = [0] * len(dims)
    step = 1
    for d in minor_to_major:
        strides[d] = step
        step *= dims[d]
    index = np.indices(dims, dtype=np.int64)
    return sum(index[d] * strides[d] for d in range(len(dims))) if dims else np.zeros((), np.int64)


def bitcast_reference(x, source_layout, result_dims, result_layout, result_dtype):
    buffer = np.empty(x.size, dtype=x.dtype)
    buffer[physical_positions(x.shape, source_layout)] = x
    return buffer.view(result_dtype)[physical_positions(result_dims, result_layout)]


@pytest.mark.parametrize("src_dims,src_layout,dst_dims,dst_layout", [
    ((6, 4), (1, 0), (4, 6), (0, 1)),                 # a logical transpose
    ((6, 4), (1, 0), (24,), (0,)),                    # a reshape
    ((2, 3, 4), (0, 2, 1), (3, 8), (1, 0)),
    ((3, 3, 3, 5), (3, 1, 0, 2), (3, 9, 5), (2, 1, 0)),
    ((18, 1, 1), (0, 2, 1), (18, 1, 1, 1, 1), (0, 4, 3, 2, 1)),
    ((0, 3), (0, 1), (3, 0), (1, 0)),
    ((), (), (1,), (0,)),
])
def test_bitcast_reinterprets_the_physical_buffer(rng, src_dims, src_layout, dst_dims, dst_layout):
    x = random_array(rng, F32, src_dims)
    got = run_op("bitcast", [x], shape=ArrayShape(F32, dst_dims, dst_layout), layouts=[src_layout])
    assert_identical(got, bitcast_reference(x, src_layout, dst_dims, dst_layout, np.float32))


def test_bitcast_f32_to_transposed_f32_is_transpose(rng):
    x = random_array(rng, F32, (6, 4))
    got = run_op("bitcast", [x], shape=ArrayShape(F32, (4, 6), (0, 1)), layouts=[(1, 0)])
    assert_identical(got, x.T)


def test_bitcast_between_element_types_of_one_width(rng):
    x = random_array(rng, F32, (3, 4))
    x[0, 0], x[0, 1] = np.nan, -0.0
    got = run_op("bitcast", [x], shape=ArrayShape(S32, (4, 3), (1, 0)), layouts=[(0, 1)])
    assert_identical(got, bitcast_reference(x, (0, 1), (4, 3), (1, 0), np.int32))
    bf = random_array(rng, BF16, (5,))
    assert_identical(run_op("bitcast", [bf], shape=ArrayShape(U16, (5,))), bf.view(np.uint16))


def test_bitcast_shape_errors():
    shape_error("bitcast", [array(F32, 6, 4)], array(F32, 5, 4), match="same number")
    shape_error("bitcast", [array(F32, 6, 4)], array(F16, 6, 4), match="same width")
    shape_error("bitcast", [array(F32, 6, 4)], None, match="result shape")


# --- properties shared by the family --------------------------------------------------------

@pytest.mark.parametrize("opcode,kind", [
    ("broadcast", "broadcast"), ("iota", "broadcast"), ("reshape", "injective"), ("transpose", "injective"),
    ("slice", "injective"), ("concatenate", "injective"), ("pad", "injective"), ("reverse", "injective"),
    ("copy", "injective"), ("bitcast", "injective"), ("constant", "elementwise"), ("parameter", "opaque"),
    ("tuple", "opaque"), ("get-tuple-element", "opaque"),
])
def test_fusion_kinds(opcode, kind):
    assert op_def(opcode).fusion_kind == kind


def test_data_movement_keeps_special_float_bits(rng):
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-45, 3.0], dtype=np.float32)
    bits = specials.view(np.uint32).copy()
    bits[0] |= 0x1234                             # a NaN payload survives too
    x = bits.view(np.float32).reshape(2, 4)
    got = run_op("transpose", [x], dimensions=(1, 0))
    assert_identical(got, x.T)
    got = run_op("pad", [x, np.float32(-0.0)], padding=(PadDim(1, 0, 1), PadDim(0, 1, 0)))
    assert_identical(got, pad_reference(x, np.float32(-0.0), (PadDim(1, 0, 1), PadDim(0, 1, 0))))
    got = run_op("bitcast", [x], shape=ArrayShape(F32, (8,)))
    assert_identical(got, x.reshape(8))
