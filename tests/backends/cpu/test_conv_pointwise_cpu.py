"""Pointwise convolutions of one image as pyxla's GEMM (conv/pointwise.py): NHWC shallow
expansions (other NHWC ones go to the tiles; NCHW ones to conv/planes.py,
test_conv_planes_cpu.py), kernels stored input- or output-feature
first, alone and with a fused epilogue, a result laid out differently from the product,
against the interpreter on fresh random inputs; and what stays with the register tiles."""
import pytest

from pyxla.backends.cpu.conv import pointwise as conv_pointwise

from .differential import assert_cpu_matches_interpreter, emitted_by


def _routed(monkeypatch):
    """The convolutions emitted by the GEMM route, as a list that fills while compiling."""
    return emitted_by(monkeypatch, conv_pointwise.PointwiseGemm)


def _module(t, x, w, out, labels, epilogue=False, window="size=1x1", out_layout=""):
    text = f"""HloModule pw
ENTRY e {{
  x = {t}[{x}] parameter(0)
  w = {t}[{w}] parameter(1)
"""
    if not epilogue:
        return text + f"  ROOT c = {t}[{out}]{out_layout} convolution(x, w), window={{{window}}}, dim_labels={labels}\n}}\n"
    feature = labels.split("->")[1].index("f")
    n_out = int(out.split(",")[feature])
    return text + f"""  b = {t}[{n_out}] parameter(2)
  c = {t}[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}
  bb = {t}[{out}] broadcast(b), dimensions={{{feature}}}
  s = {t}[{out}] add(c, bb)
  zero = {t}[] constant(0)
  z = {t}[{out}] broadcast(zero), dimensions={{}}
  ROOT r = {t}[{out}]{out_layout} maximum(s, z)
}}
"""


CASES = [
    # (x, w, out, dim_labels): NHWC shallow expansions, kernels IO and OI, odd sizes (edges
    # of the tiles); an NCHW input with an NHWC result
    ("1,9,7,13", "1,1,13,61", "1,9,7,61", "b01f_01io->b01f"),
    ("1,9,7,13", "61,13,1,1", "1,9,7,61", "b01f_oi01->b01f"),
    ("1,300,30", "1,30,130", "1,300,130", "b0f_0io->b0f"),
    ("1,37,9,7", "1,1,37,45", "1,9,7,45", "bf01_01io->b01f"),
    # over a 1x1 map (DenseNet's classifier): the matrix-vector kernel, on the pool when large
    ("1,37,1,1", "1,1,37,45", "1,45,1,1", "bf01_01io->bf01"),
    ("1,37,1,1", "45,37,1,1", "1,45,1,1", "bf01_oi01->bf01"),
    ("1,1,1,600", "1,1,600,500", "1,1,1,500", "b01f_01io->b01f"),
]


@pytest.mark.parametrize("t,tol", [("f32", 2e-4), ("f64", 1e-11)])
@pytest.mark.parametrize("epilogue", [False, True], ids=["alone", "bias-relu"])
@pytest.mark.parametrize("x,w,out,labels", CASES, ids=[c[3] for c in CASES])
def test_pointwise_convolution_as_gemm(x, w, out, labels, epilogue, t, tol, rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    window = "size=" + "x".join("1" * (len(labels.split("_")[0]) - 2))
    got = assert_cpu_matches_interpreter(_module(t, x, w, out, labels, epilogue, window), rng, rtol=tol, atol=tol)
    assert routed and got[0].shape == tuple(map(int, out.split(",")))


@pytest.mark.parametrize("x,out,labels,window", [
    ("1,9,8,16", "1,3,4,64", "b01f_01io->b01f", "size=1x1 stride=3x2"),       # NHWC, unequal strides
])
def test_strided_pointwise_convolution_reads_a_subsampled_copy(x, out, labels, window, rng, monkeypatch,
                                                             pool):
    routed = _routed(monkeypatch)
    text = _module("f32", x, "1,1,16,64", out, labels, epilogue=True, window=window)
    assert_cpu_matches_interpreter(text, rng, rtol=2e-4, atol=2e-4)
    assert routed


def test_result_in_another_layout_goes_through_scratch(rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    text = _module("f32", "1,5,6,10", "1,1,10,40", "1,5,6,40", "b01f_01io->b01f", epilogue=True,
                   out_layout="{1,3,2,0}")
    assert_cpu_matches_interpreter(text, rng, rtol=2e-4, atol=2e-4)
    assert routed


@pytest.mark.parametrize("x,w,out,window", [
    ("2,5,5,16", "1,1,16,64", "2,5,5,64", "size=1x1"),                       # a batch of two
    ("1,5,5,16", "3,3,16,64", "1,5,5,64", "size=3x3 pad=1_1x1_1"),           # a real window
    ("1,5,5,80", "1,1,80,400", "1,5,5,400", "size=1x1"),                     # NHWC, deep
    ("1,5,5,16", "1,1,16,40", "1,5,5,40", "size=1x1"),                       # NHWC, no expansion
])
def test_other_convolutions_stay_with_the_tiles(x, w, out, window, rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    assert_cpu_matches_interpreter(_module("f32", x, w, out, "b01f_01io->b01f", window=window), rng,
                                   rtol=2e-4, atol=2e-4)
    assert not routed
