"""Malformed HLO text: a ParseError at the offending token, saying what was expected and found."""
import pytest

from pyxla.errors import ParseError
from pyxla.hlo import parse_module

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def module(entry_body: str, *, header: str = "HloModule m", before: str = ADD) -> str:
    """A module whose ENTRY starts on line 8 (header, blank, 5 lines of `add`, ENTRY line);
    the first line of `entry_body` is line 9."""
    return f"{header}\n\n{before}ENTRY main {{\n{entry_body}\n}}\n"


# (id, text, line, column, message fragment)
CASES = [
    ("bad dims", module("  x = f32[2x3]{1,0} parameter(0)"), 9, 12, "expected ']' after dimensions, found 'x3'"),
    ("unknown element type", module("  x = f31[2] parameter(0)"), 9, 7, "unknown element type 'f31'"),
    ("unsupported element type", module("  x = c64[2] parameter(0)"), 9, 7, "element type 'c64' is not supported"),
    ("missing shape", module("  x = parameter(0)"), 9, 7, "expected a shape for instruction 'x', found 'parameter'"),
    ("unknown opcode", module("  x = f32[] parameter(0)\n  ROOT y = f32[] fooo(x)"), 10, 18,
     "unknown opcode 'fooo'"),
    ("undefined operand", module("  x = f32[] parameter(0)\n  ROOT y = f32[] negate(foo)"), 10, 25,
     "undefined operand 'foo'"),
    ("use before definition", module("  ROOT y = f32[] negate(x)\n  x = f32[] parameter(0)"), 9, 25,
     "undefined operand 'x'"),
    ("duplicate instruction", module("  x = f32[] parameter(0)\n  x = f32[] parameter(1)"), 10, 3,
     "duplicate instruction name 'x'"),
    ("duplicate parameter number", module("  x = f32[] parameter(0)\n  y = f32[] parameter(0)"), 10, 23,
     "parameter number 0 is already used by 'x'"),
    ("undefined computation", module("  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=ad"), 10, 36,
     "computation 'ad' is not defined"),
    ("literal too long", module("  ROOT c = f32[2] constant({1, 2, 3})"), 9, 35,
     "literal has 3 elements, shape f32[2] needs 2"),
    ("literal too short", module("  ROOT c = f32[3] constant({1, 2})"), 9, 33,
     "literal has 2 elements, shape f32[3] needs 3"),
    ("literal row too short", module("  ROOT c = s32[2,2] constant({ {1, 2}, {3} })"), 9, 42,
     "literal has 1 element in dimension 1, shape s32[2,2] needs 2"),
    ("literal missing nesting", module("  ROOT c = f32[2,2] constant({1, 2})"), 9, 31,
     "expected '{' for dimension 1 of f32[2,2], found '1'"),
    ("literal nests too deep", module("  ROOT c = f32[2] constant({{1}, {2}})"), 9, 29,
     "literal nests deeper than the rank of f32[2]"),
    ("integer out of range", module("  ROOT c = s8[2] constant({127, 128})"), 9, 33,
     "value 128 is out of range for s8 [-128, 127]"),
    ("negative unsigned", module("  ROOT c = u32[] constant(-1)"), 9, 27, "value -1 is out of range for u32"),
    ("float overflow", module("  ROOT c = f16[] constant(65520)"), 9, 27, "value 65520 is out of range for f16"),
    ("float in integer literal", module("  ROOT c = s32[] constant(2.5)"), 9, 27,
     "expected an integer for a s32 literal, found '2.5'"),
    ("bad pred", module("  ROOT c = pred[2] constant({1, 2})"), 9, 33, "a pred literal element is true, false, 1 or 0"),
    ("nan payload too wide", module("  ROOT c = bf16[] constant(nan(0x80))"), 9, 28,
     "NaN payload 0x80 does not fit the 7 mantissa bits of bf16"),
    ("two ENTRYs", module("  ROOT x = f32[] parameter(0)") + "ENTRY other {\n  ROOT y = f32[] parameter(0)\n}\n",
     11, 1, "second ENTRY computation 'other'"),
    ("missing header", ADD, 1, 1, "expected 'HloModule' at the start of the module, found 'add'"),
    ("unclosed computation", "HloModule m\n\nENTRY main {\n  ROOT x = f32[] parameter(0)\n", 4, 30,
     "expected an instruction or '}' to close computation 'main', found end of input"),
    ("missing close before next computation", "HloModule m\n\nc {\n  ROOT x = f32[] parameter(0)\n\n"
     "ENTRY main {\n  ROOT y = f32[] parameter(0)\n}\n", 6, 1, "expected '}' to close computation 'c'"),
    ("empty computation", module("", before=""), 5, 1, "computation 'main' has no instructions"),
    ("missing equals", module("  x f32[] parameter(0)"), 9, 5, "expected '=' after instruction name 'x', found 'f32'"),
    ("missing operand paren", module("  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x"), 11, 1,
     "expected ')' after the operands, found '}'"),
    ("bad layout", module("  x = f32[2,3]{1,1} parameter(0)"), 9, 15,
     "layout {1,1} is not a permutation of the dimensions of f32[2,3]"),
    ("duplicate attribute", module("  x = f32[2] parameter(0)\n  ROOT y = f32[2] reverse(x), dimensions={0}, "
                                   "dimensions={0}"), 10, 47, "duplicate attribute 'dimensions'"),
    ("bad attribute value", module("  x = f32[2] parameter(0)\n  ROOT y = f32[2] reverse(x), dimensions=0"),
     10, 42, "expected '{' to start the value of attribute 'dimensions', found '0'"),
    ("bad bool", module("  x = f32[2] parameter(0)\n  ROOT y = f32[2] sort(x), dimensions={0}, is_stable=yes"),
     10, 54, "expected true or false for attribute 'is_stable', found 'yes'"),
    ("bad dim_labels", module("  x = f32[1,2,3,4] parameter(0)\n  ROOT y = f32[1,2,3,4] convolution(x, x), "
                              "dim_labels=b01f_01io->b0f"), 10, 55, "the three parts must have the same rank"),
    ("window field mismatch", module("  x = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[2,2] "
                                     "reduce-window(x, z), window={size=2x2 stride=2}, to_apply=add"),
     11, 66, "window stride has 1 dimensions, the other fields have 2"),
    ("unbalanced raw attribute", module("  ROOT x = f32[] parameter(0), backend_config={\"a\":[1}"), 9, 54,
     "expected ']' to close '['"),
    ("unterminated string", module("  ROOT x = f32[] parameter(0), metadata={op_name=\"abc}"), 9, 50,
     "unterminated string"),
    ("bad escape", module("  ROOT x = f32[] parameter(0), metadata={op_name=\"a\\qb\"}"), 9, 52,
     "invalid escape sequence '\\q'"),
    ("unterminated comment", module("  ROOT x = f32[] /* parameter(0)"), 9, 18, "unterminated comment"),
    ("undefined control predecessor", module("  ROOT x = f32[] parameter(0), control-predecessors={y}"), 9, 54,
     "undefined control predecessor 'y'"),
    ("dynamic dimension without a bound", module("  ROOT x = f32[<=x] parameter(0)"), 9, 18,
     "expected a dimension size"),
    ("operand shape mismatch", module("  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(s32[2] x)"), 10, 26,
     "operand 'x' is written as s32[2] but its shape is f32[2]"),
    # XLA's parser: a computation's written result shape must be its root's
    ("entry signature result", "HloModule m\n\nENTRY main (p: f32[3]) -> s32[7] {\n  p = f32[3] parameter(0)\n"
     "  ROOT n = f32[3] negate(p)\n}\n", 3, 27,
     "the shape of computation 'main', s32[7], is not that of its root instruction 'n', f32[3]"),
    ("callee signature result", module("  x = f32[] parameter(0)\n  ROOT c = f32[] call(x, x), to_apply=add",
                                       before=ADD.replace("add {", "add (a: f32[], b: f32[]) -> f32[2] {")), 3, 29,
     "the shape of computation 'add', f32[2], is not that of its root instruction 's', f32[]"),
]


