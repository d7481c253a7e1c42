"""The HLO text parser: every corpus file at both levels, and the structure it builds."""
import re

import ml_dtypes
import numpy as np
import pytest

from pyxla.conformance import HLO_LEVELS, LEVELS, corpus_case_dirs, load_case
from pyxla.hlo import (
    BF16,
    F32,
    S32,
    ConvDimensionNumbers,
    HloComputation,
    PadDim,
    SliceDim,
    TupleShape,
    WindowDim,
    parse_module,
    scalar,
)

CASES = corpus_case_dirs()
CORPUS = CASES[0].parent
FILES = [(case, level) for case in CASES for level in HLO_LEVELS]

_INSTRUCTION_LINE = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+) = ", re.M)
_COMPUTATION_LINE = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)(?: \(.*\) -> .*)? \{$", re.M)
_PARAMETER = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+) = .*? parameter\((\d+)\)", re.M)


def _text(case: str, level: str = "module") -> str:
    return (CORPUS / case / LEVELS[level]).read_text()


def _parse(case: str, level: str = "module"):
    return parse_module(_text(case, level), f"{case}/{LEVELS[level]}")


def _all_instructions(module):
    return [i for c in module.computations for i in c.instructions]


def _find(module, name):
    matches = [i for i in _all_instructions(module) if i.name == name]
    assert len(matches) == 1, f"{name}: {len(matches)} matches"
    return matches[0]


def _bits(arr):
    arr = np.asarray(arr)
    return arr.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.dtype.itemsize]).tolist()


# --- every corpus file --------------------------------------------------------------------

@pytest.mark.parametrize("case_dir,level", FILES, ids=[f"{c.name}-{lv}" for c, lv in FILES])
def test_corpus_file_parses_into_the_structure_of_its_text(case_dir, level):
    text = (case_dir / LEVELS[level]).read_text()
    module = parse_module(text, str(case_dir))
    # Computations and instructions as the text lists them, in text order.
    assert [c.name for c in module.computations] == _COMPUTATION_LINE.findall(text)
    assert [i.name for i in _all_instructions(module)] == _INSTRUCTION_LINE.findall(text)
    entry_name = re.search(r"^ENTRY %?([\w.\-]+)", text, re.M).group(1)
    assert module.entry.name == entry_name and module.entry in module.computations
    # Parameters bound by their number, whatever their text order.
    numbers = {name: int(n) for name, n in _PARAMETER.findall(text)}
    for instr in _all_instructions(module):
        if instr.opcode == "parameter":
            assert instr.parameter_number == numbers[instr.name]
    assert len(module.entry.parameters) == len(load_case(case_dir).meta["inputs"])
    for comp in module.computations:
        assert comp.root in comp.instructions
        for instr in comp.instructions:
            assert instr.parent is comp
            for op in instr.operands:
                assert op.parent is comp and instr in op.users
            if instr.opcode == "constant":
                literal = instr.literal
                assert isinstance(literal, np.ndarray) and literal.shape == instr.shape.dims
                assert literal.dtype == instr.shape.dtype.np_dtype


def test_root_is_the_instruction_marked_root():
    module = _parse("misc_constants_literals")
    assert module.entry.root.name == "tuple.1"
    assert [c.root.name for c in module.computations] == ["select_n.1", "tuple.1"]


def test_parameters_out_of_text_order_are_bound_by_number():
    entry = _parse("model_transformer_block").entry
    in_text = [p.parameter_number for p in entry.instructions if p.opcode == "parameter"]
    assert in_text != sorted(in_text)
    assert [p.parameter_number for p in entry.parameters] == list(range(len(in_text)))


# --- literals -----------------------------------------------------------------------------

