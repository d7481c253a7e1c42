"""Structured control flow: while_loop, fori_loop, cond, switch, scan (over pytrees), and
optimization_barrier.

Inside a trace each Python function is traced once into a computation of the flattened
leaves (`trace_computation`), then wrapped into the single-tuple-parameter computation
HLO's while and conditional take: the wrapper unpacks the state with get-tuple-element
and `call`s the traced function. Values of enclosing traces that a function closes over
(its captures) ride along in the loop state or the branch operand, unchanged.

With no trace active the same functions run as plain Python loops and ifs on concrete
values, so eager code and jitted code give the same results.

Trip counts: scan and fori_loop with concrete bounds know how many times their loop runs,
and say so on the while instruction as XLA does, in its backend_config
(`{"known_trip_count":{"n":"10"}}`, which XLA's HLO parser accepts): reverse-mode
differentiation needs it (pyxla/autodiff/while_rules.py).

Weak typing: a carry leaf that starts as a Python number takes the type the body gives it
(`fori_loop(0, n, f, 0.0)` with an f32 body carries f32), as in JAX.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TraceError
from ..frontend.pytree import PyTreeDef, tree_flatten, tree_unflatten
from ..frontend.tracing import Tracer, bind, current_trace, make_tuple, trace_computation, where
from ..hlo.builder import HloBuilder
from ..hlo.computation import HloComputation
from ..hlo.shape import ArrayShape, TupleShape
from ..hlo.types import PRED, S32
from ._values import as_type, aval, convert, fresh_name, is_python_scalar, is_weak, unify_types
from .elementwise import add, clamp, convert_element_type, logical_pred, lt, sub
from .shapes import dynamic_index_in_dim, dynamic_update_index_in_dim, full

# --- carries: structure, shapes, weak types ---------------------------------------------

@dataclass
class Carry:
    """The flattened form of a pytree of values flowing through a loop or into branches."""
    leaves: list[Any]
    tree: PyTreeDef
    avals: list[ArrayShape]
    weak: list[bool]

    @staticmethod
    def of(value: Any) -> Carry:
        leaves, tree = tree_flatten(value)
        return Carry(leaves, tree, [aval(x) for x in leaves], [is_weak(x) for x in leaves])

    def value(self) -> Any:
        return tree_unflatten(self.tree, self.leaves)

    def concrete_leaves(self) -> list[Any]:
        """Leaves fit to be operands of an HLO tuple (Python numbers as arrays of their aval)."""
        return [np.asarray(x, a.dtype.np_dtype) if is_python_scalar(x) else x
                for x, a in zip(self.leaves, self.avals)]


def match_carry(what: str, expected: Carry, tree: PyTreeDef, avals: Sequence[ArrayShape],
                weak: Sequence[bool], leaf: str = "carry leaf") -> list[ArrayShape]:
    """Check a function's output (tree, avals, weak flags) against the carry it must equal.

    Returns the carry's avals with weak leaves promoted to the type the function gives them
    (same dimensions, strongly typed output). Anything else that differs is a TraceError.
    """
    if tree != expected.tree:
        raise TraceError(f"{what} returns a value of structure {tree}, expected the carry's structure "
                         f"{expected.tree}{where()}")
    promoted = []
    for i, (want, got, want_weak, got_weak) in enumerate(zip(expected.avals, avals, expected.weak, weak)):
        if got.compatible(want) or (got_weak and got.dims == want.dims):
            promoted.append(want)
        elif want_weak and got.dims == want.dims:
            promoted.append(got)
        else:
            raise TraceError(f"{what} returns {got.to_text(False)} for {leaf} {i}, expected "
                             f"{want.to_text(False)}{where()}")
    return promoted


def _adopt(what: str, out: Any, expected: Carry) -> Carry:
    """An eager function's output as the next carry: checked, Python numbers typed."""
    new = Carry.of(out)
    promoted = match_carry(what, expected, new.tree, new.avals, new.weak)
    leaves = [as_type(what, x, a.dtype) if w and not isinstance(x, Tracer) and aval(x).dtype != a.dtype else x
              for x, a, w in zip(new.leaves, promoted, new.weak)]
    return Carry.of(tree_unflatten(new.tree, leaves))


def _concrete_predicate(what: str, value: Any) -> bool:
    a = aval(value)
    if a.rank != 0:
        raise TraceError(f"{what} must be a scalar, got {a.to_text(False)}{where()}")
    return bool(np.asarray(value))


# --- tracing functions of flat leaves ---------------------------------------------------

