"""The IR's building blocks: element types, shapes, attribute values, builder, evaluator boundary."""
import ml_dtypes
import numpy as np
import pytest

from pyxla.errors import ArgumentError, ShapeError
from pyxla.hlo import (
    BF16,
    F16,
    F32,
    PRED,
    S8,
    U64,
    ArrayShape,
    ConvDimensionNumbers,
    HloBuilder,
    TokenShape,
    TupleShape,
    array,
    element_type,
    evaluate_module,
    from_numpy_dtype,
    scalar,
    scalar_computation,
)


def test_element_types_know_their_storage():
    assert element_type("bf16").np_dtype == np.dtype(ml_dtypes.bfloat16)
    assert from_numpy_dtype(np.float16) is F16
    assert PRED.is_pred and S8.is_signed and U64.is_unsigned and BF16.is_float
    assert [element_type(n).bits for n in ("pred", "s8", "u16", "f32", "f64")] == [8, 8, 16, 32, 64]
    with pytest.raises(KeyError, match="unknown element type 'f31'"):
        element_type("f31")
    with pytest.raises(TypeError, match="complex128"):
        from_numpy_dtype(np.complex128)


def test_shape_text_and_compatibility():
    s = ArrayShape(F32, (2, 3), (0, 1))
    assert s.to_text() == "f32[2,3]{0,1}"
    assert s.to_text(with_layout=False) == "f32[2,3]"
    assert array(F32, 2, 3).to_text() == "f32[2,3]{1,0}"
    assert scalar(PRED).to_text() == "pred[]"
    assert s.compatible(array(F32, 2, 3)) and not s.compatible(array(F32, 3, 2))
    assert s.size == 6 and s.byte_size == 24 and s.minor_to_major == (0, 1)
    t = TupleShape(tuple(array(F32, i) for i in range(7)))
    assert "/*index=5*/f32[5]" in t.to_text()
    nested = TupleShape((t, scalar(S8)))
    assert len(nested.leaves()) == 8
    assert TokenShape().to_text() == "token[]"


@pytest.mark.parametrize("labels", ["b01f_01io->b01f", "bf01_oi01->bf01", "f01b_i01o->01bf", "b0f_0io->b0f",
                                    "b012f_012io->b012f"])
def test_dim_labels_round_trip(labels):
    dn = ConvDimensionNumbers.from_labels(labels)
    assert dn.to_labels() == labels


def test_dim_labels_roles():
    dn = ConvDimensionNumbers.from_labels("b01f_01io->b01f")
    assert (dn.input_batch, dn.input_feature, dn.input_spatial) == (0, 3, (1, 2))
    assert (dn.kernel_input_feature, dn.kernel_output_feature, dn.kernel_spatial) == (2, 3, (0, 1))


@pytest.mark.parametrize("bad", ["b01f_01io", "b01f_01i->b01f", "bb1f_01io->b01f", "b02f_01io->b01f", "bx1f_01io->b01f"])
def test_dim_labels_rejects_malformed(bad):
    with pytest.raises(ValueError, match="dim_labels"):
        ConvDimensionNumbers.from_labels(bad)


def test_builder_infers_shapes_and_checks_arity(rng):
    b = HloBuilder("f")
    x = b.parameter(array(F32, 4, 5), "x")
    y = b.op("exponential", x)
    assert y.shape.compatible(array(F32, 4, 5))
    with pytest.raises(ShapeError, match="takes 1 operand"):
        b.op("exponential", x, x)
    total = b.op("reduce", y, b.constant(np.float32(0)), dimensions=(1,), to_apply=scalar_computation("add", F32))
    module = b.module(total)
    assert [c.name for c in module.computations][-1] == "f"
    v = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate_module(module, [v]), np.exp(v.astype(np.float64)).sum(1), rtol=1e-5)


def test_builder_attribute_shortcut(rng):
    b = HloBuilder("g")
    x = b.parameter(array(F32, 2, 3), "x")
    t = b.transpose(x, dimensions=(1, 0))
    assert t.shape.dims == (3, 2) and t.opcode == "transpose"
    with pytest.raises(NotImplementedError, match="'frobnicate' is not supported"):
        b.frobnicate(x)


def _identity_module():
    b = HloBuilder("id")
    x = b.parameter(array(F32, 2, 3), "x")
    return b.module(b.op("negate", x))


def test_evaluator_names_bad_arguments(rng):
    module = _identity_module()
    with pytest.raises(ArgumentError, match="takes 1 arguments"):
        evaluate_module(module, [])
    with pytest.raises(ArgumentError, match=r"parameter x: expected shape f32\[2,3\], got an array of shape \[3, 2\]"):
        evaluate_module(module, [np.ones((3, 2), np.float32)])
    with pytest.raises(ArgumentError, match="parameter x: expected element type f32, got int32"):
        evaluate_module(module, [np.ones((2, 3), np.int32)])
    with pytest.raises(ArgumentError, match="do not fit f32"):
        evaluate_module(module, [np.full((2, 3), 0.1, np.float64)])


