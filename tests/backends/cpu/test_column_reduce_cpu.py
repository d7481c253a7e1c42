"""Column reductions (ops/column_reduce.py): a reduce over the leading dimensions of a
row-major operand, folded row by row into accumulators in the output, on one thread and
split across the pool by columns, against the evaluator. Each result folds its inputs in
row order, so a sum is the evaluator's to the rounding of that order."""
import numpy as np
import pytest

import pyxla
from pyxla import lax, nn
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.ops import column_reduce
from pyxla.backends.cpu.runtime import parallel

from .differential import assert_cpu_matches_interpreter


@pytest.fixture
def taken(monkeypatch):
    """The reductions the column kernel emitted."""
    emitted = []
    emit = column_reduce.emit_column_reduction
    monkeypatch.setattr(codegen, "emit_column_reduction",
                        lambda ke, outs: emitted.extend(r.name for r, _ in outs) or emit(ke, outs))
    return emitted


def _module(t, dims, reduced, reducer="add", init="0", fused=False):
    kept = [d for i, d in enumerate(dims) if i not in reduced]
    shape = ",".join(map(str, dims))
    out = ",".join(map(str, kept))
    body = (f"  y = {t}[{shape}] parameter(1)\n  p = {t}[{shape}] multiply(x, y)\n" if fused else "")
    source = "p" if fused else "x"
    return f"""HloModule m
red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] {reducer}(a, b)
}}
ENTRY e {{
  x = {t}[{shape}] parameter(0)
{body}  z = {t}[] constant({init})
  ROOT r = {t}[{out}] reduce({source}, z), dimensions={{{",".join(map(str, reduced))}}}, to_apply=red
}}
"""


CASES = [((256, 1024), (0,)), ((2, 33), (0,)), ((7, 1), (0,)), ((3, 5, 31), (0, 1)), ((2, 3, 4, 17), (0,))]


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("dims,reduced", CASES, ids=[str(c) for c in CASES])
def test_sums_over_leading_dimensions(dims, reduced, t, rng, taken):
    x = rng.standard_normal(dims).astype(np.float32 if t == "f32" else np.float64)
    # a sum of n terms in order rounds by at most n ulp of the running total's magnitude
    n = int(np.prod([dims[d] for d in reduced]))
    bound = n * np.finfo(x.dtype).eps * np.abs(x).sum(axis=reduced).max()
    assert_cpu_matches_interpreter(_module(t, dims, reduced), rng, [x], rtol=0, atol=bound)
    assert len(taken) == 1


@pytest.mark.parametrize("reducer,init", [("maximum", "-inf"), ("minimum", "inf"), ("multiply", "1")])
def test_other_reducers_and_nan(reducer, init, rng, taken):
    x = (rng.standard_normal((40, 19)) * 0.5 + 1).astype(np.float32)
    x[rng.integers(0, 40), rng.integers(0, 19)] = np.nan
    assert_cpu_matches_interpreter(_module("f32", (40, 19), (0,), reducer, init), rng, [x], rtol=1e-5)
    assert len(taken) == 1


def test_fused_operand(rng, taken):
    """A kInput fusion: the operand computed per element while it is folded."""
    x, y = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32)
    bound = 2 * 64 * np.finfo(np.float32).eps * np.abs(x * y).sum(axis=0).max()
    assert_cpu_matches_interpreter(_module("f32", (64, 48), (0,), fused=True), rng, [x, y], rtol=0, atol=bound)
    assert taken


def test_split_across_threads(rng, taken, monkeypatch):
    if parallel.worker_pool() is None:
        monkeypatch.setenv("PYXLA_NUM_THREADS", "3")
    assert parallel.worker_pool() is not None
    monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
    monkeypatch.setattr(codegen, "TASK_MIN_WORK", 16)
    x = rng.standard_normal((37, 5, 41)).astype(np.float32)
    bound = 37 * np.finfo(np.float32).eps * np.abs(x).sum(axis=0).max()
    assert_cpu_matches_interpreter(_module("f32", (37, 5, 41), (0,)), rng, [x], rtol=0, atol=bound)
    assert len(taken) == 1