@dataclass
class Traced:
    """A Python function traced on flat leaves: its computation returns a tuple of leaves."""
    comp: HloComputation
    tree: PyTreeDef
    avals: list[ArrayShape]
    weak: list[bool]
    captures: list[Any]


def trace_flat(what: str, fn: Callable, carry: Carry, name: str,
               out_types: Sequence[Any] | None = None) -> Traced:
    """Trace `fn(*leaves)` (returning any pytree) with parameters shaped like `carry`.

    Weak (Python number) output leaves take `out_types[i]` where given, so that a body
    returning `0.0` for an f32 carry leaf returns f32.
    """
    info: dict[str, Any] = {}

    def flat(*params):
        leaves, tree = tree_flatten(fn(*params))
        info["tree"], info["weak"] = tree, [is_weak(x) for x in leaves]
        if out_types is not None:
            leaves = [as_type(what, x, t) if t is not None and is_weak(x) else x
                      for x, t in zip(leaves, list(out_types) + [None] * len(leaves))]
        return tuple(leaves)

    comp, _, captures, lifted = trace_computation(flat, carry.avals, fresh_name(name), weak=carry.weak)
    return Traced(comp, info["tree"], [t.aval for t in lifted], info["weak"], captures)


def _unique(values: Sequence[Any]) -> list[Any]:
    seen, out = set(), []
    for v in values:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


class StateComputation:
    """A computation of one tuple parameter (carry leaves, then captures) that calls a
    traced function on the carry leaves and the captures that function uses."""

    def __init__(self, name: str, state_shape: TupleShape, n_carry: int, captures: list[Any]):
        self.builder = HloBuilder(fresh_name(name))
        self.state = self.builder.parameter(state_shape, f"{self.builder.name}.state")
        self.n_carry = n_carry
        self.position = {id(c): n_carry + k for k, c in enumerate(captures)}
        self.size = len(state_shape.elements)
        self._elements: dict[int, Any] = {}

    def element(self, i: int):
        if i not in self._elements:
            self._elements[i] = self.builder.op("get-tuple-element", self.state, index=i)
        return self._elements[i]

    def call(self, traced: Traced):
        args = [self.element(i) for i in range(self.n_carry)]
        args += [self.element(self.position[id(c)]) for c in traced.captures]
        return self.builder.op("call", *args, to_apply=traced.comp)

    def result(self, call, index: int):
        return self.builder.op("get-tuple-element", call, index=index)

    def build(self, root) -> HloComputation:
        return self.builder.build(root)


# --- known trip counts ------------------------------------------------------------------

def known_trip_count_config(n: int) -> str:
    """The backend_config of a while that runs `n` times (XLA's form)."""
    return json.dumps({"known_trip_count": {"n": str(int(n))}}, separators=(",", ":"))


