"""The dynamic padder: symbolic modules specialised to a bucket, compiled for the CPU and run at
several actual sizes with the padding filled with NaN (or huge integers), so any use of it shows.
Results on the valid region are compared with NumPy in float64."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends.cpu import CpuBackend
from pyxla.hlo import parse_module, verify_module
from pyxla.hlo.attributes import ConvDimensionNumbers, PadDim, SliceDim, WindowDim
from pyxla.hlo.builder import HloBuilder, scalar_computation
from pyxla.hlo.dims import DimExpr, Symbol, evaluate_dim
from pyxla.hlo.shape import ArrayShape, TupleShape
from pyxla.hlo.types import F32, S8, S32
from pyxla.passes.dynamic_padder import pad_to_bounds, reshape_problem

B = DimExpr.symbol(Symbol("b"))
S = DimExpr.symbol(Symbol("s"))


def arr(*dims, dtype=F32) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))


def padded_arguments(padded, sizes, rng):
    """For each original parameter: (actual values, the bucket-sized array holding them with
    NaN / huge padding)."""
    out = []
    params = padded.module.entry.parameters[:len(padded.param_dims)]
    for dims, param in zip(padded.param_dims, params):
        shape = param.array_shape
        actual = tuple(evaluate_dim(d, sizes) for d in dims)
        if shape.dtype.is_float:
            values = (rng.standard_normal(actual) + 0.1).astype(shape.dtype.np_dtype)
            full = np.full(shape.dims, np.nan, shape.dtype.np_dtype)
        else:
            values = rng.integers(-50, 50, actual).astype(shape.dtype.np_dtype)
            full = np.full(shape.dims, np.iinfo(shape.dtype.np_dtype).max, shape.dtype.np_dtype)
        full[tuple(slice(0, n) for n in actual)] = values
        out.append((values, full))
    return out


def check(module, bounds, size_list, reference, rng, rtol=1e-5, atol=1e-5):
    """Pad `module` to `bounds`, compile it once and compare, for each sizes dict, the valid
    region of every output with `reference(*actual_arguments)` (a tuple of arrays)."""
    padded = pad_to_bounds(module, bounds)
    verify_module(padded.module)
    sizes_given = padded.module.entry.parameters[len(padded.param_dims):]
    assert [p.shape for p in sizes_given] == [arr(dtype=S32)] * len(padded.symbols)
    executable = CpuBackend().compile(padded.module)
    for sizes in size_list:
        args = padded_arguments(padded, sizes, rng)
        result = executable(*[full for _, full in args], *[np.int32(sizes[s]) for s in padded.symbols])
        leaves = list(result) if isinstance(result, tuple) else [result]
        want = reference(*[v.astype(np.float64) if v.dtype.kind == "f" else v for v, _ in args])
        want = list(want) if isinstance(want, tuple) else [want]
        assert len(leaves) == len(want) == len(padded.output_dims)
        for got, w, dims in zip(leaves, want, padded.output_dims):
            valid = tuple(evaluate_dim(d, sizes) for d in dims)
            assert tuple(np.shape(w)) == valid, (np.shape(w), valid)
            got = np.asarray(got)[tuple(slice(0, n) for n in valid)]
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got.astype(np.float64), w, rtol=rtol, atol=atol,
                                           err_msg=f"at sizes {sizes}")
            else:
                np.testing.assert_array_equal(got, w, err_msg=f"at sizes {sizes}")
    return padded


ADD = scalar_computation("add", F32)
MAX = scalar_computation("maximum", F32)


# --- step 1: substitution, size parameters, get-dimension-size, reduce --------------------------

def test_reduce_and_mean_over_a_symbolic_dimension(rng):
    b = HloBuilder("mean")
    x = b.parameter(arr(B, 32), "x")
    e = b.op("exponential", x)
    total = b.op("reduce", e, b.constant(0.0, F32), dimensions=(0,), to_apply=ADD)
    n = b.op("convert", b.op("get-dimension-size", x, dimensions=(0,)), shape=arr())
    mean = b.op("divide", total, b.op("broadcast", n, shape=arr(32), dimensions=()))
    peak = b.op("reduce", x, b.constant(-np.inf, F32), dimensions=(0, 1), to_apply=MAX)
    module = b.module(b.tuple(mean, e, peak))
    padded = check(module, {"b": 16}, [{"b": 1}, {"b": 7}, {"b": 16}],
                   lambda x: (np.exp(x).mean(0), np.exp(x), x.max()), rng)
    assert padded.symbols == ("b",)
    assert padded.output_dims == ((32,), (B, 32), ())
    assert padded.param_dims == ((B, 32),)
    entry = padded.module.entry
    assert [p.shape.to_text(False) for p in entry.parameters] == ["f32[16,32]", "s32[]"]
    assert all(i.opcode != "get-dimension-size" for i in entry.instructions)
    assert module.entry.parameters[0].shape.dims == (B, 32)   # the input module is left as it was


def test_size_parameters_follow_the_symbols_sorted_by_name(rng):
    b = HloBuilder("two")
    x = b.parameter(arr(S, B), "x")
    total = b.op("reduce", x, b.constant(0.0, F32), dimensions=(1,), to_apply=ADD)
    s_size = b.op("convert", b.op("get-dimension-size", x, dimensions=(0,)), shape=arr())
    scaled = b.op("multiply", total, b.op("broadcast", s_size, shape=arr(S), dimensions=()))
    module = b.module(scaled)
    padded = check(module, {"b": 8, "s": 5}, [{"b": 3, "s": 5}, {"b": 8, "s": 1}, {"b": 2, "s": 4}],
                   lambda x: x.sum(1) * x.shape[0], rng)
    assert padded.symbols == ("b", "s")
    assert [p.shape.to_text(False) for p in padded.module.entry.parameters] == ["f32[5,8]", "s32[]", "s32[]"]


def test_size_expressions_in_shapes_and_values(rng):
    # x: f32[2*b, 3]; get-dimension-size of a 2*b dimension is 2*n; reshape keeps 2*b outermost.
    b = HloBuilder("expr")
    x = b.parameter(arr(2 * B, 3), "x")
    flat = b.op("reshape", x, shape=arr(6 * B))
    total = b.op("reduce", flat, b.constant(0.0, F32), dimensions=(0,), to_apply=ADD)
    size = b.op("convert", b.op("get-dimension-size", flat, dimensions=(0,)), shape=arr())
    module = b.module(b.tuple(b.op("divide", total, size), b.op("negate", flat)))
    check(module, {"b": 4}, [{"b": 1}, {"b": 3}, {"b": 4}],
          lambda x: (x.sum() / x.size, -x.reshape(-1)), rng)


def test_static_module_gets_no_size_parameters(rng):
    b = HloBuilder("static")
    x = b.parameter(arr(4, 3), "x")
    module = b.module(b.op("reduce", x, b.constant(0.0, F32), dimensions=(1,), to_apply=ADD))
    padded = check(module, {}, [{}], lambda x: x.sum(1), rng)
    assert padded.symbols == () and len(padded.module.entry.parameters) == 1


def test_bounded_dynamic_text_pads_to_its_bounds(rng):
    module = parse_module("""HloModule text

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[<=8,3] parameter(0)
  e = f32[<=8,3] exponential(x)
  z = f32[] constant(0)
  ROOT total = f32[3] reduce(e, z), dimensions={0}, to_apply=add
}
""")
    (rows,) = module.entry.parameters[0].shape.dims[0].symbols   # an anonymous symbol, bounded by 8
    padded = check(module, None, [{rows.name: 1}, {rows.name: 5}, {rows.name: 8}], lambda x: np.exp(x).sum(0), rng)
    assert [p.shape.to_text(False) for p in padded.module.entry.parameters] == ["f32[8,3]", "s32[]"]


def test_bounds_must_cover_every_symbol_and_fit_its_range():
    b = HloBuilder("f")
    x = b.parameter(arr(B, S), "x")
    module = b.module(b.op("negate", x))
    with pytest.raises(ValueError, match="'s'"):
        pad_to_bounds(module, {"b": 4})
    bounded = DimExpr.symbol(Symbol("c", 1, 10))
    b = HloBuilder("g")
    y = b.parameter(arr(bounded), "y")
    with pytest.raises(ValueError, match="at most 10"):
        pad_to_bounds(b.module(b.op("negate", y)), {"c": 16})


# --- step 2: the other rewrites -------------------------------------------------------------------

def test_dot_contracting_a_symbolic_dimension_and_with_symbolic_free_dimensions(rng):
    b = HloBuilder("dots")
    x = b.parameter(arr(B, 8), "x")
    y = b.parameter(arr(B, 4), "y")
    w = b.parameter(arr(8, 4), "w")
    gram = b.op("dot", x, y, lhs_contracting_dims=(0,), rhs_contracting_dims=(0,))   # [8, 4]
    proj = b.op("dot", x, w, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))   # [b, 4]
    module = b.module(b.tuple(gram, proj))
    check(module, {"b": 16}, [{"b": 1}, {"b": 9}, {"b": 16}], lambda x, y, w: (x.T @ y, x @ w), rng, rtol=1e-4)


def test_cumulative_sum_as_a_reduce_window_with_a_symbolic_window(rng):
    b = HloBuilder("cumsum")
    x = b.parameter(arr(3, B), "x")
    window = (WindowDim(1), WindowDim(B, pad_low=B - 1))
    cumsum = b.op("reduce-window", x, b.constant(0.0, F32), window=window, to_apply=ADD)
    pooled = b.op("reduce-window", x, b.constant(-np.inf, F32), window=(WindowDim(1), WindowDim(3, 1, 1, 1)),
                  to_apply=MAX)

    def reference(x):
        padded = np.pad(x, ((0, 0), (1, 1)), constant_values=-np.inf)
        return np.cumsum(x, 1), np.max([padded[:, k:k + x.shape[1]] for k in range(3)], axis=0)

    check(b.module(b.tuple(cumsum, pooled)), {"b": 12}, [{"b": 1}, {"b": 5}, {"b": 12}], reference, rng, rtol=1e-4)


def test_concatenate_along_symbolic_dimensions(rng):
    b = HloBuilder("concat")
    x = b.parameter(arr(B, 3), "x")
    y = b.parameter(arr(S, 3), "y")
    z = b.parameter(arr(2, 3), "z")
    both = b.op("concatenate", x, z, y, dimensions=(0,))
    total = b.op("reduce", both, b.constant(0.0, F32), dimensions=(0,), to_apply=ADD)
    last = b.op("concatenate", z, x, dimensions=(0,))   # only the last operand is symbolic: unchanged
    check(b.module(b.tuple(both, total, last)), {"b": 8, "s": 4},
          [{"b": 1, "s": 1}, {"b": 5, "s": 3}, {"b": 8, "s": 4}],
          lambda x, y, z: (np.concatenate([x, z, y]), np.concatenate([x, z, y]).sum(0), np.concatenate([z, x])), rng)


def test_pad_with_high_and_interior_padding_on_a_symbolic_dimension(rng):
    b = HloBuilder("pad")
    x = b.parameter(arr(B, 2), "x")
    padded = b.op("pad", x, b.constant(0.5, F32), padding=(PadDim(2, 3, 1), PadDim(1, 0)))
    total = b.op("reduce", padded, b.constant(0.0, F32), dimensions=(0, 1), to_apply=ADD)

    def reference(x):
        n = x.shape[0]
        out = np.full((2 + 3 + n + (n - 1), 3), 0.5)
        out[2:2 + 2 * n - 1:2, 1:] = x
        return out, out.sum()

    check(b.module(b.tuple(padded, total)), {"b": 8}, [{"b": 1}, {"b": 4}, {"b": 8}], reference, rng)


def test_slices_with_symbolic_and_static_starts(rng):
    b = HloBuilder("slices")
    x = b.parameter(arr(B, 4), "x")
    y = b.parameter(arr(2 * B), "y")
    last_row = b.op("slice", x, slice=(SliceDim(B - 1, B), SliceDim(0, 4)))
    tail = b.op("slice", x, slice=(SliceDim(1, B), SliceDim(1, 4, 2)))
    second_half = b.op("slice", y, slice=(SliceDim(B, 2 * B),))
    half_sum = b.op("reduce", second_half, b.constant(0.0, F32), dimensions=(0,), to_apply=ADD)
    module = b.module(b.tuple(last_row, tail, second_half, half_sum))
    check(module, {"b": 8}, [{"b": 1}, {"b": 3}, {"b": 8}],
          lambda x, y: (x[-1:], x[1:, 1::2], y[len(y) // 2:], y[len(y) // 2:].sum()), rng)


def test_dynamic_slice_and_update_clamp_to_the_actual_sizes(rng):
    b2 = DimExpr.symbol(Symbol("b", 2))
    b = HloBuilder("dynamic")
    x = b.parameter(arr(b2, 4), "x")
    u = b.parameter(arr(2, 4), "u")
    big = b.parameter(arr(2 * b2, 3), "big")
    v = b.parameter(arr(b2, 3), "v")
    i = b.parameter(arr(dtype=S32), "i")
    zero = b.constant(0, S32)
    window = b.op("dynamic-slice", x, i, zero, dynamic_slice_sizes=(2, 4))
    updated = b.op("dynamic-update-slice", x, u, i, zero)
    merged = b.op("dynamic-update-slice", big, v, i, zero)
    module = b.module(b.tuple(window, updated, merged))

    def reference(x, u, big, v, i):
        n = x.shape[0]
        start = int(np.clip(i, 0, n - 2))
        out = x.copy()
        out[start:start + 2] = u
        start2 = int(np.clip(i, 0, 2 * n - n))
        out2 = big.copy()
        out2[start2:start2 + n] = v
        return x[start:start + 2], out, out2

    padded = pad_to_bounds(module, {"b": 8})
    executable = CpuBackend().compile(padded.module)
    for n in (2, 5, 8):
        for start in (-3, 0, 1, 4, 100):
            args = padded_arguments(padded, {"b": n}, rng)
            args[4] = (np.int32(start), np.int32(start))
            got = executable(*[full for _, full in args], np.int32(n))
            want = reference(*[a for a, _ in args])
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g[tuple(slice(0, k) for k in w.shape)], w.astype(np.float32),
                                              err_msg=f"b={n}, start={start}")


def test_convolution_with_a_symbolic_batch(rng):
    b = HloBuilder("conv")
    x = b.parameter(arr(B, 3, 6, 6), "x")
    k = b.parameter(arr(4, 3, 3, 3), "k")
    y = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf01_oi01->bf01"),
             window=(WindowDim(3, pad_low=1, pad_high=1), WindowDim(3, pad_low=1, pad_high=1)))
    per_item = b.op("reduce", y, b.constant(0.0, F32), dimensions=(1, 2, 3), to_apply=ADD)

    def reference(x, k):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))   # n c h w kh kw
        out = np.einsum("nchwij,ocij->nohw", windows, k)
        return out, out.sum((1, 2, 3))

    check(b.module(b.tuple(y, per_item)), {"b": 4}, [{"b": 1}, {"b": 3}], reference, rng, rtol=1e-4, atol=1e-4)


def _conv1d(x, k, pad_low, pad_high, stride=1):
    """NCW x OIW -> NOW, cross-correlation, zero padding."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad_low, pad_high)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, k.shape[2], axis=2)[:, :, ::stride]
    return np.einsum("ncwk,ock->now", windows, k)


