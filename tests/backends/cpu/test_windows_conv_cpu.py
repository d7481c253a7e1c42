"""reduce-window, select-and-scatter and convolution on the CPU backend against the evaluator:
padding (negative too), strides, base and window dilation, variadic and mixed-precision
reducers; convolutions in 1-D/2-D/3-D, NHWC and NCHW, feature and batch groups, window
reversal, the f32/f64 paths (chunked patch matrices) and the loop path (integers, bf16,
depthwise, a fused epilogue)."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.cpu.codegen import OUTPUT_FUSION_KERNELS, register_kernels
from pyxla.backends.cpu.conv import tile_plan
from pyxla.backends.cpu.conv import tiles as conv_tiles
from pyxla.backends.cpu.ops import windows
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.backends.llvm import windows as llvm_windows
from pyxla.errors import VerifierError
from pyxla.hlo import evaluate_module, parse_module, verify_module

from ...passes.test_convolution_layout import PADDED_CHAIN
from .differential import assert_cpu_matches_interpreter

REDUCERS = {
    "add": "ROOT sum = {t}[] add(a, b)",
    "maximum": "ROOT max = {t}[] maximum(a, b)",
    "minimum": "ROOT min = {t}[] minimum(a, b)",
}
IDENTITY = {"add": "0", "maximum": "-inf", "minimum": "inf"}


def reduce_window_module(reducer: str, t: str, dims: str, window: str, out: str, in_t: str | None = None) -> str:
    in_t = in_t or t
    init = IDENTITY[reducer] if t.startswith("f") else {"add": "0", "maximum": "-2147483648",
                                                         "minimum": "2147483647"}[reducer]
    return f"""HloModule rw
red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  {REDUCERS[reducer].format(t=t)}
}}
ENTRY main {{
  x = {in_t}[{dims}] parameter(0)
  init = {t}[] constant({init})
  ROOT r = {t}[{out}] reduce-window(x, init), window={{{window}}}, to_apply=red
}}
"""


def window_output(dims, window_text):
    """XLA's window output dims for `size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=..`."""
    fields = dict(f.split("=") for f in window_text.split())
    rank = len(dims)

    def field(name, default):
        return [int(v) for v in fields[name].split("x")] if name in fields else [default] * rank

    size, stride = field("size", 1), field("stride", 1)
    lhs, rhs = field("lhs_dilate", 1), field("rhs_dilate", 1)
    pads = [tuple(int(v) for v in p.split("_")) for p in fields["pad"].split("x")] if "pad" in fields \
        else [(0, 0)] * rank
    out = []
    for n, k, s, ld, r, (lo, hi) in zip(dims, size, stride, lhs, rhs, pads):
        padded = (n - 1) * ld + 1 + lo + hi
        span = (k - 1) * r + 1
        out.append(max(0, (padded - span) // s + 1))
    return out


WINDOWS = [
    ((2, 9, 8, 3), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),
    ((3, 17), "size=1x17 pad=0_0x16_0"),                           # a cumulative sum
    ((4, 10), "size=2x3 stride=1x2 pad=1_-1x2_0"),                 # negative padding crops
    ((11, 7), "size=3x2 lhs_dilate=2x1 rhs_dilate=1x2 pad=2_1x0_1"),  # base and window dilation
    ((5, 6, 7), "size=2x2x2 stride=2x1x3 rhs_dilate=2x2x1"),
]


@pytest.mark.parametrize("reducer", ["add", "maximum", "minimum"])
@pytest.mark.parametrize("dims,window", WINDOWS, ids=[w for _, w in WINDOWS])
def test_reduce_window_float(dims, window, reducer, rng):
    out = window_output(dims, window)
    text = reduce_window_module(reducer, "f32", ",".join(map(str, dims)), window, ",".join(map(str, out)))
    x = (rng.standard_normal(dims) * 3).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size)] = np.nan   # NaN-propagating max/min
    got = assert_cpu_matches_interpreter(text, rng, [x], rtol=1e-5, atol=1e-5)
    assert got[0].shape == tuple(out)


clamp = llvm_windows.clamped_windows
POOLS = [
    # (dims, window, whether every window holds an element: padding read as the nearest one)
    ((1, 3, 12, 11), "size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1", True),   # ResNet's max pool
    ((2, 5, 7), "size=1x4x2 stride=1x3x1 pad=0_0x2_3x1_0", True),
    ((2, 4, 6), "size=1x2x2 stride=1x1x1 pad=0_0x3_0x0_0", False),   # windows of padding only: init
    ((3, 9), "size=1x3 rhs_dilate=1x2 pad=0_0x2_2", False),          # window dilation: checked
]


