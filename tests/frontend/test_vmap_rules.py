"""Every batching rule: vmap(f)(xs) against f run on each example, stacked.

One case per rule (some rules have several, for their forms): the function is batched with
random in_axes (negative ones included, and in the second variant some arguments
unbatched) and a random out_axes, eagerly and under jit, and compared with pyxla running f
on each example alone: exactly for integer and bool results, to float32 rounding for
floats (a batched dot or convolution may sum in another order). `test_every_rule_is_exercised`
checks that the cases reach every rule in BATCH_RULES with a batched operand.
"""
from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, random
from pyxla.batching import BATCH_RULES
from pyxla.frontend.tracing import bind
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import S32

B = 3


def normal(*shape):
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape).astype(np.float32)


def ints(lo, hi, *shape, dtype=np.int32):
    return lambda rng: rng.integers(lo, hi, shape).astype(dtype)


@dataclass
class Case:
    name: str
    fn: Callable
    args: list            # one maker per argument: rng -> one example's value
    opcodes: tuple        # the rules the case must reach with a batched operand
    jit: bool = True


CASES: list[Case] = []


def case(name, fn, args, opcodes, jit=True):
    CASES.append(Case(name, fn, args, tuple(opcodes), jit))


# --- elementwise ---------------------------------------------------------------------------------------

