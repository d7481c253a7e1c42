"""Transposition: the backward pass of a LinearProgram or of a called computation, and the
forward evaluation of a LinearProgram.

A linear program's instructions split in two. Those that depend on a linear input (a
tangent parameter) are linear in it; the rest compute from residuals only (the primal
values the JVP rules captured, constants, loop counters). The backward pass emits the
residual part that the linear part needs, then walks the linear instructions from last to
first, giving each one's operands their cotangents by the opcode's transpose rule
(transpose_rules.py, control_flow_rules.py) and summing cotangents where a value has
several users. What reaches a linear input is its cotangent. Instructions go into the
current trace (or run at once eagerly), so the backward pass is ordinary HLO in the same
program as the forward pass.

One walk serves two callers:
- `transpose_program`: a LinearProgram (pyxla.vjp, grad), inputs its tangent parameters;
- `transpose_computation`: a computation a linear control-flow instruction calls (a
  branch, a loop body, a `call`), inputs the parameters or parameter tuple elements that
  its transpose rule marks `Linear`. A tuple parameter can be partly linear: a loop body
  reads its tangents and its residuals from one state tuple.

Linearity is tracked per tuple element (`Lin`: True, False, or a tuple of them for a tuple
value), so that a loop's counter or its stacked residuals, which ride in the same tuple as
its tangents, stay residuals.

`evaluate_program` runs the tangent program forward on given tangents: pyxla.linearize's
JVP function.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..frontend.tracing import Tracer, bind, emission_scope
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import Shape, TupleShape
from ..lax import add
from .forward import LinearProgram, constant_value
from .staging import location, operand_value, semantic_attrs
from .transpose_rules import TRANSPOSE_RULES, Linear, Rule

# The transpose rules of opcodes that call computations (call, conditional, while), with
# TRANSPOSE_RULES' signature; control_flow_rules.py and while_rules.py register them.
CALLING_TRANSPOSE_RULES: dict[str, Rule] = {}

# Whether a value depends on the linear inputs: a bool, or per element for a tuple.
Lin = bool | tuple


# --- linearity -----------------------------------------------------------------------------------

def any_linear(lin: Lin) -> bool:
    return any(any_linear(e) for e in lin) if isinstance(lin, tuple) else bool(lin)


def _normal(lin: Lin) -> Lin:
    """A tuple whose elements are all False is False; all True, True."""
    if not isinstance(lin, tuple):
        return lin
    lin = tuple(_normal(e) for e in lin)
    if not any_linear(lin):
        return False
    return True if all(e is True for e in lin) else lin


def lin_or(a: Lin, b: Lin) -> Lin:
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return _normal(tuple(lin_or(x, y) for x, y in zip(a, b)))


def lin_element(lin: Lin, index: int) -> Lin:
    return lin[index] if isinstance(lin, tuple) else lin


def linearity_of(arg: Any) -> Lin:
    """The linearity of a transpose rule's argument: a `Linear` marker, a value, or a tuple
    of those (a partly linear tuple)."""
    if isinstance(arg, Linear):
        return True
    if isinstance(arg, tuple):
        return _normal(tuple(linearity_of(a) for a in arg))
    return False


def while_linearity(instr: HloInstruction, state: Lin) -> Lin:
    """A loop's state elements that depend on the linear inputs: the fixed point of the body."""
    body = instr.attrs["body"]
    while True:
        grown = lin_or(state, computation_linearity(body, [state]))
        if grown == state:
            return state
        state = grown


def _instruction_linearity(instr: HloInstruction, ops: list[Lin]) -> Lin:
    if not any(any_linear(o) for o in ops):
        return False
    opcode = instr.opcode
    if opcode == "tuple":
        return _normal(tuple(ops))
    if opcode == "get-tuple-element":
        return lin_element(ops[0], instr.attrs["index"])
    if opcode == "call":
        return computation_linearity(instr.attrs["to_apply"], ops)
    if opcode == "while":
        return while_linearity(instr, ops[0])
    if opcode == "conditional" and not any_linear(ops[0]):
        result: Lin = False
        for k, branch in enumerate(branch_computations(instr)):
            result = lin_or(result, computation_linearity(branch, [ops[k + 1]]))
        return result
    return True