@pytest.mark.parametrize("reducer", ["maximum", "minimum"])
@pytest.mark.parametrize("dims,window,clamped", POOLS, ids=[w for _, w, _ in POOLS])
def test_pooling_reads_padding_as_the_nearest_element(dims, window, clamped, reducer, rng, monkeypatch):
    """A max or min over windows that each hold an element reads padding as the nearest
    element (llvm/windows.py's clamped_windows); NaNs at the edges still propagate, and windows of
    padding only give the init value."""
    decided = []
    monkeypatch.setattr(llvm_windows, "clamped_windows", lambda instr: decided.append(clamp(instr)) or decided[-1])
    out = window_output(dims, window)
    text = reduce_window_module(reducer, "f32", ",".join(map(str, dims)), window, ",".join(map(str, out)))
    x = (rng.standard_normal(dims) * 3).astype(np.float32)
    x[..., 0] = np.where(rng.random(x[..., 0].shape) < 0.3, np.nan, x[..., 0])
    assert_cpu_matches_interpreter(text, rng, [x], rtol=0, atol=0)
    assert decided and all(d == clamped for d in decided)


ROWS = [
    ((1, 2, 9, 40), "size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1"),   # interior from 1 to the end
    ((2, 3, 30), "size=1x1x5 pad=0_0x0_0x2_4"),                          # edges at both ends
    ((3, 37), "size=2x4 stride=1x3 rhs_dilate=1x2 pad=1_0x3_1"),          # window dilation
    ((2, 25), "size=1x3 pad=0_0x-2_1"),                                   # a crop
]


@pytest.mark.parametrize("reducer", ["add", "maximum"])
@pytest.mark.parametrize("dims,window", ROWS, ids=[w for _, w in ROWS])
def test_pool_rows_split_at_their_interior(dims, window, reducer, rng, monkeypatch):
    """A reduce-window kernel row by row: positions whose windows lie inside the input along
    the last dimension without checks, those at its edges with them (windows._emit_rows)."""
    interiors = []
    find = windows._interior
    monkeypatch.setattr(windows, "_interior", lambda instr, *least: interiors.append(find(instr, *least)) or interiors[-1])
    out = window_output(dims, window)
    text = reduce_window_module(reducer, "f32", ",".join(map(str, dims)), window, ",".join(map(str, out)))
    x = (rng.standard_normal(dims) * 3).astype(np.float32)
    assert_cpu_matches_interpreter(text, rng, [x], rtol=1e-6, atol=1e-5)
    assert interiors and all(i is not None for i in interiors)


VECTOR_ROWS = [
    ((1, 3, 14, 14), "size=1x1x3x3 pad=0_0x0_0x1_1x1_1"),                  # Inception's 3x3 'same' pools
    ((1, 2, 7, 7), "size=1x1x3x3 pad=0_0x0_0x1_1x1_1"),                    # rows of 7: half-width vectors
    ((1, 2, 15, 15), "size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x0_1x0_1"),   # stride 2 over a short row
    ((2, 40, 21), "size=1x2x3 stride=1x2x3"),                              # stride 3, no padding
    ((1, 9, 9, 48), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),    # NHWC: vectors of the host's width
    ((1, 9, 9, 40), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),    # NHWC: 8 lanes where 16 do not divide
]


