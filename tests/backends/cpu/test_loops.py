"""Loop nests (llvm/loops.py) and LLVM's unroller: short nests stay unrollable, a long nest and a
row of 16..256 are marked `llvm.loop.unroll.disable` (so the row reaches the vectoriser as a
loop, not as scalar copies), a longer row is left to the unroller; results equal the
evaluator's in every case."""
import re

import pytest

from pyxla.backends import get_backend
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter


def module(dims: str) -> str:
    return f"""HloModule m
ENTRY main {{
  x = f32[{dims}] parameter(0)
  y = f32[{dims}] parameter(1)
  ROOT r = f32[{dims}] multiply(x, y)
}}"""


def ir_texts(text, tmp_path, monkeypatch):
    """(LLVM IR, optimised LLVM IR) of a module on the cpu backend, on one thread."""
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    get_backend("cpu").compile(parse_module(text))
    monkeypatch.delenv("PYXLA_DUMP")
    folder = next(tmp_path.glob("*/llvm-ir.ll")).parent
    return (folder / "llvm-ir.ll").read_text(), (folder / "llvm-ir.optimized.ll").read_text()


def marked_loops(ir_text: str) -> int:
    """Back edges carrying a loop id whose properties say not to unroll."""
    disabled = {m.group(1) for m in re.finditer(r'^!(\d+) = !\{ !"llvm.loop.unroll.disable" \}', ir_text, re.M)}
    ids = {m.group(1) for m in re.finditer(r"^!(\d+) = distinct !\{ !\1, !(\d+) \}", ir_text, re.M)
           if m.group(2) in disabled}
    return sum(1 for m in re.finditer(r"!llvm\.loop !(\d+)", ir_text) if m.group(1) in ids)


@pytest.mark.parametrize("dims,marked", [
    ("3,5", 0),        # 15 iterations in all: LLVM may unroll it whole
    ("15", 0),
    ("6,64", 2),       # the nest and the row of 64
    ("64", 1),
    ("256", 1),
    ("1000", 0),       # a long row: only its vector loop can be unrolled
    ("2,600", 1),      # the nest around a long row
    ("4,1,64", 2),     # unit dimensions have no loop
])
def test_which_loops_are_marked(dims, marked, rng, tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_NUM_THREADS", "1")   # whole kernels, not tasks of a split one
    text = module(dims)
    ir_text, _ = ir_texts(text, tmp_path, monkeypatch)
    assert marked_loops(ir_text) == marked
    assert_cpu_matches_interpreter(text, rng)


TRANSPOSE = """HloModule t
ENTRY main {
  x = f32[2,16,4,64] parameter(0)
  ROOT r = f32[2,4,16,64] transpose(x), dimensions={0,2,1,3}
}"""


def test_marked_row_is_vectorised_not_copied(rng, tmp_path, monkeypatch):
    """Rows of 64 moved by a transpose: without the marks LLVM unrolls the row (and the loop
    around it) into scalar copies before vectorising; with them the optimised kernel moves
    vectors."""
    monkeypatch.setenv("PYXLA_NUM_THREADS", "1")
    _, optimised = ir_texts(TRANSPOSE, tmp_path, monkeypatch)
    assert re.search(r"load <\d+ x float>", optimised)
    assert len(re.findall(r"load float", optimised)) < 8
    assert_cpu_matches_interpreter(TRANSPOSE, rng)


def test_a_concatenates_runs_are_not_unrolled(rng, tmp_path, monkeypatch):
    """Features concatenated along the minor dimension (ops/concat_rows.py): the loop over each
    operand's run is marked, as is the nest over the 4 x 9 pixels (36 iterations; its inner
    loop of 9 stays unrollable)."""
    monkeypatch.setenv("PYXLA_NUM_THREADS", "1")
    text = """HloModule c
ENTRY main {
  a = f32[4,9,40] parameter(0)
  b = f32[4,9,300] parameter(1)
  c = f32[4,9,340] concatenate(a, b), dimensions={2}
  ROOT r = f32[4,9,340] negate(c)
}"""
    ir_text, _ = ir_texts(text, tmp_path, monkeypatch)
    assert marked_loops(ir_text) == 3    # the runs of 40 and of 300, and the nest of pixels
    assert_cpu_matches_interpreter(text, rng)
