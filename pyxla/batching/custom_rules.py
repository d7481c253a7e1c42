"""Batching a `call` that carries a derivative rule (custom_jvp, custom_vjp, checkpoint; see
autodiff/traced_calls.CALL_RULES), as JAX batches its custom_jvp_call, custom_vjp_call and
remat: the batched call keeps a rule, batched too, so that differentiating the vmapped
function still uses the user's rule (inlining the callee would give the primal's derivative).

- checkpoint: a call of the batched callee, with the same record (policy, prevent_cse), so
  the backward pass of the batched program still recomputes.
- custom_jvp: a call of the batched primal whose rule is the batched jvp rule, tangents
  batched as their primals. An output is batched where the primal computation or either
  output of the rule makes it so (JAX's choice), so that primal and tangent agree.
- custom_vjp: a call of the batched primal whose fwd is the batched fwd (residuals batched as
  fwd makes them) and whose bwd is `vmap` of bwd over the residuals and output cotangents;
  the cotangent of an argument that is the same for every example is summed over the batch.

A rule traced only when needed (the call of a custom function from its own rule) is traced
per example then, and batched the same way. Rules read nondiff arguments outside the vmapped
function: a traced one the same for every example is replaced by its value there. What
cannot be carried is refused with NotImplementedError naming vmap and the function, when
the rule is needed: a nondiff argument that differs per example read by bwd (or by a rule
traced only then), a bwd closing over a value of the vmapped function.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import lax
from ..autodiff.checkpoint import CheckpointCall
from ..autodiff.custom import CustomJvpCall, CustomVjpCall, leaves_allowing_none
from ..autodiff.traced_calls import CALL_RULES, TracedLeaves
from ..errors import TraceError
from ..frontend.pytree import float0, tree_flatten, tree_unflatten
from ..frontend.tracing import Tracer, bind, current_trace, trace_computation
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape
from .api import vmap
from .interpreter import force_front, run_batched
from .rule_helpers import BatchingError, batch_size, batched_shape, front_or_none

_names = itertools.count(1)
Dims = list  # one batch dimension (0 or None) per array


def _union(*dims: Sequence[int | None]) -> Dims:
    return [0 if any(d is not None for d in ds) else None for ds in zip(*dims)]


def _batched(comp: HloComputation, dims: Dims, size: int, want: Dims | None = None) -> tuple[TracedLeaves, Dims]:
    """`comp` (a root array or a tuple of arrays) traced again with its parameters batched as
    `dims` (0 or None) and its instructions batched: each output leaf batched first, or as
    `want` (which must batch at least what the computation batches). Also the leaves' dims."""
    found: dict[str, Dims] = {}

    def body(*params: Any) -> Any:
        out, d = run_batched(comp, list(params), dims)
        many = isinstance(out, tuple)
        leaves, leaf_dims = (list(out), list(d)) if many else ([out], [d])
        if any(isinstance(e, tuple) for e in leaf_dims):
            raise BatchingError(f"vmap of a call of {comp.name}: nested tuple results are not implemented")
        found["dims"] = targets = [None if e is None else 0 for e in leaf_dims] if want is None else want
        fronted = [force_front(v, e, t, size) for v, e, t in zip(leaves, leaf_dims, targets)]
        return tuple(fronted) if many else fronted[0]

    shapes = [batched_shape(p.shape, d, size) for p, d in zip(comp.parameters, dims)]
    name = f"{comp.name.split('.')[0]}.vmap.{next(_names)}"
    new, tree, captures, lifted = trace_computation(body, shapes, name)
    assert not captures, "a batched computation closed over an outer value"
    avals = [t.aval for t in lifted]
    assert all(isinstance(a, ArrayShape) for a in avals)
    trace = lifted[0].trace if lifted else None
    return TracedLeaves(trace, new, tree, avals, []), found["dims"]   # type: ignore[arg-type]


def _agreeing(comp: HloComputation, dims: Dims, size: int, want: Dims, found: tuple[TracedLeaves, Dims]
              ) -> TracedLeaves:
    """`found` (comp batched as it batches itself), or comp batched again as `want` if that differs."""
    return found[0] if found[1] == want else _batched(comp, dims, size, want)[0]


def _name(record: Any) -> str:
    return getattr(record.function.fun, "__name__", "fn")