def linearity(instrs: Sequence[HloInstruction], seeds: dict[int, Lin]) -> dict[int, Lin]:
    """The linearity of each of `instrs` (operands first), given that of some (parameters)."""
    lin: dict[int, Lin] = {}
    for instr in instrs:
        if id(instr) in seeds:
            lin[id(instr)] = seeds[id(instr)]
        else:
            lin[id(instr)] = _instruction_linearity(instr, [lin.get(id(o), False) for o in instr.operands])
    return lin


def computation_linearity(comp: HloComputation, params: Sequence[Lin]) -> Lin:
    """The linearity of `comp`'s result given that of its parameters."""
    seeds = {id(p): _normal(params[p.parameter_number]) for p in comp.parameters}
    assert comp.root is not None
    return linearity(comp.post_order(), seeds)[id(comp.root)]


def branch_computations(instr: HloInstruction) -> list[HloComputation]:
    """A conditional's branches in index order (a pred conditional: true, then false)."""
    if "branch_computations" in instr.attrs:
        return list(instr.attrs["branch_computations"])
    return [instr.attrs["true_computation"], instr.attrs["false_computation"]]


# --- cotangents ------------------------------------------------------------------------------------

def _normal_ct(ct: Any) -> Any:
    """A tuple value's cotangent (gathered as a list from its get-tuple-elements) as a tuple,
    None when every element is zero."""
    if isinstance(ct, (list, tuple)):
        ct = tuple(_normal_ct(c) for c in ct)
        return None if all(c is None for c in ct) else ct
    return ct


def add_cotangents(a: Any, b: Any) -> Any:
    """The sum of two cotangents (None: zero; tuples elementwise)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, (list, tuple)):
        return [add_cotangents(x, y) for x, y in zip(a, b)]
    return add(a, b)


def _evaluate(instr: HloInstruction, env: dict[int, Any]) -> Any:
    """`instr` emitted again in the current trace, its operands' values taken from `env`."""
    if instr.opcode == "constant":
        return constant_value(instr)
    operands = [env[id(o)] for o in instr.operands]
    if instr.opcode == "tuple":
        return tuple(operands)
    if instr.opcode == "get-tuple-element":
        return operands[0][instr.attrs["index"]]
    return bind(instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))


def _argument(shape: Shape, lin: Lin, value: Any) -> Any:
    """What a transpose rule gets for an operand: `Linear`, its value, or a tuple of those."""
    if lin is True:
        return Linear(shape)
    if lin is False:
        return value
    assert isinstance(shape, TupleShape)
    values = value if isinstance(value, tuple) else (None,) * len(lin)
    return tuple(_argument(s, e, v) for s, e, v in zip(shape.elements, lin, values))


