"""pyxla.lax: every function eager and under jit against NumPy float64 references.

The table below lists one program per lax function (some functions appear in several
cases, for their corner cases); each runs eagerly and compiled, on fresh random inputs.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.errors import TraceError

# --- inputs -------------------------------------------------------------------------------


def normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def uniform(rng, lo, hi, *shape, dtype=np.float32):
    return rng.uniform(lo, hi, shape).astype(dtype)


def ints(rng, lo, hi, *shape, dtype=np.int32):
    return rng.integers(lo, hi, shape).astype(dtype)


def nonzero(rng, *shape):
    """Values away from zero, of both signs (divisors)."""
    return (uniform(rng, 0.5, 2.0, *shape) * rng.choice([-1, 1], shape)).astype(np.float32)


def with_specials(rng, x):
    """`x` with a few NaNs, infinities and signed zeros mixed in."""
    x = x.copy()
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(4, flat.size), replace=False)
    flat[picks] = np.array([np.nan, np.inf, -np.inf, -0.0], x.dtype)[: len(picks)]
    return x


def partly_equal(rng, x):
    """A copy of `x` with about half of its elements replaced (so x == y sometimes holds)."""
    y = x.copy()
    mask = rng.random(x.shape) < 0.5
    y[mask] = normal(rng, int(mask.sum()))
    return y


def bits32(rng, *shape, dtype=np.uint32):
    return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32).view(dtype)


# --- NumPy references -------------------------------------------------------------------

def round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def trunc_div(a, b):
    return np.trunc(a.astype(np.float64) / b).astype(a.dtype)


def saturating_f32_to_s32(x):
    clipped = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), -2.0**31, 2.0**31 - 1)
    return clipped.astype(np.int32)


def shift_left_u32(x, s):
    shifted = (x.astype(np.uint64) << np.minimum(s, 31).astype(np.uint64)) & 0xFFFFFFFF
    return np.where(s >= 32, 0, shifted).astype(np.uint32)


def shift_right_logical_u32(x, s):
    return np.where(s >= 32, 0, x >> np.minimum(s, 31)).astype(np.uint32)


def shift_right_arithmetic_s32(x, s):
    return np.where((s >= 32) | (s < 0), x >> 31, x >> np.clip(s, 0, 31)).astype(np.int32)


def clz_u32(x):
    return np.vectorize(lambda v: 32 - int(v).bit_length())(x).astype(np.uint32)


def np_pad(x, value, config):
    """XLA's pad, one dimension at a time: interior padding, then low/high (negative crops)."""
    for axis, (lo, hi, interior) in enumerate(config):
        n = x.shape[axis]
        size = n + max(n - 1, 0) * interior
        spread = np.full(x.shape[:axis] + (size,) + x.shape[axis + 1:], value, x.dtype)
        spread[(slice(None),) * axis + (slice(0, size, interior + 1),)] = x
        edge = lambda k: np.full(x.shape[:axis] + (k,) + x.shape[axis + 1:], value, x.dtype)  # noqa: E731
        spread = np.concatenate([edge(max(lo, 0)), spread, edge(max(hi, 0))], axis)
        x = spread[(slice(None),) * axis + (slice(max(-lo, 0), spread.shape[axis] - max(-hi, 0)),)]
    return x


def np_conv(x, w, strides, pads, lhs_dilation=(1, 1), rhs_dilation=(1, 1), groups=1):
    """A direct 2-D convolution: x (N, C, H, W), w (O, I, KH, KW), float64."""
    n, c, h, wd = x.shape
    dil = np.zeros((n, c, (h - 1) * lhs_dilation[0] + 1, (wd - 1) * lhs_dilation[1] + 1))
    dil[:, :, ::lhs_dilation[0], ::lhs_dilation[1]] = x
    x = np_pad(dil, 0.0, [(0, 0, 0), (0, 0, 0), (*pads[0], 0), (*pads[1], 0)])
    o, i, kh, kw = w.shape
    spans = [(kh - 1) * rhs_dilation[0] + 1, (kw - 1) * rhs_dilation[1] + 1]
    out_hw = [(x.shape[2 + k] - spans[k]) // strides[k] + 1 for k in range(2)]
    out = np.zeros((n, o, *out_hw))
    per_group = o // groups
    for g in range(groups):
        for a in range(kh):
            for b in range(kw):
                r0, c0 = a * rhs_dilation[0], b * rhs_dilation[1]
                patch = x[:, g * i:(g + 1) * i,
                          r0:r0 + (out_hw[0] - 1) * strides[0] + 1:strides[0],
                          c0:c0 + (out_hw[1] - 1) * strides[1] + 1:strides[1]]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * per_group:(g + 1) * per_group, :, a, b])
    return out


