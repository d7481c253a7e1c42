"""reduce, reduce-window and select-and-scatter against NumPy references on random inputs."""
import itertools

import ml_dtypes
import numpy as np
import pytest

from pyxla.errors import ShapeError
from pyxla.hlo import (
    BF16,
    F32,
    PRED,
    S32,
    U8,
    HloBuilder,
    TupleShape,
    WindowDim,
    array,
    evaluate_module,
    scalar,
    scalar_computation,
    verify_module,
)


def _module(b, root):
    module = b.module(root)
    verify_module(module)
    return module


def _random(rng, dtype, shape):
    if dtype == PRED:
        return rng.random(shape) < 0.5
    if dtype == U8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dtype == S32:
        return rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)
    # near 1 in magnitude so that long products stay finite
    return (rng.choice([-1, 1], shape) * rng.uniform(0.5, 1.5, shape)).astype(np.float32)


def _reduce(dtype, opcode, init, dims, shape):
    b = HloBuilder("reduce")
    x = b.parameter(array(dtype, *shape), "x")
    return _module(b, b.op("reduce", x, b.constant(init, dtype), dimensions=dims,
                           to_apply=scalar_computation(opcode, dtype)))


# opcode -> (init, NumPy reduction computed exactly or in float64)
_REDUCERS = {
    "add": (0, lambda x, axis: np.sum(x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64), axis)),
    "multiply": (1, lambda x, axis: np.prod(x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64),
                                            axis)),
    "maximum": (None, np.max),
    "minimum": (None, np.min),
    "and": (True, np.all),
    "or": (False, np.any),
}


def _identity(opcode, dtype):
    init = _REDUCERS[opcode][0]
    if init is not None:
        return init
    if dtype == F32:
        return -np.inf if opcode == "maximum" else np.inf
    info = np.iinfo(dtype.np_dtype)
    return info.min if opcode == "maximum" else info.max


_CASES = [("add", F32), ("add", S32), ("multiply", F32), ("multiply", S32), ("maximum", F32),
          ("minimum", F32), ("maximum", U8), ("minimum", S32), ("and", PRED), ("or", PRED)]
_AXES = [((4, 5, 6), (1,)), ((4, 5, 6), (0, 2)), ((4, 5, 6), (0, 1, 2)), ((4, 5, 6), ()),
         ((3, 700), (1,)), ((0, 3), (0,)), ((3, 0), (1,)), ((2, 0, 3), (0, 2)), ((), ())]


@pytest.mark.parametrize("opcode,dtype", _CASES, ids=[f"{o}-{t}" for o, t in _CASES])
@pytest.mark.parametrize("shape,dims", _AXES, ids=[f"{s}-{d}" for s, d in _AXES])
def test_reduce_matches_numpy(rng, opcode, dtype, shape, dims):
    init = _identity(opcode, dtype)
    x = _random(rng, dtype, shape)
    got = evaluate_module(_reduce(dtype, opcode, init, dims, shape), [x])
    want = np.asarray(_REDUCERS[opcode][1](x, dims)) if x.size else None
    if x.size == 0:   # a reduction over nothing is the init value; NumPy refuses max/min of nothing
        kept = tuple(s for i, s in enumerate(shape) if i not in dims)
        want = np.full(kept, init)
    assert got.dtype == dtype.np_dtype and got.shape == want.shape
    if dtype == F32:
        # sums of +-1-sized terms may cancel: the error bound is absolute
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 if opcode == "add" else 0)
    else:
        np.testing.assert_array_equal(got, want.astype(dtype.np_dtype))


def test_mixed_precision_reduce_accumulates_in_f32(rng):
    # bf16 elements, f32 accumulator: folded sequentially, each element widened exactly
    r = HloBuilder("add_bf16_to_f32")
    acc = r.parameter(scalar(F32), "acc", 0)
    element = r.parameter(scalar(BF16), "element", 1)
    reducer = r.build(r.op("add", acc, r.op("convert", element, shape=scalar(F32))))
    b = HloBuilder("mixed")
    x = b.parameter(array(BF16, 3, 300), "x")
    module = _module(b, b.op("reduce", x, b.constant(0.0, F32), dimensions=(1,), to_apply=reducer))
    xs = rng.uniform(0.0, 1.0, (3, 300)).astype(ml_dtypes.bfloat16)
    got = evaluate_module(module, [xs])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, xs.astype(np.float64).sum(1), rtol=1e-5)


