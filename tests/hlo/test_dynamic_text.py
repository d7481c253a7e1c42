"""Dynamic dimensions in HLO text: `f32[?,32]` and `f32[<=128,32]` parse into anonymous symbols,
print back exactly, flow between instructions as the shape rules say, verify, and are refused
(clearly) at compile time."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends.cpu import CpuBackend
from pyxla.compiler import compile_module
from pyxla.errors import ParseError
from pyxla.hlo import parse_module, verify_module
from pyxla.hlo.builder import HloBuilder
from pyxla.hlo.dims import DimExpr, Symbol, is_anonymous, upper_bound
from pyxla.hlo.dynamic_dims import compatible_as_text
from pyxla.hlo.parser import parse_program_shape
from pyxla.hlo.shape import ArrayShape, TupleShape
from pyxla.hlo.types import F32

MODULE = """HloModule dynamic, entry_computation_layout={(f32[<=10,3]{1,0}, f32[?,3]{0,1})->(f32[3]{0}, f32[<=30]{0}, (f32[<=10,3]{1,0}, f32[?,3]{1,0}))}

add {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT add = f32[] add(lhs, rhs)
}

ENTRY main {
  p = f32[<=10,3]{1,0} parameter(0)
  q = f32[?,3]{0,1} parameter(1)
  e = f32[<=10,3]{1,0} exponential(p)
  c = f32[<=10,3]{0,1} add(e, p)
  r = f32[<=30]{0} reshape(c)
  z = f32[] constant(0)
  s = f32[3]{0} reduce(c, z), dimensions={0}, to_apply=add
  b = f32[<=10,3,2]{2,1,0} broadcast(c), dimensions={0,1}
  t = (f32[<=10,3]{1,0}, f32[?,3]{1,0}) tuple(e, q)
  ROOT out = (f32[3]{0}, f32[<=30]{0}, (f32[<=10,3]{1,0}, f32[?,3]{1,0})) tuple(s, r, t)
}

"""


def test_round_trip_is_exact_with_tuples_and_layouts():
    module = parse_module(MODULE)
    assert module.to_text() == MODULE
    assert parse_module(module.to_text()).to_text() == MODULE
    verify_module(module)


def test_dimensions_become_anonymous_symbols_with_the_written_bounds():
    module = parse_module(MODULE)
    p, q = module.entry.parameters
    (pd, p3), (qd, q3) = p.shape.dims, q.shape.dims
    assert isinstance(pd, DimExpr) and isinstance(qd, DimExpr) and p3 == q3 == 3
    assert upper_bound(pd) == 10 and upper_bound(qd) is None
    assert all(is_anonymous(s) for s in pd.symbols | qd.symbols)
    assert pd != qd   # two `?` / `<=N` are two unrelated sizes
    assert p.shape.layout is None and q.shape.layout == (0, 1)


def test_written_dynamic_dimensions_take_the_inferred_expressions():
    module = parse_module(MODULE)
    entry = module.entry
    p = entry.instruction("p").shape.dims[0]
    assert entry.instruction("e").shape.dims == (p, 3)
    assert entry.instruction("c").shape.dims == (p, 3)
    assert entry.instruction("r").shape.dims == (3 * p,)
    assert entry.instruction("b").shape.dims == (p, 3, 2)


def test_shapes_left_out_are_inferred_from_dynamic_operands():
    # XLA's dynamic padder test form: the reduce's shape is left out
    text = """HloModule LargeDynamicInput

add (lhs: f32[], rhs: f32[]) -> f32[] {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT add = f32[] add(lhs, rhs)
}

ENTRY main {
  param = f32[<=20,<=20,<=20] parameter(0)
  zero = f32[] constant(0)
  partial = reduce(param, zero), to_apply=add, dimensions={1,2}
  ROOT out = exponential(partial)
}
"""
    module = parse_module(text)
    verify_module(module)
    out = module.entry.root
    assert out.shape.to_text() == "f32[<=20]{0}"
    assert out.shape.dims == module.entry.parameters[0].shape.dims[:1]


def test_xla_forms_signatures_and_set_dimension_size():
    signature = """HloModule TEST

