"""select-and-scatter on the CPU backend against the evaluator, bit for bit: the disjoint-window
route (ops/select_scatter.py: NHWC features in vectors, NCHW and other layouts one position at
a time, padding, strides past the window) and the general loops it falls back to
(overlapping windows, other selects); ties broken by the first position, as XLA does."""
import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.backends.cpu.ops import select_scatter, windows

from .differential import assert_cpu_matches_interpreter
from .test_windows_conv_cpu import window_output

SELECTS = {"GE": "compare(a, b), direction=GE", "GT": "compare(a, b), direction=GT",
           "LE": "compare(a, b), direction=LE", "GE_SWAPPED": "compare(b, a), direction=LE"}


def module(t: str, dims, source, window: str, select: str = "GE", layout: str = "") -> str:
    join = lambda d: ",".join(map(str, d))   # noqa: E731
    return f"""HloModule sas
sel {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = pred[] {SELECTS[select]}
}}
sc {{
  acc = {t}[] parameter(0)
  value = {t}[] parameter(1)
  ROOT s = {t}[] add(acc, value)
}}
ENTRY main {{
  x = {t}[{join(dims)}]{layout} parameter(0)
  g = {t}[{join(source)}]{layout} parameter(1)
  init = {t}[] constant(0)
  ROOT r = {t}[{join(dims)}]{layout} select-and-scatter(x, g, init), window={{{window}}}, select=sel, scatter=sc
}}
"""


# (dims, window, layout, whether the disjoint route takes it)
CASES = [
    ((4, 8, 8, 32), "size=1x2x2x1 stride=1x2x2x1", "", True),                    # NHWC pool, whole vectors
    ((1, 6, 6, 19), "size=1x2x2x1 stride=1x2x2x1", "", True),                    # batch 1, a vector tail
    ((2, 5, 5, 3), "size=1x2x2x1 stride=1x2x2x1", "", True),                     # few features, odd rows
    ((2, 3, 8, 8), "size=1x1x2x2 stride=1x1x2x2", "", True),                     # NCHW: one position at a time
    ((2, 7, 7, 5), "size=1x2x2x1 stride=1x2x2x1 pad=0_0x1_0x0_1x0_0", "", True),  # padding
    ((2, 9, 9, 4), "size=1x2x2x1 stride=1x3x3x1", "", True),                     # stride past the window
    ((2, 7, 7, 9), "size=1x3x3x1 stride=1x3x3x1 pad=0_0x1_1x1_1x0_0", "", True),  # windows of padding only
    ((2, 6, 6, 11), "size=1x2x2x1 stride=1x2x2x1", "{0,3,2,1}", True),           # batch minor: vectors of it
    ((2, 6, 6, 3), "size=1x2x2x1 stride=1x2x2x1", "{2,1,3,0}", True),            # a windowed dimension minor
    ((2, 7, 7, 3), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0", "", False),  # overlapping windows
    ((9, 5), "size=4x2 stride=1x1 pad=2_1x1_0", "", False),
]


@pytest.fixture
def routes(monkeypatch):
    """Whether each compiled select-and-scatter took the disjoint route."""
    taken = []

    def spy(ke):
        taken.append(select_scatter.emit_disjoint(ke))
        return taken[-1]

    monkeypatch.setattr(windows, "emit_disjoint", spy)
    return taken


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("select", sorted(SELECTS))
@pytest.mark.parametrize("dims,window,layout,disjoint", CASES, ids=[f"{d}-{w}{lay}" for d, w, lay, _ in CASES])
def test_select_and_scatter_matches_interpreter(dims, window, layout, disjoint, select, t, rng, routes):
    source = window_output(dims, window)
    x = rng.integers(-2, 3, dims).astype({"f32": np.float32, "f64": np.float64}[t])   # small integers: ties in most windows
    g = (rng.standard_normal(source) * 2).astype(x.dtype)
    assert_cpu_matches_interpreter(module(t, dims, source, window, select, layout), rng, [x, g], rtol=0, atol=0)
    assert routes == [disjoint]


def test_nan_and_signed_zeros_select_as_the_interpreter_does(rng, routes):
    dims, window = (2, 4, 4, 9), "size=1x2x2x1 stride=1x2x2x1"
    source = window_output(dims, window)
    x = rng.choice(np.array([np.nan, -0.0, 0.0, 1.0, -np.inf], np.float32), dims)
    g = rng.standard_normal(source).astype(np.float32)
    assert_cpu_matches_interpreter(module("f32", dims, source, window), rng, [x, g], rtol=0, atol=0)
    assert routes == [True]


def test_rank_one_operand_in_vectors(rng, routes):
    dims, window = (37,), "size=1 stride=1"
    x, g = rng.standard_normal(dims).astype(np.float32), rng.standard_normal(dims).astype(np.float32)
    assert_cpu_matches_interpreter(module("f32", dims, dims, window), rng, [x, g], rtol=0, atol=0)
    assert routes == [True]


@pytest.mark.parametrize("shape,window,strides,padding", [
    ((3, 8, 8, 13), (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    ((1, 9, 9, 8), (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
    ((2, 9, 9, 8), (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),   # overlapping: the general loops
])
def test_grad_of_max_pooling(shape, window, strides, padding, rng):
    x = rng.integers(-3, 4, shape).astype(np.float32)   # ties: the gradient goes to the first maximum
    weights = rng.standard_normal(window_output(shape, " ".join([
        "size=" + "x".join(map(str, window)), "stride=" + "x".join(map(str, strides))] +
        ([_same_pad(shape, window, strides)] if padding == "SAME" else [])))).astype(np.float32)

    def loss(x):
        return lax.reduce_sum(lax.reduce_window(x, -np.inf, lax.max, window, strides, padding) * weights,
                              tuple(range(len(shape))))

    got = pyxla.jit(pyxla.grad(loss), backend="cpu")(x)
    want = pyxla.jit(pyxla.grad(loss), backend="interpreter")(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _same_pad(shape, window, strides) -> str:
    pads = []
    for n, k, s in zip(shape, window, strides):
        total = max((-(-n // s) - 1) * s + k - n, 0)
        pads.append(f"{total // 2}_{total - total // 2}")
    return "pad=" + "x".join(pads)
