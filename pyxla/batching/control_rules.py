"""Batching rules for control flow and calls: while, conditional, call, opt-barrier, and
rng-bit-generator.

The called computations are batched by tracing a new computation that runs the old one's
instructions through their rules (interpreter.run_batched), with the parameters batched as
the operands are.

- while: the state elements that are batched on entry, or that the body makes batched,
  are carried batched (found by re-tracing until the set stops growing). A predicate that is
  the same for every example runs the batched body as long as it holds; a predicate that
  differs per example runs while any example's holds, and each example keeps its old state
  once its own predicate is false (JAX's rule).
- conditional: an index the same for every example picks one batched branch; an index that
  differs per example runs every branch and selects each example's result (JAX's rule).
- call: the callee inlined, batched; a call carrying a derivative rule (custom_jvp,
  custom_vjp, checkpoint) stays a call of the batched callee, its rule batched
  (custom_rules.py).
- rng-bit-generator: one generator per example's key (the examples are unrolled); an
  unbatched key never reaches this rule, and gives every example the same bits, as in JAX.
"""
from __future__ import annotations

from typing import Any

from .. import lax
from ..autodiff.staging import operand_value, semantic_attrs
from ..autodiff.traced_calls import CALL_RULES
from ..frontend.tracing import bind, current_trace, make_tuple
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import TupleShape
from ..hlo.types import S32
from .custom_rules import batch_recorded_call
from .interpreter import BATCH_RULES, batched_computation, force_front, run_batched
from .rule_helpers import BatchingError, batch_size, dims_of, to_front


def _elements(state: Any, n: int) -> list[Any]:
    """The elements of a tuple value (a Python tuple, or a traced tuple parameter)."""
    if isinstance(state, tuple):
        return list(state)
    return [bind("get-tuple-element", state, index=i) for i in range(n)]


def _union(a: Any, b: Any) -> Any:
    """Batch dimensions wanted for a value that is batched where either `a` or `b` is."""
    if isinstance(a, tuple):
        return tuple(_union(x, y) for x, y in zip(a, b))
    return 0 if a is not None or b is not None else None


def _body_carrying(body: HloComputation, want: tuple, size: int) -> tuple[HloComputation, tuple]:
    """The body batched with the state batched as `want`, and the state it returns batched as
    `want` joined with what the body makes batched (equal to `want` at the fixed point)."""
    found: dict[str, Any] = {}

    def run(params: list[Any]) -> Any:
        out, d = run_batched(body, params, [want])
        found["want"] = _union(want, d)
        return force_front(out, d, found["want"], size)

    comp = batched_computation(body, [want], size, run, body.name)
    return comp, found["want"]


def _while(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)
    state, sdims = values[0], dims[0]
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    want = _union(sdims, sdims)
    for _ in range(len(instr.shape.elements) + 1):
        body_b, grown = _body_carrying(body, want, size)
        if grown == want:
            break
        want = grown
    found: dict[str, Any] = {}

    def predicate(params: list[Any]) -> Any:
        pred, found["dim"] = run_batched(cond, params, [want])
        return pred

    cond_b = batched_computation(cond, [want], size, predicate, cond.name)
    if found["dim"] is None:
        out = bind("while", make_tuple(*force_front(tuple(state), sdims, want, size)),
                   condition=cond_b, body=body_b)
        return out, want
    return _while_any(instr, state, sdims, size)


def _while_any(instr: HloInstruction, state: Any, sdims: Any, size: int) -> tuple[Any, Any]:
    """A loop whose predicate differs per example: every state element batched, run while any
    example's predicate holds, each example's state kept once its own predicate is false."""
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    shape = instr.shape
    assert isinstance(shape, TupleShape)
    n = len(shape.elements)
    want = tuple([0] * n)

    def any_holds(params: list[Any]) -> Any:
        pred, d = run_batched(cond, params, [want])
        return lax.reduce_or(to_front(pred, d, size), (0,))

    def step(params: list[Any]) -> Any:
        pred, pd = run_batched(cond, params, [want])
        pred = to_front(pred, pd, size)
        new, nd = run_batched(body, params, [want])
        new = force_front(new, nd, want, size)
        old = _elements(params[0], n)
        return tuple(lax.select(lax.broadcast_in_dim(pred, dims_of(o), (0,)), x, o) for x, o in zip(new, old))

    cond_b = batched_computation(cond, [want], size, any_holds, cond.name)
    body_b = batched_computation(body, [want], size, step, body.name)
    out = bind("while", make_tuple(*force_front(tuple(state), sdims, want, size)), condition=cond_b, body=body_b)
    return out, want


