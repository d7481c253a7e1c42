"""lax control flow: while_loop, fori_loop, cond, switch and scan, eager and under jit,
against Python reference loops; pytrees, closures, nesting, weak types and errors."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.errors import TraceError
from pyxla.hlo import evaluate_module, parse_module, verify_module

MODES = ["eager", "jit"]


def run(mode, fn, *args, **static):
    """fn(*args) eagerly, or compiled with `static` keyword arguments marked static."""
    if mode == "eager":
        return fn(*args, **static)
    return pyxla.jit(fn, static_argnames=tuple(static))(*args, **static)


def f32(x):
    return np.asarray(x, np.float32)


# --- while_loop ---------------------------------------------------------------------------

def newton_sqrt(a, steps):
    """sqrt(a) by Newton's method, the carry a dict with a step counter."""
    def cond(c):
        return lax.lt(c["n"], steps)

    def body(c):
        return {"x": lax.mul(lax.add(c["x"], lax.div(a, c["x"])), 0.5), "n": lax.add(c["n"], 1)}

    return lax.while_loop(cond, body, {"x": a, "n": np.int32(0)})


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_carries_a_dict_and_closes_over_an_argument(mode, rng):
    a = rng.uniform(1, 4, 5).astype(np.float32)
    steps = int(rng.integers(3, 7))
    out = run(mode, newton_sqrt, a, steps=steps)
    x = a.astype(np.float64)
    ref = x.copy()
    for _ in range(steps):
        ref = 0.5 * (ref + x / ref)
    assert out["n"] == steps and out["n"].dtype == np.int32
    assert out["x"].dtype == np.float32
    np.testing.assert_allclose(out["x"], ref, rtol=1e-6)


def doubling_count(x, limit):
    """How many doublings until x exceeds limit: a data-dependent trip count."""
    def cond(c):
        return lax.le(c[0], limit)
    return lax.while_loop(cond, lambda c: (lax.mul(c[0], 2.0), lax.add(c[1], 1)), (x, np.int32(0)))


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_with_data_dependent_trip_count(mode, rng):
    x = np.float32(rng.uniform(0.1, 1.0))
    limit = np.float32(rng.uniform(10, 1000))
    value, count = run(mode, doubling_count, x, limit)
    ref_value, ref_count = float(x), 0
    while ref_value <= limit:
        ref_value, ref_count = ref_value * 2, ref_count + 1
    assert count == ref_count
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)


def test_while_loop_lowers_to_hlo_while_that_parses_back(rng):
    a = rng.uniform(1, 4, 3).astype(np.float32)
    text = pyxla.jit(newton_sqrt, static_argnames="steps").lower(a, steps=4).as_text()
    assert " while(" in text and "get-tuple-element" in text and "call(" in text
    module = parse_module(text)
    verify_module(module)
    out = evaluate_module(module, [a])
    np.testing.assert_allclose(out[1], np.sqrt(a), rtol=1e-3)


# --- fori_loop ------------------------------------------------------------------------------

def rnn_by_fori(h, w, n):
    """h <- tanh(h @ w + i): the body closes over the traced w."""
    def body(i, h):
        return lax.tanh(lax.add(lax.dot(h, w), lax.convert_element_type(i, np.float32)))
    return lax.fori_loop(0, n, body, h)


