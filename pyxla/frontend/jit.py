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
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import get_backend
from ..compiler import CompiledModule, compile_module
from ..errors import ArgumentError, TraceError
from ..hlo.cost_analysis import cost_analysis, memory_analysis
from ..hlo.module import HloModule
from ..hlo.printer import print_module
from ..hlo.shape import ArrayShape
from ..hlo.types import ELEMENT_TYPES, from_numpy_dtype
from ..hlo.verifier import verify_module
from .pytree import PyTreeDef, tree_flatten, tree_unflatten
from .tracing import Trace, Tracer, current_trace

_DEFAULTS = {"backend": "cpu"}
_ELEMENT_DTYPES = frozenset(t.np_dtype for t in ELEMENT_TYPES.values())


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


def _leaf_value(x: Any, device_arrays: bool = False) -> tuple[np.ndarray, bool]:
    """An argument leaf as an array, and whether it is weakly typed (a Python scalar);
    with `device_arrays` (a GPU backend), a GPU backend's array as it is."""
    if isinstance(x, Tracer):
        raise TraceError("a traced value was passed to a jitted function from outside any trace")
    if isinstance(x, (int, float)) and not isinstance(x, (bool, np.generic)):
        return np.asarray(x), True
    if device_arrays and getattr(x, "__pyxla_device_array__", False):
        return x, False   # (shape, dtype): the GPU executable takes it without a copy
    arr = np.asarray(x)
    if not arr.dtype.isnative:
        # ">f4" holds the same values as float32 in other bytes: the signature and the
        # compiled code know only the machine's order, so the values are reordered here.
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # bfloat16 and ml_dtypes' 8-/4-bit floats and 4-/2-bit integers are NumPy "V" (void)
    # kinds: ask the element types, not the kind letter.
    if arr.dtype == object or (arr.dtype.kind in "USVOMmc" and arr.dtype not in _ELEMENT_DTYPES):
        raise ArgumentError(f"a {type(x).__name__} ({arr.dtype}) is not an array pyxla can compile for")
    return arr, False


def _sequence_leaves(dyn_args: list, kwargs: dict) -> dict[int, tuple[str, type]]:
    """id of each parameter traced for an element of a list or tuple argument -> (the
    argument, its type): an op given that list meets its elements one by one in NumPy, and
    the error should name the list, not one traced scalar of it."""
    found: dict[int, tuple[str, type]] = {}
    named = [(f"argument {i}", a) for i, a in enumerate(dyn_args)] + [(f"argument {k!r}", a) for k, a in kwargs.items()]
    for name, arg in named:
        if isinstance(arg, (list, tuple)):
            leaves, _ = tree_flatten(arg)
            for leaf in leaves:
                if isinstance(leaf, Tracer):
                    found[id(leaf.instr)] = (f"{name} (a {type(arg).__name__} of {len(leaves)} traced values)",
                                             type(arg))
    return found


def _normalize_static(index: int | Iterable[int] | None) -> tuple[int, ...]:
    if index is None:
        return ()
    return (index,) if isinstance(index, int) else tuple(index)


