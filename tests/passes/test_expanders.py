"""Expanders: composite ops rewritten into basic ones, values unchanged."""
import numpy as np
import pytest

from pyxla.hlo import F32, HloBuilder, array, evaluate_module, flatten_result, verify_module
from pyxla.passes.expanders import batch_norm_expander, logistic_expander
from pyxla.passes.pipeline import run_pipeline

from .hlo_checks import assert_same_values, entry_opcodes

SHAPE = (4, 3, 5, 2)   # feature dimension 1
FEATURE = 1
EPS = 1e-3


def _bn_module(opcode: str):
    b = HloBuilder(opcode.replace("-", "_"))
    x = b.parameter(array(F32, *SHAPE), "x")
    vec = array(F32, SHAPE[FEATURE])
    if opcode == "batch-norm-inference":
        operands = [x] + [b.parameter(vec, n) for n in ("scale", "offset", "mean", "variance")]
    elif opcode == "batch-norm-training":
        operands = [x] + [b.parameter(vec, n) for n in ("scale", "offset")]
    else:
        operands = [x] + [b.parameter(vec, n) for n in ("scale", "mean", "variance")] + \
                   [b.parameter(array(F32, *SHAPE), "grad_output")]
    root = b.op(opcode, *operands, epsilon=EPS, feature_index=FEATURE)
    module = b.module(root)
    verify_module(module)
    return module


def _args(module, rng):
    out = []
    for p in module.entry.parameters:
        a = rng.standard_normal(p.shape.dims)
        if p.name.startswith("variance"):
            a = np.abs(a) + 0.5
        out.append(a.astype(np.float32))
    return out


def _numpy_reference(opcode, args):
    x = args[0].astype(np.float64)
    axes = (0, 2, 3)
    b = lambda v: v.astype(np.float64).reshape(1, -1, 1, 1)  # noqa: E731
    if opcode == "batch-norm-inference":
        _, scale, offset, mean, var = args
        return [(x - b(mean)) / np.sqrt(b(var) + EPS) * b(scale) + b(offset)]
    if opcode == "batch-norm-training":
        _, scale, offset = args
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        return [(x - b(mean)) / np.sqrt(b(var) + EPS) * b(scale) + b(offset), mean, var]
    _, scale, mean, var, dy = args
    # the gradient of training-mode batch norm, by the chain rule written out
    xhat = (x - b(mean)) / np.sqrt(b(var) + EPS)
    n = x.size // x.shape[1]
    g_offset = dy.sum(axis=axes)
    g_scale = (dy * xhat).sum(axis=axes)
    g_x = b(scale) / np.sqrt(b(var) + EPS) / n * (n * dy - b(g_offset) - xhat * b(g_scale))
    return [g_x, g_scale, g_offset]


OPCODES = ["batch-norm-inference", "batch-norm-training", "batch-norm-grad"]


@pytest.mark.parametrize("opcode", OPCODES)
def test_evaluator_matches_numpy(opcode, rng):
    module = _bn_module(opcode)
    args = _args(module, rng)
    got = flatten_result(evaluate_module(module, args))
    for g, w in zip(got, _numpy_reference(opcode, args)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opcode", OPCODES)
def test_expansion_removes_op_and_keeps_values(opcode, rng):
    before = _bn_module(opcode)
    after = _bn_module(opcode)
    run_pipeline(after, [batch_norm_expander], verify=True)
    assert entry_opcodes(after)[opcode] == 0
    assert entry_opcodes(after)["rsqrt"] == 1
    # the gradient sums cancel: near-zero results carry f32 rounding of the large terms
    assert_same_values(before, after, rng, rtol=1e-4, make_args=_args, atol=1e-4)


def test_logistic_expander(rng):
    b = HloBuilder("sigmoid")
    x = b.parameter(array(F32, 64), "x")
    module = b.module(b.op("logistic", x))
    run_pipeline(module, [logistic_expander], verify=True)
    assert entry_opcodes(module)["logistic"] == 0 and entry_opcodes(module)["exponential"] == 1
    v = (rng.standard_normal(64) * 30).astype(np.float32)
    np.testing.assert_allclose(evaluate_module(module, [v]), 1 / (1 + np.exp(-v.astype(np.float64))),
                               rtol=1e-6, atol=1e-30)


RNG = """
HloModule rng
ENTRY main {{
  s = u64[{n}] parameter(0)
  r = (u64[{n}], {t}[{dims}]) rng-bit-generator(s), algorithm=rng_default
  ROOT again = (u64[{n}], {t}[{dims}]) rng-bit-generator(s), algorithm=rng_philox
}}
"""


@pytest.mark.parametrize("n,t,dims", [(2, "u32", "7"), (2, "u32", "3,5"), (2, "u64", "9"), (3, "s32", "4,4"),
                                      (2, "s64", "1"), (3, "u64", "2,3")])
def test_philox_expansion_is_bit_exact(n, t, dims, rng):
    from pyxla.hlo import parse_module
    from pyxla.passes.expanders import rng_bit_generator_expander
    text = RNG.format(n=n, t=t, dims=dims)
    before = parse_module(text)
    after = parse_module(text)
    run_pipeline(after, [rng_bit_generator_expander], verify=True)
    assert entry_opcodes(after)["rng-bit-generator"] == 0
    for state in (rng.integers(0, 2**63, n, dtype=np.uint64),
                  np.array([2**64 - 1] * n, np.uint64)):   # the counter wraps and carries
        want = flatten_result(evaluate_module(before, [state]))
        got = flatten_result(evaluate_module(after, [state]))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)


def test_philox_expansion_matches_the_corpus():
    from pyxla.conformance import default_corpus, load_case, run_case
    from pyxla.hlo import parse_module
    from pyxla.passes.expanders import rng_bit_generator_expander

    def run(text, inputs):
        module = parse_module(text)
        run_pipeline(module, [rng_bit_generator_expander], verify=True)
        assert entry_opcodes(module)["rng-bit-generator"] == 0
        return flatten_result(evaluate_module(module, inputs))

    assert run_case(load_case(default_corpus() / "rng_bit_generator_rbg"), "module", run) == []