def known_trip_count(instr: Any) -> int | None:
    """The trip count a while instruction's backend_config records, if any."""
    config = instr.attrs.get("backend_config")
    if not config:
        return None
    try:
        return int(json.loads(config)["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None


# --- while_loop -------------------------------------------------------------------------

def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any) -> Any:
    """Repeats `val = body_fun(val)` while `cond_fun(val)`; `val` is any pytree of arrays
    whose structure, shapes and types the body keeps."""
    carry = Carry.of(init_val)
    if current_trace() is None:
        while _concrete_predicate("while_loop cond_fun's result", cond_fun(carry.value())):
            carry = _adopt("while_loop body", body_fun(carry.value()), carry)
        return carry.value()
    return _while_traced(cond_fun, body_fun, carry, "while_loop")


def _while_traced(cond_fun: Callable, body_fun: Callable, carry: Carry, what: str,
                  trip_count: int | None = None) -> Any:
    traced, carry = _trace_body(body_fun, carry, what)
    cond = trace_flat(f"{what} cond_fun", lambda *xs: cond_fun(tree_unflatten(carry.tree, xs)), carry, "while_cond")
    if cond.tree.num_leaves != 1 or cond.tree.kind != "leaf" or not cond.avals[0].compatible(ArrayShape(PRED, ())):
        got = ", ".join(a.to_text(False) for a in cond.avals) or "nothing"
        raise TraceError(f"{what} cond_fun must return a pred[] scalar, got {got}{where()}")
    captures = _unique(traced.captures + cond.captures)
    n = len(carry.avals)
    state_shape = TupleShape(tuple(carry.avals) + tuple(aval(c) for c in captures))

    body_comp = StateComputation("while_body", state_shape, n, captures)
    call = body_comp.call(traced)
    new_state = [body_comp.result(call, i) for i in range(n)]
    new_state += [body_comp.element(i) for i in range(n, len(state_shape.elements))]
    body_comp = body_comp.build(body_comp.builder.tuple(*new_state))

    cond_comp = StateComputation("while_cond", state_shape, n, captures)
    cond_comp = cond_comp.build(cond_comp.result(cond_comp.call(cond), 0))

    state = make_tuple(*carry.concrete_leaves(), *captures)
    config = {} if trip_count is None else {"backend_config": known_trip_count_config(trip_count)}
    out = bind("while", state, condition=cond_comp, body=body_comp, **config)
    return tree_unflatten(carry.tree, list(out[:n]))


def _trace_body(body_fun: Callable, carry: Carry, what: str) -> tuple[Traced, Carry]:
    """The traced loop body and the carry it takes: traced again, once, when weak carry
    leaves get promoted to the types the body gives them."""
    for _ in range(2):
        traced = trace_flat(f"{what} body", lambda *xs: body_fun(tree_unflatten(carry.tree, xs)), carry,
                            "while_body_fn", out_types=[a.dtype for a in carry.avals])
        promoted = match_carry(f"{what} body", carry, traced.tree, traced.avals, traced.weak)
        if promoted == carry.avals:
            return traced, carry
        carry = _carry_with_avals(carry, promoted)
    raise TraceError(f"{what} body changes the types of its carry {[a.to_text(False) for a in carry.avals]} "
                     f"on every trace{where()}")


def _carry_with_avals(carry: Carry, avals: list[ArrayShape]) -> Carry:
    """`carry` with leaves converted to `avals`' types (promoted weak leaves lose weakness)."""
    if avals == carry.avals:
        return carry
    leaves, weak = [], []
    for x, old, new, w in zip(carry.leaves, carry.avals, avals, carry.weak):
        changed = old.dtype != new.dtype
        leaves.append((as_type("loop carry", x, new.dtype) if is_python_scalar(x) else convert(x, new.dtype))
                      if changed else x)
        weak.append(w and not changed)
    return Carry(leaves, carry.tree, list(avals), weak)


# --- fori_loop --------------------------------------------------------------------------

def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any, *,
              unroll: Any = None) -> Any:
    """`val = body_fun(i, val)` for i in [lower, upper). The index is s32 when both bounds
    are Python ints (weakly typed), else the bounds' integer type. `unroll` is ignored."""
    both_python = is_python_scalar(lower) and is_python_scalar(upper)
    if current_trace() is None and not isinstance(lower, Tracer) and not isinstance(upper, Tracer):
        index_dtype = None if both_python else aval(unify_types("fori_loop", [lower, upper])[0]).dtype.np_dtype
        carry = Carry.of(init_val)
        for i in range(int(lower), int(upper)):
            index = i if both_python else np.asarray(i, index_dtype)
            carry = _adopt("fori_loop body", body_fun(index, carry.value()), carry)
        return carry.value()
    if both_python:
        lo, hi = np.asarray(lower, np.int32), np.asarray(upper, np.int32)
    else:
        lo, hi = unify_types("fori_loop", [lower, upper])
    if not aval(lo).dtype.is_integral:
        raise TraceError(f"fori_loop bounds must be integers, got {aval(lo).to_text(False)}{where()}")
    user = Carry.of(init_val)

    def body(state):
        i, val = state
        out = body_fun(i, val)
        given = Carry.of(out)
        match_carry("fori_loop body", Carry.of(val), given.tree, given.avals, given.weak)
        return add(i, 1), out

    carry = Carry([lo] + user.leaves, tree_flatten((lo, init_val))[1], [aval(lo)] + user.avals,
                  [both_python] + user.weak)
    static = not isinstance(lower, Tracer) and not isinstance(upper, Tracer)
    trip_count = max(0, int(np.asarray(upper)) - int(np.asarray(lower))) if static else None
    _, val = _while_traced(lambda state: lt(state[0], hi), body, carry, "fori_loop", trip_count)
    return val


# --- cond and switch --------------------------------------------------------------------

