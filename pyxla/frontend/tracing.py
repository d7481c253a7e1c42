"""Tracing: Python code run on abstract arrays records HLO instructions.

A `Trace` owns an HloBuilder. While a trace is active (inside `jit`, or while a loop body
or reducer is being turned into a computation) every primitive called through `bind`
adds an instruction to the innermost trace and returns a `Tracer`: an abstract array with
a shape and a dtype but no values. With no trace active, `bind` runs the one primitive at
once on the reference evaluator and returns NumPy arrays, so the same code serves both
eager and compiled use.

A traced function may use values traced by an enclosing trace (a loop body closing over
an argument of the jitted function): those are *captured*, turned into extra parameters
of the inner computation, which the control-flow primitives pass in.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import ConcretizationError, ShapeError, TraceError
from ..hlo.builder import HloBuilder
from ..hlo.computation import HloComputation
from ..hlo.evaluator import EvalContext, evaluate_computation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape, Shape, TupleShape
from ..hlo.types import from_numpy_dtype

_PYXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_state = threading.local()


def _stack() -> list[Trace]:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current_trace() -> Trace | None:
    stack = _stack()
    return stack[-1] if stack else None


def user_source_location() -> tuple[str, int] | None:
    """The innermost stack frame outside pyxla's own files: where the user called us."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_PYXLA_DIR) and "importlib" not in filename:
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def where() -> str:
    loc = user_source_location()
    return f" (at {loc[0]}:{loc[1]})" if loc else ""


def _scope_names() -> list[str]:
    if not hasattr(_state, "scope_names"):
        _state.scope_names = []
    return _state.scope_names


@contextlib.contextmanager
def emission_scope(name: str | None = None, location: tuple[str, int] | None = None) -> Iterator[None]:
    """Instructions emitted inside get `name` in their op_name (`jit(f)/name/opcode`, nested
    scopes in order) and, where given, `location` as their source file and line instead of
    the caller's frame. Transformations that re-emit a traced program (pyxla.grad) use it
    so that each derived instruction points at the user's line it came from."""
    names = _scope_names()
    old_location = getattr(_state, "location", None)
    if name:
        names.append(name)
    if location is not None:
        _state.location = location
    try:
        yield
    finally:
        if name:
            names.pop()
        _state.location = old_location



class SequenceOperandError(TraceError, TypeError):
    """A Python list or tuple where an op wants an array. Traced values inside it (a list
    argument of a jitted function is a pytree: each number its own traced scalar) cannot be
    turned into an array by NumPy, so say that, as JAX's ops do, rather than fail on one
    element's conversion."""

    def __init__(self, shown: str, kind: type, opcode: str | None = None):
        self.shown, self.kind = shown, kind
        op = f"{opcode} " if opcode else ""
        super().__init__(
            f"{op}got {shown} of type {kind}, expected an array: a {kind.__name__} is not an array{where()}. "
            f"A {kind.__name__} passed to a jitted function is a pytree of traced scalars: convert it with "
            f"np.asarray(...) before the call, or stack its elements with pyxla.numpy.asarray inside.")

    @classmethod
    def of(cls, value: list | tuple) -> SequenceOperandError:
        shown = repr(value)
        return cls(shown if len(shown) <= 80 else shown[:77] + "...", type(value))


def _holds_tracer(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_tracer(v) for v in value)
    return isinstance(value, Tracer)