def np_max_pool_grad(x, source, k, s):
    """Each source value added onto the first maximum of its k x k window (stride s)."""
    out = np.zeros_like(x)
    for i in range(source.shape[0]):
        for j in range(source.shape[1]):
            window = x[i * s:i * s + k, j * s:j * s + k]
            a, b = np.unravel_index(np.argmax(window), window.shape)
            out[i * s + a, j * s + b] += source[i, j]
    return out


def np_cumulative(ufunc, x, axis, reverse=False):
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis)
    return ufunc.accumulate(x, axis=axis)


def np_sort_nan_last(x, axis):
    return np.sort(x, axis=axis)   # NumPy already sorts NaN last


# --- the table --------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    fn: Callable[..., Any]                # the lax program
    inputs: Callable[[Any], list]         # rng -> arguments
    ref: Callable[..., Any]               # NumPy reference (float inputs widened to float64)
    rtol: float = 1e-5
    atol: float = 1e-6

    def __repr__(self) -> str:
        return self.name


GATHER_ROWS = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
SCATTER_ROWS = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                           scatter_dims_to_operand_dims=(0,))


def two(rng, *shape):
    return [normal(rng, *shape), normal(rng, *shape)]


def unary(name, fn, ref, make=lambda rng: [normal(rng, 3, 5)], **tol):
    return Case(name, fn, make, ref, **tol)


def gathered_fill(x, idx):
    out = np.full((len(idx), x.shape[1]), np.nan)
    ok = (idx >= 0) & (idx < x.shape[0])
    out[ok] = x[idx[ok]]
    return out


def updated(x, index, value):
    out = x.copy()
    out[index] = value
    return out


def scatter_ref(ufunc, x, idx, updates):
    out = x.copy()
    ufunc.at(out, idx, updates)
    return out


def argmax_ref(x, axis):
    return np.argmax(x, axis=axis).astype(np.int32)   # first NaN, else first maximum