def test_long_float_sum_is_accurate(rng):
    # a pairwise fold keeps a long f32 sum within a few ulp of the exact result
    x = rng.uniform(0.0, 1.0, (2, 200_000)).astype(np.float32)
    got = evaluate_module(_reduce(F32, "add", 0.0, (1,), x.shape), [x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=1e-6)


def test_reduce_max_propagates_nan(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    x[1, 3] = np.nan
    x[3, 8] = np.nan
    got = evaluate_module(_reduce(F32, "maximum", -np.inf, (1,), x.shape), [x])
    np.testing.assert_array_equal(got, np.max(x, axis=1))


def _arg_reducer(direction):
    """JAX's argmax/argmin reducer: (value, index) pairs, NaN wins, ties to the lower index."""
    b = HloBuilder(f"arg_{direction}")
    a_val = b.parameter(scalar(F32), "a_val", 0)
    a_idx = b.parameter(scalar(S32), "a_idx", 1)
    x_val = b.parameter(scalar(F32), "x_val", 2)
    x_idx = b.parameter(scalar(S32), "x_idx", 3)
    better = b.op("compare", a_val, x_val, direction=direction)
    a_is_nan = b.op("compare", a_val, a_val, direction="NE")
    keep_a = b.op("or", better, a_is_nan)
    value = b.op("select", keep_a, a_val, x_val)
    tie = b.op("and", b.op("compare", a_val, x_val, direction="EQ"),
               b.op("compare", a_idx, x_idx, direction="LT"))
    index = b.op("select", b.op("or", keep_a, tie), a_idx, x_idx)
    return b.build(b.tuple(value, index))


@pytest.mark.parametrize("direction,numpy_fn,init", [("GT", np.argmax, -np.inf), ("LT", np.argmin, np.inf)])
@pytest.mark.parametrize("shape,axis", [((5, 6), 1), ((5, 6), 0), ((30,), 0), ((3, 37), 1)])
def test_argmax_argmin_as_variadic_reduce(rng, direction, numpy_fn, init, shape, axis):
    x = rng.integers(0, 4, shape).astype(np.float32)   # few distinct values: many ties
    if len(shape) == 2:
        x[1, 2] = np.nan   # argmax/argmin both pick the first NaN, as NumPy does
    b = HloBuilder("arg")
    px = b.parameter(array(F32, *shape), "x")
    iota = b.op("iota", shape=array(S32, *shape), iota_dimension=axis)
    kept = tuple(d for i, d in enumerate(shape) if i != axis)
    red = b.op("reduce", px, iota, b.constant(init, F32), b.constant(0, S32), dimensions=(axis,),
               to_apply=_arg_reducer(direction))
    assert red.shape.compatible(TupleShape((array(F32, *kept), array(S32, *kept))))
    values, indices = evaluate_module(_module(b, red), [x])
    want = numpy_fn(x, axis=axis)
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, np.expand_dims(want, axis), axis).squeeze(axis))


def _matrix_product_reducer():
    """(a, b, c, d) x (e, f, g, h) as 2x2 matrices: associative, not commutative (s32 wraps)."""
    b = HloBuilder("matmul2x2")
    a, b_, c, d, e, f, g, h = (b.parameter(scalar(S32), n, i) for i, n in enumerate("abcdefgh"))

    def dot(p, q, r, s):
        return b.op("add", b.op("multiply", p, q), b.op("multiply", r, s))

    return b.build(b.tuple(dot(a, e, b_, g), dot(a, f, b_, h), dot(c, e, d, g), dot(c, f, d, h)))