def _alive(value: Any) -> bool:
    """Whether a traced value belongs to the current trace or one enclosing it (not to the
    vmapped function's own trace, which is finished)."""
    trace = current_trace()
    while trace is not None:
        if value.trace is trace:
            return True
        trace = trace.parent
    return False


# Per thread, while a custom call's computations are batched: the traced values of the vmapped
# function its nondiff arguments held, by id, and what they are outside it. A call of the
# same function inside its own fwd or rule holds the same values.
_state = threading.local()


def _outside() -> list[dict[int, Any]]:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


@contextlib.contextmanager
def _replacing(mapping: dict[int, Any]) -> Iterator[None]:
    stack = _outside()
    stack.append(mapping)
    try:
        yield
    finally:
        stack.pop()


def _live_nondiff(kind: str, record: Any, instr: HloInstruction, values: list[Any], dims: Dims
                  ) -> tuple[Any, dict[int, Any], str | None]:
    """`record` with each traced value of the vmapped function among its nondiff arguments
    replaced by its value outside it (the rule reads them later, outside the vmapped function),
    that replacement by id, and why one could not be replaced (None: all were). Such a value
    must be the same for every example, and an operand of the call (the primal or its rule
    uses it) or replaced already by an enclosing call's. The refusal waits until the rule is
    needed: a call that is never differentiated needs none."""
    operand_of = {id(o): i for i, o in enumerate(instr.operands)}
    mapping: dict[int, Any] = {}
    refusal: list[str] = []

    def live(leaf: Any) -> Any:
        if not isinstance(leaf, Tracer) or _alive(leaf):
            return leaf
        for known in reversed(_outside()):
            if id(leaf) in known:
                mapping[id(leaf)] = known[id(leaf)]
                return known[id(leaf)]
        i = operand_of.get(id(leaf.instr))
        if i is None or dims[i] is not None:
            refusal.append(
                f"vmap of {kind} function {_name(record)} with a nondiff argument that "
                + ("differs per example" if i is not None else "is a traced value its primal function does not use")
                + " is not implemented: pass it as an ordinary (differentiable) argument instead")
            return leaf
        mapping[id(leaf)] = values[i]
        return values[i]

    a = record.args
    if not any(isinstance(v, Tracer) for v in tree_flatten(a.nondiff_values)[0]):
        return record, mapping, None
    nondiff = {}
    for k, v in a.nondiff.items():
        leaves, tree = tree_flatten(v)
        nondiff[k] = tree_unflatten(tree, [live(leaf) for leaf in leaves])
    return replace(record, args=replace(a, nondiff=nondiff)), mapping, (refusal[0] if refusal else None)


def _call_args(record: Any, values: list[Any], leaf_dims: Dims, size: int) -> Any:
    """The record's Arguments with the batched leaves (call_rules reads their shapes)."""
    a = record.args
    avals = [batched_shape(v, d, size) for v, d in zip(a.avals, leaf_dims)]
    return replace(a, leaves=list(values[:len(a.leaves)]), avals=avals)


def _float_dims(avals: Sequence[ArrayShape], dims: Dims) -> Dims:
    return [d for v, d in zip(avals, dims) if v.dtype.is_float]


# --- checkpoint ---------------------------------------------------------------------------------


def _checkpoint(comp: HloComputation, record: CheckpointCall, values: list[Any], dims: Dims, size: int
                ) -> tuple[Any, Any]:
    batched, out_dims = _batched(comp, dims, size)
    CALL_RULES[batched.computation] = record
    return _emit(batched.computation, values, out_dims)


def _emit(comp: HloComputation, values: list[Any], out_dims: Dims) -> tuple[Any, Any]:
    out = bind("call", *values, to_apply=comp)
    return (out, tuple(out_dims)) if isinstance(out, tuple) else (out, out_dims[0])


# --- custom_jvp ---------------------------------------------------------------------------------


@dataclass
class BatchedCustomJvp:
    """A custom_jvp function under vmap, standing as `function` in the batched call's record:
    its name, and its rule traced per example and batched when call_rules asks for it."""
    inner: CustomJvpCall          # the per-example call
    leaf_dims: Dims
    out_dims: Dims
    size: int
    refusal: str | None           # why its rule cannot be traced (a traced nondiff argument), if so

    @property
    def fun(self) -> Any:
        return self.inner.function.fun

    def trace_rule(self, a: Any, out_tree: Any, out_avals: Any) -> TracedLeaves:
        if self.refusal is not None:
            raise BatchingError(self.refusal)
        rule = self.inner.trace_rule()
        tangent_dims = _float_dims(self.inner.args.avals, self.leaf_dims)
        # Its captures are values of the traces around the vmap: the same for every example.
        dims = self.leaf_dims + tangent_dims + [None] * len(rule.captures)
        want = self.out_dims + _float_dims(self.inner.out_avals, self.out_dims)
        batched, _ = _batched(rule.computation, dims, self.size, want)
        batched.captures = rule.captures
        return batched