@pytest.mark.parametrize("mode", MODES)
def test_fori_loop_closure_over_traced_value(mode, rng):
    h = rng.standard_normal((2, 4)).astype(np.float32)
    w = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    n = int(rng.integers(2, 6))
    out = run(mode, rnn_by_fori, h, w, n=n)
    ref = h.astype(np.float64)
    for i in range(n):
        ref = np.tanh(ref @ w + i)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def total_with_traced_bound(x, n):
    return lax.fori_loop(np.int32(0), n, lambda i, acc: lax.add(acc, lax.dynamic_index_in_dim(x, i, 0, False)), 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_fori_loop_traced_bound_and_python_float_carry_takes_f32(mode, rng):
    x = rng.standard_normal(9).astype(np.float32)
    n = np.int32(rng.integers(1, 9))
    out = run(mode, total_with_traced_bound, x, n)
    assert np.asarray(out).dtype == np.float32   # the weak 0.0 carry took the body's type
    np.testing.assert_allclose(out, x[:n].astype(np.float64).sum(), rtol=1e-5, atol=1e-6)


def pair_products(x):
    """sum_{i<j} x[i] * x[j] with nested loops: the inner body uses the outer index and x."""
    n = x.shape[0]

    def outer(i, acc):
        xi = lax.dynamic_index_in_dim(x, i, 0, keepdims=False)

        def inner(j, acc):
            xj = lax.dynamic_index_in_dim(x, j, 0, keepdims=False)
            return lax.add(acc, lax.mul(xi, xj))
        return lax.fori_loop(lax.add(i, 1), n, inner, acc)

    return lax.fori_loop(0, n, outer, np.float32(0))


@pytest.mark.parametrize("mode", MODES)
def test_nested_fori_loops_capture_from_every_level(mode, rng):
    x = rng.standard_normal(6).astype(np.float32)
    out = run(mode, pair_products, x)
    w = x.astype(np.float64)
    ref = sum(w[i] * w[j] for i in range(6) for j in range(i + 1, 6))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_nested_loop_hlo_has_two_whiles(rng):
    text = pyxla.jit(pair_products).lower(rng.standard_normal(4).astype(np.float32)).as_text()
    assert text.count(" while(") == 2
    verify_module(parse_module(text))


# --- cond and switch --------------------------------------------------------------------------

def branchy(x, params, threshold):
    """A cond over a tuple operand holding a dict; both branches close over `threshold`."""
    def big(operand):
        v, p = operand
        return {"out": lax.mul(v, p["scale"]), "shift": lax.add(p["shift"], threshold)}

    def small(operand):
        v, p = operand
        return {"out": lax.sub(v, p["shift"]), "shift": lax.mul(p["shift"], threshold)}

    return lax.cond(lax.gt(lax.reduce_sum(x, (0,)), threshold), big, small, (x, params))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("take_true", [True, False])
def test_cond_pytree_operands_and_closures(mode, take_true, rng):
    x = rng.standard_normal(5).astype(np.float32)
    params = {"scale": f32(rng.uniform(1, 2)), "shift": f32(rng.standard_normal())}
    total = float(x.astype(np.float64).sum())
    threshold = f32(total - 1.0 if take_true else total + 1.0)
    out = run(mode, branchy, x, params, threshold)
    if take_true:
        ref = {"out": x * params["scale"], "shift": params["shift"] + threshold}
    else:
        ref = {"out": x - params["shift"], "shift": params["shift"] * threshold}
    for key in ref:
        np.testing.assert_allclose(out[key], ref[key], rtol=1e-6, err_msg=key)


@pytest.mark.parametrize("mode", MODES)
def test_cond_with_integer_predicate_and_no_operands(mode, rng):
    a, b = (rng.standard_normal(3).astype(np.float32) for _ in range(2))
    k = np.int32(rng.integers(-3, 3))
    out = run(mode, lambda k, a, b: lax.cond(k, lambda: lax.exp(a), lambda: lax.neg(b)), k, a, b)
    np.testing.assert_allclose(out, np.exp(a.astype(np.float64)) if k != 0 else -b, rtol=1e-6)


BRANCHES = [lambda x: lax.mul(x, 2.0), lambda x: lax.exp(x), lambda x: lax.add(lax.sin(x), 1.0)]
REFERENCES = [lambda x: x * 2, np.exp, lambda x: np.sin(x) + 1]


@pytest.mark.parametrize("mode", MODES)
def test_switch_clamps_out_of_range_index(mode, rng):
    x = rng.standard_normal(5).astype(np.float32)
    for index in (-7, -1, 0, 1, 2, 3, 40):
        out = run(mode, lambda i, x: lax.switch(i, BRANCHES, x), np.int32(index), x)
        ref = REFERENCES[min(max(index, 0), 2)](x.astype(np.float64))
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6, err_msg=f"index {index}")


def test_switch_lowers_to_conditional_with_clamped_index(rng):
    text = pyxla.jit(lambda i, x: lax.switch(i, BRANCHES, x)).lower(np.int32(0), np.ones(3, np.float32)).as_text()
    assert "conditional(" in text and "branch_computations={" in text and "clamp(" in text


@pytest.mark.parametrize("mode", MODES)
def test_switch_branch_returning_python_number_takes_the_other_branches_type(mode, rng):
    x = rng.standard_normal(4).astype(np.float32)
    branches = [lambda x: 0.5, lambda x: lax.reduce_max(x, (0,))]
    for index in (0, 1):
        out = run(mode, lambda i, x: lax.switch(i, branches, x), np.int32(index), x)
        if mode == "jit":   # traced, the Python number 0.5 became f32 like branch 1's result
            assert out.dtype == np.float32
        np.testing.assert_allclose(out, 0.5 if index == 0 else x.max(), rtol=1e-6)