for _op, _f, _maker in [
        ("abs", lax.abs, normal), ("cbrt", lax.cbrt, normal), ("ceil", lax.ceil, normal), ("cosine", lax.cos, normal),
        ("erf", lax.erf, normal), ("exponential", lax.exp, normal), ("exponential-minus-one", lax.expm1, normal),
        ("floor", lax.floor, normal), ("is-finite", lax.is_finite, normal), ("log", lax.log, positive),
        ("log-plus-one", lax.log1p, positive), ("logistic", lax.logistic, normal), ("negate", lax.neg, normal),
        ("round-nearest-afz", lax.round, normal),
        ("round-nearest-even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), normal),
        ("rsqrt", lax.rsqrt, positive), ("sign", lax.sign, normal), ("sine", lax.sin, normal),
        ("sqrt", lax.sqrt, positive), ("tan", lax.tan, normal), ("tanh", lax.tanh, normal),
        ("copy", lambda x: bind("copy", x), normal),
        ("reduce-precision", lambda x: lax.reduce_precision(x, 5, 10), normal)]:
    case(_op, _f, [_maker(2, 3)], [_op])

for _op, _f, _maker in [
        ("add", lax.add, normal), ("subtract", lax.sub, normal), ("multiply", lax.mul, normal),
        ("divide", lax.div, positive), ("maximum", lax.max, normal), ("minimum", lax.min, normal),
        ("power", lax.pow, positive), ("remainder", lax.rem, positive), ("atan2", lax.atan2, normal)]:
    case(_op, _f, [_maker(4), _maker(4)], [_op])

for _op, _f in [("and", lax.bitwise_and), ("or", lax.bitwise_or), ("xor", lax.bitwise_xor),
                ("shift-left", lax.shift_left), ("shift-right-arithmetic", lax.shift_right_arithmetic),
                ("shift-right-logical", lax.shift_right_logical)]:
    case(_op, _f, [ints(-50, 50, 5), ints(0, 6, 5)], [_op])
case("not", lax.bitwise_not, [ints(-50, 50, 5)], ["not"])
case("popcnt", lax.population_count, [ints(-50, 50, 5)], ["popcnt"])
case("count-leading-zeros", lax.clz, [ints(0, 1000, 5)], ["count-leading-zeros"])
case("compare", lax.lt, [normal(2, 2), normal(2, 2)], ["compare"])
case("select", lambda p, x, y: lax.select(lax.gt(p, 0.0), x, y), [normal(4), normal(4), normal(4)],
     ["select", "compare"])
case("clamp scalar bounds", lambda lo, x: lax.clamp(lo, x, 1.0), [normal(), normal(5)], ["clamp"])
case("convert", lambda x: lax.convert_element_type(x, np.int32), [normal(3)], ["convert"])
case("bitcast-convert", lambda x: lax.bitcast_convert_type(x, np.uint32), [normal(3)], ["bitcast-convert"])
# Opcodes defined by expansions (hlo/expansion.py): the cpu backend expands them (prepare).
case("real", lambda x: bind("real", x), [normal(2, 3)], ["real"])
case("imag", lambda x: bind("imag", x), [normal(2, 3)], ["imag"])
case("stochastic-convert", lambda x, r: bind("stochastic-convert", x, r, shape=ArrayShape(S32, (4,))),
     [lambda rng: (rng.standard_normal(4) * 10).astype(np.float32), ints(0, 2**31, 4, dtype=np.uint32)],
     ["stochastic-convert"])
case("threefry (pyxla.random)", lambda k: random.uniform(k, (3,)), [lambda rng: np.asarray(
    random.PRNGKey(int(rng.integers(0, 1000))))], ["add", "xor", "shift-left"])

# --- data movement -------------------------------------------------------------------------------------

case("broadcast", lambda x: lax.broadcast_in_dim(x, (3, 4, 5), (0, 2)), [normal(3, 5)], ["broadcast"])
case("reshape", lambda x: lax.reshape(x, (6, 2)), [normal(3, 4)], ["reshape"])
case("transpose", lambda x: lax.transpose(x, (2, 0, 1)), [normal(2, 3, 4)], ["transpose"])
case("slice", lambda x: lax.slice(x, (1, 0), (3, 4), (1, 2)), [normal(3, 4)], ["slice"])
case("concatenate", lambda x, y: lax.concatenate([x, y, x], 1), [normal(2, 3), normal(2, 1)], ["concatenate"])
case("pad", lambda x, v: lax.pad(x, v, [(1, -1, 1), (0, 2, 0)]), [normal(3, 2), normal()], ["pad"])
case("reverse", lambda x: lax.rev(x, (0, 2)), [normal(2, 3, 2)], ["reverse"])
case("iota and constants", lambda x: x * lax.iota(np.float32, 4) + 2.0, [normal(4)], ["multiply", "add"])

# --- reductions, windows, sorting ----------------------------------------------------------------------

case("reduce sum", lambda x: pnp.sum(x, axis=1), [normal(3, 4, 2)], ["reduce"])
case("reduce max all", lambda x: pnp.max(x), [normal(3, 4)], ["reduce"])
case("argmax (variadic reduce)", lambda x: pnp.argmax(x, axis=0), [normal(5, 3)], ["reduce"])
case("reduce-window max", lambda x: lax.reduce_window_max(x, (2, 2), (1, 2), "VALID"), [normal(4, 5)],
     ["reduce-window"])
case("cumsum", lambda x: lax.cumsum(x, axis=1, reverse=True), [normal(2, 4)], ["reduce-window"])
case("select-and-scatter", lambda s, x: lax.select_and_scatter_add(s, x, lax.ge, (2,), (2,), "VALID"),
     [normal(3), normal(6)], ["select-and-scatter"])
case("sort", lambda x: pnp.sort(x, axis=0), [normal(5, 2)], ["sort"])
case("sort_key_val", lambda k, v: lax.sort_key_val(k, v), [normal(5), ints(0, 9, 5)], ["sort"])
case("topk", lambda x: lax.top_k(x, 2), [normal(3, 5)], ["topk"])

# --- contractions --------------------------------------------------------------------------------------

case("dot matrix", lambda x, w: x @ w, [normal(2, 3), normal(3, 4)], ["dot"])
case("dot_general batch dims", lambda x, w: lax.dot_general(x, w, (((2,), (1,)), ((0,), (0,)))),
     [normal(2, 3, 4), normal(2, 4, 5)], ["dot"])
case("dot vector", lambda x, w: pnp.dot(x, w), [normal(4), normal(4, 2)], ["dot"])


def spd(n):
    def make(rng):
        x = rng.standard_normal((n, n))
        return (x @ x.T + n * np.eye(n)).astype(np.float32)
    return make


def triangular(n):
    return lambda rng: (rng.standard_normal((n, n)) + 2 * n * np.eye(n)).astype(np.float32)


case("cholesky", lambda a: lax.linalg.cholesky(a), [spd(4)], ["cholesky"])
case("triangular_solve", lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                                  transpose_a=True),
     [triangular(4), normal(4, 2)], ["triangular-solve"])