def test_convolution_over_a_symbolic_length_and_symbolic_features(rng):
    s3 = DimExpr.symbol(Symbol("s", 3))   # the unpadded convolution needs 3 elements
    b = HloBuilder("conv1d")
    x = b.parameter(arr(2, 3, s3), "x")           # a sequence of symbolic length s
    k = b.parameter(arr(4, 3, 3), "k")
    same = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf0_oi0->bf0"),
                window=(WindowDim(3, pad_low=1, pad_high=1),))
    causal = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf0_oi0->bf0"),
                  window=(WindowDim(3, pad_low=2),))
    valid = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf0_oi0->bf0"),
                 window=(WindowDim(3),))
    pooled = b.op("reduce", same, b.constant(0.0, F32), dimensions=(2,), to_apply=ADD)
    y = b.parameter(arr(2, B, 5), "y")           # symbolic features, contracted with the kernel's
    ky = b.parameter(arr(4, B, 3), "ky")
    mixed = b.op("convolution", y, ky, dim_labels=ConvDimensionNumbers.from_labels("bf0_oi0->bf0"),
                 window=(WindowDim(3, pad_low=1, pad_high=1),))

    def reference(x, k, y, ky):
        s = _conv1d(x, k, 1, 1)
        return s, _conv1d(x, k, 2, 0), _conv1d(x, k, 0, 0), s.sum(2), _conv1d(y, ky, 1, 1)

    check(b.module(b.tuple(same, causal, valid, pooled, mixed)), {"b": 4, "s": 16},
          [{"b": 1, "s": 3}, {"b": 3, "s": 9}, {"b": 4, "s": 16}], reference, rng, rtol=1e-4, atol=1e-4)


