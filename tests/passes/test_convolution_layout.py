"""The convolution layout pass: NCHW convolutions become NHWC ones between transposes, and
the transposes sink through the ops between convolutions until they cancel. Every case runs
the evaluator before and after on fresh random inputs."""
import pytest

from pyxla.passes.algebraic_simplifier import algebraic_simplifier
from pyxla.passes.convolution_layout import convolution_layout
from pyxla.passes.cse import common_subexpression_elimination
from pyxla.passes.dce import dead_code_elimination

from .hlo_checks import entry_opcodes, run_pass

PASSES = [convolution_layout, algebraic_simplifier, common_subexpression_elimination, dead_code_elimination]

REDUCERS = """
HloModule cnn
max {
  u = f32[] parameter(0)
  v = f32[] parameter(1)
  ROOT m = f32[] maximum(u, v)
}
sum {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
"""

# conv 3x3 + bias + ReLU, a residual add (the ReLU has two users), a stride-2 max pool, a
# 1x1 conv, padding, a 3x3 conv without padding, and a global average pool's sum.
CHAIN = REDUCERS + """
ENTRY main {
  x = f32[1,5,9,9] parameter(0)
  w1 = f32[3,3,5,8] parameter(1)
  b1 = f32[8] parameter(2)
  w2 = f32[1,1,8,6] parameter(3)
  w3 = f32[6,6,3,3] parameter(4)
  c1 = f32[1,8,9,9] convolution(x, w1), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
  bb = f32[1,8,9,9] broadcast(b1), dimensions={1}
  a1 = f32[1,8,9,9] add(c1, bb)
  z = f32[] constant(0)
  zb = f32[1,8,9,9] broadcast(z), dimensions={}
  r1 = f32[1,8,9,9] maximum(a1, zb)
  e1 = f32[1,8,9,9] exponential(r1)
  res = f32[1,8,9,9] add(r1, e1)
  ninf = f32[] constant(-inf)
  p1 = f32[1,8,5,5] reduce-window(res, ninf), window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, to_apply=max
  c2 = f32[1,6,5,5] convolution(p1, w2), window={size=1x1}, dim_labels=bf01_01io->bf01
  padded = f32[1,6,7,7] pad(c2, z), padding=0_0x0_0x1_1x1_1
  c3 = f32[1,6,5,5] convolution(padded, w3), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT total = f32[1,6] reduce(c3, z), dimensions={2,3}, to_apply=sum
}
"""


def _convolutions(module):
    return [i for i in module.entry.post_order() if i.opcode == "convolution"]


def test_a_chain_runs_features_last_from_one_transpose(rng):
    after = run_pass(PASSES, CHAIN, rng, rtol=1e-5)
    assert [c.attrs["dim_labels"].to_labels() for c in _convolutions(after)] == \
        ["b01f_01io->b01f", "b01f_01io->b01f", "b01f_oi01->b01f"]
    assert entry_opcodes(after)["transpose"] == 1      # the input's; the sum over H, W needs none
    (t,) = [i for i in after.entry.post_order() if i.opcode == "transpose"]
    assert t.operands[0].opcode == "parameter"


INCEPTION = REDUCERS + """
ENTRY main {
  x = f32[2,6,7,7] parameter(0)
  wa = f32[1,1,6,4] parameter(1)
  wb = f32[3,3,6,5] parameter(2)
  wc = f32[1,1,15,8] parameter(3)
  a = f32[2,4,7,7] convolution(x, wa), window={size=1x1}, dim_labels=bf01_01io->bf01
  b = f32[2,5,7,7] convolution(x, wb), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  pooled = f32[2,6,7,7] reduce-window(x, ninf), window={size=1x1x3x3 pad=0_0x0_0x1_1x1_1}, to_apply=max
  cat = f32[2,15,7,7] concatenate(a, b, pooled), dimensions={1}
  c = f32[2,8,7,7] convolution(cat, wc), window={size=1x1}, dim_labels=bf01_01io->bf01
  ROOT over_batch = f32[8,7,7] reduce(c, z), dimensions={0}, to_apply=sum
}
"""


def test_concatenated_branches_and_a_reduction_that_reorders(rng):
    """Two of the three branches come transposed: the pool (on the untransposed input) is
    transposed to join them; summing over the batch leaves [C, H, W], a transpose of the
    features-last sum."""
    after = run_pass(PASSES, INCEPTION, rng, rtol=1e-5)
    assert all(c.attrs["dim_labels"].to_labels() == "b01f_01io->b01f" for c in _convolutions(after))
    cat = next(i for i in after.entry.post_order() if i.opcode == "concatenate")
    assert cat.attrs["dimensions"] == (3,)
    assert after.entry.root.opcode == "transpose" and after.entry.root.operands[0].opcode == "reduce"
    # the input's (shared by CSE), the pool's (computed on the input as it came) and the result's
    assert entry_opcodes(after)["transpose"] == 3


