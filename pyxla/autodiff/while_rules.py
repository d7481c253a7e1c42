"""Differentiation of `while` (lax.while_loop, fori_loop, scan), after JAX's rules.

- Forward mode (pyxla.jvp): a while whose state carries the tangents of the state
  elements beside them. Which elements have nonzero tangents is the fixed point of the
  body (a tangent the body gives an element whose input tangent is zero makes it
  nonzero), as in JAX; the others cost nothing.
- Linearised, with a known trip count (scan, fori_loop with concrete bounds: the
  while's backend_config says `known_trip_count`): the primal while also stacks, per
  iteration, the residuals its linear body reads (dynamic-update-slice into arrays with a
  leading trip-count axis, carried in the state); residuals that are loop-invariant state
  elements (what the body captures from outside) are passed as they are. The tangent
  trace gets a while over the linear body that reads its iteration's residuals by
  dynamic-slice. Its transpose runs the transposed body from the last iteration to the
  first.
- Linearised, with no known trip count: the tangent trace gets the forward-mode while,
  which recomputes the primal state beside the tangents (so pyxla.linearize works, as
  in JAX); transposing it raises JAX's ValueError: reverse mode needs a trip count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import lax
from ..frontend.tracing import Tracer, bind, make_tuple, shape_of
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape, Shape
from ..hlo.types import S32
from ..lax.control_flow import known_trip_count, known_trip_count_config
from .forward import JOINT_RULES, JvpContext
from .rule_helpers import instantiate, zeros
from .staging import operand_value, semantic_attrs
from .subcomputations import Flat, FlatTrace, as_state, element_shape, emit_while, flat_elements
from .transpose import CALLING_TRANSPOSE_RULES, Lin, linearity_of, transpose_computation, while_linearity
from .transpose_rules import Linear

REVERSE_MODE_ERROR = ("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
                      "dynamic start/stop values. Try using lax.scan, or using fori_loop with static start/stop.")


def _condition(cond: HloComputation, state: list[Any]) -> Flat:
    """The loop condition as a flat computation of the first len(state) slots."""
    flat = FlatTrace("while_cond")
    with flat:
        params = [flat.parameter(shape_of(v), j) for j, v in enumerate(state)]
        return flat.finish([bind("call", make_tuple(*params), to_apply=cond)])


def _invariant(body: HloComputation) -> list[bool]:
    """Per state element: whether the body passes it through unchanged."""
    root, (param,) = body.root, body.parameters
    assert root is not None
    if root.opcode != "tuple":
        return [False] * len(flat_elements(None, body.result_shape))
    return [o.opcode == "get-tuple-element" and o.operands[0] is param and o.attrs["index"] == j
            for j, o in enumerate(root.operands)]


# --- forward mode ---------------------------------------------------------------------------------

def _while_jvp(context: JvpContext, instr: HloInstruction, state: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    body = instr.attrs["body"]
    n = len(state)
    nonzero = [t is not None for t in tangents]
    while True:
        moving = [j for j in range(n) if nonzero[j]]
        flat = FlatTrace("jvp_while_body")
        with flat:
            params = [flat.parameter(shape_of(v), j) for j, v in enumerate(state)]
            tparams: list[Any] = [None] * n
            for k, j in enumerate(moving):
                tparams[j] = flat.parameter(shape_of(state[j]), n + k)
            out, tout = context.jvp(body, [tuple(params)], [tuple(tparams)], tangent_trace=None)
            outs, touts = flat_elements(out, instr.shape), flat_elements(tout, instr.shape)
            grown = [z or t is not None for z, t in zip(nonzero, touts)]
            if grown == nonzero:
                outputs = outs + [instantiate(touts[j], element_shape(instr.shape, j)) for j in moving]
                break
        nonzero = grown
    init = state + [instantiate(tangents[j], element_shape(instr.shape, j)) for j in moving]
    results = emit_while(_condition(instr.attrs["condition"], state), flat.finish(outputs), init,
                         instr.attrs.get("backend_config"))
    out_tangents: list[Any] = [None] * n
    for k, j in enumerate(moving):
        out_tangents[j] = results[n + k]
    return as_state(results[:n], instr.shape), as_state(out_tangents, instr.shape)


# --- linearisation ------------------------------------------------------------------------------------

@dataclass
class _LinearBody:
    """The loop body linearised: the primal body's trace, the linear body's, which state
    elements have tangents, and the residuals: stacked (computed in the body) and passed
    (loop-invariant state elements, constants), by the value the linear body captured."""
    flat: FlatTrace
    linear: FlatTrace
    moving: list[int]
    outs: list[Any]
    touts: list[Any]
    stacked: list[Tracer]
    passed: dict[int, Any]


def _linearize_body(context: JvpContext, instr: HloInstruction, state: list[Any], tangents: list[Any]
                    ) -> _LinearBody:
    body = instr.attrs["body"]
    n = len(state)
    nonzero = [t is not None for t in tangents]
    while True:
        moving = [j for j in range(n) if nonzero[j]]
        flat = FlatTrace("lin_while_body")
        with flat:
            params = [flat.parameter(shape_of(v), j) for j, v in enumerate(state)]
            linear = FlatTrace("lin_while_body_tangent", parent=flat.trace)
            tparams: list[Any] = [None] * n
            for k, j in enumerate(moving):
                tparams[j] = linear.parameter(shape_of(state[j]), 1 + k)
            out, tout = context.jvp(body, [tuple(params)], [tuple(tparams)], tangent_trace=linear.trace)
        touts = flat_elements(tout, instr.shape)
        grown = [z or t is not None for z, t in zip(nonzero, touts)]
        if grown == nonzero:
            break
        nonzero = grown
    invariant = _invariant(body)
    param_index = {id(p): j for j, p in enumerate(params)}
    stacked, passed = [], {}
    for outer, _ in linear.trace.captures:
        j = param_index.get(id(outer))
        if j is not None and invariant[j]:
            passed[id(outer)] = state[j]
        elif isinstance(outer, Tracer) and outer.trace is flat.trace and outer.instr.opcode == "constant":
            passed[id(outer)] = outer.instr.literal
        elif isinstance(outer, Tracer) and outer.trace is flat.trace:
            stacked.append(outer)
        else:
            passed[id(outer)] = outer
    return _LinearBody(flat, linear, moving, flat_elements(out, instr.shape), touts, stacked, passed)


def _primal_loop(instr: HloInstruction, body: _LinearBody, state: list[Any], n: int) -> tuple[list[Any], list[Any]]:
    """The primal while, stacking the residuals: (its final state, the stacks)."""
    size = len(state)
    with body.flat:
        counter = body.flat.parameter(ArrayShape(S32, ()), size)
        new_stacks = []
        for r, value in enumerate(body.stacked):
            s = shape_of(value)
            stack = body.flat.parameter(ArrayShape(s.dtype, (n,) + s.dims), size + 1 + r)
            new_stacks.append(lax.dynamic_update_index_in_dim(stack, value, counter, 0))
        outputs = body.outs + [lax.add(counter, np.int32(1))] + new_stacks
    init = state + [np.int32(0)] + [zeros(ArrayShape(shape_of(v).dtype, (n,) + shape_of(v).dims))
                                   for v in body.stacked]
    results = emit_while(_condition(instr.attrs["condition"], state), body.flat.finish(outputs), init,
                         instr.attrs.get("backend_config"))
    return results[:size], results[size + 1:]


def _tangent_loop(instr: HloInstruction, body: _LinearBody, tangents: list[Any], stacks: list[Any], n: int
                  ) -> list[Any]:
    """The while over the linear body, in the current trace: the final tangents of the
    moving state elements. Its state: the iteration, then those tangents."""
    with body.linear:
        linear_out = [instantiate(body.touts[j], element_shape(instr.shape, j)) for j in body.moving]
    linear = body.linear.finish(linear_out)
    stack_of = {id(v): stack for v, stack in zip(body.stacked, stacks)}
    flat = FlatTrace("tangent_while_body")
    with flat:
        counter = flat.parameter(ArrayShape(S32, ()), 0)
        tparams = [flat.parameter(shape_of(tangents[k]), 1 + k) for k in range(len(body.moving))]
        args = []
        for x in linear.inputs:
            if isinstance(x, int):
                args.append(tparams[x - 1])
            elif id(x.value) in stack_of:
                args.append(lax.dynamic_index_in_dim(stack_of[id(x.value)], counter, 0, keepdims=False))
            else:
                args.append(body.passed[id(x.value)])
        touts = bind("call", *args, to_apply=linear.comp)
        step = flat.finish([lax.add(counter, np.int32(1)), *touts])
    cond = FlatTrace("tangent_while_cond")
    with cond:
        cond_flat = cond.finish([lax.lt(cond.parameter(ArrayShape(S32, ()), 0), np.int32(n))])
    return emit_while(cond_flat, step, [np.int32(0), *tangents], known_trip_count_config(n))[1:]


def _while_linearize(context: JvpContext, instr: HloInstruction, state: list[Any], tangents: list[Any],
                     n: int) -> tuple[Any, Any]:
    if n == 0:
        return as_state(state, instr.shape), as_state(tangents, instr.shape)
    body = _linearize_body(context, instr, state, tangents)
    outs, stacks = _primal_loop(instr, body, state, n)
    out_tangents: list[Any] = [None] * len(state)
    if body.moving:
        assert context.tangent_trace is not None
        with context.tangent_trace:
            init = [instantiate(tangents[j], element_shape(instr.shape, j)) for j in body.moving]
            finals = _tangent_loop(instr, body, init, stacks, n)
        for j, t in zip(body.moving, finals):
            out_tangents[j] = t
    return as_state(outs, instr.shape), as_state(out_tangents, instr.shape)


def _while(context: JvpContext, instr: HloInstruction, operands: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    state = flat_elements(operands[0], instr.shape)
    state_tangents = flat_elements(tangents[0], instr.shape)
    if context.tangent_trace is None:
        return _while_jvp(context, instr, state, state_tangents)
    n = known_trip_count(instr)
    if n is not None:
        return _while_linearize(context, instr, state, state_tangents, n)
    # No trip count: the tangent trace recomputes the primal loop beside the tangents (its
    # transpose refuses); the primal result is the loop as it was.
    with context.tangent_trace:
        _, out_tangents = _while_jvp(JvpContext(context.staged, None, context.scope), instr, state, state_tangents)
    out = bind("while", operand_value(operands[0]), shape=instr.shape, **semantic_attrs(instr))
    return out, out_tangents


JOINT_RULES["while"] = _while


# --- transposition --------------------------------------------------------------------------------

def _transpose_body(body: HloComputation, shape: Shape, elements: list[Any], linear: list[int], n: int) -> Flat:
    """One step of the transposed loop: at step s, the cotangents of the state before
    iteration n - 1 - s from those after it. Its state: the step, then the cotangents."""
    flat = FlatTrace("transpose_while_body")
    with flat:
        step = flat.parameter(ArrayShape(S32, ()), 0)
        ct_params = {j: flat.parameter(element_shape(shape, j), 1 + k) for k, j in enumerate(linear)}
        # The tangent loop counts its iterations in state element 0, from its initial value.
        iteration = lax.add(elements[0], lax.sub(np.int32(n - 1), step))
        arg = [iteration if j == 0 else Linear(element_shape(shape, j)) if j in ct_params else elements[j]
               for j in range(len(elements))]
        (state_ct,) = transpose_computation(body, [tuple(arg)], tuple(ct_params.get(j) for j in range(len(elements))))
        cts = flat_elements(state_ct, shape)
        return flat.finish([lax.add(step, np.int32(1))]
                           + [instantiate(cts[j], element_shape(shape, j)) for j in linear])


def _while_transpose(instr: HloInstruction, ct: Any, args: list[Any]) -> list[Any]:
    n = known_trip_count(instr)
    if n is None:
        raise ValueError(REVERSE_MODE_ERROR)
    shape, body = instr.shape, instr.attrs["body"]
    (state,) = args
    elements = flat_elements(state, shape)
    lin: Lin = while_linearity(instr, linearity_of(state))
    per_element = [lin if isinstance(lin, bool) else lin[j] for j in range(len(elements))]
    linear = [j for j, e in enumerate(per_element) if e is True]
    invariant = _invariant(body)
    if (per_element[0] is not False or element_shape(shape, 0) != ArrayShape(S32, ())
            or any(e is not True and not invariant[j] for j, e in enumerate(per_element) if j > 0)):
        raise NotImplementedError(f"transpose of a while ({instr.describe()}) whose state is not an iteration "
                                  "counter, linear elements and loop-invariant residuals")
    cts = flat_elements(ct, shape)
    init = [instantiate(cts[j], element_shape(shape, j)) for j in linear]
    cond = FlatTrace("transpose_while_cond")
    with cond:
        cond_flat = cond.finish([lax.lt(cond.parameter(ArrayShape(S32, ()), 0), np.int32(n))])
    results = emit_while(cond_flat, _transpose_body(body, shape, elements, linear, n), [np.int32(0), *init],
                         known_trip_count_config(n))
    state_cts: list[Any] = [None] * len(elements)
    for j, c in zip(linear, results[1:]):
        state_cts[j] = c
    return [as_state(state_cts, shape)]


CALLING_TRANSPOSE_RULES["while"] = _while_transpose