class Tracer:
    """An abstract array inside a trace: shape and dtype known, values not.

    `weak` marks a value that came from a Python scalar: in dtype promotion it adopts the
    other operand's type, as NumPy 2 does for Python scalars.

    Its operators, ndarray methods (`.sum()`, `.reshape()`, `.T`, ...), indexing, `.at` and
    NumPy's dispatch protocols are implemented by pyxla.numpy, which installs them
    (pyxla/numpy/array_methods.py); `import pyxla` does so.
    """

    __slots__ = ("instr", "trace", "weak")
    __array_priority__ = 1000   # NumPy defers `ndarray + tracer` to Tracer.__radd__

    def __init__(self, instr: HloInstruction, trace: Trace, weak: bool = False):
        self.instr = instr
        self.trace = trace
        self.weak = weak

    @property
    def aval(self) -> Shape:
        return self.instr.shape

    @property
    def shape(self) -> tuple[int, ...]:
        return self.instr.shape.dims

    @property
    def dtype(self) -> np.dtype:
        return self.instr.shape.dtype.np_dtype

    @property
    def ndim(self) -> int:
        return len(self.instr.shape.dims)

    @property
    def size(self) -> int:
        return self.instr.shape.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def _concrete(self, what: str):
        raise ConcretizationError(
            f"{what} needs a concrete value, but this is a traced array {self.instr.shape.to_text(False)} "
            f"(from %{self.instr.name}){where()}. Inside jit, use pyxla.lax.cond / while_loop / "
            "pyxla.numpy.where for value-dependent control flow, or mark the argument static "
            "with static_argnums.")

    def __bool__(self):
        self._concrete("Python control flow (bool())")

    def __int__(self):
        self._concrete("int()")

    def __float__(self):
        self._concrete("float()")

    def __index__(self):
        self._concrete("use as an index (__index__)")

    def __array__(self, dtype=None, copy=None):
        # an element of a list argument of jit meets NumPy when an op is given the list
        sequence = getattr(self.trace, "sequence_leaves", {}).get(id(self.instr))
        if sequence is not None:
            raise SequenceOperandError(*sequence)
        self._concrete("conversion to a NumPy array")

    def item(self, *args):
        self._concrete("item()")

    def tolist(self):
        self._concrete("tolist()")

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    def __setitem__(self, index, value):
        raise TypeError("traced arrays are immutable: instead of x[idx] = y, write x = x.at[idx].set(y)")

    def copy(self) -> Tracer:
        return self

    @property
    def real(self) -> Tracer:
        return self

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __hash__(self):
        raise TypeError("traced arrays are not hashable")

    def __repr__(self) -> str:
        return f"Tracer<{self.instr.shape.to_text(False)}>"


class Trace:
    def __init__(self, name: str, parent: Trace | None = None, allow_captures: bool = True):
        self.name = name
        self.parent = parent
        self.builder = HloBuilder(name)
        self.allow_captures = allow_captures
        self.captures: list[tuple[Any, Tracer]] = []   # (value of the enclosing trace, parameter here)
        self._captured: dict[int, Tracer] = {}
        self.num_parameters = 0
        # Instructions that stop gradients (lax.stop_gradient): copies that pyxla.grad and
        # friends treat as constants. One set per outermost trace, shared by the traces nested
        # in it, so the stops inside a loop body or branch are still known when autodiff
        # walks that computation.
        self.gradient_stops: set[HloInstruction] = parent.gradient_stops if parent is not None else set()
        root = self
        while root.parent is not None:
            root = root.parent
        self.op_prefix = f"jit({root.name})" if root is not self else f"jit({name})"

    def __enter__(self) -> Trace:
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        popped = _stack().pop()
        assert popped is self

    def owns(self, t: Tracer) -> bool:
        return t.trace is self

    def is_ancestor_of(self, t: Tracer) -> bool:
        trace = self.parent
        while trace is not None:
            if t.trace is trace:
                return True
            trace = trace.parent
        return False

    def new_parameter(self, shape: Shape, name: str | None = None, weak: bool = False) -> Tracer:
        if self.parent is not None:
            # A nested computation (loop body, reducer) ends up in the same module as its
            # parent, where instruction names must be unique: prefix its computation's name.
            name = f"{self.name}.{name or 'param'}"
        instr = self.builder.parameter(shape, name, number=self.num_parameters)
        self.num_parameters += 1
        return Tracer(instr, self, weak)

    def lift(self, value: Any) -> Tracer:
        """`value` as a Tracer of this trace: captured from an enclosing trace, or a constant."""
        if isinstance(value, Tracer):
            if value.trace is self:
                return value
            if self.is_ancestor_of(value):
                return self._capture(value)
            raise TraceError(f"a traced value {value!r} from a finished trace was used{where()}: "
                             "traced values must not escape the function being traced")
        if isinstance(value, (list, tuple)) and _holds_tracer(value):
            raise SequenceOperandError.of(value)
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TraceError(f"cannot use a {type(value).__name__} as an array{where()}")
        instr = self.builder.constant(arr)
        return Tracer(instr, self)

    def _capture(self, outer: Tracer) -> Tracer:
        if not self.allow_captures:
            raise TraceError(f"the function traced into {self.name} uses a value traced outside it "
                             f"({outer!r}){where()}; reducer and comparator functions must use only their arguments")
        key = id(outer)
        if key not in self._captured:
            inner = self.new_parameter(outer.aval, "captured", outer.weak)
            self.captures.append((outer, inner))
            self._captured[key] = inner
        return self._captured[key]

    def emit(self, opcode: str, operands: Sequence[Any], shape: Shape | None, attrs: dict) -> Tracer:
        try:
            instrs = [self.lift(o).instr for o in operands]
        except SequenceOperandError as e:
            raise SequenceOperandError(e.shown, e.kind, opcode) from None
        loc = getattr(_state, "location", None) or user_source_location()
        metadata = {"op_name": "/".join([self.op_prefix, *_scope_names(), opcode])}
        if loc:
            metadata["source_file"], metadata["source_line"] = loc
        try:
            instr = self.builder.op(opcode, *instrs, shape=shape, attrs={**attrs, "metadata": metadata})
        except ShapeError as e:
            shapes = ", ".join(i.shape.to_text(False) for i in instrs)
            raise TraceError(f"{opcode}({shapes}): {e}{where()}") from None
        return Tracer(instr, self)