@pytest.mark.parametrize("conv", [
    # depthwise
    "c = f32[1,8,9,9] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01, "
    "feature_group_count=8\n  w = f32[3,3,1,8] parameter(1)",
    # grouped
    "c = f32[1,8,9,9] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01, "
    "feature_group_count=2\n  w = f32[3,3,4,8] parameter(1)",
    # features last already
    "c = f32[1,9,9,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
    "  w = f32[3,3,8,8] parameter(1)",
], ids=["depthwise", "grouped", "nhwc"])
def test_convolutions_left_as_they_are(conv, rng):
    line, weight = conv.split("\n")
    x = "f32[1,9,9,8]" if "b01f_" in line else "f32[1,8,9,9]"
    text = f"HloModule keep\nENTRY main {{\n  x = {x} parameter(0)\n{weight}\n  ROOT {line}\n}}\n"
    after = run_pass(PASSES, text, rng)
    assert entry_opcodes(after) == {"convolution": 1}
    assert not convolution_layout(after)


@pytest.mark.parametrize("window,kernel,out", [
    ("size=7x7 stride=2x2 pad=3_3x3_3", "7,7,3,8", "1,8,10,10"),    # ResNet's
    ("size=3x3 stride=2x2", "3,3,3,8", "1,8,9,9"),                  # SqueezeNet's
], ids=["7x7", "3x3"])
def test_a_colour_stem_writes_features_last(window, kernel, out, rng):
    """A padded stem reads its colour image as it is: the convolution's copy of its padded
    input puts the features last anyway, where a transpose before it would be a kernel of
    its own (ResNet-50's stem and that transpose: 928 -> 888 us). An unpadded one reads a
    transposed image where it lies."""
    text = f"""
HloModule stem
ENTRY main {{
  x = f32[1,3,20,20] parameter(0)
  w = f32[{kernel}] parameter(1)
  ROOT c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels=bf01_01io->bf01
}}
"""
    after = run_pass(PASSES, text, rng, rtol=1e-5)
    padded = "pad" in window
    assert entry_opcodes(after) == {"convolution": 1, "transpose": 1 if padded else 2}
    assert _convolutions(after)[0].attrs["dim_labels"].to_labels() == ("bf01" if padded else "b01f") + "_01io->b01f"


def test_a_transpose_stops_at_an_op_it_cannot_pass(rng):
    """A reshape that flattens NCHW needs NCHW: the transpose back stays before it."""
    text = """
HloModule flatten
ENTRY main {
  x = f32[1,6,5,5] parameter(0)
  w = f32[3,3,6,4] parameter(1)
  c = f32[1,4,5,5] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
  n = f32[1,4,5,5] negate(c)
  ROOT f = f32[1,100] reshape(n)
}
"""
    after = run_pass(PASSES, text, rng, rtol=1e-5)
    reshape = after.entry.root
    assert reshape.operands[0].opcode == "transpose" and reshape.operands[0].operands[0].opcode == "negate"


PADDED_CHAIN = """
HloModule padded
ENTRY main {
  x = f32[1,8,9,9] parameter(0)
  w1 = f32[1,1,8,16] parameter(1)
  w2 = f32[3,3,16,8] parameter(2)
  c1 = f32[1,16,9,9] convolution(x, w1), window={size=1x1}, dim_labels=bf01_01io->bf01
  z = f32[] constant(0)
  zb = f32[1,16,9,9] broadcast(z), dimensions={}
  r = f32[1,16,9,9] maximum(c1, zb)
  c2 = f32[1,8,9,9] convolution(r, w2), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01
  ROOT out = %s
}
"""


@pytest.mark.parametrize("root,rewritten", [
    ("f32[1,8,9,9] negate(c2)", True),
    ("(f32[1,8,9,9], f32[1,16,9,9]) tuple(c2, r)", False),   # the ReLU is used elsewhere too
], ids=["only-user", "two-users"])
def test_a_padded_input_is_padded_by_the_convolution_that_computes_it(root, rewritten, rng):
    """conv(relu(conv(x))) padded by its window becomes conv(pad(relu(conv(x)))) unpadded,
    the pad for the fusion pass to put at the end of the first convolution's epilogue;
    not when the ReLU has another user (the pad would be a copy of its own)."""
    after = run_pass(PASSES, PADDED_CHAIN % root, rng, rtol=1e-5)
    second = _convolutions(after)[-1]
    padded = second.operands[0].opcode == "pad"
    assert padded == rewritten
    assert all(w.pad_low == w.pad_high == (0 if rewritten else 1) for w in second.attrs["window"])
