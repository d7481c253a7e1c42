"""dynamic-slice, dynamic-update-slice, gather and scatter against element-by-element
references written from XLA's operation semantics (clamped starts for the slices and
gather, skipped out-of-bounds windows for scatter, updates applied in order)."""
import numpy as np
import pytest

from pyxla.hlo import (
    BF16,
    F32,
    F64,
    PRED,
    S8,
    S32,
    S64,
    U8,
    ArrayShape,
    HloBuilder,
    array,
    op_def,
    scalar,
    scalar_computation,
)

from .test_shape_ops import assert_identical, random_array, run_op, shape_error


def random_indices(rng, dtype, dims, low, high):
    return rng.integers(low, high, size=dims, endpoint=True).astype(dtype)


# --- dynamic-slice and dynamic-update-slice -----------------------------------------------

def clamp(start, dim, size):
    return min(max(int(start), 0), dim - size)


@pytest.mark.parametrize("dims,sizes", [((6, 7), (2, 5)), ((10,), (3,)), ((3, 4, 5), (3, 1, 0)), ((4, 0), (2, 0)), ((), ())])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.uint32, np.int8])
def test_dynamic_slice_clamps_starts(rng, dims, sizes, index_dtype):
    x = random_array(rng, F32, dims)
    low = 0 if np.dtype(index_dtype).kind == "u" else -9
    starts = [index_dtype(rng.integers(low, 12)) for _ in dims]
    got = run_op("dynamic-slice", [x, *starts], dynamic_slice_sizes=sizes)
    at = [clamp(s, d, z) for s, d, z in zip(starts, dims, sizes)]
    expected = x[np.ix_(*[np.arange(a, a + z) for a, z in zip(at, sizes)])] if dims else x
    assert_identical(got, expected)


def test_dynamic_slice_huge_unsigned_start_clamps_to_the_end(rng):
    x = random_array(rng, S32, (9,))
    got = run_op("dynamic-slice", [x, np.uint64(2**64 - 1)], dynamic_slice_sizes=(4,))
    assert_identical(got, x[5:])


@pytest.mark.parametrize("dims,update_dims", [((6, 7), (2, 5)), ((8, 2), (8, 2)), ((5,), (0,)), ((3, 4, 2), (1, 4, 2))])
@pytest.mark.parametrize("etype", [F32, S8, PRED, BF16], ids=str)
def test_dynamic_update_slice_clamps_starts(rng, dims, update_dims, etype):
    x = random_array(rng, etype, dims)
    original = x.copy()
    update = random_array(rng, etype, update_dims)
    starts = [np.int32(rng.integers(-5, 10)) for _ in dims]
    got = run_op("dynamic-update-slice", [x, update, *starts])
    expected = x.copy()
    at = [clamp(s, d, z) for s, d, z in zip(starts, dims, update_dims)]
    for j in np.ndindex(*update_dims):
        expected[tuple(a + i for a, i in zip(at, j))] = update[j]
    assert_identical(got, expected)
    assert_identical(x, original)           # the operand value itself is not written


def test_dynamic_slice_shape_errors():
    i = scalar(S32)
    shape_error("dynamic-slice", [array(F32, 4, 4), i], dynamic_slice_sizes=(2, 2), match="2 start indices|1 start")
    shape_error("dynamic-slice", [array(F32, 4), array(S32, 1)], dynamic_slice_sizes=(2,), match="scalar")
    shape_error("dynamic-slice", [array(F32, 4), scalar(F32)], dynamic_slice_sizes=(2,), match="integer")
    shape_error("dynamic-slice", [array(F32, 4, 4), i, scalar(S64)], dynamic_slice_sizes=(2, 2), match="one element type")
    shape_error("dynamic-slice", [array(F32, 4), i], dynamic_slice_sizes=(5,), match="does not fit")
    shape_error("dynamic-slice", [array(F32, 4), i], dynamic_slice_sizes=(1, 1), match="one size per")
    shape_error("dynamic-update-slice", [array(F32, 4), array(F32, 5), i], match="does not fit")
    shape_error("dynamic-update-slice", [array(F32, 4), array(S32, 2), i], match="element type")
    shape_error("dynamic-update-slice", [array(F32, 4), array(F32, 2, 1), i], match="does not fit")


