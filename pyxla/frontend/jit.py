"""`pyxla.jit`: trace a Python function once per signature, compile it, cache it.

The cache key is the tree structure of the dynamic arguments, each leaf's shape, dtype
and weak-type flag (Python scalars are weak), and the values of the static arguments.
A call with a known key costs a dictionary lookup and the executable's call.
`PYXLA_LOG_COMPILES=1` logs every trace with the reason the cache missed.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from ..backends import get_backend
from ..errors import ArgumentError, TraceError
from ..hlo.module import HloModule
from ..hlo.printer import print_module
from ..hlo.shape import ArrayShape
from ..hlo.types import from_numpy_dtype
from ..hlo.verifier import verify_module
from ..runtime.analysis import cost_analysis, memory_analysis
from .pytree import PyTreeDef, tree_flatten, tree_unflatten
from .tracing import Trace, Tracer

_DEFAULTS = {"backend": "interpreter"}


def set_default_backend(name: str) -> None:
    """The backend `jit` uses when none is named."""
    get_backend(name)   # fails now for an unknown name
    _DEFAULTS["backend"] = name


def default_backend() -> str:
    return _DEFAULTS["backend"]


@dataclass(frozen=True)
class LeafSignature:
    shape: tuple[int, ...]
    dtype: str
    weak: bool

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}" + (" (weak)" if self.weak else "")


def _leaf_value(x: Any) -> tuple[np.ndarray, bool]:
    """An argument leaf as an array, and whether it is weakly typed (a Python scalar)."""
    if isinstance(x, Tracer):
        raise TraceError("a traced value was passed to a jitted function from outside any trace")
    if isinstance(x, (int, float)) and not isinstance(x, (bool, np.generic)):
        return np.asarray(x), True
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind in "USVOMmc":
        raise ArgumentError(f"a {type(x).__name__} ({arr.dtype}) is not an array pyxla can compile for")
    return arr, False


def _normalize_static(index: int | Iterable[int] | None) -> tuple[int, ...]:
    if index is None:
        return ()
    return (index,) if isinstance(index, int) else tuple(index)


class Compiled:
    """A compiled executable for one signature: callable, with its module and analyses."""

    def __init__(self, module: HloModule, executable, in_tree: PyTreeDef, out_tree: PyTreeDef,
                 static_key: tuple, split_args: Callable, compile_seconds: float):
        self.module = module
        self.executable = executable
        self.in_tree = in_tree
        self.out_tree = out_tree
        self._static_key = static_key
        self._split = split_args
        self.compile_seconds = compile_seconds

    def as_text(self) -> str:
        """The module as it runs (no optimisation passes exist yet, so as traced)."""
        return print_module(self.module)

    def cost_analysis(self) -> dict:
        return cost_analysis(self.module)

    def memory_analysis(self) -> dict:
        return memory_analysis(self.module)

    def call_flat(self, leaves: list[np.ndarray]) -> Any:
        result = self.executable(*leaves)
        outs = _flatten_value(result) if self.out_tree.num_leaves != 1 or self.out_tree.kind != "leaf" else [result]
        return tree_unflatten(self.out_tree, outs)

    def __call__(self, *args, **kwargs) -> Any:
        static_key, leaves, in_tree = self._split(args, kwargs)
        if static_key != self._static_key or in_tree != self.in_tree:
            raise ArgumentError("this compiled function was built for other static arguments or "
                                f"another argument structure ({self.in_tree})")
        return self.call_flat([leaf for leaf, _ in leaves])


def _flatten_value(value) -> list:
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(_flatten_value(v))
        return out
    return [value]


class Lowered:
    """A traced module for one signature, before compilation."""

    def __init__(self, jitted: "Jitted", module: HloModule, in_tree, out_tree, static_key, trace_seconds):
        self._jitted = jitted
        self.module = module
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.static_key = static_key
        self.trace_seconds = trace_seconds

    def as_text(self) -> str:
        return print_module(self.module)

    def compile(self) -> Compiled:
        start = time.perf_counter()
        executable = get_backend(self._jitted.backend).compile(self.module)
        return Compiled(self.module, executable, self.in_tree, self.out_tree, self.static_key,
                        self._jitted._split_args, time.perf_counter() - start)


class Jitted:
    def __init__(self, fn: Callable, static_argnums=(), static_argnames=(), donate_argnums=(),
                 backend: str | None = None):
        self.fn = fn
        self.backend = backend or default_backend()
        get_backend(self.backend)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters)
        self.static_argnums = set(_normalize_static(static_argnums))
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
        for name in names:
            if name in params:
                self.static_argnums.add(params.index(name))
        self.static_argnames = set(names) | {params[i] for i in self.static_argnums if i < len(params)}
        self.donate_argnums = _normalize_static(donate_argnums)
        self._cache: dict[tuple, Compiled] = {}
        self.trace_count = 0
        functools.update_wrapper(self, fn)

    # --- arguments -------------------------------------------------------------------------
    def _split_args(self, args: tuple, kwargs: dict):
        """(static key, [(leaf array, weak)], tree of the dynamic arguments)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{self.fn.__name__}(): {e}") from None
        bound.apply_defaults()
        static, dynamic = [], {}
        for name, value in bound.arguments.items():
            if name in self.static_argnames:
                try:
                    hash(value)
                except TypeError:
                    raise ArgumentError(f"static argument {name!r} of {self.fn.__name__} must be hashable, "
                                        f"got {type(value).__name__}") from None
                static.append((name, value))
            else:
                dynamic[name] = value
        leaves, tree = tree_flatten(list(dynamic.values()))
        return tuple(static), [_leaf_value(x) for x in leaves], (tuple(dynamic), tree)

    def _key(self, static_key, leaves, in_tree) -> tuple:
        sig = tuple(LeafSignature(a.shape, a.dtype.name, weak) for a, weak in leaves)
        return (in_tree, sig, static_key)

    # --- tracing -----------------------------------------------------------------------------
    def _trace(self, static_key, leaves, in_tree) -> Lowered:
        start = time.perf_counter()
        self.trace_count += 1
        names, tree = in_tree
        trace = Trace(self.fn.__name__)
        with trace:
            tracers = [trace.new_parameter(ArrayShape(from_numpy_dtype(a.dtype), a.shape), f"arg{i}", weak)
                       for i, (a, weak) in enumerate(leaves)]
            dyn_values = tree_unflatten(tree, tracers)
            call_args = dict(zip(names, dyn_values))
            call_args.update(dict(static_key))
            args, kwargs = _call_arguments(self.signature, call_args)
            out = self.fn(*args, **kwargs)
            out_leaves, out_tree = tree_flatten(out)
            lifted = [trace.lift(x) for x in out_leaves]
        if out_tree.kind == "leaf":
            root = lifted[0].instr
        else:
            root = trace.builder.tuple(*[t.instr for t in lifted])
        module = trace.builder.module(root, name=f"jit_{self.fn.__name__}")
        module.donated_parameters = self.donate_argnums
        verify_module(module)
        return Lowered(self, module, in_tree, out_tree, static_key, time.perf_counter() - start)

    def lower(self, *args, **kwargs) -> Lowered:
        static_key, leaves, in_tree = self._split_args(args, kwargs)
        return self._trace(static_key, leaves, in_tree)

    def __call__(self, *args, **kwargs) -> Any:
        static_key, leaves, in_tree = self._split_args(args, kwargs)
        key = self._key(static_key, leaves, in_tree)
        compiled = self._cache.get(key)
        if compiled is None:
            if os.environ.get("PYXLA_LOG_COMPILES"):
                print(f"pyxla: compiling {self.fn.__name__}: {self._miss_reason(key)}", file=sys.stderr)
            compiled = self._trace(static_key, leaves, in_tree).compile()
            self._cache[key] = compiled
        return compiled.call_flat([a for a, _ in leaves])

    def _miss_reason(self, key) -> str:
        in_tree, sig, static_key = key
        if not self._cache:
            return "first call"
        for old_tree, old_sig, old_static in self._cache:
            if old_tree == in_tree and old_static == static_key and len(old_sig) == len(sig):
                diffs = [f"argument leaf {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(old_sig, sig)) if a != b]
                return "new signature: " + "; ".join(diffs)
        for old_tree, old_sig, old_static in self._cache:
            if old_tree == in_tree and old_static != static_key:
                return f"new static arguments: {dict(old_static)} -> {dict(static_key)}"
        return f"new argument structure: {in_tree[1]}"

    def clear_cache(self) -> None:
        self._cache.clear()


def _call_arguments(signature: inspect.Signature, values: dict) -> tuple[list, dict]:
    """Positional and keyword arguments for `values` keyed by parameter name."""
    args, kwargs = [], {}
    for name, param in signature.parameters.items():
        if name not in values:
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(values[name])
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(values[name])
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[name] = values[name]
        else:
            args.append(values[name])
    return args, kwargs


def jit(fn: Callable | None = None, *, static_argnums=(), static_argnames=(), donate_argnums=(),
        backend: str | None = None):
    """Compile `fn` for each new signature of its arguments; usable as @jit or @jit(...)."""
    if fn is None:
        return lambda f: Jitted(f, static_argnums, static_argnames, donate_argnums, backend)
    return Jitted(fn, static_argnums, static_argnames, donate_argnums, backend)