def test_evaluator_accepts_exactly_representable_wider_floats(rng):
    module = _identity_module()
    v = rng.standard_normal((2, 3)).astype(np.float32)
    out = evaluate_module(module, [v.astype(np.float64)])
    assert out.dtype == np.float32 and np.array_equal(out, -v)


CLONED = """HloModule cloned, entry_computation_layout={(f32[4]{0}, s32[])->f32[4]{0}}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

body {
  t = (f32[4], s32[]) parameter(0)
  v = f32[4] get-tuple-element(t), index=0
  i = s32[] get-tuple-element(t), index=1
  c = f32[4] constant({1, 2, 3, 4})
  w = f32[4] add(v, c), metadata={op_name="jit(f)/add" source_file="f.py" source_line=3}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (f32[4], s32[]) tuple(w, j)
}

cond {
  t = (f32[4], s32[]) parameter(0)
  i = s32[] get-tuple-element(t), index=1
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[4] parameter(0)
  k = s32[] parameter(1)
  init = (f32[4], s32[]) tuple(x, k)
  loop = (f32[4], s32[]) while(init), condition=cond, body=body
  y = f32[4] get-tuple-element(loop), index=0
  z = f32[] constant(0)
  total = f32[] reduce(y, z), dimensions={0}, to_apply=add
  ROOT out = f32[4] broadcast(total), dimensions={}
}
"""


def test_a_clone_is_the_same_program_and_shares_nothing(rng):
    from pyxla.hlo import evaluate_module, parse_module
    original = parse_module(CLONED)
    original.donated = (0,)   # an annotation a front end attached
    copy = original.clone()
    assert copy.to_text() == original.to_text() and copy.donated == (0,)
    objects = {id(o) for c in original.computations for o in (c, *c.instructions)}
    assert not objects & {id(o) for c in copy.computations for o in (c, *c.instructions)}
    loop = next(i for i in copy.entry.instructions if i.opcode == "while")
    assert loop.attrs["body"] in copy.computations and loop.attrs["condition"] in copy.computations
    assert all(u.parent is c for c in copy.computations for i in c.instructions for u in i.users)
    # the copy's literals and metadata are its own
    constant = next(i for i in loop.attrs["body"].instructions if i.opcode == "constant" and i.shape.dims == (4,))
    constant.literal[0] = 100.0
    next(i for i in loop.attrs["body"].instructions if i.name == "w").attrs["metadata"]["op_name"] = "changed"
    x = rng.standard_normal(4).astype(np.float32)
    k = np.int32(0)
    want = np.full(4, np.sum(x.astype(np.float64) + 3 * np.array([1, 2, 3, 4])), np.float32)
    np.testing.assert_allclose(evaluate_module(original, [x, k]), want, rtol=1e-5)
    assert 'op_name="jit(f)/add"' in original.to_text()


def test_fresh_names_avoid_names_added_by_other_means():
    from pyxla.hlo import parse_module
    from pyxla.hlo.instruction import HloInstruction
    module = parse_module(CLONED)
    entry = module.entry
    first = module.fresh_name("foo")
    stem, n = first.split(".")
    entry.add_instruction(HloInstruction(first, "constant", ArrayShape(F32, ()), literal=np.float32(1)))
    # added without fresh_name: the next two names it would have issued
    for k in (1, 2):
        entry.add_instruction(HloInstruction(f"{stem}.{int(n) + k}", "constant", ArrayShape(F32, ()),
                                             literal=np.float32(k)))
    names = [module.fresh_name("foo") for _ in range(3)]
    held = {i.name for c in module.computations for i in c.instructions}
    assert not set(names) & held and len(set(names)) == 3
    # a removed instruction's name may stay taken; no issued name is ever reused
    entry.remove_instruction(entry.instructions[-1])
    again = module.fresh_name("foo")
    assert again not in names and again != first


def test_array_and_tuple_shape_of_an_instruction():
    b = HloBuilder("f")
    x = b.parameter(array(F32, 2, 3), "x")
    t = b.tuple(x, x)
    assert x.array_shape is x.shape and x.array_shape.dims == (2, 3)
    assert t.tuple_shape is t.shape and len(t.tuple_shape.elements) == 2
    with pytest.raises(TypeError, match="not an array shape"):
        _ = t.array_shape
    with pytest.raises(TypeError, match="not a tuple shape"):
        _ = x.tuple_shape