CASES = [
    # arithmetic
    Case("add", lax.add, lambda rng: two(rng, 3, 4), np.add),
    Case("add_broadcasts_numpy_style", lax.add, lambda rng: [normal(rng, 3, 4), normal(rng, 4)], np.add),
    Case("sub", lax.sub, lambda rng: two(rng, 3, 4), np.subtract),
    Case("mul", lax.mul, lambda rng: two(rng, 3, 4), np.multiply),
    Case("div", lax.div, lambda rng: [normal(rng, 3, 4), nonzero(rng, 3, 4)], np.divide),
    Case("rem", lax.rem, lambda rng: [normal(rng, 3, 4) * 4, nonzero(rng, 3, 4)], np.fmod),
    Case("pow", lax.pow, lambda rng: [uniform(rng, 0.1, 3, 3, 4), normal(rng, 3, 4)], np.power),
    Case("max_propagates_nan", lax.max, lambda rng: [with_specials(rng, normal(rng, 3, 4)), normal(rng, 3, 4)],
         lambda x, y: np.where(np.isnan(x) | np.isnan(y), np.nan, np.maximum(x, y))),
    Case("min", lax.min, lambda rng: two(rng, 3, 4), np.minimum),
    Case("atan2", lax.atan2, lambda rng: two(rng, 3, 4), np.arctan2),
    Case("div_int_truncates", lax.div,
         lambda rng: [ints(rng, -50, 50, 12), ints(rng, 1, 9, 12) * rng.choice(np.array([-1, 1], np.int32), 12)],
         trunc_div),
    Case("rem_int", lax.rem, lambda rng: [ints(rng, -50, 50, 12), ints(rng, 1, 9, 12)], np.fmod),
    Case("integer_pow", lambda x: lax.integer_pow(x, 5), lambda rng: [normal(rng, 6)], lambda x: x ** 5),
    Case("integer_pow_negative", lambda x: lax.integer_pow(x, -2), lambda rng: [nonzero(rng, 6)], lambda x: x ** -2.0),
    Case("square", lax.square, lambda rng: [normal(rng, 6)], np.square),
    Case("reciprocal", lax.reciprocal, lambda rng: [nonzero(rng, 6)], np.reciprocal),
    # unary math
    unary("neg", lax.neg, np.negative, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("abs", lax.abs, np.abs, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("sign", lax.sign, np.sign, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("exp", lax.exp, np.exp, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("expm1", lax.expm1, np.expm1, make=lambda rng: [normal(rng, 3, 5) * 1e-3]),
    unary("log", lax.log, np.log, make=lambda rng: [uniform(rng, 0.01, 10, 3, 5)]),
    unary("log1p", lax.log1p, np.log1p, make=lambda rng: [uniform(rng, -0.5, 1e-3, 3, 5)]),
    unary("sqrt", lax.sqrt, np.sqrt, make=lambda rng: [uniform(rng, 0.01, 10, 3, 5)]),
    unary("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x), make=lambda rng: [uniform(rng, 0.01, 10, 3, 5)]),
    unary("cbrt", lax.cbrt, np.cbrt),
    unary("sin", lax.sin, np.sin),
    unary("cos", lax.cos, np.cos),
    unary("tan", lax.tan, np.tan, make=lambda rng: [uniform(rng, -1.2, 1.2, 3, 5)]),
    unary("tanh", lax.tanh, np.tanh, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("logistic", lax.logistic, lambda x: 1 / (1 + np.exp(-x)), make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    unary("erf", lax.erf, np.vectorize(math.erf)),
    unary("floor", lax.floor, np.floor, make=lambda rng: [with_specials(rng, normal(rng, 3, 5) * 5)]),
    unary("ceil", lax.ceil, np.ceil, make=lambda rng: [normal(rng, 3, 5) * 5]),
    unary("round_away_from_zero", lambda x: lax.round(x), round_half_away,
          make=lambda rng: [np.concatenate([normal(rng, 8) * 5, [0.5, -0.5, 1.5, -2.5]]).astype(np.float32)]),
    unary("round_to_nearest_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), np.round,
          make=lambda rng: [np.concatenate([normal(rng, 8) * 5, [0.5, -0.5, 1.5, -2.5]]).astype(np.float32)]),
    unary("is_finite", lax.is_finite, np.isfinite, make=lambda rng: [with_specials(rng, normal(rng, 3, 5))]),
    # bits
    Case("bitwise_and", lax.bitwise_and, lambda rng: [bits32(rng, 8), bits32(rng, 8)], np.bitwise_and),
    Case("bitwise_or", lax.bitwise_or, lambda rng: [bits32(rng, 8), bits32(rng, 8)], np.bitwise_or),
    Case("bitwise_xor", lax.bitwise_xor, lambda rng: [bits32(rng, 8), bits32(rng, 8)], np.bitwise_xor),
    Case("bitwise_not", lax.bitwise_not, lambda rng: [bits32(rng, 8, dtype=np.int32)], np.invert),
    Case("logical_and_on_pred", lax.bitwise_and, lambda rng: [rng.random(8) < 0.5, rng.random(8) < 0.5],
         np.logical_and),
    Case("shift_left", lax.shift_left, lambda rng: [bits32(rng, 12), ints(rng, 0, 36, 12, dtype=np.uint32)],
         shift_left_u32),
    Case("shift_right_logical", lax.shift_right_logical,
         lambda rng: [bits32(rng, 12), ints(rng, 0, 36, 12, dtype=np.uint32)], shift_right_logical_u32),
    Case("shift_right_arithmetic", lax.shift_right_arithmetic,
         lambda rng: [bits32(rng, 12, dtype=np.int32), ints(rng, 0, 36, 12)], shift_right_arithmetic_s32),
    Case("population_count", lax.population_count, lambda rng: [bits32(rng, 12)],
         lambda x: np.bitwise_count(x).astype(np.uint32)),
    Case("clz", lax.clz, lambda rng: [bits32(rng, 12) >> ints(rng, 0, 32, 12, dtype=np.uint32)], clz_u32),
    # comparisons, select, clamp
    *[Case(f"compare_{name}", getattr(lax, name),
           lambda rng: (lambda x: [x, partly_equal(rng, x)])(with_specials(rng, normal(rng, 4, 4))), ref)
      for name, ref in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                        ("gt", np.greater), ("ge", np.greater_equal)]],
    Case("select", lax.select, lambda rng: [rng.random((3, 4)) < 0.5, *two(rng, 3, 4)], np.where),
    Case("select_n", lambda i, a, b, c: lax.select_n(i, a, b, c),
         lambda rng: [ints(rng, 0, 3, 6), *two(rng, 6), normal(rng, 6)],
         lambda i, a, b, c: np.choose(i, [a, b, c])),
    Case("clamp_python_bounds", lambda x: lax.clamp(-0.5, x, 0.5), lambda rng: [normal(rng, 3, 4)],
         lambda x: np.clip(x, -0.5, 0.5)),
    Case("clamp_array_bounds", lax.clamp, lambda rng: [normal(rng, 6) - 1, normal(rng, 6), normal(rng, 6) + 1],
         lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi)),
    # conversions
    Case("convert_f32_to_s32_saturates", lambda x: lax.convert_element_type(x, np.int32),
         lambda rng: [np.concatenate([uniform(rng, -1e10, 1e10, 8), [np.nan, 3.7, -3.7]]).astype(np.float32)],
         saturating_f32_to_s32),
    Case("convert_s32_to_f32", lambda x: lax.convert_element_type(x, "f32"),
         lambda rng: [ints(rng, -2**31, 2**31 - 1, 10)], lambda x: x.astype(np.float32)),
    Case("convert_f32_to_bf16", lambda x: lax.convert_element_type(x, ml_dtypes.bfloat16),
         lambda rng: [normal(rng, 10)], lambda x: x.astype(np.float32).astype(ml_dtypes.bfloat16)),
    Case("bitcast_convert_same_width", lambda x: lax.bitcast_convert_type(x, np.uint32),
         lambda rng: [normal(rng, 3, 4)], lambda x: x.astype(np.float32).view(np.uint32)),
    Case("bitcast_convert_narrower_adds_dim", lambda x: lax.bitcast_convert_type(x, np.uint8),
         lambda rng: [normal(rng, 3)], lambda x: x.astype(np.float32).view(np.uint8).reshape(3, 4)),
    Case("bitcast_convert_wider_drops_dim", lambda x: lax.bitcast_convert_type(x, np.float32),
         lambda rng: [normal(rng, 3).view(np.uint8).reshape(3, 4)], lambda x: x.reshape(-1).view(np.float32)),
    Case("reduce_precision_to_f16", lambda x: lax.reduce_precision(x, 5, 10),
         lambda rng: [nonzero(rng, 12) * 50], lambda x: x.astype(np.float16).astype(np.float32)),
    # shapes
    Case("broadcast", lambda x: lax.broadcast(x, (2,)), lambda rng: [normal(rng, 3)],
         lambda x: np.broadcast_to(x, (2, 3))),
    Case("broadcast_in_dim_stretches_size_1", lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
         lambda rng: [normal(rng, 3, 1)], lambda x: np.broadcast_to(x[None], (2, 3, 4))),
    Case("reshape_with_dimensions", lambda x: lax.reshape(x, (4, 6), dimensions=(2, 0, 1)),
         lambda rng: [normal(rng, 2, 3, 4)], lambda x: np.transpose(x, (2, 0, 1)).reshape(4, 6)),
    Case("transpose", lambda x: lax.transpose(x, (1, 2, 0)), lambda rng: [normal(rng, 2, 3, 4)],
         lambda x: np.transpose(x, (1, 2, 0))),
    Case("squeeze_expand_dims", lambda x: lax.expand_dims(lax.squeeze(x, (1,)), (0,)),
         lambda rng: [normal(rng, 3, 1, 2)], lambda x: x[None, :, 0, :]),
    Case("slice_strided", lambda x: lax.slice(x, (1, 2), (5, 8), (2, 3)), lambda rng: [normal(rng, 6, 8)],
         lambda x: x[1:5:2, 2:8:3]),
    Case("slice_in_dim_negative", lambda x: lax.slice_in_dim(x, -3, None, axis=1),
         lambda rng: [normal(rng, 4, 6)], lambda x: x[:, -3:]),
    Case("index_in_dim", lambda x: lax.index_in_dim(x, -1, axis=0, keepdims=False),
         lambda rng: [normal(rng, 4, 6)], lambda x: x[-1]),
    Case("dynamic_slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
         lambda rng: [normal(rng, 6, 8), np.int32(rng.integers(0, 4)), np.int32(rng.integers(0, 5))],
         lambda x, i, j: x[i:i + 2, j:j + 3]),
    Case("dynamic_slice_clamps_start", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
         lambda rng: [normal(rng, 6, 8), np.int32(rng.integers(5, 50)), np.int32(-rng.integers(1, 50))],
         lambda x, i, j: x[4:6, 0:3]),
    Case("dynamic_update_slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 2)),
         lambda rng: [normal(rng, 6, 8), normal(rng, 2, 3), np.int32(rng.integers(0, 10))],
         lambda x, u, i: updated(x, np.s_[min(i, 4):min(i, 4) + 2, 2:5], u)),
    Case("dynamic_index_and_update_in_dim", lambda x, i: lax.dynamic_update_index_in_dim(
        x, lax.mul(lax.dynamic_index_in_dim(x, i, 1, keepdims=False), 2.0), i, 1),
         lambda rng: [normal(rng, 3, 5), np.int32(rng.integers(0, 5))],
         lambda x, i: updated(x, np.s_[:, i], 2 * x[:, i])),
    Case("concatenate", lambda a, b, c: lax.concatenate([a, b, c], 1),
         lambda rng: [normal(rng, 2, 3), normal(rng, 2, 1), normal(rng, 2, 4)],
         lambda a, b, c: np.concatenate([a, b, c], 1)),
    Case("pad_negative_and_interior", lambda x: lax.pad(x, 0.5, [(1, 2, 1), (-1, 1, 0), (0, -2, 2)]),
         lambda rng: [normal(rng, 3, 4, 3)], lambda x: np_pad(x, 0.5, [(1, 2, 1), (-1, 1, 0), (0, -2, 2)])),
    Case("rev", lambda x: lax.rev(x, (0, 2)), lambda rng: [normal(rng, 2, 3, 4)], lambda x: x[::-1, :, ::-1]),
    Case("iota", lambda: lax.iota(np.int32, 7), lambda rng: [], lambda: np.arange(7, dtype=np.int32)),
    Case("broadcasted_iota", lambda: lax.broadcasted_iota(np.float32, (3, 4), 1), lambda rng: [],
         lambda: np.broadcast_to(np.arange(4.0), (3, 4))),
    Case("full", lambda x: lax.add(x, lax.full((3, 4), 1.5, np.float32)), lambda rng: [normal(rng, 3, 4)],
         lambda x: x + 1.5),
    # gather and scatter
    Case("gather_rows", lambda x, i: lax.gather(x, i[:, None] if isinstance(i, np.ndarray) else lax.expand_dims(i, (1,)),
                                                GATHER_ROWS, (1, 4)),
         lambda rng: [normal(rng, 6, 4), ints(rng, 0, 6, 5)], lambda x, i: x[i]),
    Case("gather_clamps_out_of_bounds", lambda x, i: lax.gather(x, lax.expand_dims(i, (1,)), GATHER_ROWS, (1, 4)),
         lambda rng: [normal(rng, 6, 4), np.array([-3, 0, 9, 5], np.int32)], lambda x, i: x[np.clip(i, 0, 5)]),
    Case("gather_fill_mode", lambda x, i: lax.gather(x, lax.expand_dims(i, (1,)), GATHER_ROWS, (1, 4), mode="fill"),
         lambda rng: [normal(rng, 6, 4), np.array([-3, 0, 9, 5, 2], np.int32)], gathered_fill),
    Case("scatter_add_duplicates", lambda x, i, u: lax.scatter_add(x, lax.expand_dims(i, (1,)), u, SCATTER_ROWS),
         lambda rng: [normal(rng, 5, 3), ints(rng, 0, 5, 8), normal(rng, 8, 3)],
         lambda x, i, u: scatter_ref(np.add, x, i, u)),
    Case("scatter_overwrites", lambda x, i, u: lax.scatter(x, lax.expand_dims(i, (1,)), u, SCATTER_ROWS),
         lambda rng: [normal(rng, 5, 3), rng.permutation(5)[:3].astype(np.int32), normal(rng, 3, 3)],
         lambda x, i, u: updated(x, i, u)),
    Case("scatter_max", lambda x, i, u: lax.scatter_max(x, lax.expand_dims(i, (1,)), u, SCATTER_ROWS),
         lambda rng: [normal(rng, 5, 3), ints(rng, 0, 5, 8), normal(rng, 8, 3)],
         lambda x, i, u: scatter_ref(np.maximum, x, i, u)),
    Case("scatter_min", lambda x, i, u: lax.scatter_min(x, lax.expand_dims(i, (1,)), u, SCATTER_ROWS),
         lambda rng: [normal(rng, 5, 3), ints(rng, 0, 5, 8), normal(rng, 8, 3)],
         lambda x, i, u: scatter_ref(np.minimum, x, i, u)),
    Case("scatter_mul_drops_out_of_bounds", lambda x, i, u: lax.scatter_mul(x, lax.expand_dims(i, (1,)), u, SCATTER_ROWS),
         lambda rng: [normal(rng, 5, 3), np.array([1, 7, 1, -2], np.int32), normal(rng, 4, 3)],
         lambda x, i, u: scatter_ref(np.multiply, x, i[[0, 2]], u[[0, 2]])),
    # contractions
    Case("dot_matrix", lax.dot, lambda rng: [normal(rng, 3, 4), normal(rng, 4, 5)], np.dot),
    Case("dot_vector", lax.dot, lambda rng: [normal(rng, 3, 4), normal(rng, 4)], np.dot),
    Case("dot_general_batched", lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
         lambda rng: [normal(rng, 2, 3, 4), normal(rng, 2, 4, 5)], lambda a, b: np.einsum("bij,bjk->bik", a, b)),
    Case("dot_general_contract_two_dims", lambda a, b: lax.dot_general(a, b, (((0, 2), (1, 0)), ((), ()))),
         lambda rng: [normal(rng, 3, 2, 4), normal(rng, 4, 3, 5)], lambda a, b: np.einsum("iaj,jik->ak", a, b)),
    Case("dot_preferred_element_type", lambda a, b: lax.dot(a, b, preferred_element_type=np.int32),
         lambda rng: [ints(rng, -128, 128, 3, 8, dtype=np.int8), ints(rng, -128, 128, 8, 2, dtype=np.int8)],
         lambda a, b: a.astype(np.int32) @ b.astype(np.int32)),
    Case("conv_nhwc_same_stride", lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                                                         dimension_numbers=("NHWC", "HWIO", "NHWC")),
         lambda rng: [normal(rng, 2, 7, 6, 3), normal(rng, 3, 3, 3, 4)],
         lambda x, w: np_conv(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (2, 2), [(1, 1), (0, 1)]
                              ).transpose(0, 2, 3, 1), 1e-4, 1e-5),
    Case("conv_nchw_dilated_grouped", lambda x, w: lax.conv_general_dilated(
        x, w, (1, 2), [(2, 1), (-1, 2)], rhs_dilation=(2, 1), feature_group_count=2),
         lambda rng: [normal(rng, 2, 4, 8, 7), normal(rng, 6, 2, 3, 2)],
         lambda x, w: np_conv(x, w, (1, 2), [(2, 1), (-1, 2)], rhs_dilation=(2, 1), groups=2), 1e-4, 1e-5),
    Case("conv_transposed_lhs_dilation", lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), [(1, 1), (1, 1)], lhs_dilation=(2, 2)),
         lambda rng: [normal(rng, 1, 2, 4, 3), normal(rng, 3, 2, 2, 2)],
         lambda x, w: np_conv(x, w, (1, 1), [(1, 1), (1, 1)], lhs_dilation=(2, 2)), 1e-4, 1e-5),
    # reductions
    Case("reduce_python_reducer", lambda x: lax.reduce(x, 1.0, lambda a, b: lax.mul(a, b), (1,)),
         lambda rng: [uniform(rng, 0.5, 1.5, 4, 6)], lambda x: x.prod(1)),
    Case("reduce_variadic_pytree", lambda x, y: lax.reduce(
        {"s": x, "m": y}, {"s": 0.0, "m": -np.inf},
        lambda a, b: {"s": lax.add(a["s"], b["s"]), "m": lax.max(a["m"], b["m"])}, (0,)),
         lambda rng: two(rng, 5, 3), lambda x, y: {"s": x.sum(0), "m": y.max(0)}),
    Case("reduce_sum", lambda x: lax.reduce_sum(x, (0, 2)), lambda rng: [normal(rng, 3, 4, 5)],
         lambda x: x.sum((0, 2))),
    Case("reduce_max", lambda x: lax.reduce_max(x, (1,)), lambda rng: [normal(rng, 3, 4)], lambda x: x.max(1)),
    Case("reduce_min_int", lambda x: lax.reduce_min(x, (0,)), lambda rng: [ints(rng, -100, 100, 5, 3)],
         lambda x: x.min(0)),
    Case("reduce_prod", lambda x: lax.reduce_prod(x, (1,)), lambda rng: [uniform(rng, 0.5, 1.5, 3, 6)],
         lambda x: x.prod(1)),
    Case("reduce_and", lambda x: lax.reduce_and(x, (1,)), lambda rng: [rng.random((4, 3)) < 0.7],
         lambda x: x.all(1)),
    Case("reduce_or", lambda x: lax.reduce_or(x, (0,)), lambda rng: [rng.random((4, 3)) < 0.2], lambda x: x.any(0)),
    Case("argmax_ties_and_nan", lambda x: lax.argmax(x, 1), lambda rng: [
        np.where(rng.random((4, 6)) < 0.1, np.nan, ints(rng, 0, 3, 4, 6)).astype(np.float32)],
         lambda x: argmax_ref(x, 1)),
    Case("argmin_int", lambda x: lax.argmin(x, 0, np.int32), lambda rng: [ints(rng, 0, 3, 6, 4)],
         lambda x: np.argmin(x, 0).astype(np.int32)),
    Case("reduce_window_max_pool", lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 2), "VALID"),
         lambda rng: [normal(rng, 6, 8)], lambda x: x.reshape(3, 2, 4, 2).max((1, 3))),
    Case("reduce_window_sum_same", lambda x: lax.reduce_window_sum(x, (3, 3), (1, 1), "SAME"),
         lambda rng: [normal(rng, 5, 6)],
         lambda x: sum(np.pad(x, 1)[i:i + 5, j:j + 6] for i in range(3) for j in range(3))),
    Case("select_and_scatter_add", lambda s, x: lax.select_and_scatter_add(s, x, lax.ge, (2, 2), (2, 2), "VALID"),
         lambda rng: [normal(rng, 3, 4), normal(rng, 6, 8)], lambda s, x: np_max_pool_grad(x, s, 2, 2)),
    Case("cumsum", lambda x: lax.cumsum(x, axis=1), lambda rng: [normal(rng, 3, 8)],
         lambda x: np_cumulative(np.add, x, 1), 1e-5, 1e-5),
    Case("cumsum_reverse", lambda x: lax.cumsum(x, axis=0, reverse=True), lambda rng: [normal(rng, 6, 3)],
         lambda x: np_cumulative(np.add, x, 0, reverse=True), 1e-5, 1e-5),
    Case("cumprod", lambda x: lax.cumprod(x, axis=1), lambda rng: [uniform(rng, 0.5, 1.5, 3, 8)],
         lambda x: np_cumulative(np.multiply, x, 1)),
    Case("cummax", lambda x: lax.cummax(x, axis=0), lambda rng: [normal(rng, 7, 2)],
         lambda x: np_cumulative(np.maximum, x, 0)),
    Case("cummin_reverse", lambda x: lax.cummin(x, axis=1, reverse=True), lambda rng: [ints(rng, -9, 9, 2, 7)],
         lambda x: np_cumulative(np.minimum, x, 1, reverse=True)),
    # sorting
    Case("sort_nan_last_negative_zero", lambda x: lax.sort(x, dimension=0),
         lambda rng: [with_specials(rng, normal(rng, 7, 3))], lambda x: np_sort_nan_last(x, 0)),
    Case("sort_multi_operand_two_keys", lambda a, b, c: lax.sort((a, b, c), num_keys=2),
         lambda rng: [ints(rng, 0, 3, 2, 9), ints(rng, 0, 3, 2, 9), normal(rng, 2, 9)],
         lambda a, b, c: tuple(np.take_along_axis(v, np.lexsort((b, a), axis=1), 1) for v in (a, b, c))),
    Case("sort_key_val_stable", lambda k, v: lax.sort_key_val(k, v),
         lambda rng: [ints(rng, 0, 4, 10), normal(rng, 10)],
         lambda k, v: (np.sort(k, kind="stable"), v[np.argsort(k, kind="stable")])),
    Case("top_k", lambda x: lax.top_k(x, 3), lambda rng: [normal(rng, 4, 9)],
         lambda x: (-np.sort(-x, 1)[:, :3], np.argsort(-x, 1, kind="stable")[:, :3].astype(np.int32))),
    Case("optimization_barrier", lambda x, y: lax.optimization_barrier((lax.add(x, y), {"y": y})),
         lambda rng: two(rng, 3), lambda x, y: (x + y, {"y": y})),
]