# --- gather -----------------------------------------------------------------------------------

def gather_reference(x, indices, result_dims, offset_dims, collapsed_slice_dims, start_index_map,
                     index_vector_dim, slice_sizes, operand_batching_dims=(), start_indices_batching_dims=()):
    """XLA's gather, one result element at a time, start indices clamped so slices fit."""
    out = np.empty(result_dims, dtype=x.dtype)
    batch_dims = [d for d in range(len(result_dims)) if d not in offset_dims]
    window_dims = [d for d in range(x.ndim) if d not in collapsed_slice_dims + operand_batching_dims]
    for r in np.ndindex(*result_dims):
        batch = [r[d] for d in batch_dims]
        if index_vector_dim < indices.ndim:
            vector = indices[tuple(batch[:index_vector_dim]) + (slice(None),) + tuple(batch[index_vector_dim:])]
        else:
            vector = [indices[tuple(batch)]]
        at = [0] * x.ndim
        for k, d in enumerate(start_index_map):
            at[d] = clamp(vector[k], x.shape[d], slice_sizes[d])
        for od, idim in zip(operand_batching_dims, start_indices_batching_dims):
            at[od] = batch[idim if idim < index_vector_dim else idim - 1]
        for d, o in zip(window_dims, offset_dims):
            at[d] += r[o]
        out[r] = x[tuple(at)]
    return out


GATHER_CASES = {
    # x[idx] on rows: (operand, indices, result, attrs)
    "take_rows": ((6, 5), (4, 1), (4, 5), dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                                              index_vector_dim=1, slice_sizes=(1, 5))),
    # index_vector_dim == rank of the indices: an implicit trailing 1
    "implicit_vector": ((6, 5), (2, 3), (2, 3, 5), dict(offset_dims=(2,), collapsed_slice_dims=(0,), start_index_map=(0,),
                                                       index_vector_dim=2, slice_sizes=(1, 5))),
    # x[i, :, j] with offset dims in front and the vector dim in the middle of the indices
    "fancy_middle": ((4, 3, 6), (2, 2, 2), (4, 2, 2, 6), dict(offset_dims=(0, 3), collapsed_slice_dims=(1,),
                                                              start_index_map=(0, 1), index_vector_dim=2,
                                                              slice_sizes=(4, 1, 6))),
    "vector_first": ((5, 7), (2, 3, 4), (3, 4, 2, 3), dict(offset_dims=(2, 3), collapsed_slice_dims=(),
                                                           start_index_map=(1, 0), index_vector_dim=0,
                                                           slice_sizes=(2, 3))),
    # take_along_axis: batching dims pair operand dim 0 with indices dim 0
    "batching": ((4, 6), (4, 3, 1), (4, 3), dict(offset_dims=(), collapsed_slice_dims=(1,), start_index_map=(1,),
                                                 operand_batching_dims=(0,), start_indices_batching_dims=(0,),
                                                 index_vector_dim=2, slice_sizes=(1, 1))),
    "batching_late": ((3, 5, 2), (7, 2, 1, 3), (7, 2, 3, 5), dict(
        offset_dims=(3,), collapsed_slice_dims=(2,), start_index_map=(2,), operand_batching_dims=(0,),
        start_indices_batching_dims=(3,), index_vector_dim=2, slice_sizes=(1, 5, 1))),
    "two_batching": ((2, 3, 8), (3, 2, 5), (3, 2, 5, 2), dict(
        offset_dims=(3,), collapsed_slice_dims=(), start_index_map=(2,), operand_batching_dims=(0, 1),
        start_indices_batching_dims=(1, 0), index_vector_dim=3, slice_sizes=(1, 1, 2))),
    "scalar_index_all_collapsed": ((5,), (), (), dict(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,),
                                                      index_vector_dim=0, slice_sizes=(1,))),
    "empty_batch": ((6, 5), (0, 1), (0, 5), dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                                                index_vector_dim=1, slice_sizes=(1, 5))),
    "empty_slice": ((6, 5), (3, 1), (3, 1, 0), dict(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,),
                                                   index_vector_dim=1, slice_sizes=(1, 0))),
    "no_index_vector": ((4, 3), (5, 0), (5, 2, 3), dict(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(),
                                                       index_vector_dim=1, slice_sizes=(2, 3))),
}