@pytest.mark.parametrize("text,line,column,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_text_raises_parse_error_at_the_token(text, line, column, fragment):
    with pytest.raises(ParseError) as info:
        parse_module(text, "bad.hlo")
    err = info.value
    assert fragment in err.message
    assert (err.line, err.column) == (line, column), err
    assert err.source == "bad.hlo"
    lines = text.splitlines()
    assert err.line_text == (lines[line - 1] if line <= len(lines) else "")
    # str(err): where, then the offending line, then a caret under the column.
    shown = str(err).split("\n")
    assert shown[0] == f"bad.hlo:{line}:{column}: {err.message}"
    assert shown[1] == "  " + err.line_text
    assert shown[2] == "  " + " " * (column - 1) + "^"


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20


@pytest.mark.parametrize("text", [
    "", "   \n\n", "HloModule", "HloModule m,", "HloModule m, x=", "HloModule m\nENTRY", "HloModule m\nENTRY e {",
    "HloModule m\nENTRY e {\n  x = f32[", "HloModule m\nENTRY e {\n  x = (f32[], ", "\x00\x01\x02", "\ud800",
    "HloModule m\nENTRY e {\n  ROOT x = f32[] constant(" + "9" * 5000 + ")\n}",
    "HloModule m\nENTRY e {\n  ROOT x = f32[" + "9" * 5000 + "] parameter(0)\n}",
    "HloModule m\nENTRY e {\n  ROOT x = " + "(" * 5000 + "f32[]" + ")" * 5000 + " parameter(0)\n}",
    "HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0), backend_config=" + "{" * 20000 + "\n}",
    "HloModule m\nENTRY e {\n  ROOT x = f32[9999999999999] constant({...})\n}",
    "HloModule m\nENTRY e {\n  ROOT x = f32[" + ",".join(["1"] * 100) + "] constant({...})\n}",
    "HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0), metadata={op_name=\"\\",
    "HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0), dim_labels=" + "_" * 20000 + "\n}",
])
def test_pathological_text_is_only_ever_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_module(text)
    assert not info.value.message.startswith("internal")
    assert info.value.line >= 1 and info.value.column >= 1


def test_signature_parameters_are_not_checked_as_in_xla():
    """XLA's own tests write signatures whose parameters differ from the body's (a fused
    computation declared `()`); XLA takes the body's, and so does pyxla."""
    text = "HloModule m\n\nENTRY main (p: f32[4], q: s32[]) -> f32[3]{0} {\n  p = f32[3] parameter(0)\n" \
           "  ROOT n = f32[3] negate(p)\n}\n"
    module_ = parse_module(text)
    assert [p.shape.to_text(False) for p in module_.entry.parameters] == ["f32[3]"]