def _widen(a):
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _assert_matches(out, ref, case: Case):
    out_leaves, out_tree = pyxla.tree_flatten(out)
    ref_leaves, ref_tree = pyxla.tree_flatten(ref)
    assert out_tree == ref_tree, f"{case.name}: result structure {out_tree}, expected {ref_tree}"
    for got, want in zip(out_leaves, ref_leaves):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, f"{case.name}: shape {got.shape}, expected {want.shape}"
        if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=case.rtol,
                                       atol=case.atol, equal_nan=True, err_msg=case.name)
        else:
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=case.name)


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_lax_function_matches_numpy(case: Case, mode: str, rng):
    args = case.inputs(rng)
    out = case.fn(*args) if mode == "eager" else pyxla.jit(case.fn)(*args)
    _assert_matches(out, case.ref(*[_widen(a) for a in args]), case)
    # Results keep the operands' element type (no promotion to float64 anywhere).
    float_inputs = {np.asarray(a).dtype for a in args if np.asarray(a).dtype.kind == "f"}
    for leaf in pyxla.tree_flatten(out)[0]:
        if np.asarray(leaf).dtype.kind == "f" and float_inputs:
            assert np.asarray(leaf).dtype in float_inputs, f"{case.name}: result {np.asarray(leaf).dtype}"


