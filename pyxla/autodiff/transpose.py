"""Transposition: the backward pass of a LinearProgram, and its forward evaluation.

The tangent program's instructions split in two. Those that depend on a tangent parameter
are linear in the tangents; the rest compute from residuals only (the primal values the
JVP rules captured, constants). `transpose_program` emits the residual part that the
linear part needs, then walks the linear instructions from last to first, giving each one's
operands their cotangents by the opcode's transpose rule (transpose_rules.py) and summing
cotangents where a value has several users. What reaches a tangent parameter is the
cotangent of that input. Instructions go into the current trace (or run at once eagerly),
so the backward pass is ordinary HLO in the same program as the forward pass.

`evaluate_program` runs the tangent program forward on given tangents: pyxla.linearize's
JVP function.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..frontend.tracing import Tracer, bind, emission_scope
from ..hlo.instruction import HloInstruction
from ..lax import add
from .forward import LinearProgram, constant_value
from .staging import location, operand_value, semantic_attrs
from .transpose_rules import TRANSPOSE_RULES, Linear


def _instructions(program: LinearProgram) -> list[HloInstruction]:
    return list(program.trace.builder.computation.instructions)


def _evaluate(instr: HloInstruction, env: dict[int, Any]) -> Any:
    """`instr` emitted again in the current trace, its operands' values taken from `env`."""
    operands = [env[id(o)] for o in instr.operands]
    if instr.opcode == "constant":
        return constant_value(instr)
    if instr.opcode == "tuple":
        return tuple(operands)
    if instr.opcode == "get-tuple-element":
        return operands[0][instr.attrs["index"]]
    return bind(instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))


def _residual_values(program: LinearProgram) -> dict[int, Any]:
    """The values of the program's captured residuals, by parameter."""
    return {id(inner.instr): outer for outer, inner in program.trace.captures}


def evaluate_program(program: LinearProgram, tangents: Sequence[Any]) -> list[Any]:
    """The output tangents for input tangents `tangents` (None where not differentiated)."""
    env = _residual_values(program)
    for param, t in zip(program.inputs, tangents):
        if param is not None:
            env[id(param.instr)] = t
    for instr in _instructions(program):
        if id(instr) not in env:
            with emission_scope(program.scope, location(instr)):
                env[id(instr)] = _evaluate(instr, env)
    return [env[id(t.instr)] if isinstance(t, Tracer) and t.trace is program.trace else t
            for t in program.outputs]


def transpose_program(program: LinearProgram, cotangents: Sequence[Any]) -> list[Any]:
    """The cotangent of each input tangent (None: zero, or not differentiated), given the
    cotangent of each output (None: zero)."""
    instrs = _instructions(program)
    linear = {id(p.instr) for p in program.inputs if p is not None}
    for instr in instrs:
        if any(id(o) in linear for o in instr.operands):
            linear.add(id(instr))
    cts: dict[int, Any] = {}

    def accumulate(instr: HloInstruction, ct: Any) -> None:
        key = id(instr)
        cts[key] = ct if key not in cts else add(cts[key], ct)

    for t, ct in zip(program.outputs, cotangents):
        if ct is not None and isinstance(t, Tracer) and id(t.instr) in linear:
            accumulate(t.instr, ct)
    # The residual values the linear instructions read (and what those are computed from).
    needed: set[int] = set()
    for instr in reversed(instrs):
        if id(instr) in linear:
            needed.update(id(o) for o in instr.operands if id(o) not in linear)
        elif id(instr) in needed:
            needed.update(id(o) for o in instr.operands)
    scope = f"transpose({program.scope})"
    env = _residual_values(program)
    for instr in instrs:
        if id(instr) in needed and id(instr) not in env:
            with emission_scope(scope, location(instr)):
                env[id(instr)] = _evaluate(instr, env)
    for instr in reversed(instrs):
        ct = cts.pop(id(instr), None) if id(instr) in linear and instr.opcode != "parameter" else None
        if isinstance(ct, list):   # a tuple's elements, gathered from its get-tuple-elements
            ct = None if all(c is None for c in ct) else tuple(ct)
        if ct is None:
            continue
        if instr.opcode == "get-tuple-element":
            operand, index = instr.operands[0], instr.attrs["index"]
            elements = cts.setdefault(id(operand), [None] * len(operand.tuple_shape.elements))
            elements[index] = ct if elements[index] is None else add(elements[index], ct)
            continue
        rule = TRANSPOSE_RULES.get(instr.opcode)
        if rule is None:
            raise NotImplementedError(f"transpose of HLO opcode '{instr.opcode}' is not implemented "
                                      f"({instr.describe()}): reverse-mode differentiation needs one")
        args = [Linear(o.shape) if id(o) in linear else env[id(o)] for o in instr.operands]
        with emission_scope(scope, location(instr)):
            operand_cts = rule(instr, ct, args)
            for operand, operand_ct in zip(instr.operands, operand_cts):
                if operand_ct is not None and id(operand) in linear:
                    accumulate(operand, operand_ct)
    return [None if p is None else cts.get(id(p.instr)) for p in program.inputs]
