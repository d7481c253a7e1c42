"""sort, topk and the TopK custom-call against NumPy and Python references on random inputs."""
import math

import numpy as np
import pytest

from pyxla.errors import ShapeError
from pyxla.hlo import F32, PRED, S32, HloBuilder, TupleShape, array, evaluate_module, scalar, verify_module


def _module(b, root):
    module = b.module(root)
    verify_module(module)
    return module


def _comparator(dtypes, body, name="cmp"):
    """A comparator over (lhs_0, rhs_0, lhs_1, rhs_1, ...); body(b, pairs) returns its pred root."""
    b = HloBuilder(name)
    pairs = [(b.parameter(scalar(t), f"lhs_{i}", 2 * i), b.parameter(scalar(t), f"rhs_{i}", 2 * i + 1))
             for i, t in enumerate(dtypes)]
    return b.build(body(b, pairs))


def _compare(direction, key=0, type=None):
    def body(b, pairs):
        lhs, rhs = pairs[key]
        attrs = {"type": type} if type else {}
        return b.op("compare", lhs, rhs, direction=direction, **attrs)
    return body


def _sort(shapes_dtypes, dimension, comparator, is_stable=True):
    b = HloBuilder("sort")
    params = [b.parameter(array(t, *shape), f"x{i}") for i, (shape, t) in enumerate(shapes_dtypes)]
    return _module(b, b.op("sort", *params, dimensions=(dimension,), is_stable=is_stable, to_apply=comparator))


@pytest.mark.parametrize("shape,dimension", [((4, 6), 1), ((4, 6), 0), ((1,), 0), ((3, 33, 2), 1),
                                             ((1000,), 0), ((0, 5), 1), ((5, 0), 1)])
def test_sort_ascending_float(rng, shape, dimension):
    x = rng.standard_normal(shape).astype(np.float32)
    got = evaluate_module(_sort([(shape, F32)], dimension, _comparator([F32], _compare("LT"))), [x])
    np.testing.assert_array_equal(got, np.sort(x, axis=dimension))


def test_sort_descending_int(rng):
    x = rng.integers(-(2**31), 2**31, (5, 17), dtype=np.int64).astype(np.int32)
    got = evaluate_module(_sort([(x.shape, S32)], 1, _comparator([S32], _compare("GT"))), [x])
    np.testing.assert_array_equal(got, -np.sort(-x.astype(np.int64), axis=1))


def test_sort_is_stable_on_ties(rng):
    # argsort as JAX writes it: keys with an iota operand, comparing keys only
    keys = rng.integers(0, 4, (3, 50)).astype(np.int32)
    iota = np.broadcast_to(np.arange(50, dtype=np.int32), keys.shape).copy()
    module = _sort([(keys.shape, S32), (keys.shape, S32)], 1, _comparator([S32, S32], _compare("LT")))
    sorted_keys, order = evaluate_module(module, [keys, iota])
    want = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(sorted_keys, np.take_along_axis(keys, want, 1))


def test_sort_descending_is_stable(rng):
    keys = rng.integers(0, 3, 40).astype(np.float32)
    iota = np.arange(40, dtype=np.int32)
    module = _sort([((40,), F32), ((40,), S32)], 0, _comparator([F32, S32], _compare("GT")))
    _, order = evaluate_module(module, [keys, iota])
    np.testing.assert_array_equal(order, sorted(range(40), key=lambda i: -keys[i]))


def test_sort_multi_operand_two_keys(rng):
    # lax.sort((k1, k2, v), num_keys=2): lexicographic on (k1, k2), v carried along
    k1 = rng.integers(0, 3, 60).astype(np.int32)
    k2 = rng.integers(0, 4, 60).astype(np.float32)
    v = rng.standard_normal(60).astype(np.float32)

    def body(b, pairs):
        (a1, b1), (a2, b2), _ = pairs
        first = b.op("compare", a1, b1, direction="LT")
        tie = b.op("and", b.op("compare", a1, b1, direction="EQ"), b.op("compare", a2, b2, direction="LT"))
        return b.op("or", first, tie)

    module = _sort([((60,), S32), ((60,), F32), ((60,), F32)], 0, _comparator([S32, F32, F32], body))
    assert module.entry.root.shape.compatible(TupleShape((array(S32, 60), array(F32, 60), array(F32, 60))))
    got = evaluate_module(module, [k1, k2, v])
    order = np.lexsort((k2, k1))   # stable, last key primary
    for g, w in zip(got, (k1, k2, v)):
        np.testing.assert_array_equal(g, w[order])


def _canonical(b, x):
    """JAX's comparator prologue: every NaN becomes one NaN, -0 becomes +0."""
    zero = b.constant(0.0, F32)
    unsigned_zero = b.op("select", b.op("compare", x, zero, direction="EQ"), zero, x)
    return b.op("select", b.op("compare", x, x, direction="NE"), b.constant(np.nan, F32), unsigned_zero)


def _jnp_sort_comparator():
    def body(b, pairs):
        lhs, rhs = pairs[0]
        return b.op("compare", _canonical(b, lhs), _canonical(b, rhs), direction="LT", type="TOTALORDER")
    return _comparator([F32], body)