ENTRY %main (Arg_0.1: s32[], Arg_1.2: f32[<=2]) -> f32[<=2] {
  %Arg_0.1 = s32[] parameter(0)
  ROOT %Arg_1.2 = f32[<=2] parameter(1)
}
"""
    verify_module(parse_module(signature))
    logistic = """HloModule DynamicDimensions

ENTRY main {
  p = f32[<=10] parameter(0)
  ROOT root = f32[<=10] logistic(p)
}
"""
    module = parse_module(logistic)
    verify_module(module)
    assert module.entry.root.shape.dims == module.entry.parameters[0].shape.dims
    sizes = """HloModule module

ENTRY computation {
  a = f32[20,20] parameter(0)
  a_size_1 = s32[] parameter(1)
  a_size_2 = s32[] parameter(2)
  a_dynamic_1 = f32[<=20,20] set-dimension-size(a, a_size_1), dimensions={0}
  a_dynamic_2 = f32[<=20,<=20] set-dimension-size(a_dynamic_1, a_size_2), dimensions={1}
  ROOT n = s32[] get-dimension-size(a_dynamic_2), dimensions={1}
}
"""
    module = parse_module(sizes)
    verify_module(module)
    first, second = module.entry.instruction("a_dynamic_1"), module.entry.instruction("a_dynamic_2")
    assert second.shape.dims[0] == first.shape.dims[0]   # dimension 0 flows through
    assert module.to_text().count("f32[<=20,<=20]{1,0} set-dimension-size") == 1


def test_program_shapes_and_operand_shapes_written_with_dynamic_dimensions():
    params, result = parse_program_shape("{(f32[<=4,?]{1,0}, s32[])->(f32[<=4]{0})}")
    assert params[0].to_text() == "f32[<=4,?]{1,0}" and result.to_text() == "(f32[<=4]{0})"
    text = """HloModule m

ENTRY main {
  p = f32[<=8] parameter(0)
  ROOT n = f32[<=8] negate(f32[<=8] p)
}
"""
    verify_module(parse_module(text))
    wrong = text.replace("negate(f32[<=8] p)", "negate(f32[<=9] p)")
    with pytest.raises(ParseError, match=r"written as f32\[<=9\] but its shape is f32\[<=8\]"):
        parse_module(wrong)


def test_compatible_as_text():
    a = parse_module(MODULE).entry.parameters[0].shape
    other = ArrayShape(F32, (DimExpr.symbol(Symbol("b", 1, 10)), 3))
    assert compatible_as_text(a, other) and not a.compatible(other)
    assert not compatible_as_text(a, ArrayShape(F32, (DimExpr.symbol(Symbol("b", 1, 11)), 3)))
    assert not compatible_as_text(a, ArrayShape(F32, (10, 3)))
    assert compatible_as_text(TupleShape((a,)), TupleShape((other,)))


@pytest.mark.parametrize("text, message", [
    ("f32[<=x]", "a dimension size"),
    ("f32[<=]", "a dimension size"),
    ("f32[??]", "after dimensions"),
    ("f32[<=4,?]{0}", "not a permutation"),
])
def test_malformed_dynamic_dimensions(text, message):
    with pytest.raises(ParseError, match=message):
        parse_module(f"HloModule m\n\nENTRY main {{\n  ROOT p = {text} parameter(0)\n}}\n")


def test_compiling_dynamic_text_directly_points_to_compile_dynamic():
    module = parse_module("HloModule m\n\nENTRY main {\n  p = f32[<=10,3] parameter(0)\n"
                          "  ROOT e = f32[<=10,3] exponential(p)\n}\n")
    with pytest.raises(NotImplementedError, match=r"%p \(parameter\) in main has the dynamic shape f32\[<=10,3\]: "
                                                  r".*compile_dynamic"):
        CpuBackend().compile(module)


def test_compiling_a_symbolic_module_points_to_the_padder():
    b = HloBuilder("poly")
    x = b.parameter(ArrayShape(F32, (DimExpr.symbol(Symbol("b")), 3)), "x")
    module = b.module(b.op("negate", x))
    with pytest.raises(NotImplementedError, match=r"f32\[b,3\].*pad_to_bounds"):
        compile_module(module)
    # the static module still compiles and runs
    static = HloBuilder("static")
    y = static.parameter(ArrayShape(F32, (2, 3)), "y")
    values = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(CpuBackend().compile(static.module(static.op("negate", y)))(values), -values)
