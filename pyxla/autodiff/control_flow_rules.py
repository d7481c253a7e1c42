"""Differentiation of `call` and `conditional` (lax.cond, lax.switch), after JAX's rules.

- `call`: differentiated inline, its computation walked like the caller's.
- `conditional`, forward mode (pyxla.jvp): a conditional whose branches return their
  primal outputs and tangents. The input tangents ride in the operand; an output gets a
  tangent where any branch gives it one (the others give zeros).
- `conditional`, linearised (vjp, grad, linearize): each branch is linearised into a
  tangent trace of its own. The primal conditional's branches also return the residuals
  their linear part reads: the union over the branches, each branch filling its own slots
  and zeros in the others' (JAX's layout). Residuals that are branch operands are passed
  to the tangent conditional directly. The tangent trace gets a conditional on the same
  index whose branches are the linear parts, reading tangents and residuals from its
  operand.
- its transpose: a conditional on the same index of the transposed linear branches, from
  the output cotangents and the residuals to the cotangents of the input tangents.

The index is an integer: it has no derivative. Loops: while_rules.py (registered from here).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import lax
from ..frontend.tracing import Trace, Tracer, shape_of
from ..hlo.instruction import HloInstruction
from ..hlo.shape import Shape
from . import while_rules  # noqa: F401  (registers the rules of while)
from .forward import JOINT_RULES, JvpContext
from .rule_helpers import MissingRule, instantiate, zeros
from .subcomputations import Captured, Flat, FlatTrace, as_state, element_shape, emit_conditional, flat_elements
from .transpose import CALLING_TRANSPOSE_RULES, branch_computations, transpose_computation
from .transpose_rules import Linear


def _call(context: JvpContext, instr: HloInstruction, operands: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
    return context.jvp(instr.attrs["to_apply"], operands, tangents)


def _call_transpose(instr: HloInstruction, ct: Any, args: list[Any]) -> list[Any]:
    return transpose_computation(instr.attrs["to_apply"], args, ct)


JOINT_RULES["call"] = _call
CALLING_TRANSPOSE_RULES["call"] = _call_transpose


# --- flat states ----------------------------------------------------------------------------------

def branch_index(instr: HloInstruction, selector: Any) -> Any:
    """A conditional's branch index as s32 (a pred selects branch 0 when true)."""
    if "branch_computations" in instr.attrs:
        return selector
    return lax.select(selector, np.int32(0), np.int32(1))


class _Operands:
    """A conditional's branch operands as one list of leaves: branch k reads `slots[k]`."""

    def __init__(self, instr: HloInstruction, operands: list[Any], tangents: list[Any]):
        self.leaves: list[Any] = []
        self.tangents: list[Any] = []
        self.slots: list[list[int]] = []
        seen: dict[int, list[int]] = {}
        for operand, value, tangent in zip(instr.operands[1:], operands[1:], tangents[1:]):
            if id(operand) not in seen:
                start = len(self.leaves)
                self.leaves += flat_elements(value, operand.shape)
                self.tangents += flat_elements(tangent, operand.shape)
                seen[id(operand)] = list(range(start, len(self.leaves)))
            self.slots.append(seen[id(operand)])


def _outputs(value: Any, shape: Shape) -> list[Any]:
    return flat_elements(value, shape)


# --- forward mode ---------------------------------------------------------------------------------