@pytest.mark.parametrize("specials", [True, False], ids=["nans-and-zeros", "plain"])
@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("reducer", ["maximum", "minimum"])
@pytest.mark.parametrize("vector_bytes", [32, 64], ids=["avx2", "avx512"])
@pytest.mark.parametrize("dims,window", VECTOR_ROWS, ids=[w for _, w in VECTOR_ROWS])
def test_max_pool_rows_in_vectors(dims, window, reducer, t, specials, vector_bytes, rng, monkeypatch):
    """Clamped max and min pools compute their rows' interiors a vector of outputs at a time
    (windows._VectorRow), exactly: NaNs propagate and -0 orders below +0 as in the scalar
    fold, which the scalar edges still use. Without NaNs or zeros every vector keeps its
    plain compare-and-select fold; with them, vectors that meet one take the exact fold.
    The route depends on the host's vector width (strided rows at least a vector long are
    left to LLVM's vectoriser), so both widths are compiled whatever the host's: with
    AVX-512's every case here takes the vector rows; with AVX2's the answer must still be
    exact, by whichever route."""
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    emitted = []
    emit = windows._VectorRow.emit
    monkeypatch.setattr(windows._VectorRow, "emit", lambda self, *args: emitted.append(1) or emit(self, *args))
    out = window_output(dims, window)
    text = reduce_window_module(reducer, t, ",".join(map(str, dims)), window, ",".join(map(str, out)))
    x = (rng.standard_normal(dims) * 3).astype(t.replace("f", "float"))
    if specials:
        x.flat[rng.choice(x.size, x.size // 10, replace=False)] = np.nan
        zeros = rng.choice(x.size, x.size // 5, replace=False)
        x.flat[zeros] = np.where(rng.random(zeros.size) < 0.5, -0.0, 0.0)
    got = assert_cpu_matches_interpreter(text, rng, [x], rtol=0, atol=0)
    want = evaluate_module(parse_module(text), [x])
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(np.asarray(want)))
    assert emitted or vector_bytes < 64


@pytest.mark.parametrize("dims,window", WINDOWS[2:4], ids=[w for _, w in WINDOWS[2:4]])
def test_reduce_window_integers_exact(dims, window, rng):
    out = window_output(dims, window)
    text = reduce_window_module("add", "s32", ",".join(map(str, dims)), window, ",".join(map(str, out)))
    assert_cpu_matches_interpreter(text, rng)


def test_reduce_window_bf16_into_f32_accumulator(rng):
    """A reducer takes its operand's element type: XLA's verifier refuses a bf16 operand
    folded by an f32 reducer, and so does pyxla's (its CPU backend once failed in LLVM on
    such a module). Converted to f32 first, as JAX writes it, it runs."""
    mixed = reduce_window_module("add", "f32", "6,20", "size=2x5 stride=2x1 pad=0_0x2_2", "3,20", in_t="bf16")
    with pytest.raises(VerifierError, match="operand 0 is bf16, but reducer red takes f32"):
        verify_module(parse_module(mixed))
    converted = mixed.replace("ROOT r = f32[3,20] reduce-window(x, ",
                              "xf = f32[6,20] convert(x)\n  ROOT r = f32[3,20] reduce-window(xf, ")
    assert converted != mixed
    assert_cpu_matches_interpreter(converted, rng, rtol=1e-5, atol=1e-5)


VARIADIC = """HloModule argmax_window
red {
  va = f32[] parameter(0)
  ia = s32[] parameter(1)
  vb = f32[] parameter(2)
  ib = s32[] parameter(3)
  gt = pred[] compare(vb, va), direction=GT
  v = f32[] select(gt, vb, va)
  i = s32[] select(gt, ib, ia)
  ROOT pair = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  x = f32[7,12] parameter(0)
  iota = s32[7,12] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  minus1 = s32[] constant(-1)
  ROOT r = (f32[7,5], s32[7,5]) reduce-window(x, iota, ninf, minus1), window={size=1x4 stride=1x2 pad=0_0x1_0}, to_apply=red
}
"""


def test_reduce_window_variadic_argmax(rng):
    x = rng.integers(-3, 4, (7, 12)).astype(np.float32)   # ties: the first index wins
    got = assert_cpu_matches_interpreter(VARIADIC, rng, [x], rtol=0, atol=0)
    assert got[1].min() >= 0


FUSED_POOL = """HloModule pool
red {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT max = f32[] maximum(a, b)
}
ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  y = f32[2,8,8,3] parameter(1)
  s = f32[2,8,8,3] add(x, y)
  init = f32[] constant(-inf)
  p = f32[2,4,4,3] reduce-window(s, init), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_0x1_0x0_0}, to_apply=red
  two = f32[] constant(2)
  b2 = f32[2,4,4,3] broadcast(two), dimensions={}
  ROOT m = f32[2,4,4,3] multiply(p, b2)
}
"""


def test_reduce_window_between_elementwise_ops(rng):
    assert_cpu_matches_interpreter(FUSED_POOL, rng)


def select_and_scatter_module(t: str, dims: str, source: str, window: str, direction: str = "GE",
                              init: str = "0") -> str:
    return f"""HloModule sas
sel {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={direction}
}}
sc {{
  acc = {t}[] parameter(0)
  value = {t}[] parameter(1)
  ROOT s = {t}[] add(acc, value)
}}
ENTRY main {{
  x = {t}[{dims}] parameter(0)
  g = {t}[{source}] parameter(1)
  init = {t}[] constant({init})
  ROOT r = {t}[{dims}] select-and-scatter(x, g, init), window={{{window}}}, select=sel, scatter=sc
}}
"""


SAS_WINDOWS = [
    ((1, 6, 6, 2), "size=1x2x2x1 stride=1x2x2x1"),
    ((2, 7, 7, 3), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),   # overlapping windows, padding
    ((9, 5), "size=4x2 stride=1x1 pad=2_1x1_0"),
]


@pytest.mark.parametrize("dims,window", SAS_WINDOWS, ids=[w for _, w in SAS_WINDOWS])
def test_select_and_scatter_max_pool_gradient(dims, window, rng):
    source = window_output(dims, window)
    text = select_and_scatter_module("f32", ",".join(map(str, dims)), ",".join(map(str, source)), window)
    x = rng.integers(-2, 3, dims).astype(np.float32)     # ties: the first maximum is selected
    g = (rng.standard_normal(source) * 2).astype(np.float32)
    got = assert_cpu_matches_interpreter(text, rng, [x, g], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[0].sum(), g.sum(), rtol=1e-4, atol=1e-4)   # every source value lands once


def test_select_and_scatter_integers_min_select(rng):
    dims, window = (8, 9), "size=3x3 stride=2x2 pad=1_1x1_1"
    source = window_output(dims, window)
    text = select_and_scatter_module("s32", "8,9", ",".join(map(str, source)), window, direction="LE", init="7")
    assert_cpu_matches_interpreter(text, rng)


# --- convolution --------------------------------------------------------------------------------

def conv_module(t: str, lhs: tuple, rhs: tuple, out: tuple, window: str, labels: str, extra: str = "",
                out_t: str | None = None) -> str:
    out_t = out_t or t
    dims = lambda d: ",".join(map(str, d))   # noqa: E731
    return f"""HloModule conv
ENTRY main {{
  x = {t}[{dims(lhs)}] parameter(0)
  w = {t}[{dims(rhs)}] parameter(1)
  ROOT c = {out_t}[{dims(out)}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""


def conv_shapes(labels: str, batch: int, features: int, spatial: tuple, out_features: int, window: str,
                fgc: int = 1, bgc: int = 1) -> tuple[tuple, tuple, tuple]:
    """Operand and result dims for dim_labels `labels` (e.g. b01f_01io->b01f)."""
    lhs_l, rest = labels.split("_")
    rhs_l, out_l = rest.split("->")
    size = [int(v) for v in dict(f.split("=") for f in window.split())["size"].split("x")]
    out_spatial = window_output(spatial, window)

    def arrange(layout, roles):
        return tuple(roles[c] if c in roles else roles[int(c)] for c in layout)

    lhs = arrange(lhs_l, {"b": batch, "f": features, **dict(enumerate(spatial))})
    rhs = arrange(rhs_l, {"i": features // fgc, "o": out_features, **dict(enumerate(size))})
    out = arrange(out_l, {"b": batch // bgc, "f": out_features, **dict(enumerate(out_spatial))})
    return lhs, rhs, out


CONVS = [
    # (labels, batch, features, spatial, out features, window, fgc, bgc)
    ("b0f_0io->b0f", 2, 3, (12,), 5, "size=4", 1, 1),
    ("bf0_oi0->bf0", 3, 4, (15,), 6, "size=3 stride=2 pad=2_1 rhs_dilate=2", 1, 1),
    ("b01f_01io->b01f", 2, 3, (7, 7), 8, "size=3x3 stride=2x2 pad=1_1x1_1", 1, 1),
    ("bf01_oi01->bf01", 1, 2, (10, 8), 6, "size=3x2 pad=1_2x0_1 rhs_dilate=2x2", 1, 1),
    ("b01f_01io->b01f", 1, 3, (4, 4), 4, "size=3x3 pad=2_1x2_1 lhs_dilate=2x2", 1, 1),       # transposed conv
    ("b01f_01io->b01f", 2, 4, (6, 7), 8, "size=3x3 pad=-1_1x0_-1 rhs_reversal=1x0", 1, 1),  # crop, reversal
    ("b01f_01io->b01f", 2, 6, (6, 6), 8, "size=3x3 pad=1_1x1_1", 2, 1),                     # feature groups
    ("b01f_01io->b01f", 2, 4, (8, 8), 4, "size=3x3 pad=1_1x1_1", 4, 1),                     # depthwise
    ("f01b_i01o->01bf", 6, 3, (5, 5), 8, "size=2x2 stride=1x2", 1, 2),                      # batch groups
    ("b012f_012io->b012f", 2, 2, (5, 4, 6), 4, "size=2x3x2 stride=1x1x2 pad=1_0x1_1x0_1 lhs_dilate=1x1x2", 1, 1),
    ("bf012_oi012->bf012", 1, 3, (4, 5, 4), 5, "size=2x2x2 rhs_dilate=2x1x1 pad=0_0x1_0x0_1", 1, 1),
]


@pytest.mark.parametrize("t,np_t,tol", [("f32", np.float32, 2e-5), ("f64", np.float64, 1e-12)])
@pytest.mark.parametrize("case", CONVS, ids=[f"{c[0]}-{c[5]}-g{c[6]}b{c[7]}" for c in CONVS])
def test_convolution_floats(case, t, np_t, tol, rng, convolution_layouts):
    labels, batch, features, spatial, out_features, window, fgc, bgc = case
    lhs, rhs, out = conv_shapes(labels, batch, features, spatial, out_features, window, fgc, bgc)
    extra = (f", feature_group_count={fgc}" if fgc > 1 else "") + (f", batch_group_count={bgc}" if bgc > 1 else "")
    text = conv_module(t, lhs, rhs, out, window, labels, extra)
    got = assert_cpu_matches_interpreter(text, rng, rtol=tol, atol=tol)
    assert got[0].shape == out


TILED_CONVS = [
    # (labels, batch, features, spatial, out features, window, fgc): several panels of output
    # features with a partial last one, tiles cut by the end of the positions, groups
    ("b01f_01io->b01f", 3, 24, (9, 11), 40, "size=3x3 pad=1_1x1_1", 1),
    ("bf01_oi01->bf01", 2, 16, (7, 7), 72, "size=3x3 stride=2x2 pad=1_1x1_1", 1),
    ("b01f_01io->b01f", 2, 40, (6, 5), 40, "size=1x1", 2),
    ("b01f_01io->b01f", 1, 24, (7, 7), 40, "size=3x3 pad=1_1x1_1", 1),    # 49 positions: tiles of 7 (AVX-512)
    # tiles that divide the output rows address their pixels by one step (TilePlan.pixel_step):
    # staged with its padding (rows of 8: AVX-512's tiles; 6 x 12: AVX2's), read in place
    ("b01f_01io->b01f", 2, 16, (16, 16), 40, "size=3x3 stride=2x2 pad=1_1x1_1", 1),
    ("b01f_01io->b01f", 2, 16, (12, 24), 24, "size=3x3 stride=2x2 pad=1_1x1_1", 1),
    ("b01f_01io->b01f", 2, 24, (16, 16), 40, "size=1x1 stride=2x2", 1),
]


@pytest.mark.parametrize("sliced", [False, True], ids=["whole-depth", "depth-slices"])
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("case", TILED_CONVS, ids=["panels", "nchw-stride", "groups-1x1", "sevens", "rows-of-8",
                                                  "rows-of-12", "in-place-stride"])
def test_convolution_tiles_of_each_vector_width(case, vector_bytes, sliced, rng, monkeypatch, convolution_layouts):
    """Register tiles of AVX2's and AVX-512's width (tile_plan.TILE_POSITIONS), whatever the
    host's: LLVM splits vectors wider than the host's registers; the kernel read whole by
    each tile, or in slices of the depth (segments of 5 rows: a shorter last one)."""
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    if sliced:
        monkeypatch.setattr(tile_plan, "SLICED_FROM_BYTES", 0)
        monkeypatch.setattr(tile_plan, "KERNEL_SLICE_BYTES", 5 * 2 * vector_bytes)
    labels, batch, features, spatial, out_features, window, fgc = case
    lhs, rhs, out = conv_shapes(labels, batch, features, spatial, out_features, window, fgc)
    extra = f", feature_group_count={fgc}" if fgc > 1 else ""
    assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, window, labels, extra), rng,
                                   rtol=1e-5, atol=1e-3)   # sums of up to 216 products of size ~1, results to ~300


NCHW_STAGED = [
    # (batch, features, spatial, out features, window, fgc): NCHW images staged by square
    # blocks, the last block of the features and of each row overlapping the one before
    (2, 20, (9, 21), 24, "size=3x3 pad=1_2x2_1", 1),
    (1, 32, (17, 16), 48, "size=3x3 stride=2x2 pad=1_1x1_1", 2),
    (1, 16, (5, 33), 32, "size=2x5 pad=0_0x2_2", 1),
]


@pytest.mark.usefixtures("nchw_convolutions")
@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("case", NCHW_STAGED, ids=["overlaps", "groups-stride", "unpadded-rows"])
def test_nchw_input_staged_by_blocks(case, vector_bytes, rng, monkeypatch):
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    staged = []
    by_blocks = conv_tiles.TiledConvolution._stage_by_blocks
    monkeypatch.setattr(conv_tiles.TiledConvolution, "_stage_by_blocks",
                        lambda self, ptr: staged.append(self.conv.name) or by_blocks(self, ptr))
    batch, features, spatial, out_features, window, fgc = case
    labels = "bf01_01io->bf01"
    lhs, rhs, out = conv_shapes(labels, batch, features, spatial, out_features, window, fgc)
    extra = f", feature_group_count={fgc}" if fgc > 1 else ""
    assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, window, labels, extra), rng,
                                   rtol=1e-5, atol=1e-3)
    assert staged == ["c"]


@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize("labels", ["f01b_i01o->01bf", "f01b_01io->b01f", "fb01_01io->b01f"])
def test_features_first_input_with_an_inner_batch(labels, vector_bytes, rng, monkeypatch):
    """A weight gradient's convolution reads the activations as f01b (the images' batch
    minor-most): features-first, but not NCHW images, so not staged by blocks, whose rows
    would be read as if contiguous (the CNN's weight gradients were wrong at 8x8 maps with 8
    or more images)."""
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    staged = []
    by_blocks = conv_tiles.TiledConvolution._stage_by_blocks
    monkeypatch.setattr(conv_tiles.TiledConvolution, "_stage_by_blocks",
                        lambda self, ptr: staged.append(self.conv.name) or by_blocks(self, ptr))
    lhs, rhs, out = conv_shapes(labels, 5, 16, (16, 16), 8, "size=3x3 pad=1_1x1_1")
    assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, "size=3x3 pad=1_1x1_1", labels), rng,
                                   rtol=1e-5, atol=1e-3)
    assert staged == []


@pytest.mark.parametrize("case", [CONVS[2], CONVS[6], CONVS[8]], ids=["plain", "groups", "batch_groups"])
def test_convolution_integers_and_bf16_use_loops(case, rng):
    labels, batch, features, spatial, out_features, window, fgc, bgc = case
    lhs, rhs, out = conv_shapes(labels, batch, features, spatial, out_features, window, fgc, bgc)
    extra = (f", feature_group_count={fgc}" if fgc > 1 else "") + (f", batch_group_count={bgc}" if bgc > 1 else "")
    assert_cpu_matches_interpreter(conv_module("s8", lhs, rhs, out, window, labels, extra, out_t="s32"), rng)
    assert_cpu_matches_interpreter(conv_module("bf16", lhs, rhs, out, window, labels, extra, out_t="f32"), rng,
                                   rtol=1e-5, atol=1e-4)


def test_convolution_chunked_patch_matrix(rng):
    """A 47 x 61 output (by F(4x4, 3x3), conv/winograd.py)."""
    lhs, rhs, out = conv_shapes("b01f_01io->b01f", 1, 16, (47, 61), 8, "size=3x3 pad=1_1x1_1")
    # sums of 144 products of size ~10, to ~200: F(4x4, 3x3) rounds to about 1e-5 of that
    assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, "size=3x3 pad=1_1x1_1", "b01f_01io->b01f"),
                                   rng, rtol=1e-5, atol=2e-3)


def test_convolution_non_default_layouts(rng):
    text = """HloModule conv
ENTRY main {
  x = f32[2,3,9,9]{1,3,2,0} parameter(0)
  w = f32[3,3,3,8]{0,1,3,2} parameter(1)
  ROOT c = f32[2,8,5,5]{2,1,3,0} convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=2e-5, atol=2e-5)


CONV_EPILOGUE = """HloModule conv_relu
ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  w = f32[3,3,3,8] parameter(1)
  bias = f32[8] parameter(2)
  c = f32[2,8,8,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[2,8,8,8] broadcast(bias), dimensions={3}
  a = f32[2,8,8,8] add(c, bb)
  zero = f32[] constant(0)
  z = f32[2,8,8,8] broadcast(zero), dimensions={}
  ROOT r = f32[2,8,8,8] maximum(a, z)
}
"""


def test_convolution_with_fused_epilogue(rng, monkeypatch):
    """The bias and relu fuse into the convolution's kernel: one kOutput fusion."""
    calls = []
    register_kernels()
    kernel = OUTPUT_FUSION_KERNELS["convolution"]
    monkeypatch.setitem(OUTPUT_FUSION_KERNELS, "convolution", lambda ke: calls.append(ke.instr) or kernel(ke))
    got = assert_cpu_matches_interpreter(CONV_EPILOGUE, rng, rtol=2e-5, atol=2e-5)
    assert got[0].min() == 0.0
    assert [c.attrs["kind"] for c in calls] == ["kOutput"]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the evaluator's own 0 * inf
def test_convolution_nan_in_padding_reach(rng):
    """Padding reads as zero and 0 * inf is NaN, as in the evaluator (and XLA's im2col)."""
    lhs, rhs, out = conv_shapes("b01f_01io->b01f", 1, 2, (5, 5), 4, "size=3x3 pad=1_1x1_1")
    x = rng.standard_normal(lhs).astype(np.float32)
    w = rng.standard_normal(rhs).astype(np.float32)
    w[0, 0, 0, 0] = np.inf
    got = assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, "size=3x3 pad=1_1x1_1",
                                                     "b01f_01io->b01f"), rng, [x, w], rtol=2e-5, atol=2e-5)
    assert np.isnan(got[0][0, 0, 0, 0])