def conv(lhs, rhs):
    return lax.conv_general_dilated(lhs, rhs, (1, 2), "SAME", rhs_dilation=(1, 1),
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def grouped_conv(lhs, rhs):
    return lax.conv_general_dilated(lhs, rhs, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=2)


case("convolution", conv, [normal(2, 3, 5, 6), normal(4, 3, 3, 2)], ["convolution"])
case("convolution feature groups", grouped_conv, [normal(1, 4, 4, 4), normal(2, 2, 2, 6)], ["convolution"])

# --- indexing ------------------------------------------------------------------------------------------

case("dynamic-slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)),
     [normal(4, 5), ints(-1, 5), ints(0, 4)], ["dynamic-slice"])
case("dynamic-update-slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)),
     [normal(5, 4), normal(2, 2), ints(-1, 6)], ["dynamic-update-slice"])
case("gather (integer array index)", lambda x, idx: x[idx], [normal(5, 3), ints(0, 5, 2, 2)], ["gather"])
case("gather (take_along_axis)", lambda x, idx: pnp.take_along_axis(x, idx, axis=1),
     [normal(3, 4), ints(0, 4, 3, 2)], ["gather"])
case("scatter add", lambda x, idx, v: pnp.asarray(x).at[idx].add(v), [normal(6), ints(0, 6, 4), normal(4)], ["scatter"])
case("scatter set 2-d", lambda x, idx, v: pnp.asarray(x).at[idx, 1:].set(v), [normal(4, 3), ints(0, 4, 2), normal(2, 2)],
     ["scatter"])

# --- random bits, control flow -------------------------------------------------------------------------

case("rng-bit-generator", lambda k: lax.rng_bit_generator(k, (2, 3))[1], [ints(0, 2**31, 4, dtype=np.uint32)],
     ["rng-bit-generator"])


def fori(x, n):
    return lax.fori_loop(0, 3, lambda i, c: c * x + n, x)


def while_batched_predicate(x, limit):
    return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))


def cond_fn(p, x):
    return lax.cond(p > 0, lambda v: v * 2.0, lambda v: v - 1.0, x)


def switch_fn(i, x, y):
    return lax.switch(i, [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: (a - b) * 0.5], x, y)


case("while (fori_loop) and call", fori, [normal(3), normal(3)], ["while", "call", "multiply"])
case("while, batched predicate", while_batched_predicate, [normal(2), ints(0, 5)], ["while", "compare"])
case("conditional, batched index", cond_fn, [normal(), normal(2)], ["conditional"])
case("conditional, unbatched index (scan)", lambda x: lax.scan(
    lambda c, v: (lax.cond(c.sum() > 100.0, lambda a: a, lambda a: a + v, c), c), x, pnp.ones((2, 3), np.float32))[1],
    [normal(3)], ["conditional", "while"])
case("switch", switch_fn, [ints(-1, 4), normal(3), normal(3)], ["conditional"])
case("opt-barrier", lambda x, y: lax.optimization_barrier((x, y * 2.0)), [normal(2), normal(3)], ["opt-barrier"])


# --- the check -----------------------------------------------------------------------------------------

def _insert_axis(x, axis):
    return np.moveaxis(x, 0, axis)