def test_reverse_along_a_symbolic_dimension(rng):
    b = HloBuilder("flip")
    x = b.parameter(arr(B, 3, S), "x")
    flipped = b.op("reverse", x, dimensions=(0, 1, 2))
    first = b.op("slice", flipped, slice=(SliceDim(0, 1), SliceDim(0, 3), SliceDim(0, S)))
    check(b.module(b.tuple(flipped, first)), {"b": 8, "s": 4}, [{"b": 1, "s": 4}, {"b": 5, "s": 2}],
          lambda x: (x[::-1, ::-1, ::-1], x[::-1, ::-1, ::-1][:1]), rng)


def test_sort_and_argsort_along_a_symbolic_dimension(rng):
    less = HloBuilder("less")
    p0, p1 = less.parameter(arr(), "p0"), less.parameter(arr(), "p1")
    comparator = less.build(less.op("compare", p0, p1, direction="LT"))
    by_key = HloBuilder("by_key")
    k0, k1 = by_key.parameter(arr(), "k0"), by_key.parameter(arr(), "k1")
    by_key.parameter(arr(dtype=S32), "i0")
    by_key.parameter(arr(dtype=S32), "i1")
    greater = by_key.build(by_key.op("compare", k0, k1, direction="GT"))
    b = HloBuilder("sorts")
    x = b.parameter(arr(3, B), "x")
    y = b.parameter(arr(3, B), "y")
    ordered = b.op("sort", x, dimensions=(1,), to_apply=comparator)
    positions = b.op("iota", shape=arr(3, B, dtype=S32), iota_dimension=1)
    pair = b.op("sort", y, positions, dimensions=(1,), to_apply=greater, is_stable=True)
    module = b.module(b.tuple(ordered, b.op("get-tuple-element", pair, index=0),
                              b.op("get-tuple-element", pair, index=1)))
    padded = pad_to_bounds(module, {"b": 16})
    executable = CpuBackend().compile(padded.module)
    for n in (1, 6, 16):
        x, y = rng.standard_normal((3, n)).astype(np.float32), rng.standard_normal((3, n)).astype(np.float32)
        # padding that would sort first if it took part: -inf ascending, +inf descending
        full_x, full_y = np.full((3, 16), -np.inf, np.float32), np.full((3, 16), np.inf, np.float32)
        full_x[:, :n], full_y[:, :n] = x, y
        got = executable(full_x, full_y, np.int32(n))
        down = np.argsort(-y, axis=1, kind="stable")
        np.testing.assert_array_equal(got[0][:, :n], np.sort(x, axis=1))
        np.testing.assert_array_equal(got[1][:, :n], np.take_along_axis(y, down, 1))
        np.testing.assert_array_equal(got[2][:, :n], down)