# --- types, errors and eager results ----------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_signed_zeros_survive_bit_operations(mode, rng):
    x = np.array([0.0, -0.0, rng.uniform(1, 2)], np.float32)
    def f(x):
        return lax.neg(x), lax.abs(x), lax.sign(x)
    neg, absolute, sign = f(x) if mode == "eager" else pyxla.jit(f)(x)
    np.testing.assert_array_equal(np.signbit(neg), [True, False, True])
    np.testing.assert_array_equal(np.signbit(absolute), [False, False, False])
    np.testing.assert_array_equal(np.signbit(sign), np.signbit(x))


def test_eager_results_are_numpy_arrays(rng):
    x = normal(rng, 3)
    out = lax.add(x, 1.0)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, x + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int8, np.uint16])
def test_python_scalars_take_the_operand_type(dtype, rng):
    x = (rng.uniform(1, 5, 6)).astype(dtype)
    for mode in ("eager", "jit"):
        fn = lambda x: lax.mul(lax.add(x, 2), 3)   # noqa: E731
        out = fn(x) if mode == "eager" else pyxla.jit(fn)(x)
        assert out.dtype == np.dtype(dtype), mode
        np.testing.assert_allclose(out.astype(np.float64), ((x.astype(np.float64) + 2) * 3).astype(dtype)
                                   .astype(np.float64), rtol=1e-2)


