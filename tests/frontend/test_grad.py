"""pyxla.grad, value_and_grad, vjp, jvp, linearize and stop_gradient: the API (pytrees, argnums,
has_aux, integer arguments), composition with jit in both orders, higher derivatives, a
training step's gradient against a hand-written NumPy backward pass, random compositions
of elementwise functions against finite differences, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn
from pyxla.hlo import evaluate_module, flatten_result, parse_module, verify_module

from .gradient_testing import assert_trees_close, check_grads, numerical_grad

# --- random compositions of elementwise functions ------------------------------------------

UNARY = [
    ("sin", pnp.sin), ("cos", pnp.cos), ("tanh", pnp.tanh), ("sigmoid", nn.sigmoid), ("erf", lax.erf),
    ("exp(tanh)", lambda a: pnp.exp(pnp.tanh(a))), ("square", lambda a: a * a),
    ("log1p(a^2)", lambda a: pnp.log1p(a * a)), ("sqrt(1+a^2)", lambda a: pnp.sqrt(1 + a * a)),
    ("neg", pnp.negative), ("expm1(sin)", lambda a: pnp.expm1(pnp.sin(a))),
    ("rsqrt(2+cos)", lambda a: lax.rsqrt(2 + pnp.cos(a))), ("atan2(a,2)", lambda a: pnp.arctan2(a, 2.0)),
]
BINARY = [
    ("+", pnp.add), ("-", pnp.subtract), ("*", pnp.multiply),
    ("/(1+b^2)", lambda a, b: a / (1 + b * b)), ("power", lambda a, b: pnp.power(1.5 + pnp.sin(a), pnp.cos(b))),
]


def random_expression(rng, depth):
    """(description, function of (x, y)) built from UNARY and BINARY: smooth everywhere."""
    if depth == 0 or rng.random() < 0.2:
        k = int(rng.integers(2))
        return "xy"[k], (lambda x, y, k=k: (x, y)[k])
    if rng.random() < 0.5:
        name, op = UNARY[int(rng.integers(len(UNARY)))]
        text, inner = random_expression(rng, depth - 1)
        return f"{name}({text})", (lambda x, y: op(inner(x, y)))
    name, op = BINARY[int(rng.integers(len(BINARY)))]
    (lt, left), (rt, right) = random_expression(rng, depth - 1), random_expression(rng, depth - 1)
    return f"({lt} {name} {rt})", (lambda x, y: op(left(x, y), right(x, y)))


def test_random_elementwise_compositions_against_finite_differences(rng):
    for i in range(12):
        text, fn = random_expression(rng, 4)
        x, y = rng.standard_normal(5), rng.standard_normal(5)
        try:
            check_grads(fn, (x, y), rng, rtol=1e-5, atol=1e-7, jit=i < 3)
            gx = pyxla.grad(lambda a, b: pnp.sum(fn(a, b)))(x, y)
            np.testing.assert_allclose(gx, numerical_grad(lambda a: np.sum(fn(a, y)), x), rtol=1e-5, atol=1e-7)
        except AssertionError as e:
            raise AssertionError(f"f(x, y) = {text}: {e}") from None


# --- pytrees, argnums, has_aux -------------------------------------------------------------

def _params(rng):
    return {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4), "layers": [rng.standard_normal(4)]}


def _loss(params, x, scale=1.0):
    h = pnp.tanh(x @ params["w"] + params["b"]) * params["layers"][0]
    return scale * pnp.sum(h * h)


def test_grad_of_a_dict_of_parameters_has_their_structure(rng):
    params, x = _params(rng), rng.standard_normal((5, 3))
    grads = pyxla.grad(_loss)(params, x)
    assert set(grads) == {"w", "b", "layers"} and isinstance(grads["layers"], list)
    for key in ("w", "b"):
        def along(value, key=key):
            return _loss({**params, key: value}, x)
        np.testing.assert_allclose(grads[key], numerical_grad(along, params[key]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grads["layers"][0],
                               numerical_grad(lambda v: _loss({**params, "layers": [v]}, x), params["layers"][0]),
                               rtol=1e-6, atol=1e-8)


def test_argnums_tuple_keyword_arguments_and_value_and_grad(rng):
    params, x = _params(rng), rng.standard_normal((5, 3))
    value, (g_params, g_x) = pyxla.value_and_grad(_loss, argnums=(0, 1))(params, x, scale=2.0)
    np.testing.assert_allclose(value, _loss(params, x, 2.0), rtol=1e-12)
    assert_trees_close(g_params, pyxla.grad(_loss)(params, x, scale=2.0), 1e-12, 0, "argnums (0, 1)")
    np.testing.assert_allclose(g_x, numerical_grad(lambda v: _loss(params, v, 2.0), x), rtol=1e-6, atol=1e-8)
    g_last = pyxla.grad(lambda a, b: pnp.sum(a * b * b), argnums=-1)(x, x)
    np.testing.assert_allclose(g_last, 2 * x * x)


def test_has_aux(rng):
    x = rng.standard_normal(4)

    def f(a):
        return pnp.sum(pnp.sin(a)), {"cos": pnp.cos(a), "n": 3}

    g, aux = pyxla.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g, np.cos(x))
    np.testing.assert_allclose(aux["cos"], np.cos(x))
    (value, aux), g2 = pyxla.value_and_grad(f, has_aux=True)(x)
    np.testing.assert_allclose(value, np.sin(x).sum())
    np.testing.assert_allclose(g2, g)
    out, vjp_fn, aux = pyxla.vjp(lambda a: (pnp.exp(a), a * 2), x, has_aux=True)
    np.testing.assert_allclose(vjp_fn(np.ones(4))[0], np.exp(x))
    with pytest.raises(TypeError, match="has_aux=True needs the function to return a pair"):
        pyxla.grad(lambda a: pnp.sum(a), has_aux=True)(x)


def test_vjp_jvp_and_linearize_on_pytrees(rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)

    def f(pair):
        a, b = pair
        return {"p": a * b, "s": pnp.sin(a)}

    out, vjp_fn = pyxla.vjp(f, (x, y))
    (ga, gb), = vjp_fn({"p": np.ones(3), "s": np.full(3, 2.0)})
    np.testing.assert_allclose(ga, y + 2 * np.cos(x))
    np.testing.assert_allclose(gb, x)
    out2, tangent = pyxla.jvp(f, ((x, y),), ((np.ones(3), np.zeros(3)),))
    assert_trees_close(out2, out, 1e-12, 0, "jvp primal")
    np.testing.assert_allclose(tangent["p"], y)
    np.testing.assert_allclose(tangent["s"], np.cos(x))
    out3, f_jvp = pyxla.linearize(f, (x, y))
    assert_trees_close(f_jvp((np.ones(3), np.zeros(3))), tangent, 1e-12, 0, "linearize")
    with pytest.raises(TypeError, match="structure"):
        vjp_fn(np.ones(3))
    with pytest.raises(ValueError, match="must match"):
        vjp_fn({"p": np.ones(4), "s": np.ones(3)})


def test_integer_arguments_get_float0_cotangents(rng):
    x, n = rng.standard_normal(3), np.array([1, 2, 3], np.int32)
    f = lambda a, k: pnp.sum(a * k)   # noqa: E731
    with pytest.raises(TypeError, match="floating-point types"):
        pyxla.grad(f, argnums=1)(x, n)
    g_x, g_n = pyxla.grad(f, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_allclose(g_x, n)
    assert g_n.dtype == pyxla.float0 and g_n.shape == (3,)
    _, vjp_fn = pyxla.vjp(f, x, n)
    assert vjp_fn(1.0)[1].dtype == pyxla.float0
    # under jit, float0 results are structure of the result tree, not arrays of the program
    g_x2, g_n2 = pyxla.jit(pyxla.grad(f, argnums=(0, 1), allow_int=True))(x, n)
    np.testing.assert_allclose(g_x2, n)
    assert g_n2.dtype == pyxla.float0
    primal, tangent = pyxla.jvp(lambda a, k: a * k, (x, n), (np.ones(3), np.zeros(3, pyxla.float0)))
    np.testing.assert_allclose(tangent, n)


def test_grad_refuses_non_scalar_and_integer_outputs(rng):
    x = rng.standard_normal(3)
    with pytest.raises(TypeError, match="scalar output"):
        pyxla.grad(pnp.sin)(x)
    with pytest.raises(TypeError, match="floating-point"):
        pyxla.grad(lambda a: pnp.sum(a > 0))(x)


def test_python_scalar_arguments():
    assert float(pyxla.grad(lambda a: a * a * a)(2.0)) == 12.0
    assert float(pyxla.grad(lambda a, b: a * b, argnums=1)(3.0, 2.0)) == 3.0


# --- jit in both orders ------------------------------------------------------------------------

def _mlp_loss(params, x, onehot):
    h = pnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -pnp.mean(pnp.sum(onehot * nn.log_softmax(logits), axis=-1))


def _mlp_backward(params, x, onehot):
    """The gradient of _mlp_loss, written out in NumPy."""
    h = np.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    d_logits = (p - onehot) / x.shape[0]
    d_h = d_logits @ params["w2"].T
    d_z = d_h * (1 - h * h)
    return {"w1": x.T @ d_z, "b1": d_z.sum(0), "w2": h.T @ d_logits, "b2": d_logits.sum(0)}


@pytest.fixture
def mlp(rng):
    params = {"w1": rng.standard_normal((6, 8)) * 0.5, "b1": rng.standard_normal(8) * 0.1,
              "w2": rng.standard_normal((8, 4)) * 0.5, "b2": rng.standard_normal(4) * 0.1}
    x = rng.standard_normal((10, 6))
    onehot = np.eye(4)[rng.integers(0, 4, 10)]
    return params, x, onehot


def test_mlp_gradient_against_a_numpy_backward_pass(mlp):
    params, x, onehot = mlp
    want = _mlp_backward(params, x, onehot)
    assert_trees_close(pyxla.grad(_mlp_loss)(params, x, onehot), want, 1e-10, 1e-12, "eager grad")
    jitted = pyxla.jit(pyxla.grad(_mlp_loss))
    assert_trees_close(jitted(params, x, onehot), want, 1e-10, 1e-12, "jit(grad)")
    value, grads = pyxla.value_and_grad(pyxla.jit(_mlp_loss))(params, x, onehot)
    assert_trees_close(grads, want, 1e-10, 1e-12, "grad(jit)")
    np.testing.assert_allclose(value, _mlp_loss(params, x, onehot), rtol=1e-12)


def test_float32_training_steps_under_jit(mlp):
    params, x, onehot = pyxla.tree_map(lambda a: np.asarray(a, np.float32), mlp)

    @pyxla.jit
    def step(p, x, onehot):
        loss, g = pyxla.value_and_grad(_mlp_loss)(p, x, onehot)
        return loss, pyxla.tree_map(lambda w, d: w - 0.5 * d, p, g)

    losses = []
    for _ in range(5):
        loss, params = step(params, x, onehot)
        losses.append(float(loss))
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert step.trace_count == 1
    want = _mlp_backward(pyxla.tree_map(lambda a: a.astype(np.float64), params), x.astype(np.float64),
                         onehot.astype(np.float64))
    got = pyxla.jit(pyxla.grad(_mlp_loss))(params, x, onehot)
    assert_trees_close(got, want, 2e-4, 2e-6, "float32 jit(grad)")
    assert all(g.dtype == np.float32 for g in pyxla.tree_flatten(got)[0])


def test_the_backward_pass_is_ordinary_hlo(mlp):
    params, x, onehot = mlp
    lowered = pyxla.jit(pyxla.grad(_mlp_loss)).lower(params, x, onehot)
    text = lowered.as_text()
    module = parse_module(text)
    verify_module(module)
    assert "transpose(jvp(_mlp_loss))" in text and "jvp(_mlp_loss)/tanh" in text
    assert "custom-call" not in text
    leaves = pyxla.tree_flatten((params, x, onehot))[0]
    outs = flatten_result(evaluate_module(module, leaves))
    want = pyxla.tree_flatten(_mlp_backward(params, x, onehot))[0]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)
    compiled = lowered.compile().as_text()
    assert "fusion" in compiled


def test_jit_inside_grad_inside_jit(rng):
    x = rng.standard_normal(4)
    inner = pyxla.jit(lambda a: pnp.sum(pnp.sin(a) ** 2))
    outer = pyxla.jit(lambda a: pyxla.grad(inner)(a) * 2)
    np.testing.assert_allclose(outer(x), 4 * np.sin(x) * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(inner), backend="interpreter")(x), 2 * np.sin(x) * np.cos(x))


# --- higher derivatives and closures -----------------------------------------------------------

def test_second_derivatives(rng):
    x = rng.standard_normal(5)
    d2 = pyxla.grad(lambda a: pnp.sum(pyxla.grad(lambda b: pnp.sum(pnp.tanh(b)))(a)))(x)
    t = np.tanh(x)
    np.testing.assert_allclose(d2, -2 * t * (1 - t * t), rtol=1e-10)
    check_grads(pyxla.grad(lambda a: pnp.sum(nn.softmax(a) * a)), (rng.standard_normal((2, 4)),), rng,
                rtol=1e-5, atol=1e-7, jit=True)


def test_second_derivatives_through_pooling_and_gathers(rng):
    x = rng.standard_normal((2, 6, 6))
    check_grads(pyxla.grad(lambda a: pnp.sum(lax.reduce_window_max(a, (1, 2, 2), (1, 1, 1), "VALID") ** 2)), (x,), rng,
                rtol=1e-5, atol=1e-7, jit=True)
    check_grads(pyxla.grad(lambda a: pnp.sum(a[np.array([0, 1, 1])] ** 3)), (x,), rng, rtol=1e-5, atol=1e-7)


def test_closures_over_traced_values_are_differentiated(rng):
    x = rng.standard_normal(4)
    # d/dx of sum(d/dy sum(x y^3) at y = x) = d/dx sum(3 x^3) = 9 x^2
    h = pyxla.grad(lambda a: pnp.sum(pyxla.grad(lambda b: pnp.sum(a * b ** 3))(a)))
    np.testing.assert_allclose(h(x), 9 * x * x, rtol=1e-12)
    np.testing.assert_allclose(pyxla.jit(h, backend="interpreter")(x), 9 * x * x, rtol=1e-12)


# --- stop_gradient -------------------------------------------------------------------------------

def test_stop_gradient(rng):
    x = rng.standard_normal(4)
    f = lambda a: pnp.sum(a * pyxla.stop_gradient(a))   # noqa: E731
    np.testing.assert_allclose(pyxla.grad(f)(x), x)
    np.testing.assert_allclose(pyxla.jit(pyxla.grad(f))(x), x)
    tree = lax.stop_gradient({"a": x, "n": 3})
    assert tree["n"] == 3 and tree["a"] is x
    # a stop inside a function differentiated twice stops both derivatives
    g2 = pyxla.grad(lambda a: pnp.sum(pyxla.grad(lambda b: pnp.sum(b * b * lax.stop_gradient(b)))(a)))(x)
    np.testing.assert_allclose(g2, 2 * x)
    text = pyxla.jit(f).lower(x).as_text()
    assert 'op_name="jit(lambda)/stop_gradient/copy"' in text


# --- refusals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opcode, fn", [
    ("reduce-window", lambda a: pnp.sum(lax.reduce_window(a, np.array(0.0), lax.atan2, (2,), (1,), "VALID"))),
    ("reduce", lambda a: lax.reduce((a, a), (0.0, 1.0), lambda x, y: (x[0] + y[0], x[1] * y[1]), (0,))[1]),
])
def test_opcodes_without_rules_are_refused_at_trace_time(opcode, fn, rng):
    x = rng.standard_normal(4)
    with pytest.raises(NotImplementedError, match=rf"differentiation \(jvp\) of HLO opcode '{opcode}'") as info:
        pyxla.grad(fn)(x)
    assert "test_grad.py" in str(info.value)
    with pytest.raises(NotImplementedError, match=f"'{opcode}'"):
        pyxla.jit(pyxla.grad(fn)).lower(x)


def test_values_not_differentiated_need_no_rule(rng):
    x = rng.standard_normal((3, 5))
    # argmax reduces (value, index) pairs, which has no rule, and argsort's permutation is an
    # integer: neither is on the differentiated path here.
    f = lambda a: pnp.sum(a[np.arange(3), pnp.argmax(a, axis=1)]) + pnp.sum(pnp.argsort(a, axis=1) * 0.0)  # noqa: E731
    want = np.zeros_like(x)
    want[np.arange(3), x.argmax(1)] = 1
    np.testing.assert_allclose(pyxla.grad(f)(x), want)
