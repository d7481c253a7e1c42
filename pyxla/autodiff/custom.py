"""custom_jvp and custom_vjp: functions whose derivative the user gives (JAX's API).

    @pyxla.custom_jvp
    def log1pexp(x):
        return pnp.log1p(pnp.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return log1pexp(x), t * (1 - 1 / (1 + pnp.exp(x)))

Called while a trace is active, the function is traced into a computation of its argument
leaves and emitted as a `call` of it (ordinary HLO when nothing differentiates it); the
user's rule is traced beside it (custom_jvp's jvp, custom_vjp's fwd) and recorded for that
computation (traced_calls.CALL_RULES). Values the rule closes over become extra operands of
the call, so a derivative walk finds them wherever the call is. call_rules.py applies the
rules. Called outside any trace, the function simply runs.

A rule that calls the function itself (`ans = f(x)` inside f's jvp, the usual pattern) gets
a call whose rule is traced only when that call is differentiated (a higher derivative).
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import lax
from ..frontend.pytree import PyTreeDef, float0, tree_flatten, tree_unflatten
from ..frontend.tracing import Tracer, current_trace, shape_of
from ..hlo.shape import ArrayShape
from .staging import argument_value
from .traced_calls import TracedLeaves, add_parameters, emit_call, trace_leaves

_state = threading.local()


def _being_traced() -> set[int]:
    """The custom functions whose rules are being traced now (a call of one of them from its
    own rule defers tracing that call's rule)."""
    if not hasattr(_state, "functions"):
        _state.functions = set()
    return _state.functions


def _resolve_kwargs(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments bound to their positions (custom rules take positional arguments)."""
    if not kwargs:
        return args
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"keyword arguments {sorted(bound.kwargs)} of {getattr(fun, '__name__', fun)} could not "
                        "be resolved to positions")
    return tuple(bound.args)


@dataclass
class Arguments:
    """A call's arguments: the non-differentiable ones (nondiff_argnums) kept as they are,
    the others flattened to leaves."""
    count: int
    nondiff: dict[int, Any]
    leaves: list[Any]
    weak: list[bool]
    tree: PyTreeDef                       # of the tuple of differentiable arguments
    avals: list[ArrayShape] = field(default_factory=list)

    @staticmethod
    def of(what: str, args: tuple, nondiff_argnums: Sequence[int]) -> Arguments:
        count = len(args)
        positions = set()
        for i in nondiff_argnums:
            if not -count <= i < count:
                raise TypeError(f"{what}: nondiff_argnums {tuple(nondiff_argnums)} out of range for "
                                f"{count} positional arguments")
            positions.add(i % count)
        nondiff = {i: args[i] for i in sorted(positions)}
        diff = tuple(a for i, a in enumerate(args) if i not in positions)
        leaves, tree = tree_flatten(diff)
        values, weak = [], []
        for leaf in leaves:
            v, w = argument_value(what, leaf)
            values.append(v)
            weak.append(w)
        avals = [_aval(v) for v in values]
        return Arguments(count, nondiff, values, weak, tree, avals)

    @property
    def floats(self) -> list[bool]:
        return [a.dtype.is_float for a in self.avals]

    @property
    def nondiff_values(self) -> list[Any]:
        return list(self.nondiff.values())

    def merged(self, diff_leaves: Sequence[Any]) -> tuple:
        """All the arguments, the differentiable ones rebuilt from `diff_leaves`."""
        diff = iter(tree_unflatten(self.tree, list(diff_leaves)))
        return tuple(self.nondiff[i] if i in self.nondiff else next(diff) for i in range(self.count))

    def diff_args(self, diff_leaves: Sequence[Any]) -> tuple:
        return tuple(tree_unflatten(self.tree, list(diff_leaves)))


def _aval(value: Any) -> ArrayShape:
    shape = shape_of(value)
    assert isinstance(shape, ArrayShape)
    return shape


def _name(fun: Callable) -> str:
    return getattr(fun, "__name__", "custom_fn")


def leaves_allowing_none(what: str, value: Any, tree: PyTreeDef) -> list[Any]:
    """The leaves of `value` for the structure `tree`, where `value` may hold None (or float0
    zeros) in place of any subtree: a symbolic zero, given as None per leaf."""
    leaves, value_tree = tree_flatten(value)
    it = iter(leaves)
    out: list[Any] = []

    def align(v: PyTreeDef, t: PyTreeDef) -> None:
        if v.kind == "none" and t.kind != "none":
            out.extend([None] * t.num_leaves)
        elif t.kind == "leaf":
            if v.kind == "leaf":
                out.append(next(it))
            elif v.kind == "float0":
                out.append(None)
            else:
                raise TypeError(f"{what}: got a value of structure {v} where an array is expected")
        elif v.kind != t.kind or v.aux != t.aux or len(v.children) != len(t.children):
            raise TypeError(f"{what}: got a value of structure {value_tree}, expected {tree}")
        else:
            for vc, tc in zip(v.children, t.children):
                align(vc, tc)

    align(value_tree, tree)
    return out


def _pair(what: str, out: Any) -> tuple[Any, Any]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{what} must produce a pair (list or tuple of length two), got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return out[0], out[1]


def _check_primal_out(what: str, out: Any, tree: PyTreeDef, avals: list[ArrayShape]) -> list[Any]:
    leaves, out_tree = tree_flatten(out)
    if out_tree != tree:
        raise TypeError(f"{what} must produce primal outputs with the structure of the primal function's "
                        f"output, {tree}; got {out_tree}")
    for leaf, aval in zip(leaves, avals):
        got = _aval(leaf)
        if got.dims != aval.dims:
            raise TypeError(f"{what} produced a primal output of shape {got.to_text(False)} where the primal "
                            f"function gives {aval.to_text(False)}")
    return leaves


def like(what: str, value: Any, aval: ArrayShape) -> Any:
    """A derivative given by a rule for a value of `aval`: its shape checked, its float type
    made the value's."""
    got = _aval(value)
    if got.dims != aval.dims:
        raise ValueError(f"{what}: got shape {got.to_text(False)} for a value of shape {aval.to_text(False)}")
    if got.dtype != aval.dtype:
        return lax.convert_element_type(value, aval.dtype.np_dtype)
    return value


@dataclass
class CustomJvpCall:
    """What call_rules.py needs to differentiate one call of a custom_jvp function."""
    function: custom_jvp
    args: Arguments
    out_tree: PyTreeDef
    out_avals: list[ArrayShape]
    n_captures: int                 # the primal's captures follow the leaves among the operands
    rule: TracedLeaves | None       # the rule's captures follow those; None: traced when needed

    def trace_rule(self) -> TracedLeaves:
        return self.function.trace_rule(self.args, self.out_tree, self.out_avals)


class custom_jvp:
    """A function with a user-given JVP rule (JAX's jax.custom_jvp): `defjvp(jvp)` with
    `jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`, or `defjvps`."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        if symbolic_zeros:
            raise NotImplementedError("custom_jvp.defjvp(symbolic_zeros=True) is not supported: tangents are "
                                      "always arrays (zeros where a value is not differentiated)")
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """One function per argument, `jvp_i(t_i, primal_out, *primals)`: that argument's
        contribution to the output tangent (None: it contributes none)."""
        if self.nondiff_argnums:
            raise TypeError("custom_jvp.defjvps does not support nondiff_argnums; use defjvp")

        def jvp(primals, tangents):
            ans = self(*primals)
            terms = [f(t, ans, *primals) for f, t in zip(jvps, tangents) if f is not None]
            if not terms:
                return ans, None
            total = terms[0]
            for term in terms[1:]:
                total = _tree_add(total, term)
            return ans, total

        self.defjvp(jvp)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = _name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        args = _resolve_kwargs(self.fun, args, kwargs)
        if current_trace() is None:
            return self.fun(*args)
        a = Arguments.of(f"custom_jvp function {name}", args, self.nondiff_argnums)
        primal = trace_leaves(lambda *leaves: self.fun(*a.merged(leaves)), a.avals, a.weak, f"custom_jvp_{name}")
        rule = None if id(self) in _being_traced() else self.trace_rule(a, primal.out_tree, primal.out_avals)
        if rule is not None:
            add_parameters(primal, rule.captures)
        record = CustomJvpCall(self, a, primal.out_tree, primal.out_avals, len(primal.captures), rule)
        operands = a.leaves + primal.captures + (rule.captures if rule is not None else [])
        return tree_unflatten(primal.out_tree, emit_call(primal, operands, record))

    def trace_rule(self, a: Arguments, out_tree: PyTreeDef, out_avals: list[ArrayShape]) -> TracedLeaves:
        """The jvp rule traced on parameters (primal leaves, then the tangents of the float
        ones), returning the primal output leaves, then the tangents of the float ones."""
        assert self.jvp is not None
        jvp, name, n = self.jvp, _name(self.fun), len(a.leaves)
        what = f"Custom JVP rule {_name(jvp)} for function {name}"

        def flat_rule(*params: Any) -> list[Any]:
            given = iter(params[n:])
            tangent_leaves = [next(given) if f else np.zeros(v.dims, float0) for f, v in zip(a.floats, a.avals)]
            out = jvp(*a.nondiff_values, a.diff_args(params[:n]), a.diff_args(tangent_leaves))
            primal_out, tangent_out = _pair(what, out)
            primal_leaves = _check_primal_out(what, primal_out, out_tree, out_avals)
            tangents = leaves_allowing_none(f"{what}: its tangent output", tangent_out, out_tree)
            return primal_leaves + [
                lax.full(v.dims, 0, v.dtype) if t is None else like(f"{what}: tangent output {i}", t, v)
                for i, (t, v) in enumerate(zip(tangents, out_avals)) if v.dtype.is_float]

        tangent_avals = [v for v, f in zip(a.avals, a.floats) if f]
        functions = _being_traced()
        functions.add(id(self))
        try:
            return trace_leaves(flat_rule, a.avals + tangent_avals, a.weak + [False] * len(tangent_avals),
                                f"custom_jvp_rule_{name}")
        finally:
            functions.discard(id(self))


def _tree_add(x: Any, y: Any) -> Any:
    xs, tree = tree_flatten(x)
    ys = leaves_allowing_none("custom_jvp.defjvps: the tangents of the arguments", y, tree)
    return tree_unflatten(tree, [a if b is None else lax.add(a, b) for a, b in zip(xs, ys)])


@dataclass
class CustomVjpCall:
    """What call_rules.py needs to differentiate one call of a custom_vjp function."""
    function: custom_vjp
    args: Arguments
    out_tree: PyTreeDef
    out_avals: list[ArrayShape]
    n_captures: int
    fwd: TracedLeaves | None        # returns the output leaves, then the residual leaves
    res_tree: PyTreeDef | None

    def trace_fwd(self) -> tuple[TracedLeaves, PyTreeDef]:
        return self.function.trace_fwd(self.args, self.out_tree, self.out_avals)


class custom_vjp:
    """A function with a user-given VJP (JAX's jax.custom_vjp): `defvjp(fwd, bwd)` with
    `fwd(*args) -> (output, residuals)` and `bwd(*nondiff_args, residuals, cotangent)` ->
    a tuple with a cotangent (or None: zero) per differentiable argument."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
               optimize_remat: bool = False) -> None:
        if symbolic_zeros:
            raise NotImplementedError("custom_vjp.defvjp(symbolic_zeros=True) is not supported: cotangents are "
                                      "always arrays (zeros where an output is not used)")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = _name(self.fun)
        if self.fwd is None or self.bwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        args = _resolve_kwargs(self.fun, args, kwargs)
        if current_trace() is None:
            return self.fun(*args)
        a = Arguments.of(f"custom_vjp function {name}", args, self.nondiff_argnums)
        primal = trace_leaves(lambda *leaves: self.fun(*a.merged(leaves)), a.avals, a.weak, f"custom_vjp_{name}")
        fwd, res_tree = (None, None) if id(self) in _being_traced() else self.trace_fwd(
            a, primal.out_tree, primal.out_avals)
        if fwd is not None:
            add_parameters(primal, fwd.captures)
        record = CustomVjpCall(self, a, primal.out_tree, primal.out_avals, len(primal.captures), fwd, res_tree)
        operands = a.leaves + primal.captures + (fwd.captures if fwd is not None else [])
        return tree_unflatten(primal.out_tree, emit_call(primal, operands, record))

    def trace_fwd(self, a: Arguments, out_tree: PyTreeDef, out_avals: list[ArrayShape]
                  ) -> tuple[TracedLeaves, PyTreeDef]:
        assert self.fwd is not None
        fwd, name = self.fwd, _name(self.fun)
        what = f"Custom VJP fwd rule {_name(fwd)} for function {name}"
        trees: list[PyTreeDef] = []

        def flat_fwd(*leaves: Any) -> list[Any]:
            primal_out, residuals = _pair(what, fwd(*a.merged(leaves)))
            res_leaves, res_tree = tree_flatten(residuals)
            for leaf in res_leaves:
                if not isinstance(leaf, Tracer):
                    argument_value(f"{what}: a residual", leaf)
            trees.append(res_tree)
            return _check_primal_out(what, primal_out, out_tree, out_avals) + res_leaves

        functions = _being_traced()
        functions.add(id(self))
        try:
            traced = trace_leaves(flat_fwd, a.avals, a.weak, f"custom_vjp_fwd_{name}")
        finally:
            functions.discard(id(self))
        return traced, trees[0]

    def cotangents(self, call: CustomVjpCall, residuals: Any, out_cotangent: Any) -> list[Any]:
        """bwd's cotangent of each argument leaf (None: zero), its structure checked."""
        assert self.bwd is not None
        name = _name(self.fun)
        result = self.bwd(*call.args.nondiff_values, residuals, out_cotangent)
        n_args = len(call.args.tree.children)
        if not isinstance(result, (tuple, list)) or len(result) != n_args:
            got = f"a {type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list))
                                                  else "")
            raise TypeError(f"Custom VJP bwd rule {_name(self.bwd)} for function {name} must produce a tuple of "
                            f"length equal to the number of differentiable arguments of the primal function "
                            f"({n_args}), with a cotangent (or None) for each; got {got}")
        what = f"Custom VJP bwd rule {_name(self.bwd)} for function {name}"
        leaves = leaves_allowing_none(f"{what} must produce an output with the structure of the primal "
                                      "function's arguments", tuple(result), call.args.tree)
        return [None if ct is None or not v.dtype.is_float else like(f"{what}: cotangent of argument leaf {i}", ct, v)
                for i, (ct, v) in enumerate(zip(leaves, call.args.avals))]
