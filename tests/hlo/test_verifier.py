"""The verifier names the computation and instruction of every broken rule."""
import pytest

from pyxla.errors import VerifierError
from pyxla.hlo import F32, S32, HloBuilder, array, scalar, scalar_computation, verify_module
from pyxla.hlo.instruction import HloInstruction
from pyxla.hlo.shape import ArrayShape


def small_module():
    b = HloBuilder("entry")
    x = b.parameter(array(F32, 2, 3), "x")
    y = b.parameter(array(F32, 2, 3), "y")
    s = b.op("add", x, y, name="sum")
    e = b.op("exponential", s, name="exp")
    return b.module(e), b


def test_valid_module_passes():
    module, _ = small_module()
    verify_module(module)


def test_wrong_declared_shape_is_named():
    module, _ = small_module()
    module.entry.instruction("sum").shape = array(F32, 3, 2)
    with pytest.raises(VerifierError, match=r"%sum \(add\) in entry.*f32\[(3,2\].*f32\[2,3|2,3\].*f32\[3,2)\]"):
        verify_module(module)


def test_wrong_operand_count():
    module, _ = small_module()
    exp = module.entry.instruction("exp")
    exp.operands.append(exp.operands[0])
    with pytest.raises(VerifierError, match=r"%exp \(exponential\).*takes 1 operand"):
        verify_module(module)


def test_unknown_attribute_rejected():
    module, _ = small_module()
    module.entry.instruction("sum").attrs["dimensions"] = (0,)
    with pytest.raises(VerifierError, match=r"add has no attribute dimensions="):
        verify_module(module)


def test_metadata_is_always_allowed_and_located():
    module, _ = small_module()
    instr = module.entry.instruction("sum")
    instr.attrs["metadata"] = {"op_name": "jit(f)/add", "source_file": "model.py", "source_line": 12}
    verify_module(module)
    instr.shape = array(F32, 5)
    with pytest.raises(VerifierError, match=r"from model.py:12"):
        verify_module(module)


def test_unknown_opcode():
    module, _ = small_module()
    module.entry.instruction("exp").opcode = "exponentiate"
    with pytest.raises(VerifierError, match=r"'exponentiate' is not supported"):
        verify_module(module)


def test_bad_layout():
    module, _ = small_module()
    module.entry.instruction("sum").shape = ArrayShape(F32, (2, 3), (0, 0))
    with pytest.raises(VerifierError, match="not a permutation"):
        verify_module(module)


def test_parameter_numbers_must_be_dense():
    module, _ = small_module()
    module.entry.parameters[1].parameter_number = 5
    with pytest.raises(VerifierError, match=r"parameter numbers are \[0, 5\]"):
        verify_module(module)


def test_operand_from_another_computation():
    module, _ = small_module()
    other = HloBuilder("other")
    stranger = other.parameter(array(F32, 2, 3), "stranger")
    module.entry.instruction("exp").operands[0] = stranger
    with pytest.raises(VerifierError, match="belongs to another computation"):
        verify_module(module)


def test_cycle_detected():
    module, _ = small_module()
    s = module.entry.instruction("sum")
    e = module.entry.instruction("exp")
    s.operands[0] = e
    with pytest.raises(VerifierError, match="depends on itself"):
        verify_module(module)


def test_duplicate_instruction_names_across_computations():
    b = HloBuilder("entry")
    x = b.parameter(scalar(F32), "x")
    add = scalar_computation("add", F32, "adder")
    add.parameters[0].name = "x"
    r = b.op("call", x, x, to_apply=add)
    module = b.module(r)
    verify_module(module)   # the builder renamed the second x
    module.entry.parameters[0].name = add.parameters[0].name = "x"
    with pytest.raises(VerifierError, match="%x is used in both"):
        verify_module(module)


def test_called_computation_signature_checked():
    b = HloBuilder("entry")
    x = b.parameter(scalar(S32), "x")
    add = scalar_computation("add", F32, "adder")
    call = b.computation.add_instruction(
        HloInstruction("bad_call", "call", scalar(F32), [x, x], {"to_apply": add}))
    module = b.module(call)
    with pytest.raises(VerifierError, match=r"%bad_call \(call\).*parameter 0 is f32\[\], but s32\[\] is passed"):
        verify_module(module)


def test_while_condition_must_return_pred():
    b = HloBuilder("entry")
    x = b.parameter(scalar(F32), "x")
    bb = HloBuilder("negate_body")
    body = bb.build(bb.op("negate", bb.parameter(scalar(F32), "q")))
    cb = HloBuilder("not_a_predicate")
    p = cb.parameter(scalar(F32), "p")
    cond = cb.build(p)
    loop = b.computation.add_instruction(
        HloInstruction("loop", "while", scalar(F32), [x], {"condition": cond, "body": body}))
    module = b.module(loop)
    with pytest.raises(VerifierError, match=r"condition computation not_a_predicate returns f32\[\], expected pred\[\]"):
        verify_module(module)