def test_zero_size_convolution(rng):
    text = conv_module("f32", (0, 5, 3), (3, 3, 4), (0, 3, 4), "size=3", "b0f_0io->b0f")
    module = parse_module(text)
    got = get_backend("cpu").compile(module).run_flat([np.zeros((0, 5, 3), np.float32),
                                                        rng.standard_normal((3, 3, 4)).astype(np.float32)])
    assert got[0].shape == (0, 3, 4)


def test_windows_over_an_empty_input_see_only_padding(rng):
    """An empty spatial input with padding: every window is padding (init value, or zero)."""
    pool = reduce_window_module("maximum", "f32", "3,0", "size=1x2 pad=0_0x1_2", "3,2")
    got = assert_cpu_matches_interpreter(pool, rng, [np.zeros((3, 0), np.float32)])
    assert np.all(got[0] == -np.inf)
    lhs, rhs, out = conv_shapes("b0f_0io->b0f", 2, 3, (0,), 4, "size=2 pad=2_1")
    got = assert_cpu_matches_interpreter(conv_module("f32", lhs, rhs, out, "size=2 pad=2_1", "b0f_0io->b0f"), rng,
                                         [np.zeros(lhs, np.float32), rng.standard_normal(rhs).astype(np.float32)])
    assert got[0].shape == out and np.all(got[0] == 0)


