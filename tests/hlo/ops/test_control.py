"""call, fusion, while, conditional, opt-barrier and custom-call against Python references."""
import numpy as np
import pytest

from pyxla.hlo import (
    F32,
    PRED,
    S32,
    HloBuilder,
    TupleShape,
    array,
    evaluate_module,
    scalar,
    verify_module,
)


def _build_and_check(b, root):
    module = b.module(root)
    verify_module(module)
    return module


def test_call_applies_computation(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    inner = HloBuilder("mul_exp")
    a = inner.parameter(array(F32, 3, 4), "a")
    c = inner.parameter(array(F32, 3, 4), "c")
    callee = inner.build(inner.op("exponential", inner.op("multiply", a, c)))
    b = HloBuilder("entry")
    px, py = b.parameter(array(F32, 3, 4), "x"), b.parameter(array(F32, 3, 4), "y")
    module = _build_and_check(b, b.op("call", px, py, to_apply=callee))
    np.testing.assert_allclose(evaluate_module(module, [x, y]), np.exp(x.astype(np.float64) * y), rtol=1e-6)


def test_fusion_evaluates_its_computation(rng):
    x = rng.standard_normal(7).astype(np.float32)
    fused = HloBuilder("fused_computation")
    p = fused.parameter(array(F32, 7), "param_0")
    comp = fused.build(fused.op("tanh", fused.op("negate", p)))
    comp.is_fusion_computation = True
    b = HloBuilder("entry")
    px = b.parameter(array(F32, 7), "x")
    module = _build_and_check(b, b.op("fusion", px, kind="kLoop", calls=comp))
    np.testing.assert_allclose(evaluate_module(module, [x]), np.tanh(-x.astype(np.float64)), rtol=1e-6)


def _counting_loop():
    """while (i < n) { acc = acc * 2 + x; i += 1 } over state (i, n, acc)."""
    state = TupleShape((scalar(S32), scalar(S32), array(F32, 5)))
    cond = HloBuilder("cond")
    s = cond.parameter(state, "s")
    i = cond.op("get-tuple-element", s, index=0)
    n = cond.op("get-tuple-element", s, index=1)
    cond_comp = cond.build(cond.op("compare", i, n, direction="LT", shape=scalar(PRED)))

    body = HloBuilder("body")
    s = body.parameter(state, "s")
    i = body.op("get-tuple-element", s, index=0)
    n = body.op("get-tuple-element", s, index=1)
    acc = body.op("get-tuple-element", s, index=2)
    one = body.constant(np.int32(1))
    two = body.op("broadcast", body.constant(np.float32(2)), dimensions=(), shape=array(F32, 5))
    half = body.op("broadcast", body.constant(np.float32(0.5)), dimensions=(), shape=array(F32, 5))
    new_acc = body.op("add", body.op("multiply", acc, two), half)
    body_comp = body.build(body.tuple(body.op("add", i, one), n, new_acc))

    b = HloBuilder("entry")
    n = b.parameter(scalar(S32), "n")
    x = b.parameter(array(F32, 5), "x")
    start = b.tuple(b.constant(np.int32(0)), n, x)
    loop = b.op("while", start, condition=cond_comp, body=body_comp)
    return _build_and_check(b, b.op("get-tuple-element", loop, index=2))


@pytest.mark.parametrize("trips", [0, 1, 6])
def test_while_matches_python_loop(rng, trips):
    module = _counting_loop()
    x = rng.standard_normal(5).astype(np.float32)
    expected = x.astype(np.float64)
    for _ in range(trips):
        expected = expected * 2 + 0.5
    np.testing.assert_allclose(evaluate_module(module, [np.int32(trips), x]), expected, rtol=1e-6)


def _branch(name, opcode):
    bb = HloBuilder(name)
    return bb.build(bb.op(opcode, bb.parameter(array(F32, 4), "v")))


def test_conditional_on_predicate(rng):
    b = HloBuilder("entry")
    p = b.parameter(scalar(PRED), "p")
    x = b.parameter(array(F32, 4), "x")
    r = b.op("conditional", p, x, x, true_computation=_branch("t", "sine"),
             false_computation=_branch("f", "cosine"))
    module = _build_and_check(b, r)
    v = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(evaluate_module(module, [np.bool_(True), v]), np.sin(v.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(evaluate_module(module, [np.bool_(False), v]), np.cos(v.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("index,expected", [(0, np.sin), (1, np.cos), (2, np.tanh), (-1, np.tanh), (7, np.tanh)])
def test_conditional_branch_index_out_of_range_runs_last(rng, index, expected):
    b = HloBuilder("entry")
    i = b.parameter(scalar(S32), "i")
    x = b.parameter(array(F32, 4), "x")
    branches = (_branch("b0", "sine"), _branch("b1", "cosine"), _branch("b2", "tanh"))
    module = _build_and_check(b, b.op("conditional", i, x, x, x, branch_computations=branches))
    v = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(evaluate_module(module, [np.int32(index), v]), expected(v.astype(np.float64)),
                               rtol=1e-6)


def test_opt_barrier_and_sharding_are_identities(rng):
    b = HloBuilder("entry")
    x = b.parameter(array(F32, 3), "x")
    barrier = b.op("opt-barrier", b.tuple(x))
    inner = b.op("get-tuple-element", barrier, index=0)
    out = b.op("custom-call", inner, custom_call_target="Sharding", sharding="{replicated}", shape=array(F32, 3))
    module = _build_and_check(b, out)
    v = rng.standard_normal(3).astype(np.float32)
    assert np.array_equal(evaluate_module(module, [v]), v)


def test_unknown_custom_call_target_is_not_implemented(rng):
    b = HloBuilder("entry")
    x = b.parameter(array(F32, 3), "x")
    module = _build_and_check(b, b.op("custom-call", x, custom_call_target="my_kernel", shape=array(F32, 3)))
    with pytest.raises(NotImplementedError, match="custom-call target 'my_kernel' is not supported"):
        evaluate_module(module, [rng.standard_normal(3).astype(np.float32)])
