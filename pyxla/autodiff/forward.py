"""Forward-mode differentiation of a staged computation, and its linearisation.

`jvp_staged` walks the staged computation in order. Each instruction is emitted again
through `bind` (into the current trace, or run at once when none is active), and beside it
the opcode's JVP rule (jvp_rules.py) computes the tangent of its result from the primal
operands, the operands' tangents and the primal result. A tangent is an array of the
primal's shape and type, or None: a symbolic zero, which costs nothing and is what every
integer, every constant and every value not depending on the differentiated inputs has.

Where the tangents go decides the mode:

- `tangent_trace=None` (pyxla.jvp): the rules emit into the current trace too, so primal
  and tangent instructions form one program.
- a separate `Trace` (pyxla.vjp, grad, linearize): the rules emit into that trace, whose
  parameters are the input tangents; primal values the rules use are captured into it as
  residuals. The result, a `LinearProgram`, is linear in its parameters; transpose.py
  turns it into the backward pass.

An opcode without a JVP rule gives its result a `Poison` tangent instead of failing at
once: a value nobody differentiates (the running maximum an argmax reduction carries
beside its index, a sort's keys when only the permutation is used) needs no rule. A poison
that reaches a differentiated output raises NotImplementedError naming the opcode, the
transformation and the user's line.

Most opcodes' tangents follow from the primal result, so the walk emits the instruction and
then its JVP rule. Some need to choose the primal computation too, and register a *joint
rule* in JOINT_RULES instead: control flow (whose linearisation moves residuals out of a
loop body or branch, so the primal instruction itself changes) and user-defined rules
(custom_jvp, custom_vjp, checkpoint). A joint rule gets a `JvpContext`, emits the primal
result into the current trace and the tangent into the context's tangent trace, and can
differentiate a called computation with the same machinery (`JvpContext.jvp`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..frontend.tracing import Trace, Tracer, bind, current_trace, emission_scope
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import Shape, TupleShape
from ..lax.gradients import stop_gradient
from .jvp_rules import JVP_RULES
from .rule_helpers import MissingRule
from .staging import Staged, is_float_shape, location, operand_value, reachable, semantic_attrs


class Poison:
    """The tangent of a result whose opcode has no JVP rule: an error once differentiated."""

    __slots__ = ("instr",)

    def __init__(self, instr: HloInstruction):
        self.instr = instr

    def error(self) -> NotImplementedError:
        loc = self.instr.source_location()
        return NotImplementedError(
            f"differentiation (jvp) of HLO opcode '{self.instr.opcode}' is not implemented: pyxla has no "
            f"JVP rule for it" + (f" (the value traced at {loc})" if loc else "")
            + ". See docs/autodiff.md for the opcodes that have rules; lax.stop_gradient marks a "
              "value whose derivative is not wanted.")


def _zero_like(shape: Shape) -> Any:
    if isinstance(shape, TupleShape):
        return tuple(_zero_like(s) for s in shape.elements)
    return None


def _poison_like(shape: Shape, poison: Poison) -> Any:
    if isinstance(shape, TupleShape):
        return tuple(_poison_like(s, poison) for s in shape.elements)
    return poison if is_float_shape(shape) else None


def _leaves(t: Any) -> list[Any]:
    if isinstance(t, (tuple, list)):
        return [x for e in t for x in _leaves(e)]
    return [t]


def _only_float(t: Any, shape: Shape) -> Any:
    """A rule's result with the tangents of integer parts dropped to symbolic zeros."""
    if isinstance(shape, TupleShape):
        return tuple(_only_float(e, s) for e, s in zip(t, shape.elements))
    return t if is_float_shape(shape) else None


def constant_value(instr: HloInstruction) -> Any:
    """A constant of the staged program as a value of the current trace (or its array)."""
    trace = current_trace()
    return trace.lift(instr.literal) if trace is not None else instr.literal


@dataclass
class LinearProgram:
    """The tangent program of a linearised function: a trace whose parameters are the input
    tangents, with the output tangents (Tracers of it, None for zero)."""
    trace: Trace
    inputs: list[Tracer | None]     # the tangent parameter of each input leaf; None: not differentiated
    outputs: list[Any]              # the tangent of each output leaf
    scope: str                      # jvp(name): how op_names call the derivative instructions


@dataclass
class JvpContext:
    """What a joint rule needs of the walk it is part of."""
    staged: Staged                  # the computation being walked (its gradient stops)
    tangent_trace: Trace | None     # where tangents go: None, beside the primal (pyxla.jvp)
    scope: str                      # jvp(name), for op_names

    def staged_computation(self, computation: HloComputation) -> Staged:
        """A called computation (a branch, a loop body) as a Staged to walk: its parameters
        are the inputs, its root the one output."""
        return Staged(self.staged.trace, computation, list(computation.parameters), [],
                      [computation.root], self.staged.out_tree)

    def jvp(self, computation: HloComputation, primals: Sequence[Any], tangents: Sequence[Any],
            tangent_trace: Trace | None = None) -> tuple[Any, Any]:
        """(root value, root tangent) of `computation` at `primals` along `tangents`, its
        primal instructions emitted into the current trace and its tangents into
        `tangent_trace` (default: this walk's). A tuple parameter takes a Python tuple."""
        staged = self.staged_computation(computation)
        trace = self.tangent_trace if tangent_trace is None else tangent_trace
        outs, touts = jvp_staged(staged, primals, tangents, differentiated=[True], tangent_trace=trace,
                                 scope=self.scope)
        return outs[0], touts[0]