def test_tiles_of_fourteen_only_over_a_kernel_in_panel_order(monkeypatch):
    """A 14x14 map: tiles of 14 positions when the kernel comes in panel order (its values
    checked in test_parameter_forms.py, "nchw 3x3"), of 7 when it is read where it lies."""
    monkeypatch.setattr(host_jit(), "vector_bytes", 64)
    conv = parse_module(conv_module("f32", (1, 14, 14, 24), (3, 3, 24, 40), (1, 14, 14, 40), "size=3x3 pad=1_1x1_1",
                                    "b01f_01io->b01f", "")).entry.root
    x, w = (op.shape for op in conv.operands)
    assert tile_plan.plan(conv, x, w, 2, panel_ordered=True).positions == 14
    assert tile_plan.plan(conv, x, w, 2).positions == 7


@pytest.mark.parametrize("vector_bytes,window,spatial,step", [
    (64, "size=3x3 stride=2x2 pad=1_1x1_1", (16, 16), 2 * 16),   # staged: 8 | 8 output columns
    (64, "size=1x1 stride=2x2", (16, 16), 2 * 16),               # read in place
    (32, "size=3x3 stride=2x2 pad=1_1x1_1", (12, 24), 2 * 16),   # 6 | 12
    (64, "size=3x3 stride=2x2 pad=1_1x1_1", (12, 24), None),     # tiles of 8 cross rows of 12
])
def test_pixels_one_step_apart_when_tiles_divide_the_rows(vector_bytes, window, spatial, step, monkeypatch):
    monkeypatch.setattr(host_jit(), "vector_bytes", vector_bytes)
    lhs, rhs, out = conv_shapes("b01f_01io->b01f", 2, 16, spatial, 40, window)
    conv = parse_module(conv_module("f32", lhs, rhs, out, window, "b01f_01io->b01f")).entry.root
    x, w = (op.shape for op in conv.operands)
    assert tile_plan.plan(conv, x, w, 2).pixel_step == step


