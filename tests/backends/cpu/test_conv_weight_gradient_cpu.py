"""Weight-gradient convolutions as one GEMM per tap (conv/weight_gradient.py), against the
interpreter on fresh random inputs: the convolution reverse mode makes for a forward one
(transpose_rules.py's padding and dilations), over strides, symmetric, asymmetric and
negative padding, dilations, 1-D and 2-D, odd sizes, batch 1, channel counts that are not
whole vectors or exceed the GEMM's blocks, runs deeper than a slice, in the NHWC form
(f01b_i01o->01bf), the NCHW form (fb01_io01->fb01) and PyTorch's transposed operands
(bf01_oi01->bf01), f32 and f64, on the pool and on one thread; a fused epilogue; and the
route taken by jit(grad) of small CNNs, whose gradients match the interpreter's."""
import numpy as np
import pytest

import pyxla
from pyxla import lax
from pyxla.backends import get_backend
from pyxla.backends.cpu.conv import tiles, weight_gradient
from pyxla.hlo import evaluate_module, flatten_result, parse_module

from .differential import emitted_by, random_inputs

TOLERANCE = {"f32": 2e-5, "f64": 1e-12}


def _routed(monkeypatch):
    return emitted_by(monkeypatch, weight_gradient.WeightGradientConvolution)


def _dims(*ns) -> str:
    return ",".join(map(str, ns))


def _weight_gradient(t, layout, n, cin, cout, spatial, kernel, stride, pads, dilation, epilogue=False) -> str:
    """The module of dW for a forward convolution of an [n, cin, *spatial] input with a
    kernel of `kernel` taps to cout features, as reverse mode writes it."""
    out = [(s + lo + hi - ((k - 1) * d + 1)) // st + 1
           for s, k, st, (lo, hi), d in zip(spatial, kernel, stride, pads, dilation)]
    window = []
    for s, k, st, (lo, _), d, o in zip(spatial, kernel, stride, pads, dilation, out):
        r, o_d = (k - 1) * d + 1, (o - 1) * st + 1
        window.append((o, d, lo, (o_d - s) + (r - lo - 1), st))
    sp = "01"[:len(spatial)]
    if layout == "nhwc":
        x, dy, result = _dims(n, *spatial, cin), _dims(n, *out, cout), _dims(*kernel, cin, cout)
        labels = f"f{sp}b_i{sp}o->{sp}bf"
    elif layout == "nchw":
        x, dy, result = _dims(n, cin, *spatial), _dims(n, cout, *out), _dims(cout, cin, *kernel)
        labels = f"fb{sp}_io{sp}->fb{sp}"
    else:   # pyxla.torch's: the operands transposed to (channels, images, ...)
        x, dy, result = _dims(cin, n, *spatial), _dims(cout, n, *out), _dims(cin, cout, *kernel)
        labels = f"bf{sp}_oi{sp}->bf{sp}"
    attrs = ("size=" + "x".join(str(w[0]) for w in window) + " stride=" + "x".join(str(w[1]) for w in window)
             + " pad=" + "x".join(f"{w[2]}_{w[3]}" for w in window)
             + " rhs_dilate=" + "x".join(str(w[4]) for w in window))
    head = f"HloModule wgrad\nENTRY e {{\n  x = {t}[{x}] parameter(0)\n  dy = {t}[{dy}] parameter(1)\n"
    conv = f"convolution(x, dy), window={{{attrs}}}, dim_labels={labels}"
    if not epilogue:
        return head + f"  ROOT c = {t}[{result}] {conv}\n}}\n"
    return head + f"""  w = {t}[{result}] parameter(2)
  c = {t}[{result}] {conv}
  rate = {t}[] constant(0.125)
  scaled = {t}[{result}] broadcast(rate), dimensions={{}}
  step = {t}[{result}] multiply(c, scaled)
  ROOT updated = {t}[{result}] subtract(w, step)
}}
"""


def _check(text: str, t: str, rng) -> None:
    """The CPU backend against the interpreter: |got - want| <= tol (|want| + max |want|)."""
    module = parse_module(text)
    inputs = random_inputs(module, rng)
    want = flatten_result(evaluate_module(module, inputs))[0].astype(np.float64)
    got = get_backend("cpu").compile(parse_module(text)).run_flat(inputs)[0]
    assert got.shape == want.shape and got.dtype == inputs[0].dtype
    tol = TOLERANCE[t]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())