class Compiled:
    """A compiled executable for one signature: callable, with its module and analyses."""

    def __init__(self, compiled: CompiledModule, executable, in_tree: PyTreeDef, out_tree: PyTreeDef,
                 static_key: tuple, split_args: Callable, compile_seconds: float):
        self.compiled = compiled
        self.module = compiled.module
        self.executable = executable
        self.in_tree = in_tree
        self.out_tree = out_tree
        self._static_key = static_key
        self._split = split_args
        self.compile_seconds = compile_seconds
        self._single_output = out_tree.kind == "leaf"
        # a GPU backend's results stay on the device (DeviceArrays) unless converted
        self._run = getattr(executable, "run_device", executable.run_unchecked)
        self._run_checked = getattr(executable, "run_device", executable.run_flat)
        self.fast_call = self._fast_call_path()

    def _fast_call_path(self) -> Callable[[tuple], Any]:
        """`call(arrays)` for a tuple of C-contiguous NumPy arrays, one per parameter, of
        this signature: the shortest path the executable offers."""
        ex = self.executable
        run = self._run
        if getattr(ex, "params_are_row_major", False):
            run = ex.run_physical    # the arrays' own bytes are the parameters' layouts
        if self._single_output:
            return lambda arrays: run(arrays)[0]
        return self.call_flat if run == ex.run_unchecked else (
            lambda arrays: tree_unflatten(self.out_tree, run(arrays)))

    def as_text(self) -> str:
        """The module as it runs: optimised, fused and scheduled."""
        return print_module(self.module)

    @property
    def stage_seconds(self) -> dict[str, float]:
        """Where compile time went: tracing, passes, buffer assignment, LLVM stages."""
        return self.compiled.stage_seconds

    def cost_analysis(self) -> dict:
        """Flops, transcendentals and bytes accessed, in total and per kernel."""
        return cost_analysis(self.module)

    def memory_analysis(self) -> dict:
        """Argument, output, constant and temp-arena bytes from the buffer assignment."""
        return memory_analysis(self.module, self.compiled.buffers)

    def call_flat(self, leaves: list[np.ndarray]) -> Any:
        """Run on argument leaves that match this signature (shapes and dtypes already keyed)."""
        outs = self._run(leaves)
        if self._single_output:
            return outs[0]
        return tree_unflatten(self.out_tree, outs)

    def __call__(self, *args, **kwargs) -> Any:
        static_key, leaves, in_tree = self._split(args, kwargs)
        if static_key != self._static_key or in_tree != self.in_tree:
            raise ArgumentError("this compiled function was built for other static arguments or "
                                f"another argument structure ({self.in_tree})")
        arrays = [leaf for leaf, _ in leaves]
        outs = self._run_checked(arrays)   # checks every leaf against its parameter
        return outs[0] if self._single_output else tree_unflatten(self.out_tree, outs)


class Lowered:
    """A traced module for one signature, before compilation."""

    def __init__(self, jitted: Jitted, module: HloModule, in_tree, out_tree, static_key, trace_seconds):
        self._jitted = jitted
        self.module = module
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.static_key = static_key
        self.trace_seconds = trace_seconds

    def as_text(self) -> str:
        return print_module(self.module)

    def compile(self, constant_parameters: tuple[int, ...] = ()) -> Compiled:
        """Compile the module. `constant_parameters`: entry parameters whose argument the
        caller passes unchanged on every call (the backend may then take it in a form of its
        own: `executable.prepare_argument`)."""
        start = time.perf_counter()
        backend = get_backend(self._jitted.backend)
        module = self.module.clone()
        backend.prepare(module)
        compiled = compile_module(module, donated=self.module.donated_parameters)
        placement = {} if self._jitted.device is None else {"placement": self._jitted.device}
        executable = backend.compile(compiled.module, compiled=compiled, donated=self.module.donated_parameters,
                                     constant_parameters=constant_parameters, **placement)
        compiled.stage_seconds = {"trace": self.trace_seconds, **compiled.stage_seconds}
        if "compile" in os.environ.get("PYXLA_DEBUG", "").split(","):
            stages = "  ".join(f"{stage} {seconds * 1e3:.1f} ms" for stage, seconds in compiled.stage_seconds.items())
            print(f"pyxla compile {self.module.name}: {stages}", file=sys.stderr)
        return Compiled(compiled, executable, self.in_tree, self.out_tree, self.static_key,
                        self._jitted._split_args, time.perf_counter() - start)


