"""The dynamic padder: symbolic modules specialised to a bucket, compiled for the CPU and run at
several actual sizes with the padding filled with NaN (or huge integers), so any use of it shows.
Results on the valid region are compared with NumPy in float64."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends.cpu import CpuBackend
from pyxla.hlo import verify_module
from pyxla.hlo.builder import HloBuilder, scalar_computation
from pyxla.hlo.dims import DimExpr, Symbol, evaluate_dim
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import F32, S32
from pyxla.passes.dynamic_padder import pad_to_bounds

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