@pytest.mark.parametrize("shape,dims", [((3, 13), (1,)), ((2, 5, 4), (0, 2)), ((7,), (0,))])
def test_reduce_keeps_element_order(rng, shape, dims):
    # a non-commutative reducer: the product must be taken in row-major index order
    entries = [rng.integers(-3, 4, shape).astype(np.int32) for _ in range(4)]
    b = HloBuilder("ordered")
    params = [b.parameter(array(S32, *shape), f"m{i}") for i in range(4)]
    identity = [b.constant(v, S32) for v in (1, 0, 0, 1)]
    red = b.op("reduce", *params, *identity, dimensions=dims, to_apply=_matrix_product_reducer())
    got = np.stack(evaluate_module(_module(b, red), entries), axis=-1)

    kept = [i for i in range(len(shape)) if i not in dims]
    matrices = np.stack(entries, axis=-1).astype(np.int64).transpose(kept + list(dims) + [len(shape)])
    matrices = matrices.reshape([shape[i] for i in kept] + [-1, 2, 2])
    want = np.broadcast_to(np.eye(2, dtype=np.int64), matrices.shape[:-3] + (2, 2))
    for k in range(matrices.shape[-3]):
        want = want @ matrices[..., k, :, :]
    np.testing.assert_array_equal(got, want.reshape(got.shape).astype(np.int32))


# --- reduce-window ----------------------------------------------------------------------


