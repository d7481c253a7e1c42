"""Parameters taken in a form of the executable's own (runtime/parameter_forms.py): which parameters
get one, that a kernel in panel order gives the evaluator's answer whether the argument is
prepared once or passed as it is, and that any other use keeps the layout's order."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu.conv.planes import PlaneConvolution, WeightTiles
from pyxla.backends.cpu.conv.tile_plan import KernelPanels
from pyxla.backends.cpu.conv.tiles import TiledConvolution
from pyxla.backends.cpu.runtime.executable import FormedArgument
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.errors import ArgumentError
from pyxla.hlo import evaluate_module, flatten_result, parse_module
from pyxla.runtime.memory import ALIGNMENT

from .differential import emitted_by, random_inputs


def _conv(x: str, w: str, out: str, window: str, labels: str, extra: str = "", root: str = "ROOT c = ",
          t: str = "f32", tail: str = "") -> str:
    return f"""HloModule m
ENTRY e {{
  x = {t}[{x}] parameter(0)
  w = {t}[{w}] parameter(1)
  {root}{t}[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
{tail}}}
"""


CASES = {
    # NCHW with an HWIO kernel, 'same' padding: a ResNet 3x3 (at 7x7: too few tiles for conv/winograd.py)
    "nchw 3x3": _conv("1,64,7,7", "3,3,64,64", "1,64,7,7", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01"),
    # an OIHW kernel (ONNX's own order), strided
    "oihw stride 2": _conv("2,16,15,15", "32,16,3,3", "2,32,7,7", "size=3x3 stride=2x2", "bf01_oi01->bf01"),
    # 48 output features: the second panel zero-padded
    "padded panel": _conv("1,8,9,9", "3,3,8,48", "1,48,9,9", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01"),
    # two groups of 24 output features
    "groups": _conv("1,16,10,10", "3,3,8,48", "1,48,10,10", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01",
                    ", feature_group_count=2"),
    # NHWC, dilated kernel, f64
    "nhwc dilated f64": _conv("1,12,12,8", "3,3,8,40", "1,8,8,40", "size=3x3 rhs_dilate=2x2", "b01f_01io->b01f",
                              t="f64"),
    # tiles of a whole row of 13 positions (AVX-512), and of 11 over two images, strided
    "rows of 13": _conv("1,13,13,24", "3,3,24,40", "1,13,13,40", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f"),
    "rows of 11": _conv("2,22,22,16", "1,1,16,32", "2,11,11,32", "size=1x1 stride=2x2", "b01f_01io->b01f"),
    # a 1-d convolution
    "1d": _conv("3,20,16", "5,16,36", "3,16,36", "size=5", "b0f_0io->b0f"),
}

# Cases whose route holds at AVX-512's vector width only: over AVX2's 8 f32 lanes, 24 input
# features are whole vectors and the 3x3 goes to Winograd's transforms instead of the tiles.
AVX512_CASES = {"rows of 13"}

# convolutions conv/planes.py runs: NCHW 1x1, and small stems over a copy of their windows
PLANE_CASES = {
    "1x1": _conv("2,64,14,14", "1,1,64,80", "2,80,14,14", "size=1x1", "bf01_01io->bf01"),
    "1x1 oihw 7x7": _conv("1,96,7,7", "50,96,1,1", "1,50,7,7", "size=1x1", "bf01_oi01->bf01"),
    "1x1 groups": _conv("1,48,10,10", "1,1,16,60", "1,60,10,10", "size=1x1", "bf01_01io->bf01",
                        ", feature_group_count=3"),
    "1x1 stride 2": _conv("1,32,15,15", "1,1,32,64", "1,64,8,8", "size=1x1 stride=2x2", "bf01_01io->bf01"),
    "stem": _conv("1,3,33,33", "3,3,3,24", "1,24,16,16", "size=3x3 stride=2x2 pad=0_1x0_1", "bf01_01io->bf01"),
    "stem oihw": _conv("2,3,20,20", "16,3,3,3", "2,16,20,20", "size=3x3 pad=1_1x1_1", "bf01_oi01->bf01"),
}


def _tolerance(want: np.ndarray) -> dict:
    """Sums of hundreds of products of inputs of scale 3: rounding relative to the largest."""
    scale = float(np.abs(want).max())
    return dict(rtol=1e-4, atol=1e-5 * scale) if want.dtype == np.float32 else dict(rtol=1e-10, atol=1e-12 * scale)


def _compile(text: str, constant_parameters=(1,)):
    return get_backend("cpu").compile(parse_module(text), constant_parameters=constant_parameters)


@pytest.mark.usefixtures("nchw_convolutions")
@pytest.mark.parametrize("case", [*CASES, *PLANE_CASES])
def test_a_constant_kernel_comes_in_the_order_its_kernel_reads(case, rng, monkeypatch):
    text = CASES.get(case) or PLANE_CASES[case]
    if case in AVX512_CASES:   # whatever the host's width: LLVM splits the wider vectors
        monkeypatch.setattr(host_jit(), "vector_bytes", 64)
    emitter, form = (TiledConvolution, KernelPanels) if case in CASES else (PlaneConvolution, WeightTiles)
    inputs = random_inputs(parse_module(text), rng)
    want = flatten_result(evaluate_module(parse_module(text), inputs))[0]
    emitted = emitted_by(monkeypatch, emitter)
    executable = _compile(text)
    assert emitted and isinstance(executable.parameter_forms.get(1), form)
    prepared = executable.prepare_argument(1, inputs[1])
    assert isinstance(prepared, FormedArgument) and prepared.array.ctypes.data % ALIGNMENT == 0
    tol = _tolerance(want)
    # prepared once and passed on every call ...
    for _ in range(2):
        got = executable.run_unchecked([inputs[0], prepared])[0]
        np.testing.assert_allclose(got, want, **tol)
    # ... or passed as it is, reordered on the call
    np.testing.assert_allclose(executable.run_unchecked(inputs)[0], want, **tol)
    np.testing.assert_allclose(executable.run_flat(inputs)[0], want, **tol)


def test_weight_tiles_are_what_the_form_says(rng):
    """WeightTiles.pack: element (group, tile t, row c, lane) is the kernel's (c, output
    feature group * 20 + t * 8 + lane), zero past a group's features."""
    form = WeightTiles(output_dim=3, row_dims=(0, 1, 2), groups=2, features=8)
    kernel = rng.standard_normal((1, 1, 12, 40))     # HWIO: 2 groups of 20 output features
    packed = form.pack(kernel)
    assert packed.shape == (2, 3, 12, 8)
    for group in range(2):
        for t in range(3):
            for lane in range(8):
                feature = t * 8 + lane
                if feature < 20:
                    np.testing.assert_array_equal(packed[group, t, :, lane], kernel[0, 0, :, group * 20 + feature])
                else:
                    assert not packed[group, t, :, lane].any()