def test_f32_literal_with_special_values_keeps_exact_bits():
    c = _find(_parse("misc_constants_literals"), "constant.8")
    bits = _bits(c.literal)
    assert bits[:5] == [0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000, 0x80000000]  # nan -nan inf -inf -0
    for got, text in zip(c.literal[5:], ["1e-30", "3.40282347e+38", "1.17549435e-38", "1.4013e-45", "0.1",
                                         "0.333333343"]):
        assert _bits(got) == _bits(np.float32(text))
    assert _bits(c.literal[8]) == 1        # 1.4013e-45 is the smallest subnormal, not flushed


def test_bf16_and_f16_short_decimals_round_to_their_type():
    module = _parse("misc_constants_literals")
    bf16 = _find(module, "constant.9").literal
    assert bf16.dtype == ml_dtypes.bfloat16
    # 0.334 -> 0x3eab, 6.554e+04 -> 65536, -3.141 -> 0xc049 (worked by hand from the decimals)
    assert _bits(bf16[[0, 2, 3]]) == [0x3EAB, 0x4780, 0xC049]
    assert _bits(bf16) == _bits(np.array([0.334, 9.984e-31, 6.554e+04, -3.141], np.float32).astype(BF16.np_dtype))
    f16 = _find(module, "constant.10").literal
    assert f16.dtype == np.float16
    assert _bits(f16) == [0x3555, 0x0001, 0x7BFF, 0x8000]     # 0.33325, tiny subnormal, max, -0


def test_integer_and_pred_literals():
    module = _parse("misc_constants_literals")
    s8 = _find(module, "constant.11").literal
    assert s8.dtype == np.int8 and s8.tolist() == [-128, 127, 0]
    u32 = _find(module, "constant.12").literal
    assert u32.dtype == np.uint32 and u32.tolist() == [0, 2**32 - 1, 2**31]
    pred = _find(module, "constant.13").literal
    assert pred.dtype == np.bool_ and pred.tolist() == [True, False, True, True]


def test_empty_and_nested_array_literals():
    module = _parse("io_zero_size_arrays")
    assert _find(module, "constant.7").literal.shape == (0, 3)
    assert _find(module, "constant.10").literal.shape == (2, 0)
    assert _find(module, "constant.11").literal.shape == (0, 4)
    text = """HloModule m
ENTRY e {
  a = f32[0,3]{1,0} constant({  })
  b = s32[2,0]{1,0} constant({ {}, {} })
  c = f32[2,1,1,2]{3,2,1,0} constant({ { /*i0=0*/ { /*i1=0*/ { 1, 2 } } }, { /*i0=1*/ { /*i1=0*/ { 3, -4.5 } } } })
  ROOT t = (f32[0,3], s32[2,0], f32[2,1,1,2]) tuple(a, b, c)
}
"""
    entry = parse_module(text).entry
    assert entry.instruction("a").literal.shape == (0, 3)
    assert entry.instruction("b").literal.shape == (2, 0) and entry.instruction("b").literal.dtype == np.int32
    c = entry.instruction("c").literal
    np.testing.assert_array_equal(c, np.array([1, 2, 3, -4.5], np.float32).reshape(2, 1, 1, 2))


def test_nan_payloads_signs_and_wide_types():
    text = """HloModule m
ENTRY e {
  a = f16[3] constant({nan(0x1ff), -nan(0x1), -nan})
  b = bf16[2] constant({-nan, inf})
  c = f64[3] constant({nan(0x1), -0, 1.7976931348623157e+308})
  d = s64[2] constant({-9223372036854775808, 9223372036854775807})
  e = u64[1] constant({18446744073709551615})
  f = pred[] constant(true)
  ROOT t = (f16[3], bf16[2], f64[3], s64[2], u64[1], pred[]) tuple(a, b, c, d, e, f)
}
"""
    entry = parse_module(text).entry
    assert _bits(entry.instruction("a").literal) == [0x7DFF, 0xFC01, 0xFE00]
    assert _bits(entry.instruction("b").literal) == [0xFFC0, 0x7F80]
    c = entry.instruction("c").literal
    assert _bits(c)[:2] == [0x7FF0000000000001, 0x8000000000000000]
    assert c[2] == np.finfo(np.float64).max
    assert entry.instruction("d").literal.tolist() == [-2**63, 2**63 - 1]
    assert entry.instruction("e").literal.tolist() == [2**64 - 1]
    f = entry.instruction("f").literal
    assert f.dtype == np.bool_ and f.shape == () and bool(f)


