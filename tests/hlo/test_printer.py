"""The HLO text printer: round trips over the corpus, XLA's own spelling, attribute and literal text."""
import re

import numpy as np
import pytest

from pyxla.conformance import LEVELS, corpus_case_dirs
from pyxla.hlo import (
    BF16,
    F16,
    F32,
    F64,
    PRED,
    S32,
    U8,
    ArrayShape,
    ConvDimensionNumbers,
    HloBuilder,
    HloComputation,
    HloInstruction,
    PadDim,
    SliceDim,
    WindowDim,
    array,
    parse_module,
    print_module,
    scalar,
    scalar_computation,
)
from pyxla.hlo.printer import print_computation, print_instruction
from pyxla.hlo.stablehlo import parse_program

CASES = corpus_case_dirs()
FILES = [(case, level) for case in CASES for level in LEVELS]
FILE_IDS = [f"{c.name}-{lv}" for c, lv in FILES]


def _bits(arr):
    arr = np.asarray(arr)
    return arr.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.dtype.itemsize]).tolist()


def _attr_key(value):
    """An attribute value with computations replaced by their names, for comparison."""
    if isinstance(value, HloComputation):
        return ("computation", value.name)
    if isinstance(value, tuple) and value and isinstance(value[0], HloComputation):
        return tuple(_attr_key(v) for v in value)
    return value


def _literal_key(literal):
    if isinstance(literal, tuple):
        return tuple(_literal_key(v) for v in literal)
    if literal is None:
        return None
    return (str(literal.dtype), literal.shape, literal.tobytes())


def assert_same_module(a, b):
    assert a.name == b.name and a.header_attrs == b.header_attrs
    assert [c.name for c in a.computations] == [c.name for c in b.computations]
    assert a.entry.name == b.entry.name
    for ca, cb in zip(a.computations, b.computations):
        assert ca.is_fusion_computation == cb.is_fusion_computation, ca.name
        assert ca.root.name == cb.root.name, ca.name
        assert len(ca.instructions) == len(cb.instructions), ca.name
        for ia, ib in zip(ca.instructions, cb.instructions):
            where = f"{ca.name}/{ia.name}"
            assert (ia.name, ia.opcode, ia.shape, ia.parameter_number) == \
                   (ib.name, ib.opcode, ib.shape, ib.parameter_number), where
            assert [o.name for o in ia.operands] == [o.name for o in ib.operands], where
            assert {k: _attr_key(v) for k, v in ia.attrs.items()} == \
                   {k: _attr_key(v) for k, v in ib.attrs.items()}, where
            assert _literal_key(ia.literal) == _literal_key(ib.literal), where


# --- the corpus ---------------------------------------------------------------------------

@pytest.mark.parametrize("case_dir,level", FILES, ids=FILE_IDS)
def test_print_parse_print_is_stable(case_dir, level):
    """Every level, StableHLO included: what the StableHLO converter builds prints as HLO
    text that reads back into the same module."""
    original = parse_program((case_dir / LEVELS[level]).read_text())
    text1 = print_module(original)
    again = parse_module(text1, "printed")
    text2 = print_module(again)
    assert text1 == text2
    assert_same_module(original, again)


@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_module_level_prints_exactly_as_xla_did(case_dir):
    text = (case_dir / "module.hlo").read_text()
    assert print_module(parse_module(text)) == text


def _instruction_lines(text):
    """Header and instruction lines, without sigils and operand-list index comments (XLA's
    optimized dumps number long operand lists; pyxla prints them plain, like module.hlo)."""
    lines = [line for line in text.splitlines() if line.startswith(("  ", "HloModule"))]
    return [re.sub(r"(\w), /\*index=\d+\*/", r"\1, ", line.replace("%", "")) for line in lines]


@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_optimized_level_instructions_print_as_xla_did(case_dir):
    text = (case_dir / "optimized.hlo").read_text()
    assert _instruction_lines(print_module(parse_module(text))) == _instruction_lines(text)