def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """true_fun(*operands) if pred else false_fun(*operands); both must return the same
    structure, shapes and types. `pred` is a scalar pred (or integer: nonzero is true)."""
    a = aval(pred)
    if a.rank != 0 or a.dtype.is_float:
        raise TraceError(f"cond's predicate must be a pred or integer scalar, got {a.to_text(False)}{where()}")
    if current_trace() is None and not isinstance(pred, Tracer):
        return true_fun(*operands) if _concrete_predicate("cond's predicate", pred) else false_fun(*operands)
    index = convert_element_type(logical_pred(pred), S32)
    return _switch_traced(index, [false_fun, true_fun], operands, "cond", ["false_fun", "true_fun"])


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """branches[index](*operands), with index clamped into [0, len(branches) - 1]."""
    branches = list(branches)
    if not branches:
        raise TraceError(f"switch needs at least one branch{where()}")
    a = aval(index)
    if a.rank != 0 or not (a.dtype.is_integral or a.dtype.is_pred):
        raise TraceError(f"switch's index must be an integer scalar, got {a.to_text(False)}{where()}")
    if current_trace() is None and not isinstance(index, Tracer):
        i = min(max(int(np.asarray(index)), 0), len(branches) - 1)
        return branches[i](*operands)
    if len(branches) == 1:
        return branches[0](*operands)
    index = clamp(0, convert_element_type(index, S32), len(branches) - 1)
    return _switch_traced(index, branches, operands, "switch", [f"branch {k}" for k in range(len(branches))])


def _switch_traced(index: Any, branches: list[Callable], operands: tuple, what: str, names: list[str]) -> Any:
    args = Carry.of(tuple(operands))

    def trace_branch(k: int, out_types=None) -> Traced:
        return trace_flat(f"{what} {names[k]}", lambda *xs: branches[k](*tree_unflatten(args.tree, xs)),
                          args, "branch", out_types)

    traced = [trace_branch(k) for k in range(len(branches))]
    for k, t in enumerate(traced[1:], 1):
        if t.tree != traced[0].tree:
            raise TraceError(f"{what}: {names[k]} returns a value of structure {t.tree}, but {names[0]} "
                             f"returns {traced[0].tree}{where()}")
    # A Python number returned by one branch takes the type another branch gives that leaf.
    targets = [next((t.avals[i].dtype for t in traced if not t.weak[i]), traced[0].avals[i].dtype)
               for i in range(len(traced[0].avals))]
    traced = [trace_branch(k, targets) if any(w and a.dtype != d for w, a, d in zip(t.weak, t.avals, targets))
              else t for k, t in enumerate(traced)]
    for k, t in enumerate(traced[1:], 1):
        for i, (got, want) in enumerate(zip(t.avals, traced[0].avals)):
            if not got.compatible(want):
                raise TraceError(f"{what}: {names[k]} returns {got.to_text(False)} for output leaf {i}, but "
                                 f"{names[0]} returns {want.to_text(False)}{where()}")
    captures = _unique([c for t in traced for c in t.captures])
    n = len(args.avals)
    state_shape = TupleShape(tuple(args.avals) + tuple(aval(c) for c in captures))
    comps = []
    for t in traced:
        comp = StateComputation("branch", state_shape, n, captures)
        comps.append(comp.build(comp.call(t)))
    state = make_tuple(*args.concrete_leaves(), *captures)
    out = bind("conditional", index, *([state] * len(comps)), branch_computations=tuple(comps))
    return tree_unflatten(traced[0].tree, list(out))


# --- scan -------------------------------------------------------------------------------

def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int = 1) -> tuple[Any, Any]:
    """carry, y = f(carry, x) over the leading axis of `xs` (pytrees); returns the final
    carry and the ys stacked along a new leading axis. `reverse` runs from the end (ys keep
    their positions). `unroll` is accepted for JAX's sake and ignored."""
    x_leaves, x_tree = tree_flatten(xs)
    length = _scan_length(x_leaves, length)
    if current_trace() is None and not any(isinstance(x, Tracer) for x in x_leaves):
        return _scan_eager(f, init, x_leaves, x_tree, length, reverse)
    return _scan_traced(f, Carry.of(init), x_leaves, x_tree, length, reverse)


def _scan_length(x_leaves: list[Any], length: int | None) -> int:
    lengths = {aval(x).dims[0] if aval(x).rank else None for x in x_leaves}
    if None in lengths:
        raise TraceError(f"scan: every leaf of xs needs a leading axis to scan over{where()}")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise TraceError(f"scan: xs leaves and length disagree on the number of steps: "
                         f"{sorted(lengths)}{where()}" if lengths else f"scan needs xs or length{where()}")
    return lengths.pop()


def _split_pair(what: str, tree: PyTreeDef) -> tuple[PyTreeDef, PyTreeDef]:
    if tree.kind not in (tuple, list) or len(tree.children) != 2:
        raise TraceError(f"{what} must return a pair (carry, y), got a value of structure {tree}{where()}")
    return tree.children


