"""`jit(fn, polymorphic_shapes=...)`: one trace with symbolic sizes, one compile per bucket.

The function is traced once per argument structure (dtypes, static arguments, the sizes
that are not symbolic) with parameters whose dims are the specs' DimExprs, into a
*symbolic* module that is never compiled as it is. A call binds the symbols from its
arguments' shapes (shape_poly.PolySpecs.bind: errors name the argument, axis and dimension
before native code runs), picks each symbol's bucket (the size the code is padded to),
and compiles, once per bucket, the static module that `dynamic_padder.pad_to_bounds`
makes of the symbolic one: masks keep the padding out of reductions, contractions and
scans, and the actual sizes are extra s32[] parameters. The arguments are copied into
bucket-sized buffers (zero padding), and each output is sliced to its actual size.

`PYXLA_LOG_COMPILES=1` logs each trace and each bucket compile.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hlo.dims import Dim, InconclusiveDimensionOperation
from ..hlo.printer import print_module
from .jit import Compiled, Jitted, Lowered
from .pytree import tree_unflatten
from .shape_poly import (
    PolySpecs,
    check_size_buckets,
    choose_buckets,
    register_dimension_sources,
    run_padded,
)
from .tracing import Trace, Tracer

_FORWARDING = frozenset({"public", "method", "wrapper", "_reshape", "_transpose", "_getitem"})
_PYXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# NumPy and the standard library are not the user's code, though pyxla calls into them.
_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(np.__file__)), os.path.dirname(os.path.abspath(os.__file__)))


@dataclass
class BucketExecutable:
    """The compiled code of one bucket, and how its parameters and results are shaped."""
    bounds: dict[str, int]
    compiled: Compiled
    symbols: tuple[str, ...]
    param_shapes: list[tuple[int, ...]]
    output_dims: list[tuple[Dim, ...]]
    calls: int = field(default=0)


class SymbolicLowered(Lowered):
    """The traced module of a PolymorphicFunction: symbolic sizes, never compiled as it is."""

    def compile(self, constant_parameters: tuple[int, ...] = ()) -> Compiled:
        raise NotImplementedError(
            "this module has symbolic sizes and compiles only per size bucket: call the function, or use "
            "bucket_executable(*args) for the compiled bucket of given arguments")


@dataclass
class _Traced:
    lowered: Lowered
    specs: list
    bucket_cache: dict[tuple, BucketExecutable] = field(default_factory=dict)


class PolymorphicFunction:
    """What `jit` returns when given `polymorphic_shapes`: callable like a jitted function.

    Introspection: `trace_count` (traces made), `compile_count` (bucket compiles),
    `buckets()` (the bounds of each bucket compiled), `lower(*args)` (the symbolic module),
    `bucket_executable(*args)` (the bucket a call would run)."""

    def __init__(self, fn: Callable, polymorphic_shapes: Sequence[str | None] | str,
                 shape_constraints: Sequence[str] = (), size_buckets: Mapping[str, Any] | None = None, *,
                 static_argnums=(), static_argnames=(), donate_argnums=(), backend: str | None = None):
        if donate_argnums:
            raise NotImplementedError("donate_argnums with polymorphic_shapes: the arguments are copied into "
                                      "bucket-sized buffers, so there is nothing to donate")
        if isinstance(shape_constraints, str):
            shape_constraints = (shape_constraints,)
        self._jitted = Jitted(fn, static_argnums, static_argnames, (), backend)
        self.fn = fn
        self.name = self._jitted.name
        self.specs = PolySpecs(polymorphic_shapes, tuple(shape_constraints))
        self.size_buckets = check_size_buckets(size_buckets or {}, self.specs.symbols)
        self._traces: dict[tuple, _Traced] = {}
        self._fast_cache: dict[tuple, tuple] = {}   # (type, shape, dtype) per positional array
        self._arrays_only = not self._jitted.static_argnums and not self._jitted.static_argnames
        self.compile_count = 0
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    @property
    def trace_count(self) -> int:
        return self._jitted.trace_count

    def buckets(self) -> list[dict[str, int]]:
        """The bounds of every bucket compiled so far, in order of compilation."""
        return [dict(b.bounds) for t in self._traces.values() for b in t.bucket_cache.values()]

    # --- the steps of a call ---------------------------------------------------------------
    def _arguments(self, args: tuple, kwargs: dict):
        static_key, leaves, in_tree = self._jitted._split_args(args, kwargs)
        positional = in_tree.children[0].children
        static = self._jitted.static_argnums
        positions = [i for i in range(len(args)) if i not in static][:len(positional)]
        specs = self.specs.leaf_specs([t.num_leaves for t in positional], positions)
        specs += [None] * (len(leaves) - len(specs))
        shapes = [a.shape for a, _ in leaves]
        values = self.specs.bind(specs, shapes)
        return static_key, leaves, in_tree, specs, values

    def _traced(self, static_key, leaves, in_tree, specs) -> _Traced:
        sym_shapes = [self.specs.symbolic_shape(s, a.shape) for s, (a, _) in zip(specs, leaves)]
        key = (in_tree, static_key, tuple((a.dtype.name, weak, shape) for (a, weak), shape in zip(leaves, sym_shapes)))
        traced = self._traces.get(key)
        if traced is None:
            if os.environ.get("PYXLA_LOG_COMPILES"):
                shown = ", ".join(f"({', '.join(str(d) for d in s)})" for s in sym_shapes)
                print(f"pyxla: tracing {self.__name__} with polymorphic shapes {shown}", file=sys.stderr)

            def on_parameters(trace: Trace, params: list[Tracer]) -> None:
                register_dimension_sources(trace, params)

            try:
                lowered = self._jitted._trace(static_key, leaves, in_tree, sym_shapes, on_parameters)
            except InconclusiveDimensionOperation as e:
                raise InconclusiveDimensionOperation(_with_origin(str(e), e.__traceback__)) from None
            symbolic = SymbolicLowered(self._jitted, lowered.module, lowered.in_tree, lowered.out_tree,
                                       lowered.static_key, lowered.trace_seconds)
            traced = self._traces[key] = _Traced(symbolic, specs)
        return traced

    def _bucket(self, traced: _Traced, values: dict[str, int]) -> BucketExecutable:
        bounds = choose_buckets(values, self.specs.symbols, self.size_buckets)
        key = tuple(sorted(bounds.items()))
        entry = traced.bucket_cache.get(key)
        if entry is None:
            if os.environ.get("PYXLA_LOG_COMPILES"):
                shown = ", ".join(f"{n}<={bounds[n]}" for n in sorted(bounds)) or "(static)"
                sizes = ", ".join(f"{n}={values[n]}" for n in sorted(values))
                print(f"pyxla: compiling {self.__name__} for bucket {shown} (size {sizes})", file=sys.stderr)
            entry = self._compile_bucket(traced.lowered, bounds)
            traced.bucket_cache[key] = entry
            self.compile_count += 1
        return entry

    def _compile_bucket(self, lowered: Lowered, bounds: dict[str, int]) -> BucketExecutable:
        from ..passes.dynamic_padder import pad_to_bounds
        start = time.perf_counter()
        padded = pad_to_bounds(lowered.module, bounds)
        static = Lowered(self._jitted, padded.module, lowered.in_tree, lowered.out_tree, lowered.static_key,
                         lowered.trace_seconds + time.perf_counter() - start)
        compiled = static.compile()
        entry = padded.module.entry
        assert entry is not None
        params = entry.parameters
        n_orig = len(params) - len(padded.symbols)
        param_shapes = [tuple(p.array_shape.dims) for p in params[:n_orig]]
        return BucketExecutable(dict(bounds), compiled, tuple(padded.symbols), param_shapes,
                                [tuple(d) for d in padded.output_dims])

    def bucket_executable(self, *args, **kwargs) -> BucketExecutable:
        """The compiled bucket a call with these arguments runs (compiled now if new)."""
        static_key, leaves, in_tree, specs, values = self._arguments(args, kwargs)
        return self._bucket(self._traced(static_key, leaves, in_tree, specs), values)

    def lower(self, *args, **kwargs) -> Lowered:
        """The symbolic module traced for arguments like these (its text shows `?`/`<=N`)."""
        static_key, leaves, in_tree, specs, _ = self._arguments(args, kwargs)
        return self._traced(static_key, leaves, in_tree, specs).lowered

    def __call__(self, *args, **kwargs) -> Any:
        # Fast path: positional NumPy arrays of shapes seen before: one dict lookup gives
        # the bucket and the sizes, as jit's signature cache does.
        fast_key = None
        if not kwargs and self._arrays_only:
            try:
                fast_key = tuple([(type(a), a.shape, a.dtype) for a in args])
            except AttributeError:
                pass
            else:
                hit = self._fast_cache.get(fast_key)
                if hit is not None:
                    return self._run(hit[0], hit[1], hit[2], args)
        from .tracing import current_trace
        if current_trace() is not None:
            return self.fn(*args, **kwargs)   # inside another trace: inlined, as jit does
        static_key, leaves, in_tree, specs, values = self._arguments(args, kwargs)
        traced = self._traced(static_key, leaves, in_tree, specs)
        entry = self._bucket(traced, values)
        if fast_key is not None and all(type(a) is np.ndarray and a.dtype.isnative for a in args):
            self._fast_cache[fast_key] = (entry, values, traced.lowered.out_tree)
        return self._run(entry, values, traced.lowered.out_tree, [a for a, _ in leaves])

    def _run(self, entry: BucketExecutable, values: dict[str, int], out_tree, leaves: Sequence[np.ndarray]) -> Any:
        entry.calls += 1
        outs = run_padded(entry.compiled.executable.run_flat, leaves, entry.param_shapes, entry.symbols,
                          entry.output_dims, values)
        return outs[0] if out_tree.kind == "leaf" else tree_unflatten(out_tree, outs)

    def as_text(self, *args, **kwargs) -> str:
        return print_module(self.lower(*args, **kwargs).module)


def _with_origin(message: str, tb) -> str:
    """`message` with the pyxla function the user called and the user's line that called it:
    the innermost user frame of the traceback and the pyxla frame right after it."""
    frames = traceback.extract_tb(tb)
    user_index = None
    for i, frame in enumerate(frames):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_PYXLA_DIR) and not path.startswith(_LIBRARY_DIRS):
            user_index = i
    if user_index is None:
        return message
    user = frames[user_index]
    # the pyxla function the user called: past the wrappers that only forward the call
    inner = next((f for f in frames[user_index + 1:] if f.name not in _FORWARDING), None)
    op = ""
    if inner is not None:
        module = os.path.relpath(inner.filename, os.path.dirname(_PYXLA_DIR))
        if not module.endswith("hlo/dims.py"):
            op = f" in {inner.name} ({module})"
        else:
            op = " in a comparison or arithmetic on a symbolic size"
    return f"{message}{op}, called at {user.filename}:{user.lineno}: {(user.line or '').strip()}"
