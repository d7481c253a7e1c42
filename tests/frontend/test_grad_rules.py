"""Every differentiation rule against central finite differences, in float64.

One case per rule (some rules have several, for their corner cases): pyxla.jvp and
pyxla.vjp of the function, eagerly and under jit, against the difference quotient along a
random direction, at inputs drawn away from kinks. `test_every_rule_is_exercised` checks
that the cases reach every JVP and transpose rule there is, so the table cannot fall
behind the rules. Tie conventions (max, min, abs, clamp) are checked exactly, as JAX has them.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn
from pyxla.autodiff import jvp_rules, transpose_rules
from pyxla.frontend.tracing import bind
from pyxla.hlo.attributes import ConvDimensionNumbers, WindowDim

from .gradient_testing import check_grads

# --- inputs ------------------------------------------------------------------------------


def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def away_from_zero(*shape):
    return lambda rng: rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def away_from_integers(*shape):
    """k + u with u in (0.15, 0.35) or (0.65, 0.85): no jumps of floor/ceil/round nearby."""
    return lambda rng: rng.integers(-3, 3, shape) + rng.uniform(0.15, 0.35, shape) + rng.choice([0, 0.5], shape)


def ints(lo, hi, *shape):
    return lambda rng: rng.integers(lo, hi, shape)


def pair_apart(*shape):
    """(x, y) with |x - y| >= 0.2 everywhere: max and min have no ties."""
    def make(rng):
        x = rng.standard_normal(shape)
        return x, x + rng.uniform(0.2, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    return make


def remainder_operands(rng):
    y = rng.uniform(0.5, 2.0, (5,)) * rng.choice([-1.0, 1.0], (5,))
    return y * (rng.integers(-3, 3, (5,)) + rng.uniform(0.2, 0.8, (5,))), y


def clamp_operands(rng):
    x = rng.uniform(-2, 2, (6,))
    lo, hi = rng.uniform(-1.5, -0.5, (6,)), rng.uniform(0.5, 1.5, (6,))
    x = np.where(np.abs(x - lo) < 0.1, x + 0.3, x)
    x = np.where(np.abs(x - hi) < 0.1, x - 0.3, x)
    return lo, x, hi


GATHER = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
GATHER_WINDOWS = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))
SCATTER = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
SCATTER_ROWS = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                           scatter_dims_to_operand_dims=(0,))

CONV_REVERSED = {"dim_labels": ConvDimensionNumbers.from_labels("bf01_oi01->bf01"),
                 "window": (WindowDim(3, pad_low=1, pad_high=1, reversal=True), WindowDim(2, stride=2, reversal=True))}


@pyxla.custom_vjp
def _custom_vjp_product(x, y):
    return x * y


_custom_vjp_product.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1], g * res[0]))

# name -> (function, input makers[, check_grads options]); a maker may return several inputs
CASES: dict[str, tuple] = {
    # arithmetic
    "add": (lax.add, (normal(3, 4), normal(3, 4))),
    "subtract": (lax.sub, (normal(3, 4), normal(3, 4))),
    "multiply": (lax.mul, (normal(3, 4), normal(3, 4))),
    "divide": (lax.div, (normal(5), away_from_zero(5))),
    "negate": (lax.neg, (normal(5),)),
    "maximum": (lax.max, (pair_apart(6),)),
    "minimum": (lax.min, (pair_apart(6),)),
    "power": (lax.pow, (positive(5), normal(5))),
    "power of a negative base, integral exponent": (lambda x: x ** 3, (normal(5),)),
    "remainder": (lax.rem, (remainder_operands,)),
    "atan2": (lax.atan2, (normal(5), normal(5))),
    # math functions
    "exp": (lax.exp, (normal(5),)),
    "log": (lax.log, (positive(5),)),
    "log1p": (lax.log1p, (positive(5),)),
    "expm1": (lax.expm1, (normal(5),)),
    "tanh": (lax.tanh, (normal(5),)),
    "logistic": (lax.logistic, (normal(5),)),
    "sqrt": (lax.sqrt, (positive(5),)),
    "rsqrt": (lax.rsqrt, (positive(5),)),
    "cbrt": (lax.cbrt, (positive(5),)),
    "sin": (lax.sin, (normal(5),)),
    "cos": (lax.cos, (normal(5),)),
    "tan": (lax.tan, (lambda rng: rng.uniform(-1.2, 1.2, (5,)),)),
    "erf": (lax.erf, (normal(5),)),
    "abs": (lax.abs, (away_from_zero(6),)),
    "sign": (lambda x: lax.mul(lax.sign(x), x), (away_from_zero(6),)),
    "floor, ceil, round": (lambda x: lax.floor(x) * lax.ceil(x) + lax.round(x) + lax.round(x, 1) + x,
                           (away_from_integers(6),)),
    # select, clamp, conversion, comparison
    "select": (lambda p, x, y: lax.select(lax.gt(p, 0.0), x, y), (normal(6), normal(6), normal(6))),
    "where with a scalar": (lambda x: pnp.where(x > 0, x * x, 2.0), (away_from_zero(6),)),
    "clamp": (lax.clamp, (clamp_operands,)),
    "clamp with scalar bounds": (lambda x: lax.clamp(-0.5, x, 0.5),
                                 (lambda rng: np.array([-1.0, -0.2, 0.1, 0.4, 0.9]),)),
    "convert f64 -> f32 -> f64": (
        lambda x: lax.convert_element_type(lax.convert_element_type(x, np.float32), np.float64) * x,
        (normal(5),), {"eps": 1e-3, "rtol": 1e-3, "atol": 1e-5}),
    "convert f64 -> s32 -> f64": (
        lambda x: x * lax.convert_element_type(lax.convert_element_type(x, np.int32), np.float64),
        (away_from_integers(5),)),
    "compare": (lambda x, y: lax.select(lax.lt(x, y), x * y, x - y), (pair_apart(5),)),
    "copy and reduce_precision": (lambda x: lax.reduce_precision(bind("copy", x), 11, 52), (normal(4),)),
    # data movement
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (0, 2)), (normal(2, 4),)),
    "broadcast_in_dim of size-1 dims": (lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (0, 1)), (normal(2, 1),)),
    "reshape": (lambda x: lax.reshape(x, (6, 2)), (normal(3, 4),)),
    "transpose": (lambda x: lax.transpose(x, (2, 0, 1)), (normal(2, 3, 4),)),
    "slice": (lambda x: lax.slice(x, (1, 0), (4, 5), (2, 3)), (normal(4, 5),)),
    "indexing slices": (lambda x: x[1:, ::2] * x[0, 1], (normal(4, 5),)),
    "concatenate": (lambda x, y: lax.concatenate([x, y, x], 1), (normal(2, 3), normal(2, 2))),
    "pad (negative, interior; the padding value too)": (
        lambda x, v: lax.pad(x, v, [(1, -1, 1), (-1, 2, 0)]), (normal(3, 4), normal())),
    "reverse": (lambda x: lax.rev(x, (0, 1)), (normal(3, 2),)),
    "dynamic_slice": (lambda x, i: lax.dynamic_slice(x, (i, 2), (2, 2)), (normal(4, 5), ints(0, 4))),
    "dynamic_update_slice": (lambda x, u, i: lax.dynamic_update_slice(x, u, (1, i)),
                             (normal(4, 5), normal(2, 3), ints(0, 4))),
    "gather": (lambda x, i: lax.gather(x, i, GATHER, (1, 3)), (normal(4, 3), ints(0, 4, 5, 1))),
    "gather of clamped windows": (lambda x: lax.gather(x, np.array([[3], [1], [-2]]), GATHER_WINDOWS, (2, 2)),
                                  (normal(4, 2),)),
    "indexing with arrays": (lambda x: x[np.array([2, 0, 2, 3])] + pnp.take_along_axis(x, np.array([[0, 2]] * 4), 1)[:, :1],
                             (normal(4, 3),)),
    "scatter_add": (lambda x, i, y: lax.scatter_add(x, i, y, SCATTER), (normal(4, 2), ints(-1, 5, 5, 1), normal(5, 2))),
    "scatter (repeated and dropped indices)": (lambda x, y: lax.scatter(x, np.array([[0], [5], [2], [0]]), y, SCATTER),
                                               (normal(4, 2), normal(4, 2))),
    ".at[].set and .add": (lambda x, y: pnp.asarray(x).at[1:3].set(y).at[np.array([0, 0])].add(y), (normal(4, 2), normal(2, 2))),
    # reductions and contractions
    "sum": (lambda x: pnp.sum(x, axis=1) + lax.reduce_sum(x, (0, 1)), (normal(3, 4),)),
    "reduce with an init value": (lambda x, v: lax.reduce(x, v, lax.add, (0,)), (normal(3, 4), normal())),
    "max": (lambda x: pnp.max(x, axis=0), (normal(3, 4),)),
    "prod (with a zero, over several axes)": (
        lambda x: (pnp.prod(x, axis=1), pnp.prod(x * np.array([1.0, 0.0, 1.0])[:, None], axis=(0, 2))),
        (normal(2, 3, 4),)),
    "min": (lambda x: lax.reduce_min(x, (0, 1)), (normal(3, 4),)),
    "mean": (lambda x: pnp.mean(x, axis=(0, 2)), (normal(2, 3, 4),)),
    "matmul": (lambda x, y: x @ y, (normal(3, 4), normal(4, 5))),
    "dot of vectors": (pnp.dot, (normal(4), normal(4))),
    "dot_general, batch and unsorted contracting dims": (
        lambda x, y: lax.dot_general(x, y, (((3, 1), (0, 2)), ((0,), (3,)))), (normal(2, 3, 5, 4), normal(4, 6, 3, 2))),
    "dot_general, two batch dims": (
        lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0, 3), (3, 0)))), (normal(2, 3, 4, 5), normal(5, 4, 6, 2))),
    "einsum": (lambda x, y: pnp.einsum("bij,bjk->bik", x, y), (normal(2, 3, 4), normal(2, 4, 2))),
    "convolution, NCHW": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
                          (normal(2, 3, 5, 5), normal(4, 3, 3, 3))),
    "convolution, NHWC, strided": (
        lambda x, w: lax.conv_general_dilated(x, w, (2, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")),
        (normal(2, 7, 6, 3), normal(3, 2, 3, 4))),
    "convolution, padded and dilated": (
        lambda x, w: lax.conv_general_dilated(x, w, (1, 2), [(1, 2), (0, 1)], lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
        (normal(1, 2, 5, 6), normal(3, 2, 2, 3))),
    "convolution, feature groups": (
        lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME", feature_group_count=2), (normal(2, 4, 7), normal(6, 2, 3))),
    "convolution, batch groups": (
        lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", batch_group_count=2),
        (normal(4, 3, 5, 5), normal(4, 3, 2, 2))),
    "reduce_window sum (cumsum, sum pooling)": (
        lambda x: (pnp.cumsum(x, axis=1), lax.reduce_window_sum(x, (1, 2, 2), (1, 2, 1), "VALID")),
        (normal(2, 6, 5),)),
    "reduce_window sum, padded and dilated": (
        lambda x: lax.reduce_window_sum(x, (2, 3), (2, 1), [(1, 0), (2, 1)], (1, 2), (2, 1)), (normal(5, 4),)),
    "reduce_window max and min (max pooling, cummax)": (
        lambda x: (lax.reduce_window_max(x, (1, 2, 2), (1, 2, 2), "VALID"), lax.reduce_window_max(x, (1, 3, 3), (1, 1, 2), "SAME"),
                   lax.reduce_window_min(x, (2, 3, 1), (2, 1, 1), [(1, 0), (0, 1), (0, 0)]), lax.cummax(x, axis=1)),
        (normal(2, 6, 4),)),
    "cumprod (with a zero, reversed)": (
        lambda x: (lax.cumprod(x * np.array([1.0, 1.0, 0.0, 1.0, 1.0]), axis=1), lax.cumprod(x, axis=0, reverse=True)),
        (normal(3, 5),)),
    "reduce_window product (strided, padded, a zero)": (
        lambda x: lax.reduce_window(x * np.array([1.0, 0.0, 1.0, 1.0]), np.array(1.0), lax.mul, (2, 3), (1, 2),
                                    [(1, 0), (0, 1)]),
        (normal(3, 4),)),
    "reduce_window max and min, dilated (dilated max pooling)": (
        lambda x: (lax.reduce_window_max(x, (2, 2), (1, 1), "VALID", window_dilation=(2, 1)),
                   lax.reduce_window_min(x, (2, 2), (2, 1), [(1, 1), (0, 1)], base_dilation=(2, 1))),
        (normal(5, 6),)),
    "convolution with reversed windows": (lambda x, w: bind("convolution", x, w, **CONV_REVERSED),
                                          (normal(2, 3, 5, 6), normal(4, 3, 3, 2))),
    "scatter_max and scatter_min (repeated indices)": (
        lambda x, y: (lax.scatter_max(x, np.array([[0], [3], [0], [5]]), y, SCATTER),
                      lax.scatter_min(x, np.array([[1], [2], [1], [1]]), y, SCATTER)),
        (normal(4, 2), normal(4, 2))),
    "select_and_scatter_add": (
        lambda source, x: lax.select_and_scatter_add(source, x, lax.ge, (2, 2), (2, 1), "VALID"),
        (normal(2, 3), normal(4, 4))),
    "sort (one operand, keys and values), median": (
        lambda x, v: (pnp.sort(x, axis=0), lax.sort_key_val(x, v, 1), pnp.median(x, axis=1)), (normal(3, 5), normal(3, 5))),
    "top_k": (lambda x: lax.top_k(x, 3)[0], (normal(3, 6),)),
    # barriers and user-defined rules
    "optimization_barrier": (lambda x, y: lax.optimization_barrier((x * y, y))[0] * y, (normal(3), normal(3))),
    "custom_vjp (its linear custom-call)": (lambda x, y: _custom_vjp_product(x, y) * x, (normal(3), normal(3)),
                                            {"modes": ("rev",)}),
    # composites of primitives
    "softmax": (lambda x: nn.softmax(x), (normal(3, 5),)),
    "log_softmax": (lambda x: nn.log_softmax(x, axis=0), (normal(3, 5),)),
    "logsumexp": (lambda x: nn.logsumexp(x, axis=1), (normal(3, 5),)),
    "layer_norm": (lambda x: nn.layer_norm(x), (normal(3, 5),)),
    "gelu (tanh and erf forms)": (lambda x: nn.gelu(x) + nn.gelu(x, approximate=False), (normal(3, 5),)),
}


def _inputs(makers, rng) -> tuple:
    args = []
    for make in makers:
        value = make(rng)
        args.extend(value if isinstance(value, tuple) else [value])
    return tuple(args)


@pytest.mark.parametrize("name", list(CASES))
def test_rule_against_finite_differences(name, rng):
    fn, makers, *options = CASES[name]
    tolerances = {"rtol": 1e-6, "atol": 1e-8, **(options[0] if options else {})}
    check_grads(fn, _inputs(makers, rng), rng, jit=True, **tolerances)


def test_every_rule_is_exercised(monkeypatch, rng):
    """Each JVP rule and each transpose rule runs in some case above."""
    seen_jvp, seen_transpose = set(), set()

    def recording(table, seen):
        for opcode, rule in list(table.items()):
            def wrapped(*args, _rule=rule, _opcode=opcode):
                seen.add(_opcode)
                return _rule(*args)
            monkeypatch.setitem(table, opcode, wrapped)

    recording(jvp_rules.JVP_RULES, seen_jvp)
    recording(transpose_rules.TRANSPOSE_RULES, seen_transpose)
    for fn, makers, *_ in CASES.values():
        args = _inputs(makers, rng)
        out, vjp_fn = pyxla.vjp(fn, *args)
        vjp_fn(pyxla.tree_map(lambda o: np.ones_like(o), out))
    assert set(jvp_rules.JVP_RULES) - seen_jvp == set()
    assert set(transpose_rules.TRANSPOSE_RULES) - seen_transpose == set()


# --- conventions at kinks and ties, as JAX has them -----------------------------------------------

def test_max_and_min_split_ties_evenly():
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 5.0, 0.0])
    for op in (lax.max, lax.min):
        gx, gy = pyxla.grad(lambda a, b: pnp.sum(op(a, b)), argnums=(0, 1))(x, y)
        winner_x = (op is lax.max) == (x > y)
        np.testing.assert_array_equal(gx, np.where(x == y, 0.5, np.where(winner_x, 1.0, 0.0)))
        np.testing.assert_array_equal(gx + gy, np.ones(3))
    np.testing.assert_array_equal(pyxla.grad(lambda a: pnp.sum(pnp.maximum(a, a)))(x), np.ones(3))
    np.testing.assert_array_equal(pyxla.grad(lambda a: pnp.sum(nn.relu(a)))(np.array([-1.0, 0.0, 2.0])),
                                  [0.0, 0.5, 1.0])


def test_reduce_max_and_min_share_the_derivative_among_ties():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(pyxla.grad(lambda a: pnp.sum(pnp.max(a, axis=1)))(x),
                               [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(pyxla.grad(lambda a: pnp.min(a))(x), [[1, 0, 0], [0, 0, 0]])


def test_abs_sign_and_clamp_at_their_kinks():
    np.testing.assert_array_equal(pyxla.grad(lambda a: pnp.sum(lax.abs(a)))(np.array([-2.0, 0.0, 3.0])),
                                  [-1.0, 1.0, 1.0])
    np.testing.assert_array_equal(pyxla.grad(lambda a: pnp.sum(lax.sign(a)))(np.array([-2.0, 0.0])), [0.0, 0.0])
    grads = pyxla.grad(lambda lo, a, hi: pnp.sum(lax.clamp(lo, a, hi)), argnums=(0, 1, 2))(
        -1.0, np.array([-1.0, -2.0, 0.5, 1.0, 3.0]), 1.0)
    np.testing.assert_array_equal(grads[1], [0, 0, 1, 0, 0])   # none at the bounds themselves
    assert float(grads[0]) == 1.0 and float(grads[2]) == 1.0


def test_power_with_zero_base_and_exponent():
    gx, gy = pyxla.grad(lambda x, y: pnp.sum(lax.pow(x, y)), argnums=(0, 1))(np.array([0.0, 0.0, 2.0]),
                                                                                np.array([0.0, 2.0, 3.0]))
    np.testing.assert_array_equal(gx, [0.0, 0.0, 12.0])
    np.testing.assert_allclose(gy, [0.0, 0.0, 8 * np.log(2.0)])


def test_conversions_pass_float_derivatives_and_stop_integer_ones():
    x = np.array([0.25, -1.5, 2.0])
    g = pyxla.grad(lambda a: pnp.sum(lax.convert_element_type(a, np.float32) * np.float32(3)))(x)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    g = pyxla.grad(lambda a: pnp.sum(lax.convert_element_type(lax.convert_element_type(a, np.int32), np.float64)))(x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])
    g = pyxla.grad(lambda a: pnp.sum(lax.convert_element_type(a, np.float64) ** 2))(x.astype(np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x)


def test_comparisons_have_no_derivative():
    x = np.array([-1.0, 0.5, 2.0])
    primal, tangent = pyxla.jvp(lambda a: a > 0, (x,), (np.ones(3),))
    np.testing.assert_array_equal(primal, x > 0)
    assert tangent.dtype == pyxla.float0 and tangent.shape == (3,)


def test_scatter_max_shares_ties_evenly():
    x = np.array([1.0, 5.0, 2.0])
    gx, gy = pyxla.grad(lambda a, b: pnp.sum(lax.scatter_max(a, np.array([[0], [0], [2]]), b, SCATTER_ROWS)),
                        argnums=(0, 1))(x, np.array([1.0, 0.5, 3.0]))
    np.testing.assert_allclose(gx, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(gy, [0.5, 0.0, 1.0])


def test_cumprod_and_dilated_pooling_against_jax(rng):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        x = rng.standard_normal((4, 6)) * np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
        np.testing.assert_allclose(pyxla.grad(lambda a: pnp.sum(lax.cumprod(a, axis=1) ** 2))(x),
                                   jax.grad(lambda a: jnp.sum(jax.lax.cumprod(a, axis=1) ** 2))(x), rtol=1e-12)
        x, t = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
        ours = pyxla.jvp(lambda a: lax.reduce_window_max(a, (2, 3), (1, 2), "SAME", window_dilation=(2, 2)), (x,), (t,))
        theirs = jax.jvp(lambda a: jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (2, 3), (1, 2), "SAME",
                                                         window_dilation=(2, 2)), (x,), (t,))
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)   # JAX has no VJP of dilated max pooling
    finally:
        jax.config.update("jax_enable_x64", x64)