def _run_case(c: Case, variant: int, jit: bool, seed: int, mapped: list[bool] | None = None):
    rng = np.random.default_rng(seed)
    examples = [[np.asarray(make(rng)) for make in c.args] for _ in range(B)]
    n = len(c.args)
    if mapped is None:
        mapped = [True] * n
        if variant == 1 and n > 1:
            mapped = [bool(m) for m in rng.integers(0, 2, n)]
            mapped[int(rng.integers(0, n))] = True
    in_axes, inputs = [], []
    for k in range(n):
        if mapped[k]:
            rank = examples[0][k].ndim
            axis = int(rng.integers(-(rank + 1), rank + 1))
            in_axes.append(axis)
            inputs.append(np.moveaxis(np.stack([e[k] for e in examples]), 0, axis))
        else:
            in_axes.append(None)
            inputs.append(examples[0][k])
            for e in examples:
                e[k] = examples[0][k]
    want = [c.fn(*e) for e in examples]
    leaves0, tree = pyxla.tree_flatten(want[0])
    out_axes = [int(rng.integers(-(np.ndim(w) + 1), np.ndim(w) + 1)) for w in leaves0]
    fn = pyxla.vmap(c.fn, in_axes=tuple(in_axes), out_axes=pyxla.tree_unflatten(tree, out_axes))
    got = (pyxla.jit(fn) if jit else fn)(*inputs)
    got_leaves, got_tree = pyxla.tree_flatten(got)
    assert got_tree == tree
    for k, (g, axis) in enumerate(zip(got_leaves, out_axes)):
        stacked = np.stack([np.asarray(pyxla.tree_flatten(w)[0][k]) for w in want])
        expect = np.moveaxis(stacked, 0, axis)
        g = np.asarray(g)
        assert g.shape == expect.shape and g.dtype == expect.dtype, (g.shape, g.dtype, expect.shape, expect.dtype)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, expect, rtol=2e-5, atol=2e-5, err_msg=f"{c.name} in_axes={in_axes}")
        else:
            np.testing.assert_array_equal(g, expect, err_msg=f"{c.name} in_axes={in_axes}")


@pytest.fixture
def reached(monkeypatch):
    """The opcodes whose rules ran during the test (a rule runs only for batched operands)."""
    seen: set[str] = set()

    def recording(opcode, rule):
        def wrapped(instr, values, dims):
            seen.add(opcode)
            return rule(instr, values, dims)
        return wrapped

    for opcode, rule in list(BATCH_RULES.items()):
        monkeypatch.setitem(BATCH_RULES, opcode, recording(opcode, rule))
    return seen


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_rule_eager(c, reached):
    _run_case(c, 0, jit=False, seed=zlib.crc32(c.name.encode()))
    missing = set(c.opcodes) - reached
    assert not missing, f"{c.name} did not reach the rules of {missing}"
    _run_case(c, 1, jit=False, seed=zlib.crc32(c.name.encode()) + 1)


@pytest.mark.parametrize("c", [c for c in CASES if c.jit], ids=[c.name for c in CASES if c.jit])
def test_rule_jit(c):
    _run_case(c, 1, jit=True, seed=zlib.crc32(c.name.encode()) + 2)


PATTERNED = [c for c in CASES if c.opcodes[0] in ("dot", "convolution", "gather", "scatter", "dynamic-slice",
                                                 "dynamic-update-slice", "pad", "select", "clamp", "conditional",
                                                 "while", "concatenate", "select-and-scatter", "sort")]
PATTERNS = [(c, mapped) for c in PATTERNED
            for mapped in itertools.product([False, True], repeat=len(c.args)) if any(mapped)]


@pytest.mark.parametrize("c,mapped", PATTERNS, ids=[f"{c.name}-{''.join('01'[m] for m in p)}" for c, p in PATTERNS])
def test_rule_every_operand_pattern(c, mapped):
    """Each subset of the arguments mapped (the rest shared): every form of the rule."""
    _run_case(c, 0, jit=False, seed=zlib.crc32(c.name.encode()) + 3, mapped=list(mapped))


def test_every_rule_is_exercised():
    covered = {op for c in CASES for op in c.opcodes}
    missing = sorted(set(BATCH_RULES) - covered)
    assert not missing, f"batching rules without a case in CASES: {missing}"