def test_tuple_constants_and_elided_constants():
    text = """HloModule m
ENTRY e {
  a = (f32[2], (s32[], pred[])) constant(( {1.5, -0}, ( 3, false ) ))
  b = f32[12]{0} constant({...})
  ROOT c = (f32[2], s8[]) constant({...})
}
"""
    entry = parse_module(text).entry
    a = entry.instruction("a").literal
    assert _bits(a[0]) == [0x3FC00000, 0x80000000] and a[1][0] == 3 and a[1][1].dtype == np.bool_
    b = entry.instruction("b").literal
    assert b.shape == (12,) and not b.any()          # `{...}`: values unknown, XLA leaves zeros
    c = entry.instruction("c").literal
    assert isinstance(c, tuple) and c[1].dtype == np.int8


# --- attributes ---------------------------------------------------------------------------

def test_slice_padding_and_window_attributes():
    strided = [i.attrs["slice"] for i in _all_instructions(_parse("shape_reverse_slice_strided"))
               if i.opcode == "slice"]
    assert (SliceDim(0, 7, 2), SliceDim(1, 9, 3)) in strided
    assert (SliceDim(1, 7, 3), SliceDim(0, 9, 4)) in strided
    pads = [i.attrs["padding"] for i in _all_instructions(_parse("shape_pad_negative_interior"))
            if i.opcode == "pad"]
    assert (PadDim(-1, 1, 1), PadDim(2, -2, 0)) in pads
    assert (PadDim(1, 2, 0), PadDim(0, 0, 1)) in pads
    conv = _find(_parse("conv_depthwise_groups", "optimized"), "convolution-base-dilated-window-dilated.1")
    assert conv.attrs["window"] == (WindowDim(3, pad_low=0, pad_high=-1, rhs_dilate=2),
                                    WindowDim(6),
                                    WindowDim(2, lhs_dilate=2))
    assert conv.attrs["dim_labels"] == ConvDimensionNumbers.from_labels("b012f_012io->b012f")


def test_dot_gather_scatter_and_compare_attributes():
    gather = _find(_parse("gather_take"), "gather.2")
    assert gather.attrs == {"offset_dims": (0,), "collapsed_slice_dims": (1,), "start_index_map": (1,),
                            "index_vector_dim": 1, "slice_sizes": (6, 1)}
    module = _parse("scatter_add_duplicates")
    scatter = _find(module, "scatter-add.10")
    assert scatter.attrs["update_window_dims"] == (1,) and scatter.attrs["index_vector_dim"] == 1
    assert scatter.attrs["to_apply"] is module.computation("region_0.1")
    sort = _find(_parse("sort_argsort_stable"), "sort.11")
    assert sort.attrs["is_stable"] is True and sort.attrs["dimensions"] == (1,)
    topk = _find(_parse("sort_top_k"), "top_k.3")
    assert topk.attrs == {"k": 3, "largest": True}
    rp = _find(_parse("misc_reduce_precision_sharding"), "reduce_precision.2")
    assert rp.attrs == {"exponent_bits": 5, "mantissa_bits": 10}
    rbg = [i for i in _all_instructions(_parse("rng_bit_generator_rbg")) if i.opcode == "rng-bit-generator"]
    assert rbg and all(i.attrs["algorithm"] == "rng_default" for i in rbg)
    directions = {i.attrs["direction"] for i in _all_instructions(_parse("compare_f32_all_directions"))
                  if i.opcode == "compare"}
    assert directions == {"EQ", "NE", "LT", "LE", "GT", "GE"}
    dot = _find(_parse("dot_general_batch_dims"), "dot_general.3")
    assert dot.attrs == {"lhs_batch_dims": (1,), "lhs_contracting_dims": (2, 3), "rhs_batch_dims": (0,),
                         "rhs_contracting_dims": (1, 2)}


