"""pyxla.jit: trace once per signature, cache, static arguments, lowering and errors."""
import functools
from collections import namedtuple

import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.errors import ArgumentError, ConcretizationError, TraceError
from pyxla.hlo import evaluate_module, parse_module, verify_module


def counting(fn):
    """`fn` plus a counter of how often Python ran it (that is, traced it)."""
    calls = {"n": 0}

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        calls["n"] += 1
        return fn(*args, **kwargs)

    return wrapped, calls


def scaled_exp(x, y):
    return lax.mul(lax.exp(x), y)


def test_traced_once_for_one_signature(rng):
    fn, calls = counting(scaled_exp)
    f = pyxla.jit(fn)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    for _ in range(100):
        out = f(x, y)
    assert calls["n"] == 1
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64)) * y, rtol=1e-6)


def test_new_shape_or_dtype_retraces_once(rng):
    fn, calls = counting(scaled_exp)
    f = pyxla.jit(fn)
    a = rng.standard_normal((2, 2)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    c = rng.standard_normal((5,))
    for _ in range(3):
        f(a, a)
        f(b, b)
        out = f(c, c)
    assert calls["n"] == 3
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, np.exp(c) * c, rtol=1e-12)


def test_static_arguments_key_the_cache_by_value(rng):
    def power(x, n):
        out = x
        for _ in range(n - 1):   # Python control flow on a static value
            out = lax.mul(out, x)
        return out

    fn, calls = counting(power)
    f = pyxla.jit(fn, static_argnums=1)
    x = rng.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(f(x, 3), x.astype(np.float64) ** 3, rtol=1e-5)
    np.testing.assert_allclose(f(x, 3), x.astype(np.float64) ** 3, rtol=1e-5)
    np.testing.assert_allclose(f(x, n=4), x.astype(np.float64) ** 4, rtol=1e-5)
    assert calls["n"] == 2
    g = pyxla.jit(power, static_argnames="n")
    np.testing.assert_allclose(g(x, n=2), x.astype(np.float64) ** 2, rtol=1e-5)


def test_static_argument_must_be_hashable(rng):
    f = pyxla.jit(lambda x, opts: x, static_argnums=1)
    with pytest.raises(ArgumentError, match="static argument 1 of <lambda> must be hashable, got dict"):
        f(np.ones(2), {"a": 1})


Params = namedtuple("Params", "w b")


def test_pytree_arguments_and_results(rng):
    def layer(params, inputs):
        h = lax.add(lax.dot(inputs["x"], params.w), params.b)
        return {"out": h, "aux": (None, lax.tanh(h))}

    f = pyxla.jit(layer)
    p = Params(rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    out = f(p, {"x": x})
    ref = x.astype(np.float64) @ p.w + p.b
    terms = np.abs(x.astype(np.float64)) @ np.abs(p.w) + np.abs(p.b)   # an f32 sum that cancels is off by ~eps of these
    assert set(out) == {"out", "aux"} and out["aux"][0] is None
    np.testing.assert_allclose(out["out"], ref, rtol=1e-5, atol=1e-6 * terms.max())
    np.testing.assert_allclose(out["aux"][1], np.tanh(ref), rtol=1e-5, atol=1e-6 * terms.max())


def test_python_scalars_are_weakly_typed(rng):
    f = pyxla.jit(lambda x, s: lax.mul(x, s))
    x = rng.standard_normal(5).astype(np.float32)
    out = f(x, 2.5)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x * 2.5, rtol=1e-6)


def test_lower_gives_hlo_text_that_parses_back(rng):
    f = pyxla.jit(scaled_exp)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    lowered = f.lower(x, y)
    text = lowered.as_text()
    assert "exponential" in text and "multiply" in text
    module = parse_module(text)
    verify_module(module)
    np.testing.assert_allclose(evaluate_module(module, [x, y]), np.exp(x.astype(np.float64)) * y, rtol=1e-6)
    compiled = lowered.compile()
    np.testing.assert_allclose(compiled(x, y), np.exp(x.astype(np.float64)) * y, rtol=1e-6)
    assert "exponential" in compiled.as_text()