def _custom_jvp(comp: HloComputation, record: CustomJvpCall, values: list[Any], dims: Dims, size: int,
                refusal: str | None) -> tuple[Any, Any]:
    n, n_out = len(record.args.leaves), len(record.out_avals)
    leaf_dims = dims[:n]
    primal = _batched(comp, dims, size)
    if record.rule is None:
        # The rule is traced only if the call is differentiated: batch every output, so that
        # whatever the rule makes batched fits.
        out_dims: Dims = [0] * n_out
        rule = None
    else:
        start = n + record.n_captures
        rule_dims = leaf_dims + _float_dims(record.args.avals, leaf_dims) + dims[start:]
        found = _batched(record.rule.computation, rule_dims, size)
        tangents = iter(found[1][n_out:])
        out_dims = _union(primal[1], found[1][:n_out],
                          [next(tangents) if v.dtype.is_float else None for v in record.out_avals])
        rule = _agreeing(record.rule.computation, rule_dims, size,
                         out_dims + _float_dims(record.out_avals, out_dims), found)
        rule.captures = values[start:start + len(record.rule.captures)]
    new = _agreeing(comp, dims, size, out_dims, primal)
    out_avals = [batched_shape(v, d, size) for v, d in zip(record.out_avals, out_dims)]
    CALL_RULES[new.computation] = CustomJvpCall(
        BatchedCustomJvp(record, leaf_dims, out_dims, size, refusal), _call_args(record, values, leaf_dims, size),  # type: ignore[arg-type]
        record.out_tree, out_avals, record.n_captures, rule)
    return _emit(new.computation, values, out_dims)


# --- custom_vjp ---------------------------------------------------------------------------------


@dataclass
class BatchedCustomVjp:
    """A custom_vjp function under vmap, standing as `function` in the batched call's record:
    its name, fwd traced per example and batched when call_rules asks for it, and bwd under
    vmap."""
    inner: CustomVjpCall          # the per-example call
    leaf_dims: Dims
    out_dims: Dims
    size: int
    refusal: str | None           # why fwd or bwd cannot run (a traced nondiff argument), if so
    res_dims: Dims = field(default_factory=list)   # of the residual leaves, as the batched fwd makes them

    @property
    def fun(self) -> Any:
        return self.inner.function.fun

    def trace_fwd(self, a: Any, out_tree: Any, out_avals: Any) -> tuple[TracedLeaves, Any]:
        if self.refusal is not None:
            raise BatchingError(self.refusal)
        fwd, res_tree = self.inner.trace_fwd()
        # Its captures are values of the traces around the vmap: the same for every example.
        dims = self.leaf_dims + [None] * len(fwd.captures)
        batched, self.res_dims = _batched_fwd(fwd.computation, dims, self.size, self.out_dims)
        batched.captures = fwd.captures
        return batched, res_tree

    def cotangents(self, call: CustomVjpCall, residuals: Any, out_cotangent: Any) -> list[Any]:
        """Each argument leaf's cotangent (None: zero): bwd mapped over the examples."""
        if self.refusal is not None:
            raise BatchingError(self.refusal)
        inner = self.inner
        res_leaves, _ = tree_flatten(residuals)
        given = leaves_allowing_none(f"the output cotangent of custom_vjp function {_name(inner)}", out_cotangent,
                                     inner.out_tree)
        floats_out = [v.dtype.is_float for v in inner.out_avals]
        ct_leaves = [c if c is not None else lax.full(v.dims, 0, v.dtype) for c, v, f in
                     zip(given, call.out_avals, floats_out) if f]

        def per_example(res: list[Any], cts: list[Any]) -> list[Any]:
            it = iter(cts)
            out_ct = [next(it) if v.dtype.is_float else np.zeros(v.dims, float0) for v in inner.out_avals]
            leaves = inner.function.cotangents(inner, tree_unflatten(call.res_tree, res),
                                               tree_unflatten(inner.out_tree, out_ct))
            return [lax.full(v.dims, 0, v.dtype) if ct is None else ct
                    for ct, v in zip(leaves, inner.args.avals) if v.dtype.is_float]

        in_axes = (list(self.res_dims), _float_dims(inner.out_avals, self.out_dims))
        try:
            mapped = vmap(per_example, in_axes=in_axes, axis_size=self.size)(res_leaves, ct_leaves)
        except TraceError as e:
            raise BatchingError(f"vmap of custom_vjp function {_name(inner)}: its bwd rule could not be batched "
                                f"(does it close over a value of the vmapped function? pass that through fwd's "
                                f"residuals instead): {e}") from e
        it = iter(mapped)
        out: list[Any] = []
        for v, d in zip(inner.args.avals, self.leaf_dims):
            if not v.dtype.is_float:
                out.append(None)
                continue
            ct = next(it)
            # An argument shared by every example gets the sum of their cotangents.
            out.append(lax.reduce_sum(ct, (0,)) if d is None else ct)
        return out