def backward_pass(instrs: Sequence[HloInstruction], lin: dict[int, Lin], env: dict[int, Any],
                  seeds: Sequence[tuple[HloInstruction, Any]], scope: str | None) -> dict[int, Any]:
    """The cotangents of the linear parameters among `instrs` (operands first), given the
    cotangents `seeds` of some instructions and the values `env` of the residual parameters.
    Emits the residual computations the linear ones read, then their transposes."""
    cts: dict[int, Any] = {}

    def accumulate(instr: HloInstruction, ct: Any) -> None:
        key = id(instr)
        cts[key] = ct if key not in cts else add_cotangents(cts[key], ct)

    for instr, ct in seeds:
        if ct is not None and any_linear(lin[id(instr)]):
            accumulate(instr, ct)
    # The residual values the linear instructions read (and what those are computed from).
    needed: set[int] = set()
    for instr in reversed(instrs):
        key = id(instr)
        if key in env:
            continue
        structural = instr.opcode in ("tuple", "get-tuple-element")
        if (any_linear(lin[key]) and not structural) or (key in needed and (lin[key] is False or structural)):
            # Transposing tuples and get-tuple-elements reads no values; a rule reads its
            # residual operands, and a residual is computed from its operands.
            needed.update(id(o) for o in instr.operands if lin[id(o)] is not True)
    for instr in instrs:
        key = id(instr)
        if key not in needed or key in env:
            continue
        if lin[key] is False:
            with emission_scope(scope, location(instr)):
                env[key] = _evaluate(instr, env)
        elif instr.opcode == "tuple":   # partly linear: its residual elements
            env[key] = tuple(env.get(id(o)) for o in instr.operands)
        elif instr.opcode == "get-tuple-element" and isinstance(env.get(id(instr.operands[0])), tuple):
            env[key] = env[id(instr.operands[0])][instr.attrs["index"]]
    for instr in reversed(instrs):
        if not any_linear(lin[id(instr)]) or instr.opcode == "parameter":
            continue
        ct = _normal_ct(cts.pop(id(instr), None))
        if ct is None:
            continue
        _transpose_instruction(instr, ct, lin, env, accumulate, scope)
    return cts


def _transpose_instruction(instr: HloInstruction, ct: Any, lin: dict[int, Lin], env: dict[int, Any],
                           accumulate: Any, scope: str | None) -> None:
    """Give `instr`'s linear operands their share of its cotangent `ct`."""
    if instr.opcode == "get-tuple-element":
        operand, index = instr.operands[0], instr.attrs["index"]
        elements: list[Any] = [None] * len(operand.tuple_shape.elements)
        elements[index] = ct
        accumulate(operand, elements)
        return
    if instr.opcode == "tuple":
        for operand, element_ct in zip(instr.operands, ct):
            if element_ct is not None and any_linear(lin[id(operand)]):
                accumulate(operand, element_ct)
        return
    rule = TRANSPOSE_RULES.get(instr.opcode) or CALLING_TRANSPOSE_RULES.get(instr.opcode)
    if rule is None:
        raise NotImplementedError(f"transpose of HLO opcode '{instr.opcode}' is not implemented "
                                  f"({instr.describe()}): reverse-mode differentiation needs one")
    args = [_argument(o.shape, lin[id(o)], env.get(id(o))) for o in instr.operands]
    with emission_scope(scope, location(instr)):
        operand_cts = rule(instr, ct, args)
        for operand, operand_ct in zip(instr.operands, operand_cts):
            if operand_ct is not None and any_linear(lin[id(operand)]):
                accumulate(operand, operand_ct)


def transpose_computation(comp: HloComputation, args: Sequence[Any], ct: Any) -> list[Any]:
    """The cotangent of each parameter of `comp` (None: zero or not linear; a tuple for a
    tuple parameter) given its result's cotangent `ct`. `args` holds, per parameter, what a
    transpose rule gets: `Linear`, a value, or a tuple of those."""
    instrs = comp.post_order()
    params = comp.parameters
    seeds = {id(p): linearity_of(args[p.parameter_number]) for p in params}
    lin = linearity(instrs, seeds)
    env = {id(p): args[p.parameter_number] for p in params if seeds[id(p)] is not True}
    assert comp.root is not None
    cts = backward_pass(instrs, lin, env, [(comp.root, ct)], None)
    return [_normal_ct(cts.get(id(p))) if any_linear(seeds[id(p)]) else None for p in params]


# --- LinearProgram -----------------------------------------------------------------------------------

def _instructions(program: LinearProgram) -> list[HloInstruction]:
    return list(program.trace.builder.computation.instructions)


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
    lin = linearity(instrs, {id(p.instr): True for p in program.inputs if p is not None})
    seeds = [(t.instr, ct) for t, ct in zip(program.outputs, cotangents)
             if isinstance(t, Tracer) and t.trace is program.trace]
    cts = backward_pass(instrs, lin, _residual_values(program), seeds, f"transpose({program.scope})")
    return [None if p is None else cts.get(id(p.instr)) for p in program.inputs]
