"""Convolutions over feature planes (conv/planes.py): NCHW in and out, pointwise or with few
input features and a window (over a copy of the windows), against the interpreter on fresh
random inputs. Tiles cut by the end of a plane (a masked last vector) and by the end of a
group's features (a narrower tile), several depth chunks, groups, batches, strides,
padding, dilation, kernels stored input- or output-feature first, a fused epilogue, a
result laid out differently from the convolution, one thread and several, both vector
widths."""
import pytest

from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.conv import planes as conv_planes
from pyxla.backends.cpu.runtime.llvm_jit import host_jit

from .differential import assert_cpu_matches_interpreter, emitted_by

pytestmark = pytest.mark.usefixtures("nchw_convolutions")   # NCHW as written: the planes' layout


def _routed(monkeypatch):
    """The convolutions emitted by conv_planes, as a list that fills while compiling."""
    return emitted_by(monkeypatch, conv_planes.PlaneConvolution)


def _module(t, x, w, out, labels, window="size=1x1", epilogue=False, groups=1, out_layout=""):
    extra = f", feature_group_count={groups}" if groups > 1 else ""
    text = f"""HloModule planes
ENTRY e {{
  x = {t}[{x}] parameter(0)
  w = {t}[{w}] parameter(1)
"""
    if not epilogue:
        return text + f"  ROOT c = {t}[{out}]{out_layout} convolution(x, w), window={{{window}}}, " \
                      f"dim_labels={labels}{extra}\n}}\n"
    dims = out.split(",")
    return text + f"""  s = {t}[{dims[1]}] parameter(2)
  r = {t}[{out}] parameter(3)
  c = {t}[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
  sb = {t}[{out}] broadcast(s), dimensions={{1}}
  m = {t}[{out}] multiply(c, sb)
  a = {t}[{out}] add(m, r)
  zero = {t}[] constant(0)
  z = {t}[{out}] broadcast(zero), dimensions={{}}
  ROOT y = {t}[{out}]{out_layout} maximum(a, z)
}}
"""


CASES = [
    # (x, w, out, dim_labels, window, groups)
    ("1,37,9,7", "1,1,37,45", "1,45,9,7", "bf01_01io->bf01", "size=1x1", 1),        # 63 positions: a masked tail
    ("1,37,9,7", "45,37,1,1", "1,45,9,7", "bf01_oi01->bf01", "size=1x1", 1),        # weights OIHW
    ("2,150,8,8", "1,1,150,13", "2,13,8,8", "bf01_01io->bf01", "size=1x1", 1),      # a batch; depth in chunks
    ("1,24,10,10", "1,1,8,21", "1,21,10,10", "bf01_01io->bf01", "size=1x1", 3),     # 3 groups of 7 features
    ("1,16,9,9", "1,1,16,24", "1,24,5,5", "bf01_01io->bf01", "size=1x1 stride=2x2", 1),   # ResNet's downsampling
    ("1,64,300", "1,64,130", "1,130,300", "bf0_0io->bf0", "size=1", 1),             # one spatial dimension
    ("1,20,7,7", "1,1,20,30", "1,30,7,7", "bf01_01io->bf01", "size=1x1", 1),        # 7x7: conv_planes.ONE_TILE
    # windows copied: a 3-colour stem, stride 2 and padding; OIHW; uneven padding and dilation
    ("2,3,17,19", "3,3,3,20", "2,20,9,10", "bf01_01io->bf01", "size=3x3 stride=2x2 pad=1_1x1_1", 1),
    ("1,3,12,12", "16,3,3,3", "1,16,12,12", "bf01_oi01->bf01", "size=3x3 pad=1_1x1_1", 1),
    ("1,2,11,9", "3,3,2,13", "1,13,8,10", "bf01_01io->bf01", "size=3x3 pad=0_1x2_1 rhs_dilate=2x1", 1),
    ("1,3,40", "5,3,18", "1,18,18", "bf0_0io->bf0", "size=5 stride=2 pad=0_0", 1),
]
IDS = ["tail", "oihw", "batch-chunks", "groups", "stride", "1d", "7x7", "stem", "windows-oihw", "pad-dilate", "windows-1d"]


@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("t,tol", [("f32", 2e-4), ("f64", 1e-11)])
@pytest.mark.parametrize("epilogue", [False, True], ids=["alone", "scale-residual-relu"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pointwise_convolution_over_planes(case, epilogue, t, tol, vector_bytes, rng, monkeypatch,
                                          pool):
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    monkeypatch.setattr(conv_planes, "CHUNK_BYTES", 3 * vector_bytes * conv_planes.TILE[vector_bytes][1])
    routed = _routed(monkeypatch)
    x, w, out, labels, window, groups = case
    got = assert_cpu_matches_interpreter(_module(t, x, w, out, labels, window, epilogue, groups), rng,
                                         rtol=tol, atol=tol)
    assert routed and got[0].shape == tuple(map(int, out.split(",")))


@pytest.mark.parametrize("threads", ["one", "split"])
def test_tasks_cut_features_and_positions(threads, rng, monkeypatch, pool):
    """On one thread the whole convolution is one block; split, blocks of feature tiles by
    position tiles, each with its epilogue."""
    if threads == "one":
        monkeypatch.setattr(pool, "threads", 1)
    else:
        monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
        monkeypatch.setattr(conv_planes, "PARALLEL_MIN_WORK", 64)
    routed = _routed(monkeypatch)
    text = _module("f32", "1,40,20,20", "1,1,40,50", "1,50,20,20", "bf01_01io->bf01", epilogue=True)
    assert_cpu_matches_interpreter(text, rng, rtol=2e-4, atol=2e-4)
    assert routed


def test_result_in_another_layout_goes_through_scratch(rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    text = _module("f32", "1,24,5,6", "1,1,24,40", "1,40,5,6", "bf01_01io->bf01", epilogue=True,
                   out_layout="{1,3,2,0}")
    assert_cpu_matches_interpreter(text, rng, rtol=2e-4, atol=2e-4)
    assert routed


@pytest.mark.parametrize("x,w,out,labels,window", [
    ("1,16,5,5", "3,3,16,24", "1,24,5,5", "bf01_01io->bf01", "size=3x3 pad=1_1x1_1"),   # a window, 16 features
    ("1,5,5,16", "1,1,16,24", "1,5,5,24", "b01f_01io->b01f", "size=1x1"),               # NHWC
])
def test_other_convolutions_go_elsewhere(x, w, out, labels, window, rng, monkeypatch, pool):
    routed = _routed(monkeypatch)
    assert_cpu_matches_interpreter(_module("f32", x, w, out, labels, window), rng, rtol=2e-4, atol=2e-4)
    assert not routed