# A joint rule: rule(context, instr, operands, tangents) -> (primal result, tangent).
JointRule = Callable[[JvpContext, HloInstruction, list[Any], list[Any]], tuple[Any, Any]]
JOINT_RULES: dict[str, JointRule] = {}


def _joint(context: JvpContext, instr: HloInstruction, operands: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    """The primal result and tangent of an instruction whose opcode has a joint rule."""
    poisons = [t for t in _leaves(tangents) if isinstance(t, Poison)]
    if poisons:
        out = bind(instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))
        return out, _poison_like(instr.shape, poisons[0])
    try:
        out, tangent = JOINT_RULES[instr.opcode](context, instr, operands, tangents)
    except MissingRule:
        out = bind(instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))
        return out, _poison_like(instr.shape, Poison(instr))
    return out, _only_float(tangent, instr.shape)


def _tangent(instr: HloInstruction, operands: list[Any], tangents: list[Any], out: Any,
             tangent_trace: Trace | None, scope: str, stop: bool) -> Any:
    if stop or not is_float_shape(instr.shape) or all(t is None for t in _leaves(tangents)):
        return _zero_like(instr.shape)
    poisons = [t for t in _leaves(tangents) if isinstance(t, Poison)]
    if poisons:
        return _poison_like(instr.shape, poisons[0])
    rule = JVP_RULES.get(instr.opcode)
    if rule is None:
        return _poison_like(instr.shape, Poison(instr))
    context = tangent_trace if tangent_trace is not None else contextlib.nullcontext()
    with context, emission_scope(scope, location(instr)):
        try:
            return _only_float(rule(instr, operands, tangents, out), instr.shape)
        except MissingRule:
            return _poison_like(instr.shape, Poison(instr))


def jvp_staged(staged: Staged, primals: Sequence[Any], tangents: Sequence[Any], *,
               differentiated: Sequence[bool], tangent_trace: Trace | None, scope: str
               ) -> tuple[list[Any], list[Any]]:
    """The staged computation's outputs at `primals` and their tangents along `tangents`
    (None: zero). Only outputs marked in `differentiated` get tangents; a poisoned one raises."""
    wanted = {id(i) for i in reachable([o for o, d in zip(staged.outputs, differentiated) if d])}
    context = JvpContext(staged, tangent_trace, scope)
    env: dict[int, Any] = {}
    tenv: dict[int, Any] = {}
    for param, value, tangent in zip(staged.inputs, primals, tangents):
        env[id(param)], tenv[id(param)] = value, tangent
    for outer, param in staged.captures:
        env[id(param)], tenv[id(param)] = outer, None
    for instr in reachable(staged.outputs):
        key = id(instr)
        if instr.opcode == "parameter":
            continue
        operands = [env[id(o)] for o in instr.operands]
        op_tangents = [tenv[id(o)] for o in instr.operands]
        if instr.opcode == "constant":
            env[key], tenv[key] = constant_value(instr), None
        elif instr.opcode == "tuple":
            env[key], tenv[key] = tuple(operands), tuple(op_tangents)
        elif instr.opcode == "get-tuple-element":
            index = instr.attrs["index"]
            env[key] = operands[0][index]
            tenv[key] = op_tangents[0][index] if isinstance(op_tangents[0], tuple) else None
        elif (instr.opcode in JOINT_RULES and key in wanted and is_float_shape(instr.shape)
              and not staged.is_gradient_stop(instr) and any(t is not None for t in _leaves(op_tangents))):
            with emission_scope(scope, location(instr)):
                env[key], tenv[key] = _joint(context, instr, operands, op_tangents)
        else:
            stop = staged.is_gradient_stop(instr)
            with emission_scope(scope, location(instr)):
                out = stop_gradient(operands[0]) if stop else bind(
                    instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))
            env[key] = out
            tenv[key] = (_tangent(instr, operands, op_tangents, out, tangent_trace, scope, stop)
                         if key in wanted else _zero_like(instr.shape))
    primals_out = [env[id(o)] for o in staged.outputs]
    tangents_out = [tenv[id(o)] if d else None for o, d in zip(staged.outputs, differentiated)]
    for t in tangents_out:
        if isinstance(t, Poison):
            raise t.error()
    return primals_out, tangents_out


def linearize_staged(staged: Staged, primals: Sequence[Any], differentiable: Sequence[bool], *,
                     differentiated: Sequence[bool], name: str) -> tuple[list[Any], LinearProgram]:
    """The outputs at `primals`, and the tangent program: a LinearProgram whose parameters
    are the tangents of the `differentiable` inputs."""
    scope = f"jvp({name})"
    trace = Trace(f"jvp.{name}", parent=current_trace())
    tangents: list[Tracer | None] = [
        trace.new_parameter(param.shape, f"tangent{i}") if d else None
        for i, (param, d) in enumerate(zip(staged.inputs, differentiable))]
    primals_out, tangents_out = jvp_staged(staged, primals, tangents, differentiated=differentiated,
                                           tangent_trace=trace, scope=scope)
    return primals_out, LinearProgram(trace, tangents, tangents_out, scope)