def _batched_fwd(fwd: HloComputation, dims: Dims, size: int, out_dims: Dims) -> tuple[TracedLeaves, Dims]:
    """fwd batched: its primal outputs as `out_dims`, its residuals as it makes them."""
    n_out = len(out_dims)
    found = _batched(fwd, dims, size)
    want = out_dims + found[1][n_out:]
    return _agreeing(fwd, dims, size, want, found), found[1][n_out:]


def _custom_vjp(comp: HloComputation, record: CustomVjpCall, values: list[Any], dims: Dims, size: int,
                refusal: str | None) -> tuple[Any, Any]:
    n, n_out = len(record.args.leaves), len(record.out_avals)
    leaf_dims = dims[:n]
    primal = _batched(comp, dims, size)
    function = BatchedCustomVjp(record, leaf_dims, [], size, refusal)
    if record.fwd is None:
        # fwd is traced only if the call is differentiated: batch every output, so that
        # whatever fwd makes batched fits.
        out_dims: Dims = [0] * n_out
        fwd = None
    else:
        start = n + record.n_captures
        fwd_dims = leaf_dims + dims[start:]
        found = _batched(record.fwd.computation, fwd_dims, size)
        out_dims = _union(primal[1], found[1][:n_out])
        fwd, function.res_dims = _batched_fwd(record.fwd.computation, fwd_dims, size, out_dims)
        fwd.captures = values[start:start + len(record.fwd.captures)]
    function.out_dims = out_dims
    new = _agreeing(comp, dims, size, out_dims, primal)
    out_avals = [batched_shape(v, d, size) for v, d in zip(record.out_avals, out_dims)]
    CALL_RULES[new.computation] = CustomVjpCall(
        function, _call_args(record, values, leaf_dims, size), record.out_tree, out_avals,  # type: ignore[arg-type]
        record.n_captures, fwd, record.res_tree)
    return _emit(new.computation, values, out_dims)


# --- the rule -----------------------------------------------------------------------------------


def batch_recorded_call(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    """The batched form of a `call` whose computation has a rule in CALL_RULES: a call of the
    batched computation, with the rule batched."""
    comp = instr.attrs["to_apply"]
    record = CALL_RULES[comp]
    if any(isinstance(d, tuple) for d in dims):
        raise BatchingError(f"vmap of a call of {comp.name} with tuple operands is not implemented")
    size = batch_size(values, dims)
    values = [front_or_none(v, d) for v, d in zip(values, dims)]
    dims = [None if d is None else 0 for d in dims]
    if isinstance(record, CheckpointCall):
        return _checkpoint(comp, record, values, dims, size)
    if isinstance(record, CustomJvpCall):
        record, mapping, refusal = _live_nondiff("custom_jvp", record, instr, values, dims)
        with _replacing(mapping):
            return _custom_jvp(comp, record, values, dims, size, refusal)
    if isinstance(record, CustomVjpCall):
        record, mapping, refusal = _live_nondiff("custom_vjp", record, instr, values, dims)
        with _replacing(mapping):
            return _custom_vjp(comp, record, values, dims, size, refusal)
    raise BatchingError(f"vmap of a call of {comp.name} carrying a {type(record).__name__} rule is not "
                        "implemented: batching it would lose that rule")