def _branches(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any, list, list, list]:
    """(index, its batch dimension, branch computations, their operands and batch dims),
    the true/false form given as a two-branch index (false first)."""
    if "branch_computations" in instr.attrs:
        return (values[0], dims[0], list(instr.attrs["branch_computations"]), list(values[1:]), list(dims[1:]))
    index = lax.convert_element_type(values[0], S32)
    return (index, dims[0], [instr.attrs["false_computation"], instr.attrs["true_computation"]],
            [values[2], values[1]], [dims[2], dims[1]])


def _conditional(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)
    index, index_dim, comps, operands, op_dims = _branches(instr, values, dims)
    if index_dim is not None:
        return _select_branches(index, index_dim, comps, operands, op_dims, size)
    found: list[Any] = []

    def branch(comp: HloComputation, d: Any, want: Any) -> HloComputation:
        def run(params: list[Any]) -> Any:
            out, od = run_batched(comp, params, [d])
            found.append(od)
            return out if want is None else force_front(out, od, want, size)
        return batched_computation(comp, [d], size, run, comp.name)

    for comp, d in zip(comps, op_dims):
        branch(comp, d, None)
    want = found[0]
    for od in found[1:]:
        want = _union(want, od)
    new = [branch(comp, d, want) for comp, d in zip(comps, op_dims)]
    out = bind("conditional", index, *map(operand_value, operands), branch_computations=tuple(new))
    return out, want


def _select_branches(index: Any, index_dim: int, comps: list, operands: list, op_dims: list,
                     size: int) -> tuple[Any, Any]:
    """Every branch run on every example; each example's result chosen by its index (one
    out of range takes the last branch, as HLO's conditional does)."""
    index = to_front(index, index_dim, size)
    results = []
    for comp, op, d in zip(comps, operands, op_dims):
        out, od = run_batched(comp, [op], [d])
        results.append(force_front(out, od, _all_batched(od), size))
    is_tuple = isinstance(results[0], tuple)
    rows = [list(r) if is_tuple else [r] for r in results]
    chosen = rows[-1]
    for k in range(len(rows) - 2, -1, -1):
        hit = lax.eq(index, k)
        chosen = [lax.select(lax.broadcast_in_dim(hit, dims_of(x), (0,)), x, c) for x, c in zip(rows[k], chosen)]
    if is_tuple:
        return tuple(chosen), tuple([0] * len(chosen))
    return chosen[0], 0


def _all_batched(d: Any) -> Any:
    return tuple(_all_batched(e) for e in d) if isinstance(d, tuple) else 0


def _call(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    comp = instr.attrs["to_apply"]
    # Eagerly nothing can differentiate the result: the callee's rule is not needed then.
    if comp in CALL_RULES and current_trace() is not None:
        return batch_recorded_call(instr, values, dims)
    return run_batched(comp, values, dims)


def _opt_barrier(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    return bind("opt-barrier", operand_value(values[0])), dims[0]


def _rng_bit_generator(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)
    keys = to_front(values[0], dims[0], size)
    states, bits = [], []
    for b in range(size):
        state, out = bind("rng-bit-generator", lax.index_in_dim(keys, b, 0, keepdims=False), shape=instr.shape,
                          **semantic_attrs(instr))
        states.append(lax.expand_dims(state, (0,)))
        bits.append(lax.expand_dims(out, (0,)))
    return (lax.concatenate(states, 0), lax.concatenate(bits, 0)), (0, 0)


def _refuse_nested_tuples(rule):
    def checked(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
        if any(isinstance(d, tuple) and any(isinstance(e, tuple) for e in d) for d in dims):
            raise BatchingError(f"vmap of HLO opcode '{instr.opcode}' with nested tuple operands is not implemented")
        return rule(instr, values, dims)
    return checked


BATCH_RULES["while"] = _refuse_nested_tuples(_while)
BATCH_RULES["conditional"] = _refuse_nested_tuples(_conditional)
BATCH_RULES["call"] = _call
BATCH_RULES["opt-barrier"] = _opt_barrier
BATCH_RULES["rng-bit-generator"] = _rng_bit_generator