def test_panel_order_is_what_the_form_says(rng):
    """KernelPanels.pack: element (panel q, offsets, i, lane) is the kernel's (offsets, i,
    output feature q * panel + lane), zero past a group's features."""
    form = KernelPanels(output_dim=0, input_dim=1, spatial_dims=(2, 3), groups=2, panel_columns=16)
    kernel = rng.standard_normal((2 * 20, 3, 2, 5))     # OIHW: 2 groups of 20 output features
    packed = form.pack(kernel)
    assert packed.shape == (4, 2, 5, 3, 16)
    for q in range(4):
        group, first = divmod(q * 16, 32)
        for lane in range(16):
            feature = first + lane
            if feature < 20:
                np.testing.assert_array_equal(packed[q, :, :, :, lane], kernel[group * 20 + feature].transpose(1, 2, 0))
            else:
                assert not packed[q, :, :, :, lane].any()


def test_a_wrong_argument_is_refused_by_name(rng):
    executable = _compile(CASES["nchw 3x3"])
    with pytest.raises(ArgumentError, match="parameter w: expected shape"):
        executable.prepare_argument(1, rng.standard_normal((3, 3, 64, 32)).astype(np.float32))
    with pytest.raises(ArgumentError, match="parameter w: expected element type"):
        executable.prepare_argument(1, rng.integers(0, 2, (3, 3, 64, 64)).astype(bool))
    # an f64 array of f32 values is converted, as a call converts it
    kernel = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    prepared = executable.prepare_argument(1, kernel.astype(np.float64))
    assert prepared.array.dtype == np.float32