def test_called_computations_resolve_to_objects():
    module = _parse("cond_pred")
    cond = _find(module, "cond.12")
    assert cond.attrs["branch_computations"] == (module.computation("region_0.1"), module.computation("region_1.2"))
    loop = _find(_parse("while_fori_loop"), "while.7")
    assert isinstance(loop.attrs["condition"], HloComputation) and loop.attrs["condition"].name == "region_2.4"
    assert loop.attrs["body"].name == "region_0.3"
    topk = _parse("sort_top_k", "optimized")
    call = _find(topk, "custom-call")
    assert call.attrs["custom_call_target"] == "TopK"
    assert call.attrs["called_computations"] == (topk.computation("compare-greater-than.1.clone"),)


def test_instruction_and_computation_may_share_a_name():
    module = _parse("sort_values_nan_zero")
    comp = module.computation("sort.2")
    instr = _find(module, "sort.2")
    assert instr.opcode == "parameter" and instr.parent is not comp
    call = _find(module, "jit_sort_.3")
    assert call.attrs["to_apply"] is comp


def test_fusion_computations_are_marked():
    module = _parse("misc_constants_literals", "optimized")
    called = {i.attrs["calls"].name for i in _all_instructions(module) if i.opcode == "fusion"}
    assert called == {c.name for c in module.computations if c.is_fusion_computation}
    assert not module.entry.is_fusion_computation
    plain = _parse("misc_constants_literals")
    assert not any(c.is_fusion_computation for c in plain.computations)


def test_metadata_backend_config_and_other_annotations():
    module = _parse("while_fori_loop", "optimized")
    loop = _find(module, "while.2")
    assert loop.attrs["metadata"] == {"op_name": "jit(f)/while", "stack_frame_id": 11}
    raw = re.search(r"backend_config=(\{.*\})$", _text("while_fori_loop", "optimized").split("%while.2 = ")[1]
                    .split("\n")[0]).group(1)
    assert loop.attrs["backend_config"] == raw and '"known_trip_count":{"n":"6"}' in raw
    rng = _parse("rng_bit_generator_rbg", "optimized")
    copy = _find(rng, "copy.27")
    assert copy.attrs["control-predecessors"] == ("copy.19",)
    sharding = _parse("misc_reduce_precision_sharding")
    custom = _find(sharding, "sharding_constraint.1")
    assert custom.attrs["custom_call_target"] == "Sharding"
    assert custom.attrs["sharding"] == "{replicated}"
    assert custom.attrs["frontend_attributes"] == \
        r'{xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{\"d\"}, {}]>]>"}'
    assert sharding.header_attrs["frontend_attributes"] == '{xla.sdy.meshes={mesh = #sdy.mesh<["d"=1]>}}'
    escaped = _find(_parse("model_attention", "optimized"), "p__wk__.1")
    assert escaped.attrs["metadata"] == {"op_name": "p['wk']"}


def test_header_attributes_are_kept_as_raw_text():
    module = _parse("misc_constants_literals", "optimized")
    assert module.name == "jit_f"
    assert list(module.header_attrs) == ["is_scheduled", "entry_computation_layout",
                                         "allow_spmd_sharding_propagation_to_parameters",
                                         "allow_spmd_sharding_propagation_to_output"]
    assert module.header_attrs["is_scheduled"] == "true"
    assert module.header_attrs["entry_computation_layout"].endswith("/*index=5*/f32[4]{0})}")
    assert module.header_attrs["allow_spmd_sharding_propagation_to_output"] == "{true,true,true,true,true,true}"