# --- attributes ---------------------------------------------------------------------------

def _one(text_of_entry: str, name: str):
    module = parse_module("HloModule m\n\nENTRY e {\n" + text_of_entry + "\n}\n")
    return module.entry.instruction(name)


def test_slice_strides_print_only_when_one_differs_from_one():
    x = HloInstruction("x", "parameter", array(F32, 8, 9), parameter_number=0)
    unit = HloInstruction("u", "slice", array(F32, 4, 2), [x], {"slice": (SliceDim(0, 4), SliceDim(1, 3))})
    strided = HloInstruction("s", "slice", array(F32, 2, 2), [x],
                             {"slice": (SliceDim(0, 4, 2), SliceDim(1, 3))})
    assert print_instruction(unit) == "u = f32[4,2]{1,0} slice(x), slice={[0:4], [1:3]}"
    assert print_instruction(strided) == "s = f32[2,2]{1,0} slice(x), slice={[0:4:2], [1:3:1]}"


@pytest.mark.parametrize("dims,text", [
    ((PadDim(0, 1), PadDim(2, 2)), "0_1x2_2"),
    ((PadDim(0, 1, 0), PadDim(2, 2, 1)), "0_1_0x2_2_1"),
    ((PadDim(-1, 3, 0),), "-1_3"),
])
def test_padding_prints_interior_for_all_dimensions_or_none(dims, text):
    instr = _one(f"  x = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n"
                 f"  ROOT p = f32[4,4] pad(x, z), padding={text}", "p")
    assert instr.attrs["padding"] == dims
    assert f"padding={text}" in print_instruction(instr)