def test_forms_only_for_constant_parameters():
    assert _compile(CASES["nchw 3x3"], constant_parameters=()).parameter_forms == {}
    assert _compile(CASES["nchw 3x3"], constant_parameters=(0,)).parameter_forms == {}   # the input


@pytest.mark.parametrize("tail", [
    "  ROOT t = (f32[1,64,14,14], f32[3,3,64,64]) tuple(c, w)\n",                  # also an output
    "  n = f32[3,3,64,64] negate(w)\n  ROOT t = (f32[1,64,14,14], f32[3,3,64,64]) tuple(c, n)\n",  # read elementwise
])
def test_a_kernel_with_other_uses_keeps_its_layout(tail, rng):
    text = _conv("1,64,14,14", "3,3,64,64", "1,64,14,14", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01",
                 root="c = ", tail=tail)
    inputs = random_inputs(parse_module(text), rng)
    executable = _compile(text)
    assert executable.parameter_forms == {}
    assert executable.prepare_argument(1, inputs[1]) is inputs[1]
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    for g, w in zip(executable.run_unchecked([inputs[0], executable.prepare_argument(1, inputs[1])]), want):
        np.testing.assert_allclose(g, w, **_tolerance(w))


def test_kernels_read_where_they_are():
    """A reversed window is packed per call by the tiles; a 1x1 convolution over a 1x1 map is
    a matrix-vector product (conv/pointwise.py), which reads the kernel where it is."""
    reversed_ = _conv("1,16,9,9", "3,3,16,32", "1,32,7,7", "size=3x3 rhs_reversal=1x1", "bf01_01io->bf01")
    assert _compile(reversed_).parameter_forms == {}
    classifier = _conv("1,256,1,1", "1,1,256,100", "1,100,1,1", "size=1x1", "bf01_01io->bf01")
    assert _compile(classifier).parameter_forms == {}


def test_two_convolutions_sharing_a_kernel(rng):
    text = """HloModule m
ENTRY e {
  x = f32[1,32,8,8] parameter(0)
  w = f32[3,3,32,32] parameter(1)
  c = f32[1,32,8,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
  r = f32[1,32,8,8] maximum(c, c)
  ROOT d = f32[1,32,8,8] convolution(r, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
}
"""
    inputs = random_inputs(parse_module(text), rng)
    executable = _compile(text)
    assert isinstance(executable.parameter_forms.get(1), KernelPanels)
    want = flatten_result(evaluate_module(parse_module(text), inputs))[0]
    got = executable.run_unchecked([inputs[0], executable.prepare_argument(1, inputs[1])])[0]
    np.testing.assert_allclose(got, want, **_tolerance(want))


def test_a_fresh_process_packs_a_constant_kernel_for_the_route_it_runs(tmp_path):
    """The first compile of a process chooses a constant kernel's form before any code is
    emitted: every route (Winograd's for a 3x3 convolution at 28x28) must be registered by
    then, or the kernel is packed for one route and read by another (a wrong answer that
    constant test weights would hide). Random weights, checked against NumPy in float64."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from pyxla.backends import get_backend
        from pyxla.hlo import parse_module
        text = sys.argv[1]
        rng = np.random.default_rng(5)
        x = rng.standard_normal((1, 28, 28, 32)).astype(np.float32)
        w = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
        exe = get_backend("cpu").compile(parse_module(text), constant_parameters=(1,))
        form = type(exe.parameter_forms[1]).__name__
        got = exe.run_unchecked([x, exe.prepare_argument(1, w)])[0].astype(np.float64)
        xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
        want = sum(np.einsum("nhwc,co->nhwo", xp[:, i:i + 28, j:j + 28], w[i, j].astype(np.float64))
                   for i in range(3) for j in range(3))
        print(form, float(np.abs(got - want).max() / np.abs(want).max()))
    """)
    text = _conv("1,28,28,32", "3,3,32,32", "1,28,28,32", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f")
    env = {**os.environ, "PYXLA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script, text], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    form, error = done.stdout.split()
    assert form == "WinogradKernel"
    assert float(error) < 1e-4
