"""3x3 convolutions by Winograd's F(2x2, 3x3) (conv/winograd.py) against the interpreter on
fresh random inputs: a kernel that is a constant parameter, in its transform; odd heights
and widths (tiles moved back a pixel), strips across images, a padded last panel, NCHW
inputs staged, f64, a fused epilogue, a result written inside a border, one thread and
several, both vector widths; a kernel passed on each call, transformed by the kernel. Windows
the transform does not cover take the direct tiles."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu.conv import tile_plan
from pyxla.backends.cpu.conv import tiles as conv_tiles
from pyxla.backends.cpu.conv import winograd as conv_winograd
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.hlo import evaluate_module, flatten_result, parse_module

from .differential import emitted_by, random_inputs


def _conv(x: str, w: str, out: str, window: str = "size=3x3 pad=1_1x1_1", labels: str = "b01f_01io->b01f",
          t: str = "f32", extra: str = "") -> str:
    return f"""HloModule m
ENTRY e {{
  x = {t}[{x}] parameter(0)
  w = {t}[{w}] parameter(1)
  ROOT c = {t}[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""


CASES = {
    "resnet": _conv("1,14,14,64", "3,3,64,64", "1,14,14,64"),
    # 13 x 13: the last tile of each row and column moved back a pixel; 48 features: the
    # second panel half padding
    "odd": _conv("1,13,13,32", "3,3,32,48", "1,13,13,48"),
    # no padding, 9 x 7 from 11 x 9, two images: strips run across the images
    "valid batch": _conv("2,11,9,16", "3,3,16,32", "2,9,7,32", window="size=3x3"),
    # padding of one side only
    "asymmetric": _conv("1,12,15,16", "3,3,16,32", "1,12,14,32", window="size=3x3 pad=1_1x0_1"),
    # ONNX's kernel order
    "oihw": _conv("1,12,12,32", "40,32,3,3", "1,12,12,40", labels="b01f_oi01->b01f"),
    "f64": _conv("1,12,12,16", "3,3,16,24", "1,12,12,24", t="f64"),
}


def _compare(text: str, rng, inputs=None, constant=(1,)) -> None:
    inputs = inputs if inputs is not None else random_inputs(parse_module(text), rng)
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    got = get_backend("cpu").compile(parse_module(text), constant_parameters=constant).run_flat(inputs)
    for g, w in zip(got, want):
        scale = float(np.abs(w).max())
        tol = dict(rtol=1e-4, atol=1e-5 * scale) if w.dtype == np.float32 else dict(rtol=1e-10, atol=1e-12 * scale)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **tol)


@pytest.fixture(params=[2, 4], ids=["F(2x2)", "F(4x4)"])
def tile(request, monkeypatch):
    """Both transforms, F(4x4, 3x3) over every output at least 4 wide."""
    monkeypatch.setattr(conv_winograd, "LARGE_TILES_FROM", 4 if request.param == 4 else 1 << 30)
    tiles = []
    init = conv_winograd.WinogradConvolution.__init__
    monkeypatch.setattr(conv_winograd.WinogradConvolution, "__init__",
                        lambda self, ke, conv: init(self, ke, conv) or tiles.append(self.f.tile))
    yield request.param
    assert set(tiles) == {request.param}


@pytest.mark.parametrize("vector_bytes", [64, 32])
@pytest.mark.parametrize("case", CASES)
def test_winograd_matches_the_interpreter(case, vector_bytes, tile, rng, monkeypatch, pool):
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    _compare(CASES[case], rng)
    assert routed == ["c"]


@pytest.mark.parametrize("threads", [1, 2])
def test_tasks_cut_tiles_and_panels(threads, tile, rng, monkeypatch, pool):
    """One thread runs every task in a loop; with two, 1 x 8 x 8 tiles cut along the
    panels too (16 tiles: two strips for eight tasks)."""
    monkeypatch.setattr(pool, "threads", threads)
    monkeypatch.setattr(conv_winograd, "MIN_TILES", 16)
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    _compare(_conv("1,8,8,32", "3,3,32,128", "1,8,8,128"), rng)
    assert routed == ["c"]


@pytest.mark.usefixtures("nchw_convolutions")
def test_an_nchw_input_is_staged_features_last(tile, rng, monkeypatch, pool):
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    _compare(_conv("2,32,10,9", "3,3,32,32", "2,32,10,9", labels="bf01_01io->bf01"), rng)
    assert routed == ["c"]


EPILOGUE = """HloModule m
ENTRY e {
  x = f32[1,12,11,32] parameter(0)
  w = f32[3,3,32,40] parameter(1)
  b = f32[40] parameter(2)
  r = f32[1,12,11,40] parameter(3)
  c = f32[1,12,11,40] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[1,12,11,40] broadcast(b), dimensions={3}
  a = f32[1,12,11,40] add(c, bb)
  s = f32[1,12,11,40] add(a, r)
  z = f32[] constant(0)
  zb = f32[1,12,11,40] broadcast(z), dimensions={}
  ROOT m = f32[1,12,11,40] maximum(s, zb)
}
"""


def test_a_fused_epilogue(tile, rng, monkeypatch, pool):
    """Bias, a residual and a ReLU applied to each pixel as its tile writes it (11 wide: the
    last tile of a row moved back)."""
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    _compare(EPILOGUE, rng)
    assert len(routed) == 1


BORDERED = """HloModule m
ENTRY e {
  x = f32[1,12,12,32] parameter(0)
  w = f32[3,3,32,40] parameter(1)
  c = f32[1,12,12,40] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  v = f32[] constant(-1.5)
  ROOT p = f32[1,15,13,40] pad(c, v), padding=0_0x1_2x0_1x0_0
}
"""


def test_a_result_inside_a_border(tile, rng, monkeypatch, pool):
    """An output fusion ending in a pad (the next convolution's padded input): the pixels at
    the pad's offset, the border filled."""
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    filled = []
    fill = conv_tiles._fill_border
    monkeypatch.setattr(conv_tiles, "_fill_border", lambda ke, pad, lows: filled.append(lows) or fill(ke, pad, lows))
    _compare(BORDERED, rng)
    assert len(routed) == 1 and filled == [(0, 1, 0, 0)]


@pytest.mark.parametrize("case", ["resnet", "odd", "oihw", "f64"])
def test_a_kernel_passed_on_each_call_is_transformed_on_the_call(case, tile, rng, monkeypatch, pool):
    """Not a constant parameter (pyxla.jit's arguments): the kernel's transform computed
    into scratch by the kernel itself, the padded panel's lanes zero."""
    routed = emitted_by(monkeypatch, conv_winograd.WinogradConvolution)
    transformed = []
    transform = conv_winograd.WinogradConvolution._transform_kernel
    monkeypatch.setattr(conv_winograd.WinogradConvolution, "_transform_kernel",
                        lambda self: transformed.append(1) or transform(self))
    _compare(CASES[case], rng, constant=())
    assert routed == ["c"] and transformed


@pytest.mark.parametrize("setting,route", [("0", None), ("2", 2), ("4", 4), ("", 4)])
def test_pyxla_winograd_chooses_the_transform(setting, route, rng, monkeypatch, pool):
    """PYXLA_WINOGRAD=0 leaves every convolution to the direct tiles, 2 keeps to F(2x2, 3x3)
    (a 56-wide output takes F(4x4, 3x3) by default)."""
    monkeypatch.setenv("PYXLA_WINOGRAD", setting)
    tiles = []
    init = conv_winograd.WinogradConvolution.__init__
    monkeypatch.setattr(conv_winograd.WinogradConvolution, "__init__",
                        lambda self, ke, conv: init(self, ke, conv) or tiles.append(self.f.tile))
    direct = emitted_by(monkeypatch, conv_tiles.TiledConvolution)
    _compare(_conv("1,56,56,16", "3,3,16,32", "1,56,56,32"), rng)
    assert tiles == ([route] if route else []) and (direct == ["c"]) == (route is None)


def test_pyxla_winograd_refuses_other_values(monkeypatch):
    monkeypatch.setenv("PYXLA_WINOGRAD", "3")
    with pytest.raises(ValueError, match="PYXLA_WINOGRAD must be 0, 2 or 4, got '3'"):
        conv_winograd.largest_tile()


@pytest.mark.parametrize("x,w,out,window,extra", [
    ("1,16,16,32", "3,3,32,32", "1,8,8,32", "size=3x3 stride=2x2 pad=1_1x1_1", ""),      # strided
    ("1,16,16,32", "5,5,32,32", "1,16,16,32", "size=5x5 pad=2_2x2_2", ""),              # 5x5
    ("1,16,16,32", "3,3,32,32", "1,12,12,32", "size=3x3 rhs_dilate=2x2", ""),           # dilated
    ("1,16,16,32", "3,3,16,32", "1,16,16,32", "size=3x3 pad=1_1x1_1", ", feature_group_count=2"),
    ("1,16,16,24", "3,3,24,32", "1,16,16,32", "size=3x3 pad=1_1x1_1", ""),              # 24 features
    ("1,7,7,64", "3,3,64,64", "1,7,7,64", "size=3x3 pad=1_1x1_1", ""),                  # 16 tiles
    ("1,16,16,1152", "3,3,1152,32", "1,16,16,32", "size=3x3 pad=1_1x1_1", ""),        # strips over 1 MiB
], ids=["stride", "5x5", "dilated", "groups", "24 features", "few tiles", "deep input"])
def test_other_convolutions_keep_the_direct_tiles(x, w, out, window, extra, monkeypatch):
    monkeypatch.setattr(host_jit(), "vector_bytes", 64)
    conv = parse_module(_conv(x, w, out, window=window, extra=extra)).entry.root
    assert tile_plan.fits(conv) and not conv_winograd.fits(conv)


@pytest.mark.parametrize("features,size", [(256, 4), (448, 4), (512, 2), (1024, 2)])
def test_strips_stay_within_their_stack_budget(features, size, monkeypatch):
    """A 28x28 output takes F(4x4, 3x3) while its strips' stack stays within STRIP_BYTES, then
    F(2x2, 3x3)."""
    monkeypatch.setattr(host_jit(), "vector_bytes", 64)
    conv = parse_module(_conv(f"1,28,28,{features}", f"3,3,{features},64", "1,28,28,64")).entry.root
    assert conv_winograd.fits(conv) and conv_winograd.transform(conv).tile == size


@pytest.mark.parametrize("size", [2, 4])
def test_the_kernel_transform_is_g_g_gt(size, rng):
    """WinogradKernel.pack: element (panel, xi = patch * a + b, input c, lane) is
    (G g G^T)[a, b] of input c and output feature panel * 32 + lane, zero past the output
    features."""
    form = conv_winograd.WinogradKernel(output_dim=0, input_dim=1, spatial_dims=(2, 3), panel_columns=32, tile=size)
    kernel = rng.standard_normal((40, 5, 3, 3)).astype(np.float32)     # OIHW
    packed = form.pack(kernel)
    points = (size + 2) ** 2
    assert packed.shape == (2, points, 5, 32) and packed.dtype == np.float32
    G = conv_winograd.TRANSFORMS[size].kernel
    for o in (0, 17, 39):
        for c in (0, 4):
            u = G @ kernel[o, c].astype(np.float64) @ G.T
            np.testing.assert_allclose(packed[o // 32, :, c, o % 32], u.reshape(points), rtol=1e-6)
    assert not packed[1, :, :, 8:].any()
