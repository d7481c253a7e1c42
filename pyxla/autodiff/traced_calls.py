"""Functions traced into called computations, for the transformations that keep a rule with
a `call`: custom_jvp, custom_vjp and checkpoint.

Such a function, called while a trace is active, is traced into a computation of its
argument leaves and emitted as an HLO `call` of it: when nothing differentiates it, that is
ordinary HLO (the call inliner copies it into its caller when compiling). The rule that
differentiation must use instead is kept in `CALL_RULES`, keyed by the called computation:
re-emitting the call (a derivative walk, vmap) keeps its `to_apply`, so the rule follows the
instruction wherever it is copied. call_rules.py reads the table.

`evaluate` re-emits a traced computation instruction by instruction into the current trace
(or runs it at once eagerly); given a tangent trace, the instructions that read a value of
that trace go there instead (partial evaluation: what depends only on primal values is
computed in the forward pass, the rest is the linear tangent program).
"""
from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..frontend.pytree import PyTreeDef
from ..frontend.tracing import Trace, Tracer, bind, current_trace, emission_scope, shape_of
from ..hlo.computation import HloComputation
from ..hlo.shape import ArrayShape, Shape
from .staging import location, operand_value, output_leaves, semantic_attrs

# The rule of each called computation that has one: a custom_jvp, custom_vjp or checkpoint record.
CALL_RULES: weakref.WeakKeyDictionary[HloComputation, Any] = weakref.WeakKeyDictionary()

_names = itertools.count()


@dataclass
class TracedLeaves:
    """A function of flat leaves traced into a computation: parameters are the leaves, then
    the values of enclosing traces it closes over (`captures`), then any added later."""
    trace: Trace
    computation: HloComputation
    out_tree: PyTreeDef
    out_avals: list[ArrayShape]
    captures: list[Any]


def trace_leaves(fn: Callable[..., Any], avals: Sequence[Shape], weak: Sequence[bool], name: str) -> TracedLeaves:
    """`fn(*leaves)`, returning any pytree of arrays, traced in a trace nested in the current
    one: the root is the one output leaf, or a tuple of them."""
    trace = Trace(f"{name}.{next(_names)}", parent=current_trace())
    params = [trace.new_parameter(a, f"arg{i}", w) for i, (a, w) in enumerate(zip(avals, weak))]
    with trace:
        lifted, tree = output_leaves(trace, fn(*params), name)
    root = lifted[0].instr if len(lifted) == 1 else trace.builder.tuple(*[t.instr for t in lifted])
    computation = trace.builder.build(root)
    return TracedLeaves(trace, computation, tree, [t.aval for t in lifted], [o for o, _ in trace.captures])


def add_parameters(traced: TracedLeaves, values: Sequence[Any]) -> None:
    """Unused parameters for `values` after the computation's own: a call passes them along
    (the captures of a rule traced beside it), so that a walk over the call finds them."""
    for v in values:
        traced.trace.new_parameter(shape_of(v), "rule_capture")


def emit_call(traced: TracedLeaves, operands: Sequence[Any], rule: Any) -> list[Any]:
    """A `call` of `traced` on `operands` in the current trace, with `rule` recorded for its
    computation; returns the output leaves."""
    CALL_RULES[traced.computation] = rule
    out = bind("call", *operands, to_apply=traced.computation)
    return list(out) if isinstance(out, tuple) else [out]


def is_in(value: Any, trace: Trace | None) -> bool:
    """Whether `value` (or an element of a tuple value) is a Tracer of `trace`."""
    if trace is None:
        return False
    if isinstance(value, tuple):
        return any(is_in(v, trace) for v in value)
    return isinstance(value, Tracer) and value.trace is trace


# Per tangent trace, whether each of its instructions depends on a tangent parameter (not on
# captured residuals only): instructions never change once emitted, so the answers keep.
_LINEAR: weakref.WeakKeyDictionary[Trace, dict[int, bool]] = weakref.WeakKeyDictionary()


def is_linear(value: Any, tangent_trace: Trace | None) -> bool:
    """Whether `value` depends on the tangents of `tangent_trace` (a value of that trace
    computed from residuals only, such as recomputed primal values, does not)."""
    if isinstance(value, tuple):
        return any(is_linear(v, tangent_trace) for v in value)
    if tangent_trace is None or not is_in(value, tangent_trace):
        return False
    known = _LINEAR.setdefault(tangent_trace, {})
    captured = {id(inner.instr) for _, inner in tangent_trace.captures}
    stack = [value.instr]
    while stack:
        instr = stack[-1]
        if id(instr) in known:
            stack.pop()
            continue
        if instr.opcode == "parameter":
            known[id(instr)] = id(instr) not in captured
            stack.pop()
            continue
        pending = [o for o in instr.operands if id(o) not in known]
        if pending:
            stack.extend(pending)
            continue
        known[id(instr)] = any(known[id(o)] for o in instr.operands)
        stack.pop()
    return known[id(value.instr)]


def evaluate(computation: HloComputation, arguments: Sequence[Any], *, tangent_trace: Trace | None = None,
             scope: str | None = None, values: dict[int, Any] | None = None) -> Any:
    """The root value of `computation` at `arguments` (one per parameter), its instructions
    emitted again in the current trace, except those reading a value of `tangent_trace`,
    which go there. A `call` that reads one is evaluated inline, so that the tangent trace
    holds only the opcodes whose transposes exist. `values`, where given, receives the value
    of every instruction, by id."""
    env: dict[int, Any] = {} if values is None else values
    for param in computation.parameters:
        env[id(param)] = arguments[param.parameter_number]
    for instr in computation.post_order():
        if instr.opcode == "parameter":
            continue
        operands = [env[id(o)] for o in instr.operands]
        if instr.opcode == "constant":
            env[id(instr)] = instr.literal       # lifted into whichever trace uses it
        elif instr.opcode == "tuple":
            env[id(instr)] = tuple(operands)
        elif instr.opcode == "get-tuple-element":
            env[id(instr)] = operands[0][instr.attrs["index"]]
        elif instr.opcode == "call" and any(is_in(v, tangent_trace) for v in operands):
            env[id(instr)] = evaluate(instr.attrs["to_apply"], operands, tangent_trace=tangent_trace, scope=scope)
        else:
            linear = any(is_in(v, tangent_trace) for v in operands)
            where_to = tangent_trace if linear and tangent_trace is not None else contextlib.nullcontext()
            with where_to, emission_scope(scope, location(instr)):
                env[id(instr)] = bind(instr.opcode, *map(operand_value, operands), shape=instr.shape,
                                      **semantic_attrs(instr))
    return env[id(computation.root)]