@pytest.mark.parametrize("width,panel_ordered,positions", [
    (13, True, 13), (55, True, 11), (27, True, 9), (56, True, 14), (7, True, 7),
    (111, True, 14),    # no tile of 7 to 14 divides 111: the fewest wasted of 14, 8, 7
    (13, False, 8),     # over a kernel read where it lies: tiles of 8 or 7 only, the cheaper
])
def test_tiles_divide_the_output_rows_where_they_can(width, panel_ordered, positions, monkeypatch):
    monkeypatch.setattr(host_jit(), "vector_bytes", 64)
    conv = parse_module(conv_module("f32", (1, width, width, 16), (1, 1, 16, 32), (1, width, width, 32), "size=1x1",
                                    "b01f_01io->b01f")).entry.root
    x, w = (op.shape for op in conv.operands)
    assert tile_plan.plan(conv, x, w, 2, panel_ordered=panel_ordered).positions == positions


PADDED_OUTPUT = """HloModule padded
ENTRY main {{
  x = f32[2,6,7,24] parameter(0)
  w = f32[3,3,24,40] parameter(1)
  b = f32[40] parameter(2)
  c = f32[2,6,7,40] convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  bb = f32[2,6,7,40] broadcast(b), dimensions={{3}}
  a = f32[2,6,7,40] add(c, bb)
  z = f32[] constant(0)
  zb = f32[2,6,7,40] broadcast(z), dimensions={{}}
  r = f32[2,6,7,40] maximum(a, zb)
  v = f32[] constant({value})
  ROOT p = f32[{dims}] pad(r, v), padding={padding}
}}
"""