def _conditional_jvp(context: JvpContext, instr: HloInstruction, ops: _Operands, index: Any) -> tuple[Any, Any]:
    n = len(ops.leaves)
    moving = [j for j, t in enumerate(ops.tangents) if t is not None]
    traced = []
    for comp, slots in zip(branch_computations(instr), ops.slots):
        flat = FlatTrace("jvp_branch")
        with flat:
            params = [flat.parameter(shape_of(v), j) for j, v in enumerate(ops.leaves)]
            tparams: list[Any] = [None] * n
            for k, j in enumerate(moving):
                tparams[j] = flat.parameter(shape_of(ops.tangents[j]), n + k)
            param_shape = comp.parameters[0].shape
            out, tout = context.jvp(comp, [as_state([params[j] for j in slots], param_shape)],
                                    [as_state([tparams[j] for j in slots], param_shape)], tangent_trace=None)
        traced.append((flat, _outputs(out, comp.root.shape), _outputs(tout, comp.root.shape)))
    out_shapes = flat_elements(None, instr.shape)
    nonzero = [i for i in range(len(out_shapes)) if any(t[2][i] is not None for t in traced)]
    flats = []
    for flat, outs, touts in traced:
        with flat:
            flats.append(flat.finish(outs + [instantiate(touts[i], element_shape(instr.shape, i)) for i in nonzero]))
    results = emit_conditional(index, flats, ops.leaves + [ops.tangents[j] for j in moving])
    m = len(out_shapes)
    tangents: list[Any] = [None] * m
    for k, i in enumerate(nonzero):
        tangents[i] = results[m + k]
    return as_state(results[:m], instr.shape), as_state(tangents, instr.shape)


# --- linearisation --------------------------------------------------------------------------------

class _LinearBranch:
    """One branch linearised: its primal trace, its tangent trace (a child of the primal
    one, capturing the residuals), its outputs and their tangents."""

    def __init__(self, flat: FlatTrace, linear: FlatTrace, params: list[Tracer], outs: list[Any],
                 touts: list[Any]):
        self.flat, self.linear, self.params, self.outs, self.touts = flat, linear, params, outs, touts
        params_ids = {id(p) for p in params}
        # Residuals computed in the branch; its parameters, constants and outer values are
        # passed as they are.
        self.locals = [outer for outer, _ in linear.trace.captures
                       if isinstance(outer, Tracer) and outer.trace is flat.trace and id(outer) not in params_ids
                       and outer.instr.opcode != "constant"]


def _linearize_branches(context: JvpContext, instr: HloInstruction, ops: _Operands) -> list[_LinearBranch]:
    n = len(ops.leaves)
    moving = [j for j, t in enumerate(ops.tangents) if t is not None]
    branches = []
    for comp, slots in zip(branch_computations(instr), ops.slots):
        flat = FlatTrace("lin_branch")
        with flat:
            params = [flat.parameter(shape_of(v), j) for j, v in enumerate(ops.leaves)]
            linear = FlatTrace("lin_branch_tangent", parent=flat.trace)
            tparams: list[Any] = [None] * n
            for k, j in enumerate(moving):
                tparams[j] = linear.parameter(shape_of(ops.tangents[j]), k)
            param_shape = comp.parameters[0].shape
            out, tout = context.jvp(comp, [as_state([params[j] for j in slots], param_shape)],
                                    [as_state([tparams[j] for j in slots], param_shape)],
                                    tangent_trace=linear.trace)
        branches.append(_LinearBranch(flat, linear, params, _outputs(out, comp.root.shape),
                                      _outputs(tout, comp.root.shape)))
    return branches


def _linear_flat(branch: _LinearBranch, outputs: list[Any], first_slot: int, leaves: list[Any]) -> Flat:
    """The branch's linear part as a computation of the tangent conditional's operand: the
    moving tangents, then the residual union (this branch's from `first_slot`)."""
    built = branch.linear.finish(outputs)
    local_slots = {id(v): first_slot + r for r, v in enumerate(branch.locals)}
    param_slots = {id(p): j for j, p in enumerate(branch.params)}
    inputs: list[int | Captured] = []
    for x in built.inputs:
        if isinstance(x, Captured) and id(x.value) in local_slots:
            inputs.append(local_slots[id(x.value)])
        elif isinstance(x, Captured) and id(x.value) in param_slots:
            inputs.append(Captured(leaves[param_slots[id(x.value)]]))
        elif isinstance(x, Captured) and isinstance(x.value, Tracer) and x.value.trace is branch.flat.trace:
            inputs.append(Captured(x.value.instr.literal))   # a constant
        else:
            inputs.append(x)
    return Flat(built.comp, inputs)