class Jitted:
    def __init__(self, fn: Callable, static_argnums=(), static_argnames=(), donate_argnums=(),
                 backend: str | None = None, device: str | None = None):
        self.fn = fn
        self.backend = backend or default_backend()
        get_backend(self.backend)
        if device is not None and not self.backend.startswith("gpu"):
            raise ArgumentError(f"device={device!r} places work between host and device on the gpu backends, "
                                f"not on {self.backend!r}")
        self.device = device   # a GPU backend's placement: "auto", "device" or "host"
        self.signature = inspect.signature(fn)
        self.name = _identifier(getattr(fn, "__name__", "fn"))
        self.static_argnums = set(_normalize_static(static_argnums))
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
        positional = [n for n, p in self.signature.parameters.items()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for name in names:
            if name in positional:
                self.static_argnums.add(positional.index(name))
        self.static_argnames = set(names) | {positional[i] for i in self.static_argnums if i < len(positional)}
        self.donate_argnums = _normalize_static(donate_argnums)
        self._cache: dict[tuple, Compiled] = {}
        self._fast_cache: dict[tuple, Compiled] = {}   # (type, shape, strides, dtype) per positional array
        self._positional_arrays_only = not self.static_argnums and not self.static_argnames
        self.trace_count = 0
        functools.update_wrapper(self, fn, updated=())   # not fn.__dict__: a jitted fn has caches of its own

    # --- arguments -------------------------------------------------------------------------
    def _split_args(self, args: tuple, kwargs: dict):
        """(static key, [(leaf array, weak)], structure of the dynamic arguments).

        Positional arguments at `static_argnums` and keyword arguments named in
        `static_argnames` (or naming a parameter at a static position) are static: hashed
        into the cache key and passed to the function as they are.
        """
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{self.fn.__name__}(): {e}") from None
        static = []
        dyn_args = []
        for i, value in enumerate(args):
            if i in self.static_argnums:
                static.append((i, _hashable(self.fn.__name__, i, value)))
            else:
                dyn_args.append(value)
        dyn_kwargs = {}
        for name, value in sorted(kwargs.items()):
            if name in self.static_argnames:
                static.append((name, _hashable(self.fn.__name__, name, value)))
            else:
                dyn_kwargs[name] = value
        leaves, tree = tree_flatten((dyn_args, dyn_kwargs))
        on_gpu = self.backend.startswith("gpu")
        return tuple(static), [_leaf_value(x, on_gpu) for x in leaves], tree

    def _key(self, static_key, leaves, in_tree) -> tuple:
        sig = tuple(LeafSignature(a.shape, a.dtype.name, weak) for a, weak in leaves)
        return (in_tree, sig, static_key)

    # --- tracing -----------------------------------------------------------------------------
    def _trace(self, static_key, leaves, in_tree, shapes: list[tuple] | None = None,
               on_parameters: Callable[[Trace, list[Tracer]], None] | None = None) -> Lowered:
        """Trace the function on parameters shaped like `leaves` (or with dims `shapes`,
        which may be symbolic; `on_parameters` then sees the parameters before the call)."""
        start = time.perf_counter()
        self.trace_count += 1
        trace = Trace(self.name)
        with trace:
            tracers = [trace.new_parameter(ArrayShape(from_numpy_dtype(a.dtype), a.shape if shapes is None
                                                      else shapes[i]), f"arg{i}", weak)
                       for i, (a, weak) in enumerate(leaves)]
            if on_parameters is not None:
                on_parameters(trace, tracers)
            dyn_args, kwargs = tree_unflatten(in_tree, tracers)
            trace.sequence_leaves = _sequence_leaves(dyn_args, kwargs)
            args = _merge_static(dyn_args, static_key)
            kwargs.update({k: v for k, v in static_key if isinstance(k, str)})
            out = self.fn(*args, **kwargs)
            out_leaves, out_tree = tree_flatten(out)
            lifted = [trace.lift(x) for x in out_leaves]
        if out_tree.kind == "leaf":
            root = lifted[0].instr
        else:
            root = trace.builder.tuple(*[t.instr for t in lifted])
        module = trace.builder.module(root, name=f"jit_{self.name}")
        module.donated_parameters = self._donated_leaves(static_key, in_tree)
        verify_module(module)
        return Lowered(self, module, in_tree, out_tree, static_key, time.perf_counter() - start)

    def _donated_leaves(self, static_key, in_tree) -> tuple[int, ...]:
        """The parameter numbers of the leaves of the arguments at `donate_argnums`: an
        argument position counts the static arguments, a parameter number only leaves."""
        static_positions = {k for k, _ in static_key if isinstance(k, int)}
        arg_trees = in_tree.children[0].children
        donated, first, j = [], 0, 0
        for position in range(len(arg_trees) + len(static_positions)):
            if position in static_positions:
                continue
            if j >= len(arg_trees):
                break
            count = arg_trees[j].num_leaves
            if position in self.donate_argnums:
                donated.extend(range(first, first + count))
            first, j = first + count, j + 1
        return tuple(donated)

    def lower(self, *args, **kwargs) -> Lowered:
        static_key, leaves, in_tree = self._split_args(args, kwargs)
        return self._trace(static_key, leaves, in_tree)

    def __call__(self, *args, **kwargs) -> Any:
        # Fast path: positional C-contiguous NumPy arrays of a signature seen before: one dict
        # lookup, then the executable. The strides in the key tell contiguous arrays apart
        # from views of the same shape; the type keeps NumPy scalars and subclasses out.
        fast_key = None
        if not kwargs and self._positional_arrays_only:
            try:
                fast_key = tuple([(type(a), a.shape, a.strides, a.dtype) for a in args])
            except AttributeError:
                pass
            else:
                compiled = self._fast_cache.get(fast_key)
                if compiled is not None:
                    return compiled.fast_call(args)
        if current_trace() is not None:
            # Called while another function is traced (inside jit, grad, a loop body): its
            # instructions go into that trace, as XLA inlines a nested call. (Arguments that
            # are all NumPy arrays of a known signature took the fast path above: a constant.)
            return self.fn(*args, **kwargs)
        static_key, leaves, in_tree = self._split_args(args, kwargs)
        key = self._key(static_key, leaves, in_tree)
        compiled = self._cache.get(key)
        if compiled is None:
            if os.environ.get("PYXLA_LOG_COMPILES"):
                print(f"pyxla: compiling {self.fn.__name__}: {self._miss_reason(key)}", file=sys.stderr)
            compiled = self._trace(static_key, leaves, in_tree).compile()
            self._cache[key] = compiled
        if fast_key is not None and all(type(a) is np.ndarray and a.flags.c_contiguous for a in args):
            self._fast_cache[fast_key] = compiled
        return compiled.call_flat([a for a, _ in leaves])

    def _miss_reason(self, key) -> str:
        in_tree, sig, static_key = key
        if not self._cache:
            return "first call"
        for old_tree, old_sig, old_static in self._cache:
            if old_tree == in_tree and old_static == static_key and len(old_sig) == len(sig):
                diffs = [f"argument leaf {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(old_sig, sig)) if a != b]
                return "new signature: " + "; ".join(diffs)
        for old_tree, _old_sig, old_static in self._cache:
            if old_tree == in_tree and old_static != static_key:
                return f"new static arguments: {dict(old_static)} -> {dict(static_key)}"
        return f"new argument structure: {in_tree[1]}"

    def clear_cache(self) -> None:
        self._cache.clear()
        self._fast_cache.clear()


def _merge_static(dynamic: list, static_key: tuple) -> list:
    """Positional arguments with the static ones put back at their positions."""
    positions = dict((k, v) for k, v in static_key if isinstance(k, int))
    args, it = [], iter(dynamic)
    for i in range(len(dynamic) + len(positions)):
        args.append(positions[i] if i in positions else next(it))
    return args


def _hashable(fn_name: str, where, value):
    try:
        hash(value)
    except TypeError:
        what = f"argument {where}" if isinstance(where, int) else f"argument {where!r}"
        raise ArgumentError(f"static {what} of {fn_name} must be hashable, got {type(value).__name__}") from None
    return value


def _identifier(name: str) -> str:
    """A name HLO text can carry (`<lambda>` -> `lambda`)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "", name)
    return cleaned if cleaned and (cleaned[0].isalpha() or cleaned[0] == "_") else f"fn{cleaned}"


def jit(fn: Callable | None = None, *, static_argnums=(), static_argnames=(), donate_argnums=(),
        backend: str | None = None, polymorphic_shapes=None, shape_constraints=(), size_buckets=None,
        device: str | None = None):
    """Compile `fn` for each new signature of its arguments; usable as @jit or @jit(...).

    With `polymorphic_shapes` (one spec per positional argument, such as "b, 32", or None),
    `fn` is traced once with symbolic sizes and compiled once per size bucket: a
    `PolymorphicFunction` (docs/dynamic-shapes.md). `shape_constraints` ("b <= 512")
    bound the symbols; `size_buckets` ({"b": (64, 512)}) choose the buckets. On a GPU
    backend, `device` ("auto", "device" or "host") chooses where small work runs
    (docs/gpu-backend.md)."""
    if polymorphic_shapes is None:
        if shape_constraints or size_buckets:
            raise ArgumentError("shape_constraints and size_buckets need polymorphic_shapes")

        def make(f):
            return Jitted(f, static_argnums, static_argnames, donate_argnums, backend, device)
    else:
        if device is not None:
            raise ArgumentError("device= is not supported with polymorphic_shapes yet")
        from .polymorphic import PolymorphicFunction

        def make(f):
            return PolymorphicFunction(f, polymorphic_shapes, shape_constraints, size_buckets,
                                       static_argnums=static_argnums, static_argnames=static_argnames,
                                       donate_argnums=donate_argnums, backend=backend)
    return make if fn is None else make(fn)