@pytest.mark.parametrize("window,text", [
    ((WindowDim(2, 2), WindowDim(2, 2)), "{size=2x2 stride=2x2}"),
    ((WindowDim(3, pad_low=1, pad_high=1),), "{size=3 pad=1_1}"),
    ((WindowDim(3, 1, 0, -1, 1, 2), WindowDim(6, lhs_dilate=2, reversal=True)),
     "{size=3x6 pad=0_-1x0_0 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=0x1}"),
    ((), "{}"),
])
def test_window_prints_only_non_default_fields_in_xla_order(window, text):
    dims = ",".join(["5"] * len(window))
    module = parse_module(f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{dims}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{dims}] reduce-window(x, z), window={text}, to_apply=add
}}
""")
    instr = module.entry.root
    assert instr.attrs["window"] == window
    assert print_instruction(instr).endswith(f"reduce-window(x, z), window={text}, to_apply=add")
    printed = HloInstruction("w", "reduce-window", instr.shape, instr.operands,
                             {"window": window, "to_apply": module.computation("add")})
    assert f"window={text}, to_apply=add" in print_instruction(printed)


def test_attribute_kinds_parse_and_print_back_verbatim():
    labels = ConvDimensionNumbers.from_labels("bf01_oi01->bf01")
    text = ('  x = f32[2,3] parameter(0)\n'
            '  ROOT c = f32[2,3] custom-call(x), custom_call_target="q\\"b\\\\n\\nl\\303\\251", '
            'dimensions={1,0}, is_stable=false, direction=LT, k=7, dim_labels=bf01_oi01->bf01, '
            'metadata={op_name="jit(f)/x" source_line=3 preserve_layout=true}, '
            'control-predecessors={x}, backend_config={"a":[1, 2]}, unknown_thing=[a(b) "c,d"]')
    c = _one(text, "c")
    assert c.attrs["custom_call_target"] == 'q"b\\n\nlé'
    assert c.attrs["dimensions"] == (1, 0) and c.attrs["is_stable"] is False and c.attrs["k"] == 7
    assert c.attrs["dim_labels"] == labels
    assert c.attrs["metadata"] == {"op_name": "jit(f)/x", "source_line": 3, "preserve_layout": True}
    assert c.attrs["control-predecessors"] == ("x",)
    assert c.attrs["unknown_thing"] == '[a(b) "c,d"]'
    assert print_instruction(c) == "c = " + text.split("ROOT c = ")[1].replace("f32[2,3]", "f32[2,3]{1,0}", 1)


def test_names_print_bare_unless_they_need_a_sigil():
    b = HloBuilder("jit_<lambda>")
    x = b.parameter(scalar(F32), "ROOT")
    y = b.parameter(scalar(F32), "get-tuple-element.4")
    z = b.parameter(scalar(F32), "x<0>:a/b")
    s = b.op("add", x, y, name="9lives")
    module = b.module(b.op("add", s, z, name="out"))
    text = print_module(module)
    assert text.startswith("HloModule jit_<lambda>\n")
    assert "%ROOT = f32[] parameter(0)" in text and "get-tuple-element.4 = f32[] parameter(1)" in text
    assert "%9lives = f32[] add(%ROOT, get-tuple-element.4)" in text
    assert "ROOT out = f32[] add(%9lives, %x<0>:a/b)" in text
    assert_same_module(module, parse_module(text))


# --- literals -----------------------------------------------------------------------------

@pytest.mark.parametrize("etype,digits", [(F32, 9), (F64, 17), (F16, 5), (BF16, 4)])
def test_float_literals_round_trip_bit_for_bit(rng, etype, digits):
    """Random bit patterns, NaNs with payloads and subnormals included, print in at most the
    type's max_digits10 significant digits and parse back to the same bits."""
    fmt_bits = {F32: np.uint32, F64: np.uint64, F16: np.uint16, BF16: np.uint16}[etype]
    raw = rng.integers(0, np.iinfo(fmt_bits).max, size=400, dtype=fmt_bits, endpoint=True)
    values = raw.view(etype.np_dtype)
    b = HloBuilder("f")
    module = b.module(b.constant(values, etype))
    text = print_module(module)
    back = parse_module(text).entry.root.literal
    assert _bits(back) == _bits(values)
    body = re.search(r"constant\(\{(.*)\}\)", text).group(1)
    for token in body.split(", "):
        mantissa = re.sub(r"e[-+]\d+$", "", token.lstrip("-")).replace(".", "").lstrip("0")
        assert token.startswith(("nan", "-nan", "inf", "-inf")) or len(mantissa) <= digits, token


def test_float_literals_use_the_short_form_when_it_round_trips(rng):
    short = np.round(rng.uniform(-1000, 1000, size=200), 2).astype(np.float32)
    b = HloBuilder("f")
    text = print_module(b.module(b.constant(short, F32)))
    body = re.search(r"constant\(\{(.*)\}\)", text).group(1).split(", ")
    assert body == ["%.6g" % float(v) for v in short]   # noqa: UP031  (C's %g, as XLA prints)
    third = np.float32(1) / np.float32(3)
    b = HloBuilder("g")
    assert "constant(0.333333343)" in print_module(b.module(b.constant(third, F32)))


@pytest.mark.parametrize("etype,values,text", [
    (F32, [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.1], "{nan, -nan, inf, -inf, -0, 0.1}"),
    (BF16, [1 / 3, 65504, -3.14159], "{0.334, 6.554e+04, -3.141}"),
    (F16, [1 / 3, 65504, 5.96e-8], "{0.33325, 65504, 5.9605e-08}"),
    (PRED, [True, False, True], "{1, 0, 1}"),
    (U8, [0, 255, 7], "{0, 255, 7}"),
])
def test_literal_spelling_matches_xla(etype, values, text):
    b = HloBuilder("l")
    arr = np.array(values, dtype=np.float64 if etype.is_float else None).astype(etype.np_dtype)
    printed = print_module(b.module(b.constant(arr, etype)))
    assert f"constant({text})" in printed
    assert _bits(parse_module(printed).entry.root.literal) == _bits(arr)