def test_row_reductions_keep_their_kernel(rng, taken):
    """A reduce over the minor dimension is not a column reduction."""
    x = rng.standard_normal((16, 33)).astype(np.float32)
    assert_cpu_matches_interpreter(_module("f32", (16, 33), (1,)), rng, [x], rtol=1e-5, atol=1e-4)
    assert taken == []


# --- kInput fusions: fused producers, several reductions -----------------------------------------

_RED = """{name} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] {op}(a, b)
}}
"""


def _fused(t, dims, n_reduced, body, roots, reducers):
    """A module whose ENTRY computes `body` (HLO lines; {S} is the operand's shape, {P} its
    pred shape, {T} the element type) and reduces each of `roots` over the leading n_reduced
    dimensions with its reducer ((op, init) pairs), the results as a tuple when several."""
    shape, out = ",".join(map(str, dims)), ",".join(map(str, dims[n_reduced:]))
    dimensions = ",".join(map(str, range(n_reduced)))
    text = "".join(_RED.format(name=f"red_{op}", t=t, op=op) for op in sorted({op for op, _ in reducers}))
    lines = [line.format(S=f"{t}[{shape}]", P=f"pred[{shape}]", T=t) for line in body]
    for k, (value, (op, init)) in enumerate(zip(roots, reducers)):
        lines.append(f"i{k} = {t}[] constant({init})")
        lines.append(f"r{k} = {t}[{out}] reduce({value}, i{k}), dimensions={{{dimensions}}}, to_apply=red_{op}")
    if len(roots) > 1:
        results = ", ".join(f"r{k}" for k in range(len(roots)))
        lines.append(f"ROOT out = ({', '.join([f'{t}[{out}]'] * len(roots))}) tuple({results})")
    else:
        lines[-1] = "ROOT " + lines[-1]
    return "HloModule m\n" + text + "ENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"


def _bound(t, terms, rows):
    """A fold of `rows` terms in any fixed order rounds by at most rows ulp of the sum of
    their magnitudes, per column."""
    return 2 * rows * np.finfo(np.float32 if t == "f32" else np.float64).eps * np.abs(terms).sum(axis=0).max()


_RELU_GRAD = ["x = {S} parameter(0)", "g = {S} parameter(1)", "zero = {T}[] constant(0)",
              "zb = {S} broadcast(zero), dimensions={{}}", "m = {P} compare(x, zb), direction=GT",
              "p = {S} select(m, g, zb)"]
SHAPES = [((4, 8, 8, 32), 3), ((3, 5, 7, 37), 3), ((2, 13), 1), ((4099, 19), 1), ((2, 3, 4, 17), 1)]


def _cast(t, a):
    return a.astype(np.float32 if t == "f32" else np.float64)


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("dims,n", SHAPES, ids=[str(d) for d, _ in SHAPES])
def test_fused_relu_mask_times_gradient(dims, n, t, rng, taken):
    """The bias gradient of a relu layer: (x > 0) * g summed over the leading (NHW) dimensions."""
    body = _RELU_GRAD
    x, g = _cast(t, rng.standard_normal(dims)), _cast(t, rng.standard_normal(dims))
    rows = int(np.prod(dims[:n]))
    terms = np.where(x > 0, g, 0).reshape(rows, -1)
    text = _fused(t, dims, n, body, ["p"], [("add", "0")])
    assert_cpu_matches_interpreter(text, rng, [x, g], rtol=0, atol=_bound(t, terms, rows))
    assert len(taken) == 1


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_fused_sum_and_sum_of_squares(t, rng, taken):
    """Two reductions of one operand in a multi-output fusion, each into its own output."""
    dims = (129, 5, 23)
    body = ["x = {S} parameter(0)", "sq = {S} multiply(x, x)"]
    x = _cast(t, rng.standard_normal(dims))
    terms = x.reshape(129, -1)
    text = _fused(t, dims, 1, body, ["x", "sq"], [("add", "0"), ("add", "0")])
    assert_cpu_matches_interpreter(text, rng, [x], rtol=0, atol=_bound(t, terms * terms + np.abs(terms), 129))
    assert len(taken) == 2  # both, in one kernel


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_fused_max_of_abs_and_min(t, rng, taken):
    """max and min fold exactly: the results are the evaluator's bit for bit, NaN included."""
    dims = (33, 3, 11)
    x = _cast(t, rng.standard_normal(dims))
    x[5, 1, 7] = np.nan
    body = ["x = {S} parameter(0)", "ab = {S} abs(x)", "ng = {S} negate(x)"]
    text = _fused(t, dims, 1, body, ["ab", "ng"], [("maximum", "-inf"), ("minimum", "inf")])
    assert_cpu_matches_interpreter(text, rng, [x], rtol=0, atol=0)
    assert len(taken) == 2  # both, in one kernel


