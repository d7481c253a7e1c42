"""The joint rule of `call` (forward.JOINT_RULES): ordinary calls, custom_jvp, custom_vjp and
checkpoint; and the transpose rule of custom_vjp's linear custom-call.

- An ordinary call (a loop body's function, a call read from HLO text) is differentiated
  through its computation, which the walk copies inline.
- custom_jvp: the user's rule, traced beside the call, is emitted again; in linearisation its
  instructions that read tangents go into the tangent program, the rest (the primal output,
  the coefficients) into the forward pass (traced_calls.evaluate).
- custom_vjp: forward mode is refused, as in JAX. Linearised, fwd runs in the forward pass
  and the tangent program gets one linear instruction, a custom-call of the input tangents
  and fwd's residuals, whose transpose calls bwd with the residuals and the cotangent.
- checkpoint: the forward pass is the call; the tangent program differentiates the called
  computation again on its inputs (through an opt-barrier, against CSE), so the backward pass
  recomputes the intermediates it needs from the inputs rather than keeping them.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..errors import PyxlaError
from ..frontend.pytree import float0, tree_unflatten
from ..frontend.tracing import Trace, bind, emission_scope
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.ops.registry import register_custom_call
from ..hlo.shape import TupleShape
from ..lax.control_flow import optimization_barrier
from . import control_flow_rules  # noqa: F401  (its rule of an ordinary call first: this one wraps it)
from .checkpoint import CheckpointCall
from .custom import CustomJvpCall, CustomVjpCall
from .forward import JOINT_RULES, JvpContext
from .remat_policies import SavedValue, linearize_saving, saved_value_rule
from .rule_helpers import zeros
from .staging import location
from .traced_calls import CALL_RULES, evaluate, is_linear
from .transpose_rules import TRANSPOSE_RULES

FORWARD_MODE_ERROR = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."
VJP_TARGET = "pyxla.custom_vjp"


class ForwardModeError(PyxlaError, TypeError):
    """JAX's TypeError for forward mode through a custom_vjp function (a PyxlaError, so that
    the evaluator passes it on as it is)."""


def _forward_mode_refused(instr: Any, operands: Any, ctx: Any) -> Any:
    raise ForwardModeError(FORWARD_MODE_ERROR)


# Evaluating the linear custom-call forward (pyxla.linearize's JVP function) is forward mode.
register_custom_call(VJP_TARGET, _forward_mode_refused)

# The custom-calls of each tangent program, with the custom_vjp call each stands for and how
# many of its operands are tangents (the rest are residuals).
_LINEAR_VJPS: weakref.WeakKeyDictionary[Trace, dict[int, tuple[HloInstruction, CustomVjpCall, int]]] = \
    weakref.WeakKeyDictionary()


def _leaves(value: Any, computation: HloComputation) -> list[Any]:
    return list(value) if computation.root.opcode == "tuple" else [value]


def _packed(leaves: list[Any]) -> Any:
    return leaves[0] if len(leaves) == 1 else tuple(leaves)


def _refuse_closed_over_tangents(kind: str, name: str, tangents: list[Any]) -> None:
    if any(t is not None for t in tangents):
        raise TypeError(f"{kind} function {name} closes over a value that is being differentiated: pass it "
                        "as an argument instead, so that the custom rule gives its derivative")


def _custom_jvp(context: JvpContext, call: CustomJvpCall, operands: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    a, n = call.args, len(call.args.leaves)
    name = getattr(call.function.fun, "__name__", "fn")
    _refuse_closed_over_tangents("custom_jvp", name, tangents[n:])
    if call.rule is not None:
        rule, start = call.rule, n + call.n_captures
        captures = operands[start:start + len(rule.captures)]
    else:
        rule = call.trace_rule()
        captures = rule.captures
    tangent_args = [zeros(v) if t is None else t for t, v, f in zip(tangents[:n], a.avals, a.floats) if f]
    trace = context.tangent_trace
    values = _leaves(evaluate(rule.computation, operands[:n] + tangent_args + captures, tangent_trace=trace,
                              scope=context.scope), rule.computation)
    n_out = len(call.out_avals)
    primal, float_tangents = values[:n_out], iter(values[n_out:])
    if any(is_linear(p, trace) for p in primal):
        raise TypeError(f"the custom_jvp rule of {name} computes its primal output from the tangents")
    out_tangents = []
    for v in call.out_avals:
        t = next(float_tangents) if v.dtype.is_float else None
        # In a linearisation, a tangent not computed from the input tangents is a zero.
        out_tangents.append(t if trace is None or is_linear(t, trace) else None)
    return _packed(primal), _packed(out_tangents)


def _custom_vjp(context: JvpContext, instr: HloInstruction, call: CustomVjpCall, operands: list[Any],
                tangents: list[Any]) -> tuple[Any, Any]:
    trace = context.tangent_trace
    if trace is None:
        raise TypeError(FORWARD_MODE_ERROR)
    a, n = call.args, len(call.args.leaves)
    name = getattr(call.function.fun, "__name__", "fn")
    _refuse_closed_over_tangents("custom_vjp", name, tangents[n:])
    if call.fwd is not None:
        fwd, res_tree, start = call.fwd, call.res_tree, n + call.n_captures
        captures = operands[start:start + len(fwd.captures)]
    else:
        fwd, res_tree = call.trace_fwd()
        captures = fwd.captures
        call = CustomVjpCall(call.function, a, call.out_tree, call.out_avals, call.n_captures, fwd, res_tree)
    values = _leaves(evaluate(fwd.computation, operands[:n] + captures, scope=context.scope), fwd.computation)
    n_out = len(call.out_avals)
    primal, residuals = values[:n_out], values[n_out:]
    float_outs = [v for v in call.out_avals if v.dtype.is_float]
    with trace, emission_scope(context.scope, location(instr)):
        tangent_in = [zeros(v) if t is None else t for t, v, f in zip(tangents[:n], a.avals, a.floats) if f]
        shape = float_outs[0] if len(float_outs) == 1 else TupleShape(tuple(float_outs))
        linear = bind("custom-call", *tangent_in, *residuals, shape=shape, custom_call_target=VJP_TARGET,
                      unpack=False)
        _LINEAR_VJPS.setdefault(trace, {})[id(linear.instr)] = (linear.instr, call, len(tangent_in))
        elements = [linear] if len(float_outs) == 1 else [
            bind("get-tuple-element", linear, index=i) for i in range(len(float_outs))]
    it = iter(elements)
    out_tangents = [next(it) if v.dtype.is_float else None for v in call.out_avals]
    return _packed(primal), _packed(out_tangents)


def _transpose_custom_vjp(instr: HloInstruction, ct: Any, args: list[Any]) -> list[Any]:
    entry = next((table[id(instr)] for table in _LINEAR_VJPS.values()
                  if id(instr) in table and table[id(instr)][0] is instr), None)
    if entry is None:
        raise NotImplementedError(f"transpose of {instr.describe()}: only custom_vjp's custom-calls have one")
    _, call, n_tangents = entry
    assert call.res_tree is not None
    residuals = tree_unflatten(call.res_tree, args[n_tangents:])
    given = iter(list(ct) if isinstance(ct, tuple) else [ct])
    out_cts = []
    for v in call.out_avals:
        c = next(given) if v.dtype.is_float else None
        out_cts.append(np.zeros(v.dims, float0) if not v.dtype.is_float else zeros(v) if c is None else c)
    leaves = call.function.cotangents(call, residuals, tree_unflatten(call.out_tree, out_cts))
    return [ct for ct, f in zip(leaves, call.args.floats) if f] + [None] * (len(args) - n_tangents)


TRANSPOSE_RULES["custom-call"] = _transpose_custom_vjp


def _checkpoint(context: JvpContext, computation: HloComputation, call: CheckpointCall, operands: list[Any],
                tangents: list[Any]) -> tuple[Any, Any]:
    trace = context.tangent_trace
    if trace is None or call.saves_everything:
        return context.jvp(computation, operands, tangents)
    if not call.saves_nothing:
        return linearize_saving(context, computation, call, operands, tangents)
    out = bind("call", *operands, to_apply=computation)
    with trace:
        inputs = [trace.lift(v) for v in operands]
        if call.prevent_cse:
            inputs = list(optimization_barrier(inputs))
        _, tangent = context.jvp(computation, inputs, tangents)
    return out, tangent


def _call(context: JvpContext, instr: HloInstruction, operands: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    computation = instr.attrs["to_apply"]
    call = CALL_RULES.get(computation)
    if isinstance(call, CustomJvpCall):
        return _custom_jvp(context, call, operands, tangents)
    if isinstance(call, CustomVjpCall):
        return _custom_vjp(context, instr, call, operands, tangents)
    if isinstance(call, CheckpointCall):
        return _checkpoint(context, computation, call, operands, tangents)
    if isinstance(call, SavedValue):
        return saved_value_rule(context, call, operands, tangents)
    if _plain_call is not None:
        return _plain_call(context, instr, operands, tangents)
    return context.jvp(computation, operands, tangents)


# The rule of an ordinary call registered before this module (control_flow_rules.py's), if any.
_plain_call = JOINT_RULES.get("call")
JOINT_RULES["call"] = _call

__all__ = ["FORWARD_MODE_ERROR", "VJP_TARGET"]
