"""Linearising a checkpointed call whose policy saves some values (dots_saveable, ...).

The forward pass computes the called computation and keeps the values the policy saves.
The tangent program differentiates a copy of the computation in which each saved
instruction is a `call` of a small computation that returns the saved value, passed in as
a parameter: emitted again, it reads the residual instead of recomputing it, and its joint
rule (`SavedValue`) applies the original instruction's JVP rule with the saved value as its
result. Everything else is recomputed from the inputs, as with nothing saved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..frontend.tracing import emission_scope
from ..hlo.builder import HloBuilder
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..lax.control_flow import optimization_barrier
from .checkpoint import CheckpointCall
from .forward import JvpContext, Poison
from .jvp_rules import JVP_RULES
from .rule_helpers import MissingRule, array_shape
from .staging import is_float_shape, location
from .traced_calls import CALL_RULES, evaluate


@dataclass
class SavedValue:
    """A saved instruction of a checkpointed computation (its JVP rule gives the tangent)."""
    instr: HloInstruction


def saved_value_rule(context: JvpContext, call: SavedValue, operands: list[Any], tangents: list[Any]
                     ) -> tuple[Any, Any]:
    """The saved value (the call's last operand) and the tangent of the instruction it saves."""
    out, op_tangents = operands[-1], tangents[:-1]
    poisons = [t for t in op_tangents if isinstance(t, Poison)]
    if poisons:
        return out, poisons[0]
    if all(t is None for t in op_tangents) or not is_float_shape(call.instr.shape):
        return out, None
    rule = JVP_RULES.get(call.instr.opcode)
    if rule is None:
        return out, Poison(call.instr)
    trace = context.tangent_trace
    assert trace is not None
    with trace, emission_scope(context.scope, location(call.instr)):
        try:
            return out, rule(call.instr, operands[:-1], op_tangents, out)
        except MissingRule:
            return out, Poison(call.instr)


def _reader(instr: HloInstruction) -> HloComputation:
    """A computation of `instr`'s operands and its saved value that returns the saved value."""
    b = HloBuilder(f"saved_{instr.opcode.replace('-', '_')}")
    for i, o in enumerate(instr.operands):
        b.parameter(o.shape, f"operand{i}")
    computation = b.build(b.parameter(instr.shape, "saved"))
    CALL_RULES[computation] = SavedValue(instr)
    return computation


def _copy_reading_saved(computation: HloComputation, saved: list[HloInstruction], stops: set) -> HloComputation:
    """`computation` with a parameter after its own for each saved instruction, which a call
    of `_reader` reads in that instruction's place."""
    b = HloBuilder(f"{computation.name}_saving")
    copies: dict[int, HloInstruction] = {}
    params = computation.parameters
    for p in params:
        copies[id(p)] = b.parameter(p.shape, p.name)
    saved_params = {id(s): b.parameter(s.shape, f"saved{i}") for i, s in enumerate(saved)}
    for instr in computation.post_order():
        if instr.opcode == "parameter":
            continue
        ops = [copies[id(o)] for o in instr.operands]
        if id(instr) in saved_params:
            copy = b.op("call", *ops, saved_params[id(instr)], to_apply=_reader(instr))
        elif instr.opcode == "constant":
            copy = b.constant(instr.literal, array_shape(instr.shape).dtype)
        elif instr.opcode == "tuple":
            copy = b.tuple(*ops)
        else:
            copy = b.op(instr.opcode, *ops, shape=instr.shape, attrs=dict(instr.attrs))
        if instr in stops:
            stops.add(copy)
        copies[id(instr)] = copy
    assert computation.root is not None
    return b.build(copies[id(computation.root)])


def linearize_saving(context: JvpContext, computation: HloComputation, call: CheckpointCall, operands: list[Any],
                     tangents: list[Any]) -> tuple[Any, Any]:
    """(primal result, tangent) of a checkpointed call whose policy saves some values."""
    assert call.policy is not None and context.tangent_trace is not None
    saved = [i for i in computation.post_order()
             if i.opcode not in ("parameter", "constant", "tuple", "get-tuple-element") and call.policy(i)]
    values: dict[int, Any] = {}
    out = evaluate(computation, operands, scope=context.scope, values=values)
    copy = _copy_reading_saved(computation, saved, context.staged.trace.gradient_stops)
    trace = context.tangent_trace
    with trace:
        # The saved values go through the barrier too: else CSE would merge what is
        # recomputed from them with the forward pass.
        inputs = [trace.lift(v) for v in list(operands) + [values[id(s)] for s in saved]]
        if call.prevent_cse:
            inputs = list(optimization_barrier(inputs))
        _, tangent = context.jvp(copy, inputs, list(tangents) + [None] * len(saved))
    return out, tangent


__all__ = ["SavedValue", "linearize_saving", "saved_value_rule"]