def _window_out_dims(shape, window):
    out_dims = []
    for size, w in zip(shape, window):
        padded = ((size - 1) * w.lhs_dilate + 1 if size else 0) + w.pad_low + w.pad_high
        span = (w.size - 1) * w.rhs_dilate + 1
        out_dims.append(max((padded - span) // w.stride + 1, 0))
    return tuple(out_dims)


def _window_elements(o, window, shape):
    """Operand indices in the window at output position `o`, row-major; padding and holes skipped."""
    for k in np.ndindex(*(w.size for w in window)):
        p = [oi * w.stride + ki * w.rhs_dilate - w.pad_low for oi, ki, w in zip(o, k, window)]
        if all(pi >= 0 and pi % w.lhs_dilate == 0 and pi // w.lhs_dilate < s
               for pi, w, s in zip(p, window, shape)):
            yield tuple(pi // w.lhs_dilate for pi, w in zip(p, window))


def _reference_window(x, init, window, combine):
    """An explicit loop over output positions and window offsets."""
    out_dims = _window_out_dims(x.shape, window)
    out = np.empty(out_dims, dtype=np.float64)
    for o in np.ndindex(*out_dims):
        acc = init
        for index in _window_elements(o, window, x.shape):
            acc = combine(acc, float(x[index]))
        out[o] = acc
    return out


def _reduce_window(x_shape, window, opcode, init, dtype=F32):
    b = HloBuilder("pool")
    x = b.parameter(array(dtype, *x_shape), "x")
    return _module(b, b.op("reduce-window", x, b.constant(init, dtype), window=window,
                           to_apply=scalar_computation(opcode, dtype)))


def _w(size, stride=1, pad=(0, 0), base=1, dil=1):
    return WindowDim(size, stride, pad[0], pad[1], base, dil)


_WINDOWS = {
    "maxpool_2x2_s2": ((2, 6, 6, 3), (_w(1), _w(2, 2), _w(2, 2), _w(1))),
    "same_3x3": ((2, 6, 5, 3), (_w(1), _w(3, pad=(1, 1)), _w(3, pad=(1, 1)), _w(1))),
    "strided_padded": ((7, 9), (_w(3, 2, (2, 1)), _w(2, 3, (0, 2)))),
    "window_dilation": ((9, 8), (_w(3, 1, (1, 2), dil=2), _w(2, 2, dil=3))),
    "base_dilation": ((5, 4), (_w(3, 2, (1, 1), base=2), _w(2, 1, (0, 1), base=3, dil=2))),
    "negative_padding": ((8, 7), (_w(2, 1, (-1, 0)), _w(3, 2, (1, -2)))),
    "window_larger_than_input": ((3, 4), (_w(5), _w(2))),
    "scalar": ((), ()),
}


@pytest.mark.parametrize("name", list(_WINDOWS))
@pytest.mark.parametrize("opcode,init,combine", [("maximum", -np.inf, max), ("add", 0.0, lambda a, v: a + v)])
def test_reduce_window_matches_loop(rng, name, opcode, init, combine):
    shape, window = _WINDOWS[name]
    x = rng.standard_normal(shape).astype(np.float32)
    got = evaluate_module(_reduce_window(shape, window, opcode, init), [x])
    want = _reference_window(x, init, window, combine)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_avg_pool_divides_by_valid_count(rng):
    # JAX's SAME average pool: window sums of x over window sums of ones
    shape, window = _WINDOWS["same_3x3"]
    x = rng.standard_normal(shape).astype(np.float32)
    b = HloBuilder("avg")
    px = b.parameter(array(F32, *shape), "x")
    zero = b.constant(0.0, F32)
    ones = b.op("broadcast", b.constant(1.0, F32), dimensions=(), shape=array(F32, *shape))
    add = scalar_computation("add", F32)
    sums = b.op("reduce-window", px, zero, window=window, to_apply=add)
    counts = b.op("reduce-window", ones, zero, window=window, to_apply=add)
    total, count = evaluate_module(_module(b, b.tuple(sums, counts)), [x])
    want = _reference_window(x, 0.0, window, lambda a, v: a + v) / _reference_window(
        np.ones(shape), 0.0, window, lambda a, v: a + v)
    np.testing.assert_allclose(total / count, want, rtol=1e-5, atol=1e-6)


def test_cumulative_sum_of_integers_is_exact(rng):
    # jnp.cumsum on CPU: a window over the whole axis, padded below
    x = rng.integers(-(2**31), 2**31, 10, dtype=np.int64).astype(np.int32)
    got = evaluate_module(_reduce_window((10,), (_w(10, pad=(9, 0)),), "add", 0, S32), [x])
    np.testing.assert_array_equal(got, np.cumsum(x.astype(np.int64)).astype(np.int32))


def test_variadic_reduce_window_picks_first_maximum(rng):
    # a windowed argmax (how optimized HLO expresses select-and-scatter)
    shape = (6, 7)
    window = (_w(3, 2, (1, 1)), _w(2, 1, (0, 1)))
    x = rng.integers(0, 3, shape).astype(np.float32)
    b = HloBuilder("window_argmax")
    px = b.parameter(array(F32, *shape), "x")
    flat = b.op("reshape", b.op("iota", shape=array(S32, 42), iota_dimension=0), shape=array(S32, *shape))
    red = b.op("reduce-window", px, flat, b.constant(-np.inf, F32), b.constant(-1, S32), window=window,
               to_apply=_arg_reducer("GT"))
    values, indices = evaluate_module(_module(b, red), [x])
    want_values = _reference_window(x, -np.inf, window, max)
    np.testing.assert_array_equal(values, want_values)
    for o in np.ndindex(*values.shape):   # the index is the first maximum in the window's order
        candidates = [(k0, k1) for k0, k1 in itertools.product(range(3), range(2))
                      if 0 <= o[0] * 2 + k0 - 1 < 6 and 0 <= o[1] + k1 < 7]
        firsts = [(o[0] * 2 + k0 - 1) * 7 + o[1] + k1 for k0, k1 in candidates
                  if x[o[0] * 2 + k0 - 1, o[1] + k1] == values[o]]
        assert indices[o] == min(firsts)


def test_reduce_window_output_empty_when_window_never_fits(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    got = evaluate_module(_reduce_window((2, 3), (_w(3), _w(1)), "add", 0.0), [x])
    assert got.shape == (0, 3)


# --- select-and-scatter -----------------------------------------------------------------


def _select_and_scatter(shape, window, direction):
    b = HloBuilder("pool_grad")
    x = b.parameter(array(F32, *shape), "x")
    out_dims = _window_out_dims(shape, window)
    g = b.parameter(array(F32, *out_dims), "g")
    sel = HloBuilder(f"select_{direction}")
    lhs, rhs = sel.parameter(scalar(F32), "lhs"), sel.parameter(scalar(F32), "rhs")
    select = sel.build(sel.op("compare", lhs, rhs, direction=direction))
    root = b.op("select-and-scatter", x, g, b.constant(0.0, F32), window=window, select=select,
                scatter=scalar_computation("add", F32))
    return _module(b, root), out_dims


def _reference_select_and_scatter(x, g, window, prefer):
    """For each window, the first element in row-major order that `prefer` keeps; add g there."""
    out = np.zeros(x.shape, dtype=np.float64)
    for o in np.ndindex(*g.shape):
        best = None
        for index in _window_elements(o, window, x.shape):
            if best is None or not prefer(x[best], x[index]):
                best = index
        if best is not None:
            out[best] += g[o]
    return out


@pytest.mark.parametrize("direction,prefer", [("GE", lambda a, b: a >= b), ("GT", lambda a, b: a > b)])
@pytest.mark.parametrize("shape,window", [
    ((1, 6, 6, 2), (_w(1), _w(2, 2), _w(2, 2), _w(1))),              # max-pool gradient
    ((1, 7, 7, 2), (_w(1), _w(3, 2), _w(3, 2), _w(1))),              # overlapping windows
    ((5, 6), (_w(3, 1, (1, 1)), _w(2, 2, (0, 1)))),                  # padding, overlaps
    ((7, 5), (_w(2, 1, (1, 0), dil=3), _w(2, 2, (1, 1), base=3))),   # dilations, windows in holes only
])
def test_select_and_scatter_is_max_pool_gradient(rng, direction, prefer, shape, window):
    x = rng.integers(0, 3, shape).astype(np.float32)   # ties: GE keeps the first, GT the last
    module, out_dims = _select_and_scatter(shape, window, direction)
    g = rng.standard_normal(out_dims).astype(np.float32)
    got = evaluate_module(module, [x, g])
    np.testing.assert_allclose(got, _reference_select_and_scatter(x, g, window, prefer), rtol=1e-6, atol=1e-6)


# --- shape rules ------------------------------------------------------------------------


def _shape_error(build):
    b = HloBuilder("bad")
    x = b.parameter(array(F32, 4, 5), "x")
    with pytest.raises(ShapeError) as e:
        build(b, x)
    return str(e.value)


def test_reduce_shape_errors():
    add = scalar_computation("add", F32)
    assert "out of range" in _shape_error(
        lambda b, x: b.op("reduce", x, b.constant(0.0, F32), dimensions=(2,), to_apply=add))
    assert "repeats" in _shape_error(
        lambda b, x: b.op("reduce", x, b.constant(0.0, F32), dimensions=(1, 1), to_apply=add))
    assert "scalar" in _shape_error(
        lambda b, x: b.op("reduce", x, x, dimensions=(1,), to_apply=add))
    assert "init" in _shape_error(
        lambda b, x: b.op("reduce", x, b.constant(0, S32), dimensions=(1,), to_apply=add))
    assert "parameters" in _shape_error(
        lambda b, x: b.op("reduce", x, x, b.constant(0.0, F32), b.constant(0.0, F32), dimensions=(1,),
                          to_apply=add))
    assert "as many init values" in _shape_error(
        lambda b, x: b.op("reduce", x, x, b.constant(0.0, F32), dimensions=(1,), to_apply=add))
    assert "same dimensions" in _shape_error(
        lambda b, x: b.op("reduce", x, b.parameter(array(F32, 5, 4), "y"), b.constant(0.0, F32),
                          b.constant(0.0, F32), dimensions=(1,), to_apply=_arg_reducer("GT")))


def test_reduce_window_and_select_and_scatter_shape_errors():
    add = scalar_computation("add", F32)
    assert "rank" in _shape_error(
        lambda b, x: b.op("reduce-window", x, b.constant(0.0, F32), window=(_w(2),), to_apply=add))
    assert ">= 1" in _shape_error(
        lambda b, x: b.op("reduce-window", x, b.constant(0.0, F32), window=(_w(0), _w(1)), to_apply=add))
    assert "accumulator" in _shape_error(
        lambda b, x: b.op("reduce-window", x, b.constant(0, S32), window=(_w(2), _w(2)),
                          to_apply=scalar_computation("add", S32)))
    ge = HloBuilder("ge")
    select = ge.build(ge.op("compare", ge.parameter(scalar(F32), "a"), ge.parameter(scalar(F32), "b"),
                            direction="GE"))
    assert "source" in _shape_error(
        lambda b, x: b.op("select-and-scatter", x, b.parameter(array(F32, 2, 3), "g"), b.constant(0.0, F32),
                          window=(_w(2, 2), _w(2, 2)), select=select, scatter=add))
    assert "select computation" in _shape_error(
        lambda b, x: b.op("select-and-scatter", x, b.parameter(array(F32, 2, 2), "g"), b.constant(0.0, F32),
                          window=(_w(2, 2), _w(2, 2)), select=add, scatter=add))