def test_jit_python_scalar_argument_is_weak(rng):
    x = normal(rng, 4).astype(np.float16)
    out = pyxla.jit(lambda x, s: lax.max(x, s))(x, 0.25)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.maximum(x, np.float16(0.25)))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_mismatched_dtypes_name_op_shapes_and_line(mode):
    fn = lambda x, y: lax.add(x, y)   # noqa: E731
    args = (np.ones(3, np.float32), np.ones(3, np.float64))
    with pytest.raises(TraceError, match=r"add\(f32\[3\], f64\[3\]\).*f32.*f64.*test_lax.py:\d+"):
        fn(*args) if mode == "eager" else pyxla.jit(fn)(*args)


def test_shapes_that_do_not_broadcast_are_named():
    with pytest.raises(TraceError, match=r"subtract\(f32\[2,3\], f32\[4\]\): shapes do not broadcast.*test_lax.py"):
        pyxla.jit(lambda x, y: lax.sub(x, y))(np.ones((2, 3), np.float32), np.ones(4, np.float32))


def test_python_numbers_must_fit_the_operand_type():
    with pytest.raises(TraceError, match=r"Python float 0.5 cannot take the element type s32"):
        lax.add(np.ones(3, np.int32), 0.5)
    with pytest.raises(TraceError, match=r"Python int 300 does not fit the element type s8"):
        pyxla.jit(lambda x: lax.add(x, 300))(np.ones(3, np.int8))