def test_top_k_along_a_symbolic_dimension(rng):
    s4 = DimExpr.symbol(Symbol("s", 4))
    b = HloBuilder("topk")
    x = b.parameter(arr(3, s4), "x")
    best = b.op("topk", x, k=4, largest=True)
    worst = b.op("topk", x, k=2, largest=False)
    module = b.module(b.tuple(*(b.op("get-tuple-element", t, index=i) for t in (best, worst) for i in (0, 1))))

    def reference(x):
        down, up = np.argsort(-x, axis=1, kind="stable")[:, :4], np.argsort(x, axis=1, kind="stable")[:, :2]
        return (np.take_along_axis(x, down, 1), down.astype(np.int32), np.take_along_axis(x, up, 1),
                up.astype(np.int32))

    check(module, {"s": 16}, [{"s": 4}, {"s": 9}, {"s": 16}], reference, rng)


def test_gather_from_a_static_table_and_sort_along_a_static_dimension(rng):
    b = HloBuilder("lookup")
    table = b.parameter(arr(10, 4), "table")
    ids = b.parameter(arr(B, dtype=S32), "ids")
    rows = b.op("gather", table, ids, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                index_vector_dim=1, slice_sizes=(1, 4))
    less = HloBuilder("less")
    p0, p1 = less.parameter(arr(), "p0"), less.parameter(arr(), "p1")
    comparator = less.build(less.op("compare", p0, p1, direction="LT"))
    ordered = b.op("sort", rows, dimensions=(1,), to_apply=comparator)
    check(b.module(b.tuple(rows, ordered)), {"b": 16}, [{"b": 1}, {"b": 11}],
          lambda table, ids: (table[np.clip(ids, 0, 9)], np.sort(table[np.clip(ids, 0, 9)], axis=1)), rng)