@pytest.mark.parametrize("value,dims,padding,border", [
    ("-1.5", "2,9,9,40", "0_0x1_2x0_2x0_0", True),     # a border of -1.5, wider below and right
    ("0", "2,8,9,42", "0_0x1_1x1_1x1_1", True),         # features padded too
    ("0", "2,5,7,40", "0_0x0_-1x0_0x0_0", False),       # a crop: the convolution computed apart
], ids=["border", "features", "crop"])
def test_convolution_writes_its_result_inside_a_border(value, dims, padding, border, rng, monkeypatch):
    """An output fusion ending in a pad: the tiles write the epilogue's values at an offset
    and the kernel fills the border with the pad's value; a pad that crops takes the
    general route (the convolution into scratch, then the epilogue loop)."""
    filled = []
    fill = conv_tiles._fill_border
    monkeypatch.setattr(conv_tiles, "_fill_border", lambda ke, pad, lows: filled.append(lows) or fill(ke, pad, lows))
    text = PADDED_OUTPUT.format(value=value, dims=dims, padding=padding)
    # sums of 216 products of values of about 3 (to ~1e3; Winograd's transforms round them
    # in f32): an element that cancels to near zero is off by up to ~1e-4; a misplaced one by ~10
    got = assert_cpu_matches_interpreter(text, rng, rtol=1e-5, atol=1e-3)
    assert got[0].shape == tuple(map(int, dims.split(",")))
    assert bool(filled) == border


def test_a_padded_convolution_reads_its_input_padded_by_its_producer(rng, monkeypatch):
    """After the layout pass, the 1x1 convolution writes its ReLU inside the zero border
    the 3x3 one reads, which then copies nothing."""
    filled, staged = [], []
    fill = conv_tiles._fill_border
    monkeypatch.setattr(conv_tiles, "_fill_border", lambda ke, pad, lows: filled.append(lows) or fill(ke, pad, lows))
    stage = conv_tiles.TiledConvolution._stage_input
    monkeypatch.setattr(conv_tiles.TiledConvolution, "_stage_input", lambda self: staged.append(1) or stage(self))
    text = PADDED_CHAIN % "f32[1,8,9,9] negate(c2)"
    assert_cpu_matches_interpreter(text, rng, rtol=1e-4, atol=1e-2)   # sums of 144 products, to ~1e3
    assert filled == [(0, 1, 1, 0)] and not staged