def test_metadata_points_at_user_source(rng):
    f = pyxla.jit(scaled_exp)
    text = f.lower(np.ones(2, np.float32), np.ones(2, np.float32)).as_text()
    assert "test_jit.py" in text and 'op_name="jit(scaled_exp)/exponential"' in text


def test_cost_and_memory_analysis(rng):
    def mm(a, b):
        return lax.dot(a, b)

    compiled = pyxla.jit(mm).lower(np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)).compile()
    assert compiled.cost_analysis()["flops"] == 2 * 8 * 16 * 4
    mem = compiled.memory_analysis()
    assert mem["argument_size_in_bytes"] == (8 * 16 + 16 * 4) * 4
    assert mem["output_size_in_bytes"] == 8 * 4 * 4


def test_log_compiles_names_the_changed_argument(rng, monkeypatch, capsys):
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    f = pyxla.jit(scaled_exp)
    f(np.ones(3, np.float32), np.ones(3, np.float32))
    f(np.ones(3, np.float32), np.ones(3, np.float32))
    f(np.ones(5, np.float32), np.ones(5, np.float32))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "first call" in err[0]
    assert "argument leaf 0: float32[3] -> float32[5]; argument leaf 1: float32[3] -> float32[5]" in err[1]


def test_value_dependent_python_control_flow_is_explained():
    def branchy(x):
        if lax.gt(x, 0.0):
            return x
        return lax.neg(x)

    with pytest.raises(ConcretizationError, match=r"Python control flow.*pred\[\].*test_jit.py"):
        pyxla.jit(branchy)(np.float32(1.0))


def test_shape_errors_name_op_shapes_and_line(rng):
    def bad(x, y):
        return lax.add(x, y)

    with pytest.raises(TraceError, match=r"add\(f32\[3\], f32\[4\]\).*test_jit.py:\d+"):
        pyxla.jit(bad)(np.ones(3, np.float32), np.ones(4, np.float32))


def test_wrong_argument_count():
    with pytest.raises(ArgumentError, match="scaled_exp"):
        pyxla.jit(scaled_exp)(np.ones(3, np.float32))


def test_unknown_backend_rejected():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        pyxla.jit(scaled_exp, backend="tpu")


def test_default_backend_is_cpu_and_settable():
    assert pyxla.default_backend() == "cpu"
    with pytest.raises(ValueError):
        pyxla.set_default_backend("nope")


def test_compiled_module_is_optimised_fused_and_scheduled(rng):
    def chain(x):
        for _ in range(4):
            x = lax.tanh(lax.add(x, x))
        return lax.mul(x, 1.0)

    x = rng.standard_normal((8, 8)).astype(np.float32)
    compiled = pyxla.jit(chain).lower(x).compile()
    text = compiled.as_text()
    assert "is_scheduled=true" in text and "kind=kLoop" in text
    ks = compiled.cost_analysis()["kernels"]
    assert len(ks) == 1 and ks[0]["kind"] == "kLoop"
    ref = x.astype(np.float64)
    for _ in range(4):
        ref = np.tanh(ref + ref)
    np.testing.assert_allclose(compiled(x), ref, rtol=1e-5)
    mem = compiled.memory_analysis()
    assert mem["temp_size_in_bytes"] <= mem["temp_bytes_without_reuse"]


def test_jit_on_the_native_cpu_backend(rng):
    def layer(x, w, b):
        return lax.tanh(lax.add(lax.dot(x, w), b))

    f = pyxla.jit(layer, backend="cpu")
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(f(x, w, b), np.tanh(x.astype(np.float64) @ w + b), rtol=1e-4, atol=1e-6)
    assert "kOutput" in f.lower(x, w, b).compile().as_text()


def test_compiled_object_checks_its_arguments(rng):
    compiled = pyxla.jit(scaled_exp).lower(np.ones(3, np.float32), np.ones(3, np.float32)).compile()
    with pytest.raises(ArgumentError, match=r"expected shape f32\[3\]"):
        compiled(np.ones(4, np.float32), np.ones(4, np.float32))