def test_scatter_of_symbolically_many_rows_skips_the_padding_rows(rng):
    b = HloBuilder("scatter")
    table = b.parameter(arr(10, 4), "table")
    ids = b.parameter(arr(B, dtype=S32), "ids")
    rows = b.parameter(arr(B, 4), "rows")
    added = b.op("scatter", table, ids, rows, update_window_dims=(1,), inserted_window_dims=(0,),
                 scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=ADD)

    def reference(table, ids, rows):
        out = table.copy()
        inside = (ids >= 0) & (ids < 10)   # scatter skips windows out of bounds
        np.add.at(out, ids[inside], rows[inside])
        return out

    padded = pad_to_bounds(b.module(added), {"b": 32})
    executable = CpuBackend().compile(padded.module)
    for n in (1, 20, 32):
        args = padded_arguments(padded, {"b": n}, rng)
        ids = rng.integers(-2, 12, n).astype(np.int32)   # some out of bounds, many repeated
        full_ids = np.full(32, 3, np.int32)   # padding rows aimed at a valid row: they must be skipped
        full_ids[:n] = ids
        got = executable(args[0][1], full_ids, args[2][1], np.int32(n))
        want = reference(args[0][0].astype(np.float64), ids, args[2][0].astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_called_computations_are_inlined_and_get_the_sizes(rng):
    inner = HloBuilder("inner")
    y = inner.parameter(arr(B, 5), "y")
    summed = inner.op("reduce", y, inner.constant(0.0, F32), dimensions=(0,), to_apply=ADD)
    body = inner.build(summed)
    b = HloBuilder("outer")
    x = b.parameter(arr(B, 5), "x")
    called = b.op("call", b.op("tanh", x), to_apply=body)
    check(b.module(called), {"b": 8}, [{"b": 2}, {"b": 8}], lambda x: np.tanh(x).sum(0), rng)


# --- refusals -----------------------------------------------------------------------------------

def _refused(module, pattern):
    with pytest.raises(NotImplementedError, match=pattern):
        pad_to_bounds(module, {"b": 8, "s": 8})


def test_reshapes_that_interleave_padding_are_refused():
    b = HloBuilder("f")
    x = b.parameter(arr(B, S), "x")
    _refused(b.module(b.op("reshape", x, shape=arr(B * S), name="flat")), r"%flat \(reshape\).*2 symbolic")
    b = HloBuilder("g")
    x = b.parameter(arr(4, B), "x")
    _refused(b.module(b.op("reshape", x, shape=arr(4 * B), name="flat")), r"dimension 1 \(b\).*outermost")


def test_reshape_rule():
    assert reshape_problem((B, 4), (4 * B,)) is None
    assert reshape_problem((4 * B,), (B, 2, 2)) is None
    assert reshape_problem((2, B, 3), (2, 3 * B)) is None
    assert reshape_problem((B, S, 4), (B, S * 4)) is None
    assert reshape_problem((B, S), (S, B)) is not None
    assert reshape_problem((3, B), (B, 3)) is not None
    assert reshape_problem((B, 4), (2, 2 * B)) is not None


def test_convolution_with_a_symbolic_kernel_dimension_is_refused():
    b = HloBuilder("f")
    x = b.parameter(arr(2, 3, B), "x")
    k = b.parameter(arr(4, 3, B), "k")
    conv = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_labels("bf0_oi0->bf0"),
                window=(WindowDim(B, pad_low=B - 1),), name="conv")
    _refused(b.module(conv), r"%conv \(convolution\).*symbolic kernel dimension 2 \(b\)")