def shape_of(value: Any) -> Shape:
    """The HLO shape of a concrete value or a tracer (a Shape stands for a value of it)."""
    if isinstance(value, Tracer):
        return value.aval
    if isinstance(value, Shape):
        return value
    if isinstance(value, tuple):
        return TupleShape(tuple(shape_of(v) for v in value))
    arr = np.asarray(value)
    return ArrayShape(from_numpy_dtype(arr.dtype), arr.shape)


def bind(opcode: str, *operands: Any, shape: Shape | None = None, unpack: bool = True, **attrs) -> Any:
    """Apply primitive `opcode` to `operands`: traced when a trace is active, else at once.

    A tuple-shaped result comes back as a Python tuple of its elements (get-tuple-element
    in a trace), unless `unpack=False`.
    """
    trace = current_trace()
    if trace is None:
        return _run_eagerly(opcode, operands, shape, attrs)
    result = trace.emit(opcode, operands, shape, attrs)
    if unpack and isinstance(result.aval, TupleShape):
        return tuple(trace.emit("get-tuple-element", [result], None, {"index": i})
                     for i in range(len(result.aval.elements)))
    return result


def make_tuple(*values: Any) -> Any:
    """An HLO tuple of `values` (a Tracer in a trace, a Python tuple eagerly)."""
    trace = current_trace()
    if trace is None:
        return tuple(values)
    instrs = [trace.lift(v).instr for v in values]
    return Tracer(trace.builder.tuple(*instrs), trace)


def _run_eagerly(opcode: str, operands: Sequence[Any], shape: Shape | None, attrs: dict) -> Any:
    b = HloBuilder(f"eager_{opcode}")
    args = [v if isinstance(v, tuple) else np.asarray(v) for v in operands]
    params = [b.parameter(shape_of(a), f"arg{i}") for i, a in enumerate(args)]
    try:
        instr = b.op(opcode, *params, shape=shape, attrs=attrs)
    except ShapeError as e:
        shapes = ", ".join(p.shape.to_text(False) for p in params)
        raise TraceError(f"{opcode}({shapes}): {e}{where()}") from None
    comp = b.build(instr)
    return evaluate_computation(comp, args, EvalContext())


def trace_computation(fn: Callable, arg_shapes: Sequence[Shape], name: str,
                      allow_captures: bool = True, weak: Sequence[bool] | None = None):
    """Trace `fn(*params)` into a computation whose parameters have `arg_shapes`.

    Returns (computation, output leaves' tree, captures): `fn` may return a pytree of
    arrays; a single array is the ROOT, several become a ROOT tuple. Captured values of
    enclosing traces become extra parameters after the given ones; `captures` lists the
    outer values to pass for them, in order.
    """
    from .pytree import tree_flatten

    trace = Trace(name, parent=current_trace(), allow_captures=allow_captures)
    weak = weak or [False] * len(arg_shapes)
    params = [trace.new_parameter(s, f"p{i}", w) for i, (s, w) in enumerate(zip(arg_shapes, weak))]
    with trace:
        out = fn(*params)
        leaves, treedef = tree_flatten(out)
        lifted = [trace.lift(leaf) for leaf in leaves]
    if len(lifted) == 1 and treedef.kind == "leaf":
        root = lifted[0].instr
    else:
        root = trace.builder.tuple(*[t.instr for t in lifted])
    comp: HloComputation = trace.builder.build(root)
    return comp, treedef, [outer for outer, _ in trace.captures], lifted

