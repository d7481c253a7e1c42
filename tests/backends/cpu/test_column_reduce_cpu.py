"""Column reductions (ops/column_reduce.py): a reduce over the leading dimensions of a
row-major operand, folded row by row into accumulators in the output, on one thread and
split across the pool by columns, against the evaluator. Each result folds its inputs in
row order, so a sum is the evaluator's to the rounding of that order."""
import numpy as np
import pytest

from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.ops import column_reduce
from pyxla.backends.cpu.runtime import parallel

from .differential import assert_cpu_matches_interpreter


@pytest.fixture
def taken(monkeypatch):
    """The reductions the column kernel emitted."""
    emitted = []
    emit = column_reduce.emit_column_reduction
    monkeypatch.setattr(codegen, "emit_column_reduction", lambda ke, r: emitted.append(r.name) or emit(ke, r))
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