def test_scatter_indices_too_narrow_for_out_of_bounds_are_refused():
    b = HloBuilder("f")
    table = b.parameter(arr(200, 4), "table")
    ids = b.parameter(arr(B, dtype=S8), "ids")
    rows = b.parameter(arr(B, 4), "rows")
    added = b.op("scatter", table, ids, rows, update_window_dims=(1,), inserted_window_dims=(0,),
                 scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=ADD, name="added")
    _refused(b.module(added), r"%added \(scatter\).*s8 cannot hold an index out of bounds of operand dimension 0")


def test_gather_and_scatter_indexing_into_a_symbolic_dimension(rng):
    b2 = DimExpr.symbol(Symbol("b", 2))   # windows of two rows need two rows
    b = HloBuilder("index")
    table = b.parameter(arr(b2, 4), "table")
    ids = b.parameter(arr(S, dtype=S32), "ids")
    rows = b.parameter(arr(S, 4), "rows")
    picked = b.op("gather", table, ids, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                  index_vector_dim=1, slice_sizes=(1, 4))
    pairs = b.op("gather", table, ids, offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,),
                 index_vector_dim=1, slice_sizes=(2, 4))   # windows of two rows, clamped to fit
    added = b.op("scatter", table, ids, rows, update_window_dims=(1,), inserted_window_dims=(0,),
                 scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=ADD)
    blocks = b.parameter(arr(S, 2, 4), "blocks")
    added_pairs = b.op("scatter", table, ids, blocks, update_window_dims=(1, 2), inserted_window_dims=(),
                       scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=ADD)
    module = b.module(b.tuple(picked, pairs, added, added_pairs))
    padded = pad_to_bounds(module, {"b": 16, "s": 8})
    executable = CpuBackend().compile(padded.module)
    for n, m in ((2, 8), (9, 3), (16, 5)):
        table_v = rng.standard_normal((n, 4)).astype(np.float32)
        rows_v = rng.standard_normal((m, 4)).astype(np.float32)
        ids_v = rng.integers(-2, n + 3, m).astype(np.int32)   # some beyond the actual rows
        full_table = np.full((16, 4), np.nan, np.float32)
        full_table[:n] = table_v
        full_ids, full_rows = np.full(8, 1, np.int32), np.full((8, 4), np.nan, np.float32)
        full_ids[:m], full_rows[:m] = ids_v, rows_v
        blocks_v = rng.standard_normal((m, 2, 4)).astype(np.float32)
        full_blocks = np.full((8, 2, 4), np.nan, np.float32)
        full_blocks[:m] = blocks_v
        got = executable(full_table, full_ids, full_rows, full_blocks, np.int32(n), np.int32(m))
        want_pairs = table_v.astype(np.float64)
        for i, block in zip(ids_v, blocks_v):
            if 0 <= i <= n - 2:   # a window that does not fit is skipped
                want_pairs[i:i + 2] += block
        starts = np.clip(ids_v, 0, n - 2)
        want_added = table_v.astype(np.float64)
        inside = (ids_v >= 0) & (ids_v < n)
        np.add.at(want_added, ids_v[inside], rows_v[inside])
        np.testing.assert_array_equal(got[0][:m], table_v[np.clip(ids_v, 0, n - 1)], err_msg=f"b={n}")
        np.testing.assert_array_equal(got[1][:m], np.stack([table_v[i:i + 2] for i in starts]))
        np.testing.assert_allclose(got[2][:n], want_added, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[3][:n], want_pairs, rtol=1e-5, atol=1e-5)