def test_sort_nan_and_signed_zero_with_total_order_comparator(rng):
    x = rng.standard_normal((4, 24)).astype(np.float32)
    specials = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf], dtype=np.float32)
    x[:, rng.permutation(24)[:12]] = np.tile(specials, 2)
    got = evaluate_module(_sort([(x.shape, F32)], 1, _jnp_sort_comparator()), [x])
    # NaNs last; -0 and +0 are equal, so they keep their input order (stable)
    want = np.take_along_axis(x, np.argsort(x, axis=1, kind="stable"), 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got.view(np.int32)[finite], want.view(np.int32)[finite])


def test_sort_with_inconsistent_comparator_still_permutes(rng):
    # plain LT with NaNs is not a strict weak order: the order is unspecified, no element is lost
    x = rng.standard_normal(64).astype(np.float32)
    x[rng.permutation(64)[:20]] = np.nan
    got = evaluate_module(_sort([((64,), F32)], 0, _comparator([F32], _compare("LT"))), [x])
    np.testing.assert_array_equal(np.sort(got), np.sort(x))


# --- topk -------------------------------------------------------------------------------


def _total_order_rank(v):
    """Python sort key of IEEE total order for floats with only positive NaNs."""
    return (math.isnan(v), 0.0 if math.isnan(v) else v, not math.copysign(1.0, v) < 0)


def _reference_top_k(x, k, largest):
    values, indices = [], []
    for row in x.reshape(-1, x.shape[-1]):
        order = sorted(range(len(row)), key=lambda i: _total_order_rank(float(row[i])), reverse=largest)[:k]
        values.append(row[order])
        indices.append(order)
    shape = x.shape[:-1] + (k,)
    return np.array(values, dtype=x.dtype).reshape(shape), np.array(indices, dtype=np.int32).reshape(shape)


def _topk(shape, k, largest):
    b = HloBuilder("topk")
    x = b.parameter(array(F32, *shape), "x")
    return _module(b, b.op("topk", x, k=k, largest=largest))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("shape,k", [((3, 10), 3), ((37,), 37), ((2, 3, 9), 1), ((4, 6), 0)])
def test_topk_with_ties_nan_and_signed_zero(rng, largest, shape, k):
    x = rng.integers(-3, 4, shape).astype(np.float32)   # many ties: the lower index comes first
    flat = x.reshape(-1)
    flat[rng.permutation(flat.size)[:3]] = [np.nan, -0.0, 0.0]
    values, indices = evaluate_module(_topk(shape, k, largest), [x])
    want_values, want_indices = _reference_top_k(x, k, largest)
    np.testing.assert_array_equal(indices, want_indices)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(values.view(np.int32), want_values.view(np.int32))


def _xla_topk_comparator():
    """XLA's TopK custom-call comparator: greater-than in total order on (value, index) pairs."""
    def body(b, pairs):
        lhs, rhs = pairs[0]
        return b.op("compare", lhs, rhs, direction="GT", type="TOTALORDER")
    return _comparator([F32, S32], body, name="compare-greater-than")


def test_topk_custom_call_matches_topk(rng):
    x = rng.integers(-5, 6, (4, 12)).astype(np.float32)
    x[0, 3] = -0.0
    x[2, 7] = np.nan
    b = HloBuilder("topk_custom_call")
    px = b.parameter(array(F32, 4, 12), "x")
    out = TupleShape((array(F32, 4, 5), array(S32, 4, 5)))
    root = b.op("custom-call", px, shape=out, custom_call_target="TopK",
                called_computations=(_xla_topk_comparator(),))
    values, indices = evaluate_module(_module(b, root), [x])
    want_values, want_indices = _reference_top_k(x, 5, True)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values.view(np.int32), want_values.view(np.int32))


# --- shape rules ------------------------------------------------------------------------


def _shape_error(build):
    b = HloBuilder("bad")
    x = b.parameter(array(F32, 4, 5), "x")
    with pytest.raises(ShapeError) as e:
        build(b, x)
    return str(e.value)


def test_sort_and_topk_shape_errors():
    lt = _comparator([F32], _compare("LT"))
    assert "one dimension" in _shape_error(lambda b, x: b.op("sort", x, dimensions=(2,), to_apply=lt))
    assert "one dimension" in _shape_error(lambda b, x: b.op("sort", x, dimensions=(0, 1), to_apply=lt))
    assert "same dimensions" in _shape_error(
        lambda b, x: b.op("sort", x, b.parameter(array(S32, 5, 4), "y"), dimensions=(0,),
                          to_apply=_comparator([F32, S32], _compare("LT"))))
    assert "comparator" in _shape_error(lambda b, x: b.op("sort", x, x, dimensions=(0,), to_apply=lt))
    not_pred = _comparator([F32], lambda b, pairs: b.op("add", *pairs[0]))
    assert "-> pred" in _shape_error(lambda b, x: b.op("sort", x, dimensions=(0,), to_apply=not_pred))
    assert "k=6" in _shape_error(lambda b, x: b.op("topk", x, k=6, largest=True))
    assert "rank" in _shape_error(lambda b, x: b.op("topk", b.constant(1.0, F32), k=1))


def test_sort_of_pred_keys(rng):
    x = rng.random(30) < 0.5
    got = evaluate_module(_sort([((30,), PRED)], 0, _comparator([PRED], _compare("LT"))), [x])
    np.testing.assert_array_equal(got, np.sort(x))