def test_fused_bias_gradient_with_broadcasts(rng, taken):
    """The relu mask of x + broadcast(bias), the bias broadcast along the columns inside the
    producer, times a gradient scaled by a broadcast scalar."""
    dims = (6, 9, 9, 21)
    body = ["x = {S} parameter(0)", "g = {S} parameter(1)", "bias = {T}[21] parameter(2)", "s = {T}[] parameter(3)",
            "bb = {S} broadcast(bias), dimensions={{3}}", "sb = {S} broadcast(s), dimensions={{}}",
            "y = {S} add(x, bb)", "zero = {T}[] constant(0)", "zb = {S} broadcast(zero), dimensions={{}}",
            "m = {P} compare(y, zb), direction=GT", "gs = {S} multiply(g, sb)", "p = {S} select(m, gs, zb)"]
    x, g = rng.standard_normal(dims).astype(np.float32), rng.standard_normal(dims).astype(np.float32)
    bias, s = rng.standard_normal(21).astype(np.float32), np.float32(0.5)
    terms = (np.where(x + bias > 0, g * s, 0)).reshape(-1, 21)
    text = _fused("f32", dims, 3, body, ["p"], [("add", "0")])
    assert_cpu_matches_interpreter(text, rng, [x, g, bias, np.array(s)], rtol=0, atol=_bound("f32", terms, 486))
    assert len(taken) == 1


@pytest.mark.parametrize("columns", [7, 37, 160])
def test_fused_split_across_threads(columns, rng, taken, monkeypatch):
    """Columns cut into whole vectors across the pool, the last chunk short; each result is
    folded by one task in row order, so the result is the one-thread result bit for bit."""
    if parallel.worker_pool() is None:
        monkeypatch.setenv("PYXLA_NUM_THREADS", "3")
    assert parallel.worker_pool() is not None
    monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
    monkeypatch.setattr(codegen, "TASK_MIN_WORK", 16)
    dims = (301, columns)
    body = ["x = {S} parameter(0)", "y = {S} parameter(1)", "p = {S} multiply(x, y)", "sq = {S} multiply(p, p)"]
    x, y = rng.standard_normal(dims).astype(np.float32), rng.standard_normal(dims).astype(np.float32)
    text = _fused("f32", dims, 1, body, ["p", "sq"], [("add", "0"), ("add", "0")])
    got = assert_cpu_matches_interpreter(text, rng, [x, y], rtol=0,
                                         atol=_bound("f32", (x * y) ** 2 + np.abs(x * y), 301))
    assert len(taken) == 2  # both, in one kernel
    p = (x * y).astype(np.float32)
    want = np.zeros(columns, np.float32)
    for row in p:            # the order the kernel folds in, whatever the number of tasks
        want = (want + row).astype(np.float32)
    np.testing.assert_array_equal(got[0], want)


def test_jit_grad_of_conv_bias_relu_bias_gradient(rng):
    """The bias gradient of conv + bias + relu through jit(grad), against numpy."""
    def loss(b, x, w, up):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return (nn.relu(y + b) * up).sum()

    x = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 13)).astype(np.float32)
    b = rng.standard_normal(13).astype(np.float32) * 0.1
    up = rng.standard_normal((4, 8, 8, 13)).astype(np.float32)
    got = np.asarray(pyxla.jit(pyxla.grad(loss))(b, x, w, up))
    y = np.asarray(pyxla.jit(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))(x, w)) + b
    terms = np.where(y > 0, up, 0).reshape(-1, 13)
    np.testing.assert_allclose(got, terms.sum(axis=0), rtol=0, atol=_bound("f32", terms, 256))