def test_loops_get_the_sizes_through_their_state(rng):
    # for i in range(x.shape[0]): acc += x[i] * sum(x[:, 0])  -- the trip count, the row read and
    # the inner reduction all need the actual size, inside the condition and the body
    state = TupleShape((arr(dtype=S32), arr(3), arr(B, 3)))
    body = HloBuilder("body")
    t = body.parameter(state, "t")
    i, acc, x = (body.op("get-tuple-element", t, index=k) for k in range(3))
    row = body.op("reshape", body.op("dynamic-slice", x, i, body.constant(0, S32), dynamic_slice_sizes=(1, 3)),
                  shape=arr(3))
    column = body.op("reduce", x, body.constant(0.0, F32), dimensions=(0,), to_apply=ADD, name="inner_sum")
    acc = body.op("add", acc, body.op("multiply", row, column))
    body_comp = body.build(body.tuple(body.op("add", i, body.constant(1, S32)), acc, x))
    cond = HloBuilder("cond")
    ct = cond.parameter(state, "t")
    n = cond.op("get-dimension-size", cond.op("get-tuple-element", ct, index=2), dimensions=(0,))
    cond_comp = cond.build(cond.op("compare", cond.op("get-tuple-element", ct, index=0), n, direction="LT"))
    b = HloBuilder("scan")
    x = b.parameter(arr(B, 3), "x")
    init = b.tuple(b.constant(0, S32), b.op("broadcast", b.constant(0.0, F32), shape=arr(3), dimensions=()), x)
    loop = b.op("while", init, condition=cond_comp, body=body_comp)
    module = b.module(b.tuple(b.op("get-tuple-element", loop, index=1), b.op("get-tuple-element", loop, index=0)))
    check(module, {"b": 8}, [{"b": 1}, {"b": 5}, {"b": 8}],
          lambda x: (x.sum(0) * x.sum(0), np.int32(x.shape[0])), rng, rtol=1e-4)