def test_fast_path_keys_on_shape_and_dtype(rng):
    fn, calls = counting(scaled_exp)
    f = pyxla.jit(fn)
    a = rng.standard_normal(5).astype(np.float32)
    b = rng.standard_normal(5)
    np.testing.assert_allclose(f(a, a), np.exp(a.astype(np.float64)) * a, rtol=1e-6)
    np.testing.assert_allclose(f(a, a), np.exp(a.astype(np.float64)) * a, rtol=1e-6)
    out = f(b, b)   # same shapes, another dtype: a new signature, not the cached one
    assert out.dtype == np.float64 and calls["n"] == 2
    np.testing.assert_allclose(f(a[::-1], a[::-1]), np.exp(a[::-1].astype(np.float64)) * a[::-1], rtol=1e-6)


def test_compile_time_is_reported_per_stage(rng, monkeypatch, capsys):
    monkeypatch.setenv("PYXLA_DEBUG", "compile")
    x = rng.standard_normal(7).astype(np.float32)
    compiled = pyxla.jit(scaled_exp).lower(x, x).compile()
    stages = compiled.stage_seconds
    assert list(stages)[0] == "trace"
    assert {"passes, fusion, schedule", "buffer assignment", "LLVM IR emission", "LLVM optimisation",
            "machine code"} <= set(stages)
    assert all(seconds >= 0 for seconds in stages.values())
    # the stages' wall times add up to at most the compile's; "... cpu" entries are the CPU
    # seconds of the stage before them, summed over threads, and are not added again
    wall = sum(seconds for stage, seconds in stages.items() if not stage.endswith(" cpu"))
    assert wall <= compiled.compile_seconds + stages["trace"] + 1e-3
    printed = capsys.readouterr().err
    assert printed.startswith("pyxla compile ") and "LLVM optimisation" in printed
    np.testing.assert_allclose(compiled(x, x), np.exp(x.astype(np.float64)) * x, rtol=1e-6)


def test_donate_argnums_names_argument_positions_not_leaves(rng):
    """donate_argnums counts positional arguments (static ones included, as JAX does); a
    donated pytree argument donates every one of its leaves, and no other parameter."""
    def step(scale, p, x):
        return {"w": p["w"] - scale * x, "b": p["b"] * 2.0}, x * 3.0

    p = {"b": rng.standard_normal(4).astype(np.float32), "w": rng.standard_normal(4).astype(np.float32)}
    x = rng.standard_normal(4).astype(np.float32)
    # parameters: p["b"] 0, p["w"] 1, x 2 (the static scale is not one)
    for donate, leaves in [((2,), (2,)), ((1,), (0, 1)), ((1, 2), (0, 1, 2)), ((0,), ())]:
        f = pyxla.jit(step, static_argnums=0, donate_argnums=donate)
        assert f.lower(0.1, p, x).module.donated_parameters == leaves, donate
        out = f(0.1, p, x)
        np.testing.assert_allclose(out[0]["w"], p["w"] - np.float32(0.1) * x, rtol=1e-6)
        np.testing.assert_allclose(out[1], x * 3, rtol=1e-6)


def test_jit_on_cpu_expands_opcodes_defined_by_expansions(rng):
    """jit runs the compiler driver itself, after the backend's prepare step: cholesky and
    triangular-solve (registry expansions) compile on the cpu backend like any opcode."""
    from pyxla import lax

    a = rng.standard_normal((5, 5))
    spd = a @ a.T + 5 * np.eye(5)
    b = rng.standard_normal((5, 2))

    def solve(m, rhs):
        factor = lax.linalg.cholesky(m)
        return lax.linalg.triangular_solve(factor, rhs, left_side=True, lower=True)

    got = pyxla.jit(solve, backend="cpu")(spd, b)
    want = np.linalg.solve(np.linalg.cholesky(spd), b)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