@pytest.mark.parametrize("shape,text", [
    ((2, 2), "{ { 1, 2 }, { 3, 4 } }"),
    ((1, 1), "{ {1} }"),
    ((0, 3), "{  }"),
    ((2, 0), "{ {}, {} }"),
    ((2, 1, 1, 2), "{ { /*i0=0*/ { /*i1=0*/ { 1, 2 } } }, { /*i0=1*/ { /*i1=0*/ { 3, 4 } } } }"),
])
def test_nested_literals_print_on_one_line_as_xla_does(shape, text):
    values = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int32).reshape(shape)
    b = HloBuilder("n")
    printed = print_module(b.module(b.constant(values, S32)))
    assert f"constant({text})" in printed
    np.testing.assert_array_equal(parse_module(printed).entry.root.literal, values)


def test_scalar_pred_and_tuple_constants():
    text = """HloModule m

ENTRY e {
  a = pred[] constant(true)
  ROOT t = (f32[2]{0}, (s32[], pred[])) constant(( {1.5, -0}, ( -7, false ) ))
}

"""
    module = parse_module(text)
    assert print_module(module) == text


def test_print_options_drop_metadata_and_elide_large_constants(rng):
    values = rng.standard_normal(11).astype(np.float32)
    small = rng.standard_normal(10).astype(np.float32)
    b = HloBuilder("o")
    big = b.constant(values, F32)
    little = b.constant(small, F32)
    big.attrs["metadata"] = {"op_name": "jit(f)/big"}
    module = b.module(b.tuple(big, little))
    full = print_module(module)
    assert 'metadata={op_name="jit(f)/big"}' in full
    short = print_module(module, print_metadata=False, print_large_constants=False)
    assert "metadata" not in short and "constant({...})" in short
    assert short.count("{...}") == 1            # ten elements or fewer always print
    back = parse_module(short)
    elided = back.entry.instruction(big.name).literal
    assert elided.shape == (11,) and not elided.any()
    np.testing.assert_array_equal(back.entry.instruction(little.name).literal, small)


# --- computations and order ---------------------------------------------------------------

def test_builder_modules_print_and_parse_back(rng):
    b = HloBuilder("f")
    x = b.parameter(array(F32, 4, 3), "x")
    c = b.constant(rng.standard_normal((4, 3)).astype(np.float32), F32)
    s = b.op("add", x, c)
    r = b.op("reduce", s, b.constant(np.float32(0), F32), dimensions=(1,),
             to_apply=scalar_computation("add", F32, "add_f32"), shape=array(F32, 4))
    module = b.module(r)
    text = print_module(module)
    again = parse_module(text)
    assert_same_module(module, again)
    assert print_module(again) == text


def test_instructions_print_operands_before_users_even_when_the_list_is_not():
    b = HloBuilder("o")
    x = b.parameter(scalar(F32), "x")
    y = b.op("negate", x, name="y")
    z = b.op("exponential", y, name="z")
    comp = b.build(z)
    comp.instructions = [z, x, y]          # what a careless pass might leave behind
    text = print_computation(comp, is_entry=True)
    assert text.index("x = ") < text.index("y = ") < text.index("ROOT z = ")
    assert text.startswith("ENTRY o {")
    parse_module("HloModule m\n\n" + text)


def test_print_instruction_has_no_root_marker_and_no_indentation():
    module = parse_module((CASES[0] / "module.hlo").read_text())
    root = module.entry.root
    line = print_instruction(root)
    assert line.startswith(root.name + " = ") and "ROOT" not in line
    assert "  ROOT " + line in print_computation(module.entry, is_entry=True)


def test_array_shape_layouts_survive():
    text = """HloModule m

ENTRY e {
  a = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[2,3]{1,0} copy(a)
}

"""
    module = parse_module(text)
    assert module.entry.instruction("a").shape == ArrayShape(F32, (2, 3), (0, 1))
    assert print_module(module) == text
