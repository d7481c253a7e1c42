"""pyxla.vmap's API: axes as pytree prefixes, composition with grad and jit, nesting,
control flow, JAX's errors, and a property test over random compositions."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn
from pyxla.batching import BATCH_RULES

HAVE_JAX = importlib.util.find_spec("jax") is not None


def stack(fn, *batched, axis=0):
    """fn run on each example of arrays batched along their axis 0, stacked along `axis`."""
    outs = [fn(*[b[i] for b in batched]) for i in range(len(batched[0]))]
    return pyxla.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs], axis), *outs)


# --- axes ---------------------------------------------------------------------------------------------

def test_in_axes_tuple_with_none_and_negative():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3, 5)), rng.standard_normal((5, 2))
    got = pyxla.vmap(lambda a, b: pnp.tanh(a @ b), in_axes=(-2, None))(x, w)
    want = stack(lambda a: np.tanh(a @ w), np.moveaxis(x, 1, 0))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_in_axes_dict_prefix_and_out_axes_tree():
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((2, 6, 3))   # mapped along axis 1

    def f(p, x):
        y = x @ p["w"] + p["b"]
        return {"y": y, "norm": pnp.sum(y ** 2)}

    got = pyxla.vmap(f, in_axes=({"w": None, "b": None}, 1), out_axes={"y": 1, "norm": 0})(params, xs)
    want = stack(lambda x: {k: np.asarray(v) for k, v in f(params, x).items()}, np.moveaxis(xs, 1, 0))
    np.testing.assert_allclose(got["y"], np.moveaxis(want["y"], 0, 1), rtol=1e-12)
    np.testing.assert_allclose(got["norm"], want["norm"], rtol=1e-12)


def test_list_in_axes_is_the_arguments_tuple():
    x, y = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    got = pyxla.vmap(lambda a, b: a * b, in_axes=[1, 0])(x, y)
    np.testing.assert_array_equal(got, (x * y).T)


def test_keyword_arguments_map_along_axis_0():
    got = pyxla.vmap(lambda x, scale: x * scale, in_axes=None)(np.ones(2), scale=np.arange(3.0))
    np.testing.assert_array_equal(got, np.arange(3.0)[:, None] * np.ones(2))


def test_unbatched_output_is_broadcast_or_kept_with_out_axes_none():
    x = np.arange(3.0)
    got = pyxla.vmap(lambda a, c: (a * 2, c + 1), in_axes=(0, None), out_axes=(0, None))(x, np.float64(5))
    np.testing.assert_array_equal(got[0], x * 2)
    assert np.asarray(got[1]) == 6
    got = pyxla.vmap(lambda a, c: c + 1, in_axes=(0, None), out_axes=1)(x, np.ones(2))
    np.testing.assert_array_equal(got, np.full((2, 3), 2.0))


def test_axis_size_with_no_mapped_argument():
    got = pyxla.vmap(lambda c: c * 2, in_axes=None, axis_size=4)(np.float32(1.5))
    np.testing.assert_array_equal(got, np.full(4, 3.0, np.float32))


# --- composition --------------------------------------------------------------------------------------

def mlp_loss(params, x, label):
    h = pnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return -nn.log_softmax(logits)[label]


def mlp_params(rng):
    return {"w1": rng.standard_normal((4, 8)) * 0.5, "b1": rng.standard_normal(8) * 0.1,
            "w2": rng.standard_normal((8, 3)) * 0.5}


def test_per_example_gradients_equal_the_loop():
    rng = np.random.default_rng(2)
    params, xs, labels = mlp_params(rng), rng.standard_normal((5, 4)), rng.integers(0, 3, 5)
    per_example = pyxla.vmap(pyxla.grad(mlp_loss), in_axes=(None, 0, 0))
    got = per_example(params, xs, labels)
    want = [pyxla.grad(mlp_loss)(params, xs[i], labels[i]) for i in range(5)]
    for k in params:
        np.testing.assert_allclose(got[k], np.stack([w[k] for w in want]), rtol=1e-10, atol=1e-12)
    jitted = pyxla.jit(per_example)(params, xs, labels)
    for k in params:
        np.testing.assert_allclose(jitted[k], got[k], rtol=1e-10, atol=1e-12)


def test_grad_of_vmap_and_vmap_of_jit():
    rng = np.random.default_rng(3)
    params, xs, labels = mlp_params(rng), rng.standard_normal((5, 4)), rng.integers(0, 3, 5)

    def batch_loss(p):
        return pnp.mean(pyxla.vmap(mlp_loss, in_axes=(None, 0, 0))(p, xs, labels))

    got = pyxla.grad(batch_loss)(params)
    want = [pyxla.grad(mlp_loss)(params, xs[i], labels[i]) for i in range(5)]
    for k in params:
        np.testing.assert_allclose(got[k], np.mean([w[k] for w in want], axis=0), rtol=1e-10, atol=1e-12)
    jitted_loss = pyxla.jit(mlp_loss)
    got = pyxla.vmap(jitted_loss, in_axes=(None, 0, 0))(params, xs, labels)
    np.testing.assert_allclose(got, [mlp_loss(params, xs[i], labels[i]) for i in range(5)], rtol=1e-12)


def test_grad_of_vmap_keeps_stop_gradient():
    def f(x):
        return pnp.sum(pyxla.vmap(lambda v: v * pyxla.stop_gradient(v))(x))

    x = np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_allclose(pyxla.grad(f)(x), x)            # d/dx x * const(x) = x
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(f))(x), x)


def test_nested_vmap_is_an_outer_product():
    x, y = np.arange(3.0), np.arange(4.0) + 1
    f = pyxla.vmap(pyxla.vmap(lambda a, b: pnp.sin(a) * b, in_axes=(None, 0)), in_axes=(0, None))
    np.testing.assert_allclose(f(x, y), np.sin(x)[:, None] * y[None, :], rtol=1e-12)
    np.testing.assert_allclose(pyxla.jit(f)(x, y), np.sin(x)[:, None] * y[None, :], rtol=1e-12)


def test_jit_of_vmap_is_one_program():
    f = pyxla.jit(pyxla.vmap(lambda x: pnp.sum(x ** 2)))
    text = f.lower(np.ones((3, 4), np.float32)).as_text()
    assert "f32[3,4]" in text and "vmap(" in text
    np.testing.assert_allclose(f(np.ones((3, 4), np.float32)), [4.0, 4.0, 4.0])


def test_vmap_of_scan_fori_loop_and_cond():
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((3, 5))

    def running(x):
        return lax.scan(lambda c, v: (c + v, c * v), 0.0, x)

    got = pyxla.vmap(running)(xs)
    want = stack(running, xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)

    def power_steps(x):   # a trip count that differs per example: a batched predicate
        return lax.while_loop(lambda c: c[1] < 10.0, lambda c: (c[0] + 1, c[1] * 2.0), (0, pnp.abs(x[0]) + 0.1))

    got = pyxla.jit(pyxla.vmap(power_steps))(xs)
    want = stack(power_steps, xs)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)

    def fori(x):
        return lax.fori_loop(0, 4, lambda i, c: c * 0.5 + x[i], 0.0)

    np.testing.assert_allclose(pyxla.vmap(fori)(xs), stack(fori, xs), rtol=1e-12)

    def branchy(x):
        return lax.cond(x[0] > 0, lambda v: pnp.sum(v), lambda v: pnp.max(v) * 3.0, x)

    np.testing.assert_allclose(pyxla.vmap(branchy)(xs), stack(branchy, xs), rtol=1e-12)


def test_random_keys_batched_and_shared():
    keys = pyxla.random.split(pyxla.random.PRNGKey(0), 3)
    got = pyxla.vmap(lambda k: pyxla.random.normal(k, (2,)))(keys)
    want = stack(lambda k: pyxla.random.normal(k, (2,)), np.asarray(keys))
    np.testing.assert_array_equal(got, want)
    key = pyxla.random.PRNGKey(1)
    same = pyxla.vmap(lambda k, x: pyxla.random.uniform(k, (2,)) + x, in_axes=(None, 0))(key, np.zeros(3))
    np.testing.assert_array_equal(same[0], same[1])


# --- errors -------------------------------------------------------------------------------------------

def test_inconsistent_sizes():
    with pytest.raises(ValueError, match="vmap got inconsistent sizes for array axes to be mapped:\n"
                                         r"  \* one axis had size 2: axis 0 of argument args\[0\] of type float64\[2\];\n"
                                         r"  \* one axis had size 3: axis 1 of argument args\[1\] of type float64\[2,3\]"):
        pyxla.vmap(lambda a, b: a, in_axes=(0, 1))(np.zeros(2), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"most axes \(2 of them\) had size 3"):
        pyxla.vmap(lambda a, b, c: a)(np.zeros(3), np.zeros(3), np.zeros(4))


def test_bad_in_axes():
    with pytest.raises(ValueError, match=r"got len\(in_axes\)=2, len\(args\)=3"):
        pyxla.vmap(lambda a, b, c: a, in_axes=(0, 0))(np.zeros(2), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="in_axes specification must be a tree prefix of the corresponding value"):
        pyxla.vmap(lambda p: p["a"], in_axes=({"a": 0, "b": 0},))({"a": np.zeros(2)})
    with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or \\(nested\\) container"):
        pyxla.vmap(lambda a: a, in_axes="x")
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        pyxla.vmap(lambda a: a, in_axes=None)(np.zeros(2))


def test_axes_out_of_range():
    with pytest.raises(ValueError, match="vmap was requested to map its argument along axis 2, which implies that "
                                         r"its rank should be at least 3, but is only 2 \(its shape is \(2, 3\)\)"):
        pyxla.vmap(lambda a: a, in_axes=2)(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="axis 0, which implies that its rank should be at least 1, but is only 0"):
        pyxla.vmap(lambda a: a)(np.float64(1.0))
    with pytest.raises(ValueError, match="vmap out_axes 3 is out of range for an output of rank 2"):
        pyxla.vmap(lambda a: a, out_axes=3)(np.zeros((2, 3)))


def test_out_axes_none_on_a_batched_output():
    with pytest.raises(ValueError, match="vmap has mapped output but out_axes is None"):
        pyxla.vmap(lambda a: a * 2, out_axes=None)(np.zeros(3))


def test_missing_rule_names_opcode_vmap_and_line(monkeypatch):
    monkeypatch.delitem(BATCH_RULES, "tanh")

    def f(a):
        return pnp.tanh(a) * 2

    for run in (pyxla.vmap(f), pyxla.jit(pyxla.vmap(f))):
        with pytest.raises(NotImplementedError) as info:
            run(np.zeros(3))
        message = str(info.value)
        assert "vmap of HLO opcode 'tanh'" in message and "no batching rule" in message
        assert f"test_vmap.py:{f.__code__.co_firstlineno + 1}" in message


def test_batched_reduction_init_is_refused():
    with pytest.raises(NotImplementedError, match="vmap of HLO opcode 'reduce' with init values that differ"):
        pyxla.vmap(lambda x, i: lax.reduce(x, i, lax.add, (0,)))(np.ones((2, 3)), np.zeros(2))


# --- property -----------------------------------------------------------------------------------------

UNARY = [pnp.tanh, pnp.sin, lambda v: v * 2.0 + 1.0, pnp.abs, lambda v: pnp.exp(-v * v)]
REDUCE = [lambda v, a: pnp.sum(v, axis=a), lambda v, a: pnp.max(v, axis=a), lambda v, a: pnp.mean(v, axis=a)]


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), size=st.integers(1, 3),
       data=st.data())
def test_property_vmap_equals_stacking(shape, size, data):
    ops = data.draw(st.lists(st.integers(0, len(UNARY) - 1), min_size=1, max_size=3))
    reduce_op = data.draw(st.integers(0, len(REDUCE) - 1))
    reduce_axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    in_axis = data.draw(st.integers(-(len(shape) + 1), len(shape)))
    out_axis = data.draw(st.integers(-len(shape), len(shape) - 1))

    def f(x, y):
        for k in ops:
            x = UNARY[k](x) * y
        return REDUCE[reduce_op](x, reduce_axis)

    rng = np.random.default_rng(len(ops) * 7 + size)
    xs = rng.standard_normal((size, *shape))
    y = rng.standard_normal(shape[-1])
    got = pyxla.vmap(f, in_axes=(in_axis, None), out_axes=out_axis)(np.moveaxis(xs, 0, in_axis), y)
    want = np.moveaxis(stack(lambda x: f(x, y), xs), 0, out_axis)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not HAVE_JAX, reason="JAX is not installed")
def test_against_jax():
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    got = pyxla.vmap(lambda a, b: pnp.tanh(a @ b), in_axes=(1, None), out_axes=1)(x.T.copy(), w)
    want = jax.vmap(lambda a, b: jnp.tanh(a @ b), in_axes=(1, None), out_axes=1)(x.T.copy(), w)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)
