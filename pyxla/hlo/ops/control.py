"""Control flow and calls: call, fusion, while, conditional, opt-barrier, custom-call.

Each of these runs other computations (or, for custom-call, a named target), so their
shape rules check the called computations' signatures against the operands.
"""
from __future__ import annotations

import numpy as np

from ...errors import EvaluationError, ShapeError
from ..shape import ArrayShape, Shape
from ..types import PRED
from .registry import CUSTOM_CALL_TARGETS, OpDef, register, require_declared

PRED_SCALAR = ArrayShape(PRED, ())


def _check_signature(what: str, comp, arg_shapes: list[Shape], result: Shape | None = None) -> Shape:
    """That `comp` takes `arg_shapes`; returns its result shape (checked against `result`)."""
    params = comp.parameter_shapes()
    if len(params) != len(arg_shapes):
        raise ShapeError(f"{what} computation {comp.name} takes {len(params)} parameters, "
                         f"but {len(arg_shapes)} values are passed")
    for i, (p, a) in enumerate(zip(params, arg_shapes)):
        if not p.compatible(a):
            raise ShapeError(f"{what} computation {comp.name}: parameter {i} is {p.to_text(False)}, "
                             f"but {a.to_text(False)} is passed")
    got = comp.result_shape
    if result is not None and not got.compatible(result):
        raise ShapeError(f"{what} computation {comp.name} returns {got.to_text(False)}, "
                         f"expected {result.to_text(False)}")
    return got


def _computation(attrs: dict, name: str, opcode: str):
    comp = attrs.get(name)
    if comp is None:
        raise ShapeError(f"{opcode} needs the attribute {name}=")
    return comp


# --- call and fusion ------------------------------------------------------------------

def _call_shape(operands, attrs, declared):
    return _check_signature("to_apply", _computation(attrs, "to_apply", "call"), operands)


def _fusion_shape(operands, attrs, declared):
    return _check_signature("fused", _computation(attrs, "calls", "fusion"), operands)


register(OpDef("call", "opaque", _call_shape,
               lambda instr, ops, ctx: ctx.call(instr.attrs["to_apply"], ops),
               arity=(0, None), required_attrs=("to_apply",),
               doc="Runs to_apply on the operands (JAX's nested jit)."))

register(OpDef("fusion", "opaque", _fusion_shape,
               lambda instr, ops, ctx: ctx.call(instr.attrs["calls"], ops),
               arity=(0, None), required_attrs=("kind", "calls"), optional_attrs=("bounded_rows",),
               doc="A fused kernel: its value is the fused computation applied to the operands."))


# --- while ----------------------------------------------------------------------------

def _while_shape(operands, attrs, declared):
    (state,) = operands
    _check_signature("condition", _computation(attrs, "condition", "while"), [state], PRED_SCALAR)
    _check_signature("body", _computation(attrs, "body", "while"), [state], state)
    return state


def _while_evaluate(instr, operands, ctx):
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    (state,) = operands
    while bool(ctx.call(cond, [state])):
        after = ctx.call(body, [state])
        if _same_bits(after, state) and not _has_side_effects(body):
            # The next iteration would be this one again, forever. XLA's while-loop simplifier
            # removes such a loop (its body does nothing), so its value is the state.
            return state
        state = after
    return state


def _same_bits(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same_bits(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _has_side_effects(comp) -> bool:
    from .registry import has_side_effects
    return any(has_side_effects(i) or any(_has_side_effects(c) for c in i.called_computations())
               for i in comp.instructions)


register(OpDef("while", "opaque", _while_shape, _while_evaluate, arity=1,
               required_attrs=("condition", "body"),
               doc="Repeats body on the loop state while condition holds."))


# --- conditional ----------------------------------------------------------------------

def branch_computations(attrs) -> list:
    if "branch_computations" in attrs:
        return list(attrs["branch_computations"])
    if "true_computation" in attrs and "false_computation" in attrs:
        return [attrs["true_computation"], attrs["false_computation"]]
    raise ShapeError("conditional needs branch_computations= or true_computation=/false_computation=")


def _conditional_shape(operands, attrs, declared):
    selector, *branch_args = operands
    branches = branch_computations(attrs)
    if "branch_computations" in attrs:
        if not (isinstance(selector, ArrayShape) and selector.rank == 0 and selector.dtype.name == "s32"):
            raise ShapeError(f"conditional with branch_computations takes an s32[] branch index, "
                             f"got {selector.to_text(False)}")
    elif not selector.compatible(PRED_SCALAR):
        raise ShapeError(f"conditional with true/false computations takes a pred[] predicate, "
                         f"got {selector.to_text(False)}")
    if len(branch_args) != len(branches):
        raise ShapeError(f"conditional has {len(branches)} branches but {len(branch_args)} branch operands")
    result = _check_signature("branch", branches[0], [branch_args[0]])
    for comp, arg in zip(branches[1:], branch_args[1:]):
        _check_signature("branch", comp, [arg], result)
    return result


def _conditional_evaluate(instr, operands, ctx):
    selector, *branch_args = operands
    branches = branch_computations(instr.attrs)
    if "branch_computations" in instr.attrs:
        index = int(selector)
        if not 0 <= index < len(branches):   # XLA runs the last branch for an out-of-range index
            index = len(branches) - 1
    else:
        index = 0 if bool(selector) else 1
    return ctx.call(branches[index], [branch_args[index]])


register(OpDef("conditional", "opaque", _conditional_shape, _conditional_evaluate, arity=(2, None),
               optional_attrs=("branch_computations", "true_computation", "false_computation"),
               doc="Runs one branch, chosen by a pred or an s32 index (out of range: the last)."))


# --- opt-barrier ----------------------------------------------------------------------

register(OpDef("opt-barrier", "opaque", lambda operands, attrs, declared: operands[0],
               lambda instr, ops, ctx: ops[0], arity=1,
               doc="Identity that optimisations must not look through (rematerialisation)."))


# --- custom-call ----------------------------------------------------------------------

def _identity_target(instr, operands, ctx):
    if len(operands) != 1:
        raise EvaluationError(f"custom-call {instr.attrs.get('custom_call_target')} takes one operand")
    return operands[0]


# Annotations that compute nothing: the value passes through.
_IDENTITY_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")


def _custom_call_shape(operands, attrs, declared):
    target = attrs.get("custom_call_target")
    if target is None:
        raise ShapeError("custom-call needs custom_call_target=")
    declared = require_declared("custom-call", declared)
    if target in _IDENTITY_TARGETS:
        if len(operands) != 1 or not operands[0].compatible(declared):
            raise ShapeError(f"custom-call {target} passes one value through unchanged")
    return declared


def _custom_call_evaluate(instr, operands, ctx):
    target = instr.attrs["custom_call_target"]
    if target in _IDENTITY_TARGETS:
        return _identity_target(instr, operands, ctx)
    try:
        run = CUSTOM_CALL_TARGETS[target]
    except KeyError:
        raise NotImplementedError(f"custom-call target {target!r} is not supported") from None
    return run(instr, operands, ctx)


register(OpDef("custom-call", "opaque", _custom_call_shape, _custom_call_evaluate, arity=(0, None),
               required_attrs=("custom_call_target",),
               optional_attrs=("called_computations", "api_version", "custom_call_has_side_effect",
                               "output_to_operand_aliasing", "schedule"),
               side_effects=True,
               doc="A call to a named target: Sharding annotations and TopK are understood."))