def cond_inside_while(x):
    """Halve positive entries' sum or add one, until the count reaches 5: a cond per step."""
    def body(c):
        total, n = c
        total = lax.cond(lax.gt(total, 0.0), lambda t: lax.mul(t, 0.5), lambda t: lax.add(t, 1.0), total)
        return total, lax.add(n, 1)
    return lax.while_loop(lambda c: lax.lt(c[1], 5), body, (lax.reduce_sum(x, (0,)), np.int32(0)))[0]


@pytest.mark.parametrize("mode", MODES)
def test_cond_inside_while_body(mode, rng):
    x = rng.standard_normal(6).astype(np.float32)
    total = float(x.astype(np.float64).sum())
    for _ in range(5):
        total = total * 0.5 if total > 0 else total + 1
    np.testing.assert_allclose(run(mode, cond_inside_while, x), total, rtol=1e-6, atol=1e-6)


# --- scan -----------------------------------------------------------------------------------------

def running_stats(init, xs, reverse):
    """Carry (sum, count) over a pytree of xs; ys a pytree (tuple holding a dict)."""
    def step(carry, x):
        total, count = carry
        total = lax.add(total, lax.mul(x["a"], x["b"]))
        count = lax.add(count, 1)
        return (total, count), (lax.reduce_max(total, (0,)), {"scaled": lax.mul(x["a"], 2.0)})
    return lax.scan(step, init, xs, reverse=reverse)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytree_xs_and_ys_forward_and_reverse(mode, reverse, rng):
    steps = int(rng.integers(2, 7))
    xs = {"a": rng.standard_normal((steps, 3)).astype(np.float32),
          "b": rng.standard_normal((steps, 1)).astype(np.float32)}
    init = (np.zeros(3, np.float32), np.int32(0))
    (total, count), (maxes, extra) = run(mode, running_stats, init, xs, reverse=reverse)
    ref_total, ref_maxes = np.zeros(3), np.zeros(steps)
    for i in (reversed(range(steps)) if reverse else range(steps)):
        ref_total = ref_total + xs["a"][i].astype(np.float64) * xs["b"][i]
        ref_maxes[i] = ref_total.max()
    assert count == steps
    np.testing.assert_allclose(total, ref_total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(maxes, ref_maxes, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(extra["scaled"], 2 * xs["a"], rtol=1e-6)


def fibonacci(length):
    return lax.scan(lambda c, _: ((c[1], lax.add(c[0], c[1])), c[0]), (np.int32(0), np.int32(1)), None,
                    length=length)


@pytest.mark.parametrize("mode", MODES)
def test_scan_without_xs_uses_length(mode, rng):
    length = int(rng.integers(3, 12))
    (a, _), ys = run(mode, fibonacci, length=length)
    ref = [0, 1]
    while len(ref) < length + 1:
        ref.append(ref[-1] + ref[-2])
    np.testing.assert_array_equal(ys, ref[:length])
    assert a == ref[length]


@pytest.mark.parametrize("mode", MODES)
def test_scan_of_length_zero_returns_init_and_empty_ys(mode):
    xs = np.zeros((0, 2), np.float32)
    carry, ys = run(mode, lambda c, xs: lax.scan(lambda c, x: (lax.add(c, x), lax.mul(x, 2.0)), c, xs),
                    np.ones(2, np.float32), xs)
    np.testing.assert_array_equal(carry, np.ones(2))
    assert ys.shape == (0, 2) and ys.dtype == np.float32


def nested_scans(x, w):
    """A scan whose body runs a scan, a cond and reductions, closing over w at depth two."""
    def outer(c, row):
        def inner(h, v):
            h = lax.tanh(lax.add(lax.mul(h, w), v))
            return h, lax.reduce_sum(h, (0,))
        h, sums = lax.scan(inner, c, lax.broadcast(row, (3,)))
        h = lax.cond(lax.gt(lax.reduce_max(sums, (0,)), 0.0), lambda: h, lambda: lax.neg(h))
        return h, lax.argmax(sums, 0)
    return lax.scan(outer, lax.full_like(w, 0.0), x)


@pytest.mark.parametrize("mode", MODES)
def test_scan_nested_in_scan_with_cond_and_reductions(mode, rng):
    x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    h, best = run(mode, nested_scans, x, w)
    ref_h, ref_best = np.zeros(5), []
    for row in x.astype(np.float64):
        sums = []
        for _ in range(3):
            ref_h = np.tanh(ref_h * w + row)
            sums.append(ref_h.sum())
        ref_h = ref_h if max(sums) > 0 else -ref_h
        ref_best.append(int(np.argmax(sums)))
    np.testing.assert_allclose(h, ref_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(best, ref_best)


def test_scan_lowers_to_while_with_dynamic_slices(rng):
    xs = {"a": np.ones((4, 3), np.float32), "b": np.ones((4, 1), np.float32)}
    text = pyxla.jit(running_stats, static_argnames="reverse").lower(
        (np.zeros(3, np.float32), np.int32(0)), xs, reverse=False).as_text()
    assert " while(" in text and "dynamic-slice(" in text and "dynamic-update-slice(" in text


# --- optimization_barrier -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_optimization_barrier_passes_pytrees_through(mode, rng):
    x = rng.standard_normal(3).astype(np.float32)
    out = run(mode, lambda x: lax.optimization_barrier({"a": x, "b": (lax.neg(x),)}), x)
    np.testing.assert_array_equal(out["a"], x)
    np.testing.assert_array_equal(out["b"][0], -x)


# --- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_while_body_returning_wrong_shape_is_named(mode):
    def grow(x):
        return lax.while_loop(lambda c: lax.lt(c[0], 3), lambda c: (lax.add(c[0], 1), lax.concatenate([c[1], c[1]], 0)),
                              (np.int32(0), x))
    with pytest.raises(TraceError, match=r"while_loop body returns f32\[8\] for carry leaf 1, expected f32\[4\]"
                                         r".*test_control_flow.py:\d+"):
        run(mode, grow, np.ones(4, np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_fori_body_changing_type_or_structure_is_named(mode):
    with pytest.raises(TraceError, match=r"fori_loop body returns s32\[2\] for carry leaf 0, expected f32\[2\]"):
        run(mode, lambda x: lax.fori_loop(0, 2, lambda i, v: lax.convert_element_type(v, np.int32), x),
            np.ones(2, np.float32))
    with pytest.raises(TraceError, match=r"fori_loop body returns a value of structure"):
        run(mode, lambda x: lax.fori_loop(0, 2, lambda i, v: (v, v), x), np.ones(2, np.float32))


def test_cond_branches_must_agree():
    def bad(x):
        return lax.cond(lax.gt(x[0], 0.0), lambda v: v, lambda v: lax.concatenate([v, v], 0), x)
    with pytest.raises(TraceError, match=r"cond: true_fun returns f32\[3\] for output leaf 0, but false_fun "
                                         r"returns f32\[6\]"):
        pyxla.jit(bad)(np.ones(3, np.float32))


def test_scan_body_must_return_a_pair():
    with pytest.raises(TraceError, match=r"scan body must return a pair \(carry, y\)"):
        pyxla.jit(lambda xs: lax.scan(lambda c, x: lax.add(c, x), np.float32(0), xs))(np.ones(3, np.float32))


def test_while_cond_must_return_a_pred_scalar():
    with pytest.raises(TraceError, match=r"cond_fun must return a pred\[\] scalar, got pred\[2\]"):
        pyxla.jit(lambda x: lax.while_loop(lambda v: lax.gt(v, 0.0), lambda v: v, x))(np.ones(2, np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_comparator_closing_over_a_traced_value_is_refused(mode):
    def sort_scaled(x, s):
        return lax.sort(x, comparator=lambda a, b: lax.lt(lax.mul(a, s), b))
    if mode == "eager":   # eagerly s is concrete, so the closure is just a constant
        out = sort_scaled(np.array([3.0, 1.0, 2.0], np.float32), np.float32(1))
        np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
        return
    with pytest.raises(TraceError, match=r"uses a value traced outside it.*test_control_flow.py:\d+"):
        pyxla.jit(sort_scaled)(np.ones(3, np.float32), np.float32(2))


def test_reducer_closing_over_a_traced_value_is_refused():
    with pytest.raises(TraceError, match="reducer and comparator functions must use only their arguments"):
        pyxla.jit(lambda x, s: lax.reduce(x, 0.0, lambda a, b: lax.add(a, lax.mul(b, s)), (0,)))(
            np.ones(3, np.float32), np.float32(2))


def test_custom_comparator_sorts_descending(rng):
    x = rng.standard_normal(7).astype(np.float32)
    out = pyxla.jit(lambda x: lax.sort(x, comparator=lambda a, b: lax.gt(a, b)))(x)
    np.testing.assert_array_equal(out, np.sort(x)[::-1])
