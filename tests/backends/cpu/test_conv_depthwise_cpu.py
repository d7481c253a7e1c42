"""Depthwise and thin-group convolution kernels (conv/depthwise.py) against NumPy float64 and
the reference evaluator, on fresh random inputs: strides, padding (negative too), window
dilation and reversal, channel multipliers, thin groups with several input features, odd
sizes, batches, NHWC and NCHW, 1-D to 3-D, f32 and f64, fused epilogues, split across
threads; the cases it leaves to the elemental loops still compute right."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.conv import depthwise as conv_depthwise
from pyxla.backends.cpu.runtime import parallel
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter
from .test_windows_conv_cpu import conv_module, conv_shapes

TOLERANCE = {"f32": 2e-5, "f64": 1e-12}


@pytest.fixture
def emitted(monkeypatch):
    """The convolutions the depthwise kernel emitted (so a test knows it ran, not the loops)."""
    calls = []
    emit = conv_depthwise.DepthwiseConvolution.emit

    def record(self, *args):
        calls.append(self.p)
        return emit(self, *args)

    monkeypatch.setattr(conv_depthwise.DepthwiseConvolution, "emit", record)
    return calls


def reference_nchw(x, w, stride, pad, dilation, groups):
    """NumPy float64: x [B, C, H, W], w [KH, KW, C / groups, O] (HWIO), output [B, O, OH, OW]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    batch, channels, height, width = x.shape
    kh, kw, per_group, out_features = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (xp.shape[2] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    group_out = out_features // groups
    out = np.zeros((batch, out_features, oh, ow))
    for i in range(kh):
        for j in range(kw):
            r, c = i * dilation[0], j * dilation[1]
            patch = xp[:, :, r:r + (oh - 1) * stride[0] + 1:stride[0], c:c + (ow - 1) * stride[1] + 1:stride[1]]
            for o in range(out_features):
                g = o // group_out
                out[:, o] += np.einsum("bchw,c->bhw", patch[:, g * per_group:(g + 1) * per_group], w[i, j, :, o])
    return out


def onnx_like_module(t, batch, channels, size, multiplier, stride, pad, dilation):
    """A depthwise convolution as the ONNX importer gives it (NCHW input and output, HWIO
    kernel) with a bias and ReLU fused after it."""
    out_features = channels * multiplier
    k = 3
    o = [(n + 2 * p - (k - 1) * d - 1) // s + 1 for n, p, d, s in zip(size, pad, dilation, stride)]
    window = f"size={k}x{k} stride={stride[0]}x{stride[1]} pad={pad[0]}_{pad[0]}x{pad[1]}_{pad[1]} " \
             f"rhs_dilate={dilation[0]}x{dilation[1]}"
    out = f"{t}[{batch},{out_features},{o[0]},{o[1]}]"
    return f"""HloModule dw
ENTRY main {{
  x = {t}[{batch},{channels},{size[0]},{size[1]}] parameter(0)
  w = {t}[{k},{k},1,{out_features}] parameter(1)
  bias = {t}[{out_features}] parameter(2)
  c = {out} convolution(x, w), window={{{window}}}, dim_labels=bf01_01io->bf01, feature_group_count={channels}
  bb = {out} broadcast(bias), dimensions={{1}}
  a = {out} add(c, bb)
  zero = {t}[] constant(0)
  z = {out} broadcast(zero), dimensions={{}}
  ROOT r = {out} maximum(a, z)
}}
"""


ONNX_LIKE = [
    # (batch, channels, spatial, multiplier, stride, pad, dilation)
    (1, 24, (28, 28), 1, (1, 1), (1, 1), (1, 1)),
    (1, 16, (15, 17), 1, (2, 2), (1, 1), (1, 1)),     # odd sizes, stride 2
    (3, 5, (9, 7), 2, (1, 2), (2, 1), (2, 1)),        # batch, multiplier, dilation, mixed strides
    (2, 7, (8, 11), 3, (2, 1), (0, 1), (1, 1)),
]


@pytest.mark.parametrize("t,np_t", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("case", ONNX_LIKE, ids=[f"b{c[0]}c{c[1]}m{c[3]}s{c[4]}d{c[6]}" for c in ONNX_LIKE])
def test_depthwise_with_bias_relu_against_numpy(case, t, np_t, rng, emitted):
    batch, channels, size, multiplier, stride, pad, dilation = case
    text = onnx_like_module(t, batch, channels, size, multiplier, stride, pad, dilation)
    x = rng.standard_normal((batch, channels, *size)).astype(np_t)
    w = rng.standard_normal((3, 3, 1, channels * multiplier)).astype(np_t)
    bias = rng.standard_normal(channels * multiplier).astype(np_t)
    got = get_backend("cpu").compile(parse_module(text)).run_flat([x, w, bias])[0]
    want = np.maximum(reference_nchw(x, w, stride, pad, dilation, channels) + bias[None, :, None, None], 0)
    assert got.dtype == np_t and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[t], atol=TOLERANCE[t] * 10)
    assert 0 < np.count_nonzero(got) < got.size      # the ReLU cut some, not all
    assert [p.g.feature_groups for p in emitted] == [channels]


CONVS = [
    # (labels, batch, features, spatial, out features, window, feature groups)
    ("b01f_01io->b01f", 2, 8, (8, 8), 8, "size=3x3 pad=1_1x1_1", 8),
    ("bf01_oi01->bf01", 2, 8, (8, 8), 8, "size=3x3 pad=1_1x1_1", 8),
    ("b01f_01io->b01f", 1, 6, (9, 11), 12, "size=3x3 stride=2x2 pad=1_1x1_1", 6),
    ("bf01_oi01->bf01", 3, 5, (10, 9), 15, "size=3x3 pad=2_2x2_2 rhs_dilate=2x2", 5),
    ("b01f_01io->b01f", 1, 20, (7, 5), 20, "size=5x3 stride=1x2 pad=2_2x1_1", 20),          # more groups than a block
    ("bf01_oi01->bf01", 2, 4, (8, 8), 4, "size=3x2 pad=-1_1x0_-1 rhs_reversal=1x0", 4),    # crop, reversal
    ("b01f_01io->b01f", 2, 12, (6, 7), 8, "size=3x3 pad=1_1x1_1", 4),                      # 3 inputs, 2 outputs a group
    ("bf01_oi01->bf01", 1, 9, (7, 6), 3, "size=3x3 stride=2x1 pad=1_0x1_1", 1),            # one group, 3 outputs
    ("b0f_0io->b0f", 2, 6, (19,), 12, "size=5 stride=3 pad=2_1", 6),
    ("bf0_oi0->bf0", 1, 3, (300,), 3, "size=3 pad=1_1", 3),                                # a row longer than MAX_ROW
    ("b012f_012io->b012f", 1, 4, (5, 4, 6), 8, "size=2x3x2 stride=1x1x2 pad=1_0x1_1x0_1", 4),
    ("bf012_oi012->bf012", 2, 3, (4, 5, 4), 3, "size=2x2x2 rhs_dilate=2x1x1 pad=0_0x1_0x0_1", 3),
    ("f01b_i01o->01bf", 2, 6, (6, 5), 6, "size=3x3 pad=1_1x1_1", 6),                      # features major-most
]


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("case", CONVS, ids=[f"{c[0]}-{c[5]}-g{c[6]}" for c in CONVS])
def test_depthwise_and_thin_groups_against_evaluator(case, t, rng, emitted):
    labels, batch, features, spatial, out_features, window, groups = case
    lhs, rhs, out = conv_shapes(labels, batch, features, spatial, out_features, window, groups)
    extra = f", feature_group_count={groups}" if groups > 1 else ""
    got = assert_cpu_matches_interpreter(conv_module(t, lhs, rhs, out, window, labels, extra), rng,
                                         rtol=TOLERANCE[t], atol=TOLERANCE[t])
    assert got[0].shape == out
    assert len(emitted) == 1 and emitted[0].g.group_features == out_features // groups


def test_non_default_layouts(rng, emitted):
    """Operands and result in layouts other than row-major: the copy and the writes follow them."""
    text = """HloModule conv
ENTRY main {
  x = f32[2,6,9,9]{1,3,2,0} parameter(0)
  w = f32[3,3,1,12]{0,1,3,2} parameter(1)
  ROOT c = f32[2,12,5,5]{2,1,3,0} convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_01io->bf01, feature_group_count=6
}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=2e-5, atol=2e-5)
    assert len(emitted) == 1


def test_split_across_threads(rng, emitted, monkeypatch):
    """Enough work for several tasks, groups not a whole number of blocks, with an epilogue
    that reads another operand at the output's index (a residual add)."""
    monkeypatch.setattr(codegen, "PARALLEL_MIN_WORK", 64)
    monkeypatch.setattr(conv_depthwise, "PARALLEL_MIN_WORK", 64)
    for labels in ("b01f_01io->b01f", "bf01_01io->bf01"):
        lhs, rhs, out = conv_shapes(labels, 3, 37, (11, 10), 37, "size=3x3 pad=1_1x1_1", 37)
        dims = lambda d: ",".join(map(str, d))   # noqa: E731
        text = f"""HloModule conv
ENTRY main {{
  x = f32[{dims(lhs)}] parameter(0)
  w = f32[{dims(rhs)}] parameter(1)
  y = f32[{dims(out)}] parameter(2)
  c = f32[{dims(out)}] convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}, feature_group_count=37
  ROOT r = f32[{dims(out)}] add(c, y)
}}
"""
        assert_cpu_matches_interpreter(text, rng, rtol=2e-5, atol=2e-5)
    pool = parallel.worker_pool()
    assert len(emitted) == 2
    assert all(p.tasks > 1 if pool is not None else p.tasks == 1 for p in emitted)


def test_epilogue_reading_other_elements_uses_scratch(rng, emitted):
    """An epilogue that reads the convolution at other elements (a reverse) gets the whole
    result from scratch first."""
    text = """HloModule conv
ENTRY main {
  x = f32[1,6,8,8] parameter(0)
  w = f32[3,3,1,6] parameter(1)
  c = f32[1,6,8,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01, feature_group_count=6
  r = f32[1,6,8,8] reverse(c), dimensions={3}
  ROOT n = f32[1,6,8,8] negate(r)
}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=2e-5, atol=2e-5)
    assert len(emitted) == 1


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the evaluator's own 0 * inf
def test_nan_from_infinite_weight_over_padding(rng, emitted):
    """Padding reads as zero and 0 * inf is NaN, as in the evaluator."""
    lhs, rhs, out = conv_shapes("bf01_01io->bf01", 1, 4, (5, 5), 4, "size=3x3 pad=1_1x1_1", 4)
    x = rng.standard_normal(lhs).astype(np.float32)
    w = rng.standard_normal(rhs).astype(np.float32)
    w[0, 0, 0, 1] = np.inf
    got = assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, "size=3x3 pad=1_1x1_1", "bf01_01io->bf01",
                                                     ", feature_group_count=4"), rng, [x, w], rtol=2e-5, atol=2e-5)
    assert np.isnan(got[0][0, 1, 0, 0]) and not np.isnan(got[0][0, 0]).any()
    assert len(emitted) == 1


@pytest.mark.parametrize("labels,window,extra", [
    ("bf01_oi01->bf01", "size=3x3 pad=1_1x1_1 lhs_dilate=2x2", ", feature_group_count=4"),   # base dilation
    ("bf01_oi01->bf01", "size=3x3 pad=1_1x1_1", ", batch_group_count=4"),                    # batch groups
], ids=["lhs_dilate", "batch_groups"])
def test_left_to_the_loops(labels, window, extra, rng, emitted):
    spatial = (6, 5)
    fgc = 4 if "feature" in extra else 1
    bgc = 4 if "batch" in extra else 1
    lhs, rhs, out = conv_shapes(labels, 2 * bgc, 4, spatial, 4, window, fgc, bgc)
    assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, window, labels, extra), rng,
                                   rtol=2e-5, atol=2e-5)
    assert emitted == []


def test_plan_tap_offsets_follow_the_phase_planes():
    """A 3x3 window at stride 2 over a 9x9 input padded by 1 (11x11): phase planes of 6x6;
    tap (i, j) reads phase (i % 2, j % 2) shifted by (i // 2, j // 2) rows and columns."""
    module = parse_module(conv_module("f32", (1, 2, 9, 9), (3, 3, 1, 2), (1, 2, 5, 5), "size=3x3 stride=2x2 pad=1_1x1_1",
                                      "bf01_01io->bf01", ", feature_group_count=2"))
    conv = module.entry.root
    p = conv_depthwise.plan(conv, conv.operands[0].shape, conv.shape, threads=1)
    assert p.phase_dims == (6, 6) and p.row_strides == (6, 1)
    want = [((i % 2) * 2 + j % 2) * 36 + (i // 2) * 6 + j // 2 for i in range(3) for j in range(3)]
    assert list(p.tap_offsets) == want
    assert p.tasks == 1 and p.virtual >= 4 * 6 + 5