# (n, cin, cout, spatial, kernel, stride, pads, dilation) of the forward convolution
CASES = {
    "same-3x3": (2, 5, 7, (9, 9), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    "stride2-asymmetric-batch1": (1, 3, 17, (8, 11), (3, 3), (2, 2), ((1, 0), (0, 1)), (1, 1)),
    "dilated-2x3": (3, 9, 13, (10, 7), (2, 3), (1, 1), ((0, 0), (0, 0)), (2, 2)),
    "negative-padding": (2, 6, 10, (12, 12), (3, 3), (1, 1), ((-1, 0), (1, -1)), (1, 1)),
    "stride3-dilation2": (2, 4, 9, (13, 13), (3, 3), (3, 3), ((2, 2), (2, 2)), (2, 2)),
    "1x1-stride2": (4, 16, 24, (8, 8), (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1)),
    "7x7-stem": (2, 3, 8, (16, 16), (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1)),
    "odd-channels": (5, 19, 33, (6, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    "more-rows-than-a-block": (2, 80, 20, (5, 5), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    "more-columns-than-a-block": (1, 2, 1030, (4, 4), (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1)),
    "1d-strided": (3, 6, 10, (37,), (5,), (2,), ((2, 2),), (1,)),
    "1d-run-deeper-than-a-slice": (2, 4, 5, (1200,), (3,), (1,), ((1, 1),), (1,)),
}


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw", "torch"])
@pytest.mark.parametrize("case", CASES)
def test_weight_gradient_matches_the_interpreter(case, layout, t, rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    _check(_weight_gradient(t, layout, *CASES[case]), t, rng)
    assert routed


def test_one_thread(rng, monkeypatch):
    """Without the pool: one chunk, the tasks' loop inline."""
    monkeypatch.setattr(tiles, "worker_pool", lambda: None)
    routed = _routed(monkeypatch)
    _check(_weight_gradient("f32", "nhwc", *CASES["stride2-asymmetric-batch1"]), "f32", rng)
    assert routed


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_fused_epilogue(layout, rng, monkeypatch, pool):
    """An SGD step w - rate * dW fused after the convolution."""
    routed = _routed(monkeypatch)
    _check(_weight_gradient("f32", layout, *CASES["same-3x3"], epilogue=True), "f32", rng)
    assert routed


def test_infinite_gradient_at_the_border_is_nan_as_in_the_evaluator(rng, monkeypatch, pool):
    """The staged zero border multiplies the gradient as the evaluator's padding does."""
    text = _weight_gradient("f32", "nhwc", *CASES["same-3x3"])
    module = parse_module(text)
    x, dy = random_inputs(module, rng)
    dy[0, 0, 0, 0] = np.inf   # tap (0, 0) reads the border there: 0 * inf
    want = flatten_result(evaluate_module(module, [x, dy]))[0]
    got = get_backend("cpu").compile(parse_module(text)).run_flat([x, dy])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any()


@pytest.mark.parametrize("labels", [
    "b01f_01io->b01f",     # an ordinary forward convolution: its window is smaller than its result
])
def test_forward_convolutions_stay_with_their_routes(labels, monkeypatch, pool):
    routed = _routed(monkeypatch)
    text = f"""HloModule fwd
ENTRY e {{
  x = f32[2,9,9,8] parameter(0)
  w = f32[3,3,8,16] parameter(1)
  ROOT c = f32[2,9,9,16] convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}
}}
"""
    get_backend("cpu").compile(parse_module(text))
    assert not routed


def _cnn_loss(dimension_numbers):
    def loss(params, x):
        w1, w2 = params
        y = lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dimension_numbers)
        y = pyxla.numpy.tanh(y)
        y = lax.conv_general_dilated(y, w2, (2, 2), ((1, 0), (0, 1)), rhs_dilation=(1, 1),
                                     dimension_numbers=dimension_numbers)
        return pyxla.numpy.sum(y * y)
    return loss


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_cnn_gradients_take_the_route_and_match_the_interpreter(layout, rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    if layout == "NHWC":
        numbers, x = ("NHWC", "HWIO", "NHWC"), rng.standard_normal((3, 10, 9, 5))
        params = (rng.standard_normal((3, 3, 5, 12)) / 6, rng.standard_normal((3, 3, 12, 7)) / 10)
    else:
        numbers, x = ("NCHW", "OIHW", "NCHW"), rng.standard_normal((3, 5, 10, 9))
        params = (rng.standard_normal((12, 5, 3, 3)) / 6, rng.standard_normal((7, 12, 3, 3)) / 10)
    x = x.astype(np.float32)
    params = tuple(p.astype(np.float32) for p in params)
    grad = pyxla.grad(_cnn_loss(numbers))
    got = pyxla.jit(grad, backend="cpu")(params, x)
    want = pyxla.jit(grad, backend="interpreter")(params, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
    assert len(routed) >= 2   # both kernels' gradients