def test_long_tuple_shapes_with_index_comments():
    module = _parse("misc_constants_literals", "optimized")
    root = module.entry.root
    assert isinstance(root.shape, TupleShape) and len(root.shape.elements) == 6
    assert [e.dtype.name for e in root.shape.elements] == ["f32", "bf16", "f16", "s8", "u32", "f32"]
    assert len(root.operands) == 6


# --- syntax variants ----------------------------------------------------------------------

def test_sigils_signatures_typed_operands_comments_and_forward_calls():
    text = """HloModule m, is_scheduled=true  // a comment
ENTRY %main (p: f32[4], q: (f32[], s32[])) -> f32[4] {
  %p = f32[4]{0} parameter(0)   /* the input */
  %q = (f32[], /*index=1*/s32[]) parameter(1)
  %s = f32[] get-tuple-element((f32[], s32[]) %q), index=0
  %b = f32[4] broadcast(f32[] %s), dimensions={}
  %r = f32[4]{0} map(f32[4]{0} %p, %b), dimensions={0}, to_apply=%add
  ROOT %out = f32[4]{0} add(f32[4] %r, f32[4] %b)
}

add {
  x = f32[] parameter(1)
  y = f32[] parameter(0)
  add = f32[] add(x, y)
}
"""
    module = parse_module(text)
    assert [c.name for c in module.computations] == ["main", "add"]
    assert module.entry.name == "main" and module.entry.root.name == "out"
    add = module.computation("add")
    assert add.root.name == "add" and add.instruction("add").opcode == "add"   # no ROOT: the last one
    r = module.entry.instruction("r")
    assert r.attrs["to_apply"] is add
    assert [o.name for o in r.operands] == ["p", "b"]
    assert module.entry.instruction("s").attrs == {"index": 0}
    assert module.entry.instruction("p").users == [r]
    assert module.entry.instruction("q").shape == TupleShape((scalar(F32), scalar(S32)))


def test_default_layouts_are_normalised_and_others_kept():
    text = """HloModule m
ENTRY e {
  a = f32[2,3]{1,0} parameter(0)
  b = f32[2,3]{0,1} copy(a)
  c = f32[2,3] copy(b)
  ROOT d = f32[] constant(1)
}
"""
    entry = parse_module(text).entry
    assert entry.instruction("a").shape.layout is None
    assert entry.instruction("b").shape.layout == (0, 1)
    assert entry.instruction("a").shape == entry.instruction("c").shape


def test_stack_frame_tables_are_skipped():
    text = _text("model_softmax", "optimized")
    assert all(section in text for section in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"))
    module = parse_module(text)
    assert [c.name for c in module.computations] == _COMPUTATION_LINE.findall(text)
    frames = [i.attrs["metadata"]["stack_frame_id"] for i in _all_instructions(module)
              if "stack_frame_id" in i.attrs.get("metadata", {})]
    assert frames and all(isinstance(f, int) for f in frames)


_SCALAR_CONSTANT = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+) = (\w+)\[\] constant\(([^)]*)\)", re.M)


@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_scalar_constants_equal_their_decimal_rounded_to_type(case_dir):
    """Each scalar literal against the text read independently: Python's decimal -> double,
    then NumPy's rounding to the type (through f32 for f16/bf16, as XLA's parser rounds)."""
    text = (case_dir / "module.hlo").read_text()
    module = parse_module(text)
    for name, type_name, token in _SCALAR_CONSTANT.findall(text):
        literal = _find(module, name).literal
        if type_name == "pred":
            expected = np.array(token == "true")
        elif type_name[0] in "su":
            expected = np.array(int(token), dtype=literal.dtype)
        else:
            wide = np.array(float(token))
            expected = wide if type_name == "f64" else wide.astype(np.float32).astype(literal.dtype)
        assert literal.shape == () and _bits(literal) == _bits(expected), (name, token)