def _scan_eager(f: Callable, init: Any, x_leaves: list[Any], x_tree: PyTreeDef, length: int,
                reverse: bool) -> tuple[Any, Any]:
    carry = Carry.of(init)
    arrays = [np.asarray(x) for x in x_leaves]
    ys: list[Any] = [None] * length
    first_y = None
    for i in (reversed(range(length)) if reverse else range(length)):
        out = f(carry.value(), tree_unflatten(x_tree, [a[i] for a in arrays]))
        _split_pair("scan body", tree_flatten(out)[1])
        new_carry, ys[i] = out
        carry = _adopt("scan body", new_carry, carry)
        y = Carry.of(ys[i])
        first_y = first_y or y
        match_carry("scan body", first_y, y.tree, y.avals, y.weak, leaf="y leaf")
    if length == 0:   # the body never ran: trace it abstractly to learn the shapes of y
        x_avals = [ArrayShape(aval(a).dtype, aval(a).dims[1:]) for a in arrays]
        probe = _probe_scan_body(f, carry, x_avals, x_tree)
        stacked = [np.zeros((0,) + a.dims, a.dtype.np_dtype) for a in probe.y_avals]
        return carry.value(), tree_unflatten(probe.y_tree, stacked)
    y_leaves = [tree_flatten(y)[0] for y in ys]
    y_tree = tree_flatten(ys[0])[1]
    stacked = [np.stack([np.asarray(y[k]) for y in y_leaves]) for k in range(len(y_leaves[0]))]
    return carry.value(), tree_unflatten(y_tree, stacked)


@dataclass
class _ScanProbe:
    carry: Carry
    y_tree: PyTreeDef
    y_avals: list[ArrayShape]


def _probe_scan_body(f: Callable, carry: Carry, x_avals: list[ArrayShape], x_tree: PyTreeDef) -> _ScanProbe:
    """Trace f once on abstract values to check its carry and learn y's structure and shapes
    (promoting weak carry leaves, as a loop body does)."""
    nc = len(carry.avals)
    for _ in range(2):
        args = Carry(carry.leaves + [None] * len(x_avals), carry.tree, carry.avals + x_avals,
                     carry.weak + [False] * len(x_avals))

        def fn(*params):
            return f(tree_unflatten(carry.tree, params[:nc]), tree_unflatten(x_tree, params[nc:]))

        traced = trace_flat("scan body", fn, args, "scan_probe", out_types=[a.dtype for a in carry.avals])
        carry_tree, y_tree = _split_pair("scan body", traced.tree)
        promoted = match_carry("scan body", carry, carry_tree, traced.avals[:nc], traced.weak[:nc])
        if promoted == carry.avals:
            return _ScanProbe(carry, y_tree, traced.avals[nc:])
        carry = _carry_with_avals(carry, promoted)
    raise TraceError(f"scan body changes the types of its carry on every trace{where()}")


def _scan_traced(f: Callable, carry: Carry, x_leaves: list[Any], x_tree: PyTreeDef, length: int,
                 reverse: bool) -> tuple[Any, Any]:
    x_avals = [ArrayShape(aval(x).dtype, aval(x).dims[1:]) for x in x_leaves]
    probe = _probe_scan_body(f, carry, x_avals, x_tree)
    carry = probe.carry
    buffers = [full((length,) + a.dims, 0, a.dtype) for a in probe.y_avals]
    if length == 0:   # no step runs (and no slice of a size-0 axis would be valid)
        return carry.value(), tree_unflatten(probe.y_tree, buffers)

    def body(state):
        i, c, ys = state
        # The body is lowered as JAX does: read x at i, write y at i (from the end if reversed).
        at = sub(length - 1, i) if reverse else i
        x = tree_unflatten(x_tree, [dynamic_index_in_dim(a, at, 0, keepdims=False) for a in x_leaves])
        new_c, y = f(c, x)
        ys = [dynamic_update_index_in_dim(buf, leaf, at, 0) for buf, leaf in zip(ys, tree_flatten(y)[0])]
        return add(i, 1), new_c, ys

    start = np.zeros((), np.int32)
    init = (start, carry.value(), buffers)
    leaves, tree = tree_flatten(init)
    state = Carry(leaves, tree, [aval(x) for x in leaves],
                  [False] + carry.weak + [False] * len(buffers))
    _, final, ys = _while_traced(lambda s: lt(s[0], length), body, state, "scan", length)
    return final, tree_unflatten(probe.y_tree, ys)


# --- optimization_barrier ----------------------------------------------------------------

def optimization_barrier(operand: Any) -> Any:
    """`operand` (a pytree) unchanged, through an opt-barrier that optimisations may not
    move computations across (rematerialisation)."""
    leaves, tree = tree_flatten(operand)
    if not leaves:
        return operand
    out = bind("opt-barrier", make_tuple(*Carry.of(operand).concrete_leaves()))
    return tree_unflatten(tree, list(out))