def test_conv_with_preferred_element_type_accumulates_wider(rng):
    x = normal(rng, 1, 2, 5, 5).astype(ml_dtypes.bfloat16)
    w = normal(rng, 3, 2, 3, 3).astype(ml_dtypes.bfloat16)
    out = pyxla.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", preferred_element_type=np.float32))(x, w)
    assert out.dtype == np.float32
    ref = np_conv(x.astype(np.float64), w.astype(np.float64), (1, 1), [(0, 0), (0, 0)])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", list(lax.RandomAlgorithm))
def test_rng_bit_generator_eager_equals_jit_and_advances_the_key(algorithm, rng):
    key = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    fn = lambda k: lax.rng_bit_generator(k, (64, 16), np.uint32, algorithm)   # noqa: E731
    new_key, bits = fn(key)
    jit_key, jit_bits = pyxla.jit(fn)(key)
    np.testing.assert_array_equal(bits, jit_bits)
    np.testing.assert_array_equal(new_key, jit_key)
    assert bits.shape == (64, 16) and bits.dtype == np.uint32 and new_key.dtype == np.uint32
    assert not np.array_equal(new_key, key)
    _, next_bits = fn(new_key)
    assert not np.array_equal(next_bits, bits)
    # Uniform bits: each of the 32 bit positions is set about half of the time.
    frequency = ((bits.reshape(-1, 1) >> np.arange(32, dtype=np.uint32)) & 1).mean(0)
    assert np.all(np.abs(frequency - 0.5) < 0.1)


def test_rng_bit_generator_u32_key_is_the_u64_state_read_little_endian(rng):
    key = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    state = key.view(np.uint64)
    new_key, bits = lax.rng_bit_generator(key, (5,))
    new_state, state_bits = lax.rng_bit_generator(state, (5,))
    np.testing.assert_array_equal(bits, state_bits)
    np.testing.assert_array_equal(new_key.view(np.uint64), new_state)