@pytest.mark.parametrize("case", list(GATHER_CASES))
@pytest.mark.parametrize("etype,index_dtype", [(F32, np.int32), (BF16, np.int64), (S8, np.uint32), (PRED, np.int8),
                                               (F64, np.uint8)], ids=lambda v: str(getattr(v, "__name__", v)))
def test_gather_clamps_out_of_bounds_starts(rng, case, etype, index_dtype):
    operand_dims, indices_dims, result_dims, attrs = GATHER_CASES[case]
    x = random_array(rng, etype, operand_dims)
    low = 0 if np.dtype(index_dtype).kind == "u" else -4
    indices = random_indices(rng, index_dtype, indices_dims, low, max(operand_dims) + 3)
    got = run_op("gather", [x, indices], **attrs)
    assert got.shape == result_dims
    assert_identical(got, gather_reference(x, indices, result_dims, **attrs))


def test_gather_shape_is_inferred_not_taken_from_the_declared_shape():
    attrs = dict(GATHER_CASES["fancy_middle"][3])
    inferred = op_def("gather").shape([array(F32, 4, 3, 6), array(S32, 2, 2, 2)], attrs, array(F32, 1))
    assert inferred == array(F32, 4, 2, 2, 6)


def test_gather_is_vectorised(rng):
    x = random_array(rng, F32, (1000, 64))
    indices = random_indices(rng, np.int32, (20000, 1), -10, 1010)
    got = run_op("gather", [x, indices], **GATHER_CASES["take_rows"][3] | {"slice_sizes": (1, 64)})
    assert_identical(got, x[np.clip(indices[:, 0], 0, 999)])


def _gather_error(match, operand=(6, 5), indices=(4, 1), indices_type=S32, **changes):
    attrs = dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1,
                 slice_sizes=(1, 5))
    attrs.update(changes)
    shape_error("gather", [array(F32, *operand), ArrayShape(indices_type, indices)], match=match, **attrs)


def test_gather_shape_errors():
    _gather_error("integer", indices_type=F32)
    _gather_error("index_vector_dim", index_vector_dim=3)
    _gather_error("start_index_map", start_index_map=(0, 1))
    _gather_error("repeats", start_index_map=(0, 0), indices=(4, 2))
    _gather_error("outside", start_index_map=(2,))
    _gather_error("ascending", offset_dims=(1, 0), collapsed_slice_dims=(), slice_sizes=(1, 5))
    _gather_error("ascending", operand=(6, 5, 1), offset_dims=(1,), collapsed_slice_dims=(2, 0), slice_sizes=(1, 5, 1))
    _gather_error("one entry per", collapsed_slice_dims=())
    _gather_error("at most 1", slice_sizes=(2, 5))
    _gather_error("does not fit", slice_sizes=(1, 6))
    _gather_error("one size per", slice_sizes=(1,))
    _gather_error("outside", offset_dims=(2,))
    _gather_error("overlap", operand=(6, 5), indices=(6, 1), collapsed_slice_dims=(0,), operand_batching_dims=(0,),
                  start_indices_batching_dims=(0,), offset_dims=(1,), start_index_map=(1,))
    _gather_error("overlap", indices=(6, 1), collapsed_slice_dims=(1,), operand_batching_dims=(0,),
                  start_indices_batching_dims=(0,), offset_dims=(), start_index_map=(0,), slice_sizes=(1, 1))
    _gather_error("size 6", indices=(4, 1), collapsed_slice_dims=(1,), operand_batching_dims=(0,),
                  start_indices_batching_dims=(0,), offset_dims=(), start_index_map=(1,), slice_sizes=(1, 1))
    _gather_error("cannot be one of", indices=(6, 1), collapsed_slice_dims=(1,), operand_batching_dims=(0,),
                  start_indices_batching_dims=(1,), offset_dims=(), start_index_map=(1,), slice_sizes=(1, 1))
    _gather_error("same length", indices=(6, 1), collapsed_slice_dims=(1,), operand_batching_dims=(0,),
                  offset_dims=(), start_index_map=(1,), slice_sizes=(1, 1))


