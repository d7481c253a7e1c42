"""Loop kernels that read across their rows (llvm/transpose_loops.py): NHWC results read back as
NCHW and the like, computed in squares, against the interpreter on fresh random inputs;
and the kernels that keep the plain row-major loop."""
import pytest

from pyxla.backends.cpu import codegen
from pyxla.backends.llvm.transpose_loops import crossed_dimensions
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter


def _taken(monkeypatch):
    """The `crossed` pair of every kernel that went by squares, as a list that fills."""
    seen = []
    blocked = codegen.blocked_loop_nest
    monkeypatch.setattr(codegen, "blocked_loop_nest",
                        lambda ke, extents, crossed, body, work: seen.append(crossed) or
                        blocked(ke, extents, crossed, body, work))
    return seen


def _back_to_nchw(n, h, w, c, dtype="f32"):
    """An NHWC array read as NCHW, with a per-feature bias and a ReLU after (a convolution's
    epilogue where the next consumer wants NCHW)."""
    return f"""HloModule back
ENTRY e {{
  x = {dtype}[{n},{h},{w},{c}] parameter(0)
  b = {dtype}[{c}] parameter(1)
  t = {dtype}[{n},{c},{h},{w}] transpose(x), dimensions={{0,3,1,2}}
  bb = {dtype}[{n},{c},{h},{w}] broadcast(b), dimensions={{1}}
  a = {dtype}[{n},{c},{h},{w}] add(t, bb)
  z = {dtype}[] constant(0)
  zb = {dtype}[{n},{c},{h},{w}] broadcast(z), dimensions={{}}
  ROOT r = {dtype}[{n},{c},{h},{w}] maximum(a, zb)
}}
"""


@pytest.mark.parametrize("dims,dtype", [
    ((1, 56, 56, 64), "f32"),      # whole squares along the features, not along the rows
    ((2, 9, 37, 20), "f32"),       # neither whole: the last squares are cut short
    ((1, 7, 7, 48), "f64"),
    ((3, 5, 16, 16), "s32"),
], ids=["resnet-map", "ragged", "f64", "s32"])
def test_nhwc_read_as_nchw(dims, dtype, rng, monkeypatch):
    taken = _taken(monkeypatch)
    assert_cpu_matches_interpreter(_back_to_nchw(*dims, dtype=dtype), rng, rtol=0, atol=0)
    assert (1, 3) in taken


def test_a_lone_transpose_goes_by_squares(rng, monkeypatch):
    taken = _taken(monkeypatch)
    text = """HloModule t
ENTRY e {
  x = f32[3,40,33] parameter(0)
  ROOT t = f32[33,3,40] transpose(x), dimensions={2,0,1}
}
"""
    assert_cpu_matches_interpreter(text, rng, rtol=0, atol=0)
    assert taken == [(0, 2)]


def _instructions(text):
    module = parse_module(text)
    return list(module.entry.post_order()), module.entry.root.shape


@pytest.mark.parametrize("text", [
    # the minor dimension stays minor: rows are read as rows
    "HloModule m\nENTRY e {\n  x = f32[4,8,16] parameter(0)\n"
    "  ROOT t = f32[8,4,16] transpose(x), dimensions={1,0,2}\n}\n",
    # too short a dimension to cut into squares
    "HloModule m\nENTRY e {\n  x = f32[64,3] parameter(0)\n  ROOT t = f32[3,64] transpose(x), dimensions={1,0}\n}\n",
    # a result in another layout: not the row-major loop this cuts
    "HloModule m\nENTRY e {\n  x = f32[64,32] parameter(0)\n"
    "  ROOT t = f32[32,64]{0,1} transpose(x), dimensions={1,0}\n}\n",
], ids=["minor-stays", "short", "other-layout"])
def test_kernels_that_keep_the_row_major_loop(text, rng, monkeypatch):
    instructions, shape = _instructions(text)
    assert crossed_dimensions(instructions, shape) is None
    taken = _taken(monkeypatch)
    assert_cpu_matches_interpreter(text, rng, rtol=0, atol=0)
    assert taken == []
