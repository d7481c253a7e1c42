"""Batching a staged computation: each instruction re-emitted by its opcode's batching rule.

`batch_instructions` walks a computation in order. An instruction none of whose operands is
batched is emitted again as it is, through `bind` (into the current trace, or run at once
eagerly): it computes the same value for every example, and needs no rule. Otherwise its
opcode's rule emits the batched form, in pyxla.lax:

    rule(instr, values, dims) -> (value, dim)

`instr` is the staged instruction (its per-example shapes and attributes), `values` its
operands' values, `dims` their batch dimensions (None: unbatched, the same for every
example; a tuple of them for a tuple value such as a loop's state). The rule returns the
result and its batch dimension (rules put it first, or None when the result is the same
for every example). Rules live in the *_rules.py files of this package and register
themselves in BATCH_RULES.

Copies that stop gradients (lax.stop_gradient) are re-emitted as stop_gradient, so a
derivative taken of the batched program still stops there.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from ..autodiff.forward import constant_value
from ..autodiff.staging import location, operand_value, reachable, semantic_attrs
from ..frontend.tracing import bind, current_trace, emission_scope, trace_computation
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..lax.gradients import stop_gradient
from .rule_helpers import batched_shape, is_batched, result_dims, to_front

Rule = Callable[[HloInstruction, list[Any], list[Any]], tuple[Any, Any]]
BATCH_RULES: dict[str, Rule] = {}
_names = itertools.count(1)


def missing_rule(instr: HloInstruction) -> NotImplementedError:
    loc = instr.source_location()
    return NotImplementedError(
        f"vmap of HLO opcode '{instr.opcode}' is not implemented: pyxla has no batching rule for it"
        + (f" (the value traced at {loc})" if loc else "")
        + ". See docs/vmap.md for the opcodes that have rules.")


def _emit_unbatched(instr: HloInstruction, operands: list[Any]) -> Any:
    return bind(instr.opcode, *map(operand_value, operands), shape=instr.shape, **semantic_attrs(instr))


def _element(value: Any, dims: Any, index: int) -> tuple[Any, Any]:
    """Element `index` of a tuple value (a Python tuple, or a traced tuple parameter)."""
    d = dims[index] if isinstance(dims, tuple) else None
    if isinstance(value, tuple):
        return value[index], d
    return bind("get-tuple-element", value, index=index), d


def _batch_one(instr: HloInstruction, operands: list[Any], dims: list[Any], stop: bool) -> tuple[Any, Any]:
    if stop:   # a gradient stop: the same stop on the batched value
        return stop_gradient(operands[0]), dims[0]
    if not is_batched(dims):
        return _emit_unbatched(instr, operands), result_dims(instr.shape, None)
    rule = BATCH_RULES.get(instr.opcode)
    if rule is None:
        raise missing_rule(instr)
    return rule(instr, operands, dims)


def batch_instructions(parameters: Sequence[HloInstruction], values: Sequence[Any], dims: Sequence[Any],
                       outputs: Sequence[HloInstruction], *, scope: str,
                       gradient_stops: frozenset | set = frozenset(),
                       captures: Sequence[tuple[Any, HloInstruction]] = ()) -> tuple[list[Any], list[Any]]:
    """The values of `outputs` and their batch dimensions, given the parameters' values and
    batch dimensions; every other instruction is re-emitted through its rule."""
    env: dict[int, Any] = {}
    denv: dict[int, Any] = {}
    for param, value, d in zip(parameters, values, dims):
        env[id(param)], denv[id(param)] = value, d
    for outer, param in captures:   # values the function closed over: the same for every example
        env[id(param)], denv[id(param)] = outer, None
    for instr in reachable(list(outputs)):
        key = id(instr)
        if instr.opcode == "parameter":
            continue
        operands = [env[id(o)] for o in instr.operands]
        op_dims = [denv[id(o)] for o in instr.operands]
        if instr.opcode == "constant":
            env[key], denv[key] = constant_value(instr), None
        elif instr.opcode == "tuple":
            env[key], denv[key] = tuple(operands), tuple(op_dims)
        elif instr.opcode == "get-tuple-element":
            with emission_scope(scope, location(instr)):
                env[key], denv[key] = _element(operands[0], op_dims[0], instr.attrs["index"])
        else:
            with emission_scope(scope, location(instr)):
                env[key], denv[key] = _batch_one(instr, operands, op_dims, instr in gradient_stops)
    return [env[id(o)] for o in outputs], [denv[id(o)] for o in outputs]


def run_batched(comp: HloComputation, values: Sequence[Any], dims: Sequence[Any], scope: str = "vmap"
                ) -> tuple[Any, Any]:
    """A called computation's result (and its batch dimensions), inlined into the current
    trace with its instructions batched."""
    assert comp.root is not None
    # The callee was traced inside the same outermost trace, whose set of gradient stops the
    # current trace shares: its stop_gradient copies must stay stops once batched.
    trace = current_trace()
    stops = trace.gradient_stops if trace is not None else frozenset()
    outs, out_dims = batch_instructions(comp.parameters, values, dims, [comp.root], scope=scope,
                                        gradient_stops=stops)
    return outs[0], out_dims[0]


def force_front(value: Any, d: Any, want: Any, size: int) -> Any:
    """`value` with batch dimensions made to match `want` (None: unbatched, which `d` must
    be; else batched first), recursively through tuples."""
    if isinstance(value, tuple):
        return tuple(force_front(v, e, w, size) for v, e, w in zip(value, d, want))
    if want is None:
        assert d is None
        return value
    return to_front(value, d, size)


def batched_computation(comp: HloComputation, param_dims: Sequence[Any], size: int,
                        body: Callable[[list[Any]], Any], name: str) -> HloComputation:
    """A new computation taking `comp`'s parameters batched as `param_dims` (first), whose
    result is `body(parameters)` traced (the body typically calls run_batched)."""
    shapes = [batched_shape(p.shape, d, size) for p, d in zip(comp.parameters, param_dims)]
    fresh = f"{name.split('.')[0]}.vmap.{next(_names)}"
    new, _, captures, _ = trace_computation(lambda *ps: body(list(ps)), shapes, fresh)
    assert not captures, "a batched computation closed over an outer value"
    return new