# --- scatter ------------------------------------------------------------------------------------

def scatter_reference(inputs, indices, updates, combine, update_window_dims, inserted_window_dims,
                      scatter_dims_to_operand_dims, index_vector_dim, input_batching_dims=(),
                      scatter_indices_batching_dims=()):
    """XLA's scatter: windows in row-major order of the update scatter dims, each window's
    elements in row-major order; a window with any element out of bounds is skipped."""
    outs = [x.copy() for x in inputs]
    dims, update_dims = inputs[0].shape, updates[0].shape
    scatter_dims = [d for d in range(len(update_dims)) if d not in update_window_dims]
    window_operand_dims = [d for d in range(len(dims)) if d not in inserted_window_dims + input_batching_dims]
    window = [1] * len(dims)
    for od, ud in zip(window_operand_dims, update_window_dims):
        window[od] = update_dims[ud]
    for b in np.ndindex(*[update_dims[d] for d in scatter_dims]):
        if index_vector_dim < indices.ndim:
            vector = indices[b[:index_vector_dim] + (slice(None),) + b[index_vector_dim:]]
        else:
            vector = [indices[b]]
        at = [0] * len(dims)
        for k, d in enumerate(scatter_dims_to_operand_dims):
            at[d] = int(vector[k])
        for od, idim in zip(input_batching_dims, scatter_indices_batching_dims):
            at[od] = b[idim if idim < index_vector_dim else idim - 1]
        if any(a < 0 or a + w > n for a, w, n in zip(at, window, dims)):
            continue
        for w in np.ndindex(*[update_dims[d] for d in update_window_dims]):
            u = [0] * len(update_dims)
            for d, i in zip(scatter_dims, b):
                u[d] = i
            for d, i in zip(update_window_dims, w):
                u[d] = i
            target = list(at)
            for od, i in zip(window_operand_dims, w):
                target[od] += i
            new = combine([o[tuple(target)] for o in outs], [up[tuple(u)] for up in updates])
            for o, v in zip(outs, new):
                o[tuple(target)] = v
    return outs


def _combiner(etype, body, name):
    """A scalar computation (input, update) -> body(builder, [input, update])."""
    b = HloBuilder(name)
    return b.build(body(b, [b.parameter(scalar(etype)), b.parameter(scalar(etype))]))


def _set_combiner(etype):
    return _combiner(etype, lambda b, p: p[1], name="set")


def _double_and_add(etype):
    """a * 2 + u: applying two updates to one element gives different results in each order."""
    return _combiner(etype, lambda b, p: b.op("add", b.op("add", p[0], p[0]), p[1]), name="double_add")


COMBINERS = {
    "add": (lambda t: scalar_computation("add", t), lambda a, u: [a[0] + u[0]]),
    "set": (_set_combiner, lambda a, u: [u[0]]),
    "double_add": (_double_and_add, lambda a, u: [a[0] + a[0] + u[0]]),
}