def _conditional_linearize(context: JvpContext, instr: HloInstruction, ops: _Operands, index: Any,
                           tangent_trace: Trace) -> tuple[Any, Any]:
    branches = _linearize_branches(context, instr, ops)
    m = len(branches[0].outs)
    nonzero = [i for i in range(m) if any(b.touts[i] is not None for b in branches)]
    flats = []
    for branch in branches:
        with branch.flat:
            residuals = [v if other is branch else zeros(shape_of(v)) for other in branches for v in other.locals]
            flats.append(branch.flat.finish(branch.outs + residuals))
    results = emit_conditional(index, flats, ops.leaves)
    tangents: list[Any] = [None] * m
    if nonzero:
        moving = [t for t in ops.tangents if t is not None]
        linear_flats, first = [], len(moving)
        for branch in branches:
            with branch.linear:
                outputs = [instantiate(branch.touts[i], element_shape(instr.shape, i)) for i in nonzero]
            linear_flats.append(_linear_flat(branch, outputs, first, ops.leaves))
            first += len(branch.locals)
        with tangent_trace:
            touts = emit_conditional(index, linear_flats, moving + results[m:])
        for k, i in enumerate(nonzero):
            tangents[i] = touts[k]
    return as_state(results[:m], instr.shape), as_state(tangents, instr.shape)


def _conditional(context: JvpContext, instr: HloInstruction, operands: list[Any], tangents: list[Any]
                 ) -> tuple[Any, Any]:
    if tangents[0] is not None and not all(t is None for t in flat_elements(tangents[0], instr.operands[0].shape)):
        raise MissingRule("a conditional with a differentiable selector")
    ops = _Operands(instr, operands, tangents)
    index = branch_index(instr, operands[0])
    if context.tangent_trace is None:
        return _conditional_jvp(context, instr, ops, index)
    return _conditional_linearize(context, instr, ops, index, context.tangent_trace)


JOINT_RULES["conditional"] = _conditional


# --- transposition --------------------------------------------------------------------------------

def _conditional_transpose(instr: HloInstruction, ct: Any, args: list[Any]) -> list[Any]:
    """A conditional on the same index of the branches transposed: operand the nonzero
    output cotangents and the residual elements of the state, result the cotangents of
    its linear elements."""
    selector, state, *others = args
    if isinstance(selector, Linear):
        raise NotImplementedError("transpose of a conditional whose selector depends on the tangents")
    if any(o is not instr.operands[1] for o in instr.operands[2:]):
        raise NotImplementedError("transpose of a conditional whose branches take different operands")
    state_shape = instr.operands[1].shape
    elements = flat_elements(state, state_shape)
    cts = flat_elements(ct, instr.shape)
    linear = [i for i, a in enumerate(elements) if isinstance(a, Linear)]
    if any(isinstance(a, tuple) for a in elements):
        raise NotImplementedError("transpose of a conditional over nested tuples")
    given = [i for i, c in enumerate(cts) if c is not None]
    residual = [i for i, a in enumerate(elements) if not isinstance(a, Linear)]
    flats = []
    for comp in branch_computations(instr):
        flat = FlatTrace("transpose_branch")
        with flat:
            ct_params = {i: flat.parameter(shape_of(cts[i]), k) for k, i in enumerate(given)}
            res_params = {i: flat.parameter(shape_of(elements[i]), len(given) + k) for k, i in enumerate(residual)}
            arg = [res_params[i] if i in res_params else Linear(element_shape(state_shape, i))
                   for i in range(len(elements))]
            comp_ct = as_state([ct_params.get(i) for i in range(len(cts))], instr.shape)
            (state_ct,) = transpose_computation(comp, [as_state(arg, state_shape)], comp_ct)
            branch_cts = flat_elements(state_ct, state_shape)
            outputs = [instantiate(branch_cts[i], element_shape(state_shape, i)) for i in linear]
        flats.append(flat.finish(outputs))
    index = branch_index(instr, selector)
    results = emit_conditional(index, flats, [cts[i] for i in given] + [elements[i] for i in residual])
    state_cts: list[Any] = [None] * len(elements)
    for k, i in enumerate(linear):
        state_cts[i] = results[k]
    return [None, as_state(state_cts, state_shape)] + [None] * len(others)


CALLING_TRANSPOSE_RULES["conditional"] = _conditional_transpose
