"""What lax functions take as operands: arrays, tracers and Python scalars.

lax follows XLA: the operands of one operation must already share an element type, and
nothing is promoted. The one exception is weak typing, as in JAX: a Python scalar (or a
traced value that came from one, such as a Python number passed to a jitted function)
has no type of its own and takes the type of the other operands.

Scalar functions written in Python (reducers, comparators, scatter combiners) become HLO
computations through `scalar_computation`; they may use only their arguments.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError, TraceError
from ..frontend.pytree import tree_flatten
from ..frontend.tracing import Tracer, bind, trace_computation, where
from ..hlo.computation import HloComputation
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape
from ..hlo.types import ELEMENT_TYPES, ElementType, from_numpy_dtype

_names = itertools.count(1)


def fresh_name(base: str) -> str:
    """A computation name no other computation of this process has (so none in a module)."""
    return f"{base}.{next(_names)}"


# --- element types ------------------------------------------------------------------------

def element_type(dtype: Any) -> ElementType:
    """The element type named by an ElementType, a NumPy dtype or type, or a name ('f32', 'float32')."""
    if isinstance(dtype, ElementType):
        return dtype
    if isinstance(dtype, str) and dtype in ELEMENT_TYPES:
        return ELEMENT_TYPES[dtype]
    try:
        return from_numpy_dtype(np.dtype(dtype))
    except TypeError:
        raise TypeError(f"{dtype!r} is not an element type pyxla supports "
                        f"({', '.join(ELEMENT_TYPES)})") from None


def is_python_scalar(x: Any) -> bool:
    # np.float64 subclasses float, but a NumPy scalar has a type of its own: not weak.
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def is_weak(x: Any) -> bool:
    """Whether `x` has no element type of its own (a Python scalar, or a tracer of one)."""
    return is_python_scalar(x) or (isinstance(x, Tracer) and x.weak)


def aval(x: Any) -> ArrayShape:
    """The abstract value (element type and dimensions) of an operand."""
    if isinstance(x, Tracer):
        if not isinstance(x.aval, ArrayShape):
            raise TraceError(f"expected an array, got a value of shape {x.aval.to_text(False)}{where()}")
        return x.aval
    arr = np.asarray(x)
    if arr.dtype == object:
        raise TraceError(f"cannot use a {type(x).__name__} as an array{where()}")
    try:
        return ArrayShape(from_numpy_dtype(arr.dtype), arr.shape)
    except TypeError as e:
        raise TraceError(f"{e}{where()}") from None


def describe(x: Any) -> str:
    return aval(x).to_text(False)


def describe_all(operands: Sequence[Any]) -> str:
    return ", ".join(describe(x) for x in operands)


def op_error(opcode: str, operands: Sequence[Any], message: str) -> TraceError:
    """A TraceError in the form shape rules give through bind: `op(shapes): message (at file:line)`."""
    return TraceError(f"{opcode}({describe_all(operands)}): {message}{where()}")


def canonical_axis(opcode: str, axis: int, rank: int) -> int:
    """`axis` in [0, rank), counting negative axes from the end as NumPy does."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise TraceError(f"{opcode}: axis {axis} is out of range for an array of rank {rank}{where()}")
    return axis % rank


# --- conversion and weak typing ---------------------------------------------------------

def convert(x: Any, etype: ElementType) -> Any:
    """`x` as `etype` with XLA's convert (saturating float -> int, rounding, ...); the
    result has a type of its own (it is not weak)."""
    a = aval(x)
    if a.dtype == etype:
        return Tracer(x.instr, x.trace, False) if isinstance(x, Tracer) and x.weak else x
    return bind("convert", x, shape=ArrayShape(etype, a.dims))


def as_type(opcode: str, x: Any, etype: ElementType) -> Any:
    """Weakly typed `x` given element type `etype`.

    A Python number must fit the type: a float never becomes an integer or pred, and an
    integer must be in range (JAX refuses the same).
    """
    if isinstance(x, Tracer):
        return convert(x, etype)
    if isinstance(x, float) and not etype.is_float:
        raise TraceError(f"{opcode}: the Python float {x!r} cannot take the element type {etype} of "
                         f"the other operands; convert explicitly{where()}")
    if isinstance(x, int) and not isinstance(x, bool) and etype.is_pred:
        raise TraceError(f"{opcode}: the Python int {x!r} cannot take the element type pred{where()}")
    try:
        return np.array(x, dtype=etype.np_dtype)
    except OverflowError:
        raise TraceError(f"{opcode}: the Python int {x!r} does not fit the element type {etype}{where()}") from None


def common_type(operands: Sequence[Any]) -> ElementType:
    """The element type weakly typed operands take: that of the first strongly typed operand,
    else of the first traced one, else NumPy's type for the Python scalars."""
    for x in operands:
        if not is_weak(x):
            return aval(x).dtype
    for x in operands:
        if isinstance(x, Tracer):
            return x.aval.dtype
    return from_numpy_dtype(np.result_type(*[np.asarray(x) for x in operands]))


def unify_types(opcode: str, operands: Sequence[Any]) -> list[Any]:
    """The operands with weakly typed ones given the common type; strongly typed operands
    are left alone, so a real mismatch is reported by the opcode's shape rule."""
    target = common_type(operands)
    return [as_type(opcode, x, target) if is_weak(x) else x for x in operands]


def weakly(result: Any, operands: Sequence[Any]) -> Any:
    """`result` marked weak when every operand was weak (weakness flows through arithmetic)."""
    if isinstance(result, Tracer) and operands and all(is_weak(x) for x in operands):
        return Tracer(result.instr, result.trace, True)
    return result


def inferred_shape(opcode: str, operands: Sequence[Any], attrs: dict, etype: ElementType | None):
    """The result shape of opcode(operands) with element type `etype` (JAX's
    preferred_element_type), or None to let the shape rule decide."""
    if etype is None:
        return None
    try:
        shape = op_def(opcode).shape([aval(o) for o in operands], attrs, None)
    except ShapeError as e:
        raise op_error(opcode, operands, str(e)) from None
    return ArrayShape(etype, shape.dims)


# --- scalar functions as computations -----------------------------------------------------

def scalar_computation(fn: Callable, arg_types: Sequence[ElementType], name: str,
                       result_types: Sequence[ElementType] | None = None) -> HloComputation:
    """`fn(*scalars)` traced into a computation of scalar parameters of `arg_types`.

    Used for reducers, comparators and scatter combiners, which must use only their
    arguments: a closure over a traced value is a TraceError. A single result is the ROOT,
    several a ROOT tuple; Python numbers among the results take `result_types`.
    """
    def flat(*params):
        leaves, _ = tree_flatten(fn(*params))
        if result_types is not None:
            leaves = [as_type(name, x, t) if is_weak(x) else x for x, t in zip(leaves, result_types)]
        return leaves[0] if len(leaves) == 1 else tuple(leaves)

    shapes = [ArrayShape(t, ()) for t in arg_types]
    comp, *_ = trace_computation(flat, shapes, fresh_name(name), allow_captures=False)
    return comp