SCATTER_CASES = {
    # x.at[idx].add(rows): (operand, indices, updates, attrs)
    "rows": ((6, 4), (9, 1), (9, 4), dict(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    "points": ((5,), (12,), (12,), dict(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    # overlapping 2x2 windows (nothing inserted), window dims not trailing in the updates
    "windows": ((6, 5), (2, 7), (2, 2, 7), dict(update_window_dims=(0, 1), inserted_window_dims=(),
                                                 scatter_dims_to_operand_dims=(0, 1), index_vector_dim=0)),
    "column_points": ((6, 5), (8, 2), (8,), dict(update_window_dims=(), inserted_window_dims=(0, 1),
                                                  scatter_dims_to_operand_dims=(1, 0), index_vector_dim=1)),
    "batching": ((8, 3), (8, 2, 1), (8, 2), dict(update_window_dims=(), inserted_window_dims=(1,),
                                                  scatter_dims_to_operand_dims=(1,), input_batching_dims=(0,),
                                                  scatter_indices_batching_dims=(0,), index_vector_dim=2)),
    "batching_window": ((3, 7, 2), (4, 3), (4, 3, 2, 2), dict(
        update_window_dims=(2, 3), inserted_window_dims=(), scatter_dims_to_operand_dims=(1,),
        input_batching_dims=(0,), scatter_indices_batching_dims=(1,), index_vector_dim=2)),
    "empty_updates": ((6, 4), (0, 1), (0, 4), dict(update_window_dims=(1,), inserted_window_dims=(0,),
                                                  scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
}


@pytest.mark.parametrize("case", list(SCATTER_CASES))
@pytest.mark.parametrize("combiner", list(COMBINERS))
@pytest.mark.parametrize("etype", [F32, S32], ids=str)
def test_scatter_skips_out_of_bounds_windows_and_applies_updates_in_order(rng, case, combiner, etype):
    operand_dims, indices_dims, update_dims, attrs = SCATTER_CASES[case]
    build, reference = COMBINERS[combiner]
    x = random_array(rng, etype, operand_dims) % 1000
    updates = random_array(rng, etype, update_dims) % 1000
    # A small index range: duplicates, negative and past-the-end (skipped) windows.
    indices = random_indices(rng, np.int32, indices_dims, -2, max(operand_dims))
    got = run_op("scatter", [x, indices, updates], to_apply=build(etype), **attrs)
    (expected,) = scatter_reference([x], indices, [updates], reference, **attrs)
    assert_identical(got, expected)


def test_scatter_duplicates_use_update_order():
    # Three updates of one element with the set combiner: the last one wins.
    x = np.zeros(3, np.float32) + 5
    indices = np.array([[1], [1], [1]], np.int32)
    updates = np.array([7, 8, 9], np.float32)
    got = run_op("scatter", [x, indices, updates], to_apply=_set_combiner(F32), update_window_dims=(),
                 inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    assert_identical(got, np.array([5, 9, 5], np.float32))


def test_scatter_with_unsigned_and_huge_indices(rng):
    x = random_array(rng, U8, (7,))
    indices = np.array([3, 2**64 - 1, 6, 2**63, 0], np.uint64)
    updates = random_array(rng, U8, (5,))
    attrs = dict(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                 index_vector_dim=1)
    got = run_op("scatter", [x, indices, updates], to_apply=scalar_computation("add", U8), **attrs)

    def wrapping_add(a, u):
        return [np.uint8((int(a[0]) + int(u[0])) % 256)]
    (expected,) = scatter_reference([x], indices, [updates], wrapping_add, **attrs)
    assert_identical(got, expected)


def test_variadic_scatter_returns_a_tuple(rng):
    x0, x1 = random_array(rng, F32, (5, 3)), random_array(rng, S32, (5, 3))
    u0, u1 = random_array(rng, F32, (6, 3)), random_array(rng, S32, (6, 3))
    indices = random_indices(rng, np.int64, (6, 1), -1, 5)
    b = HloBuilder("pair")
    a0, a1 = b.parameter(scalar(F32), "a0"), b.parameter(scalar(S32), "a1")
    v0, v1 = b.parameter(scalar(F32), "v0"), b.parameter(scalar(S32), "v1")
    combiner = b.build(b.tuple(b.op("add", a0, v0), b.op("maximum", a1, v1)))
    attrs = dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                 index_vector_dim=1)
    got = run_op("scatter", [x0, x1, indices, u0, u1], to_apply=combiner, **attrs)
    expected = scatter_reference([x0, x1], indices, [u0, u1],
                                 lambda a, u: [a[0] + u[0], max(a[1], u[1])], **attrs)
    assert isinstance(got, tuple) and len(got) == 2
    assert_identical(got[0], expected[0])
    assert_identical(got[1], expected[1])


def test_scatter_with_many_duplicates_is_fast_enough(rng):
    x = random_array(rng, F32, (50, 16))
    indices = random_indices(rng, np.int32, (20000, 1), 0, 49)
    updates = random_array(rng, F32, (20000, 16))
    attrs = SCATTER_CASES["rows"][3]
    got = run_op("scatter", [x, indices, updates], to_apply=scalar_computation("add", F32), **attrs)
    expected = x.copy()
    for i, row in zip(indices[:, 0], updates):      # sequential f32 adds, in update order
        expected[i] += row
    assert_identical(got, expected)


def _scatter_error(match, operand=(6, 4), indices=(9, 1), updates=(9, 4), update_type=F32, to_apply=None, **changes):
    attrs = dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                 index_vector_dim=1, to_apply=to_apply or scalar_computation("add", F32))
    attrs.update(changes)
    shape_error("scatter", [array(F32, *operand), array(S32, *indices), ArrayShape(update_type, updates)],
                match=match, **attrs)


def test_scatter_shape_errors():
    _scatter_error("element type", update_type=S32)
    _scatter_error("scatter dimensions", updates=(8, 4))
    _scatter_error("larger than", updates=(9, 5))
    _scatter_error("ascending", operand=(6, 4, 2), updates=(9, 4, 2), update_window_dims=(2, 1))
    _scatter_error("ascending", operand=(6, 4, 1), inserted_window_dims=(2, 0), updates=(9, 4))
    _scatter_error("one entry per", inserted_window_dims=())
    _scatter_error("outside", scatter_dims_to_operand_dims=(3,))
    _scatter_error("index_vector_dim", index_vector_dim=4)
    _scatter_error("must take", to_apply=scalar_computation("add", S32))
    _scatter_error("overlap", indices=(6, 1), updates=(6,), update_window_dims=(), inserted_window_dims=(1,),
                   scatter_dims_to_operand_dims=(0,), input_batching_dims=(0,), scatter_indices_batching_dims=(0,))
    _scatter_error("size 6", indices=(4, 1), updates=(4,), update_window_dims=(), inserted_window_dims=(1,),
                   scatter_dims_to_operand_dims=(1,), input_batching_dims=(0,), scatter_indices_batching_dims=(0,))
    with pytest.raises(Exception, match="N inputs"):
        op_def("scatter").shape([array(F32, 2), array(S32, 1, 1), array(F32, 1), array(F32, 1)], {}, None)
    pair = HloBuilder("pair")
    ps = [pair.parameter(scalar(F32), f"p{i}") for i in range(4)]
    wrong = pair.build(pair.op("add", ps[0], ps[2]))          # returns one scalar, two are needed
    with pytest.raises(Exception, match="must return"):
        op_def("scatter").shape([array(F32, 6, 4), array(F32, 6, 4), array(S32, 9, 1), array(F32, 9, 4),
                                 array(F32, 9, 4)],
                                dict(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=wrong), None)


@pytest.mark.parametrize("opcode,kind", [("dynamic-slice", "injective"), ("gather", "injective"),
                                         ("dynamic-update-slice", "opaque"), ("scatter", "opaque")])
def test_fusion_kinds(opcode, kind):
    assert op_def(opcode).fusion_kind == kind