def test_branches_get_the_sizes_with_their_operand(rng):
    branch = HloBuilder("branch")
    v = branch.parameter(arr(B), "v")
    branch_comp = branch.build(branch.op("reduce", v, branch.constant(0.0, F32), dimensions=(0,), to_apply=ADD))
    other = HloBuilder("other")
    w = other.parameter(arr(B), "w")
    n = other.op("convert", other.op("get-dimension-size", w, dimensions=(0,)), shape=arr())
    other_comp = other.build(other.op("multiply", n, other.op("reduce", w, other.constant(-np.inf, F32),
                                                               dimensions=(0,), to_apply=MAX)))
    b = HloBuilder("f")
    x = b.parameter(arr(B), "x")
    size = b.op("get-dimension-size", x, dimensions=(0,))
    flag = b.op("compare", b.op("remainder", size, b.constant(2, S32)), b.constant(0, S32), direction="EQ")
    chosen = b.op("conditional", flag, x, b.op("negate", x), true_computation=branch_comp,
                  false_computation=other_comp)
    check(b.module(chosen), {"b": 8}, [{"b": 1}, {"b": 4}, {"b": 8}, {"b": 3}, {"b": 6}],
          lambda x: x.sum() if len(x) % 2 == 0 else len(x) * (-x).max(), rng)


def _counted_loop(name, state, body_fn, limit_fn):
    """A while over `state` (a tuple whose element 0 is an s32 counter): runs while
    counter < limit_fn(builder, state tuple), the body given by body_fn(builder, elements)
    returning the new elements after the counter."""
    body = HloBuilder(f"{name}_body")
    t = body.parameter(state, "t")
    elements = [body.op("get-tuple-element", t, index=k) for k in range(len(state.elements))]
    rest = body_fn(body, elements)
    body_comp = body.build(body.tuple(body.op("add", elements[0], body.constant(1, S32)), *rest))
    cond = HloBuilder(f"{name}_cond")
    ct = cond.parameter(state, "t")
    cond_comp = cond.build(cond.op("compare", cond.op("get-tuple-element", ct, index=0), limit_fn(cond, ct),
                                   direction="LT"))
    return cond_comp, body_comp


def test_nested_loops_get_the_sizes(rng):
    # total = sum over i < n, j < n of x[i] * x[j] (per column), with two loops
    inner_state = TupleShape((arr(dtype=S32), arr(3), arr(3), arr(B, 3)))   # j, acc, row i, x

    def inner_body(b, e):
        _, acc, row, x = e
        other = b.op("reshape", b.op("dynamic-slice", x, e[0], b.constant(0, S32), dynamic_slice_sizes=(1, 3)),
                     shape=arr(3))
        return [b.op("add", acc, b.op("multiply", row, other)), row, x]

    def rows_of_x(b, t):
        return b.op("get-dimension-size", b.op("get-tuple-element", t, index=3), dimensions=(0,))

    inner_cond, inner_body_comp = _counted_loop("inner", inner_state, inner_body, rows_of_x)
    outer_state = TupleShape((arr(dtype=S32), arr(3), arr(3), arr(B, 3)))   # i, acc, unused, x

    def outer_body(b, e):
        i, acc, _, x = e
        row = b.op("reshape", b.op("dynamic-slice", x, i, b.constant(0, S32), dynamic_slice_sizes=(1, 3)),
                   shape=arr(3))
        init = b.tuple(b.constant(0, S32), acc, row, x)
        loop = b.op("while", init, condition=inner_cond, body=inner_body_comp)
        return [b.op("get-tuple-element", loop, index=1), row, x]

    outer_cond, outer_body_comp = _counted_loop("outer", outer_state, outer_body, rows_of_x)
    b = HloBuilder("nested")
    x = b.parameter(arr(B, 3), "x")
    zeros = b.op("broadcast", b.constant(0.0, F32), shape=arr(3), dimensions=())
    loop = b.op("while", b.tuple(b.constant(0, S32), zeros, zeros, x), condition=outer_cond, body=outer_body_comp)
    check(b.module(b.op("get-tuple-element", loop, index=1)), {"b": 8}, [{"b": 1}, {"b": 3}, {"b": 8}],
          lambda x: x.sum(0) ** 2, rng, rtol=1e-4)
