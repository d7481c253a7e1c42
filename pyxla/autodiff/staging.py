"""Staging: a Python function traced into an HLO computation that autodiff then reads.

`stage(fn, args)` traces `fn` on abstract arrays shaped like the flat argument leaves, in
a trace nested in the current one (so values `fn` closes over from an enclosing trace are
captured, exactly as a loop body captures them). The result is the computation with the
parameter of each argument leaf, the captured outer values, the output instructions and
the output tree. The trace is kept: it knows which instructions stop gradients.

Derivative programs are built by re-emitting this computation instruction by instruction
through `bind` (into whichever trace is current, or eagerly) and applying a rule per
opcode beside each instruction (see forward.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TraceError
from ..frontend.pytree import PyTreeDef, tree_flatten, tree_unflatten
from ..frontend.tracing import Trace, Tracer, current_trace, make_tuple, shape_of, where
from ..hlo.computation import HloComputation, operands_first
from ..hlo.instruction import HloInstruction
from ..hlo.shape import ArrayShape, Shape, TupleShape
from ..hlo.types import ELEMENT_TYPES

_ELEMENT_DTYPES = frozenset(t.np_dtype for t in ELEMENT_TYPES.values())


@dataclass
class Staged:
    """A traced function: its computation and how its parameters and outputs map to the
    caller's values."""
    trace: Trace
    computation: HloComputation
    inputs: list[HloInstruction]                     # the parameter of each argument leaf
    captures: list[tuple[Any, HloInstruction]]      # (outer value, its parameter here)
    outputs: list[HloInstruction]                   # one per output leaf
    out_tree: PyTreeDef

    def is_gradient_stop(self, instr: HloInstruction) -> bool:
        return instr in self.trace.gradient_stops


def argument_value(name: str, x: Any) -> tuple[Any, bool]:
    """An argument leaf as a Tracer or a NumPy array, and whether it is weakly typed (a
    Python scalar, or a tracer of one)."""
    if isinstance(x, Tracer):
        return x, x.weak
    weak = isinstance(x, (int, float)) and not isinstance(x, (bool, np.generic))
    arr = np.asarray(x)
    if arr.dtype == object or (arr.dtype.kind in "USVOMmc" and arr.dtype not in _ELEMENT_DTYPES):
        raise TypeError(f"{name}: a {type(x).__name__} ({arr.dtype}) is not an array pyxla can "
                        "differentiate")
    return arr, weak


def output_leaves(trace: Trace, out: Any, name: str) -> tuple[list[Tracer], PyTreeDef]:
    """The leaves of a traced function's result `out` as values of `trace` (entered), and its
    tree; every leaf must be an array."""
    leaves, tree = tree_flatten(out)
    try:
        lifted = [trace.lift(leaf) for leaf in leaves]
    except (TypeError, ValueError) as e:
        raise TraceError(f"{name}: the function must return arrays (a pytree of them): {e}{where()}") from None
    for t in lifted:
        if not isinstance(t.aval, ArrayShape):
            raise TraceError(f"{name}: the function returned a value of shape {t.aval.to_text(False)}, "
                             f"not an array{where()}")
    return lifted, tree


def stage(fn: Callable, leaves: Sequence[Any], weak: Sequence[bool], in_tree: PyTreeDef,
          name: str) -> Staged:
    """`fn(*tree_unflatten(in_tree, leaves))` traced into a computation; `fn` may return any
    pytree of arrays."""
    trace = Trace(name, parent=current_trace())
    params = [trace.new_parameter(shape_of(x), f"arg{i}", w) for i, (x, w) in enumerate(zip(leaves, weak))]
    with trace:
        lifted, out_tree = output_leaves(trace, fn(*tree_unflatten(in_tree, params)), name)
    if len(lifted) == 1:
        root = lifted[0].instr
    else:
        root = trace.builder.tuple(*[t.instr for t in lifted]) if lifted else trace.builder.tuple()
    computation = trace.builder.build(root)
    return Staged(trace, computation, [p.instr for p in params],
                  [(outer, inner.instr) for outer, inner in trace.captures],
                  [t.instr for t in lifted], out_tree)


def reachable(outputs: Sequence[HloInstruction]) -> list[HloInstruction]:
    """The instructions `outputs` depend on, operands before users."""
    return operands_first(outputs)


def is_float_shape(shape: Shape) -> bool:
    """Whether a value of `shape` carries derivatives: a float array, or a tuple with one."""
    if isinstance(shape, TupleShape):
        return any(is_float_shape(s) for s in shape.elements)
    return isinstance(shape, ArrayShape) and shape.dtype.is_float


def location(instr: HloInstruction) -> tuple[str, int] | None:
    """The user's source line an instruction was traced from, where it was recorded."""
    md = instr.metadata
    if "source_file" in md and "source_line" in md:
        return str(md["source_file"]), int(md["source_line"])
    return None


def semantic_attrs(instr: HloInstruction) -> dict[str, Any]:
    """The attributes that re-emitting `instr` needs (its metadata is made afresh)."""
    return {k: v for k, v in instr.attrs.items() if k != "metadata"}


def operand_value(value: Any) -> Any:
    """A value as an operand to re-emit: the Python tuple that stands for an HLO tuple (a
    loop's state) becomes one again in a trace."""
    if isinstance(value, tuple):
        return make_tuple(*[operand_value(v) for v in value])
    return value
