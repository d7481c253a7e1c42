"""What every pyxla.numpy function shares: operands, dtype promotion, broadcasting, results.

A pyxla.numpy function takes Tracers (inside a trace), concrete arrays and Python scalars,
and emits HLO primitives through `bind`: traced when a trace is active, run at once on the
reference evaluator otherwise. So one implementation serves `jit` and eager use, with the
same (XLA) semantics in both.

Operands. Python scalars (bool, int, float) stay Python scalars until their dtype is
decided: they are *weak*, as in NumPy 2 (NEP 50), so `float32_array * 2.0` stays float32.
A Tracer with `.weak=True` (a Python scalar passed to a jitted function) is weak in the
same way. Everything else is a NumPy array with a strong dtype.

Results. Eagerly, public functions return `pyxla.Array` (an ndarray subclass with `.at`);
`export` registers a function in the namespace and does that conversion.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import TraceError
from ..frontend.shape_poly import as_dim, broadcast_dims, dimension_value
from ..frontend.tracing import SequenceOperandError, Tracer, bind, current_trace, where
from ..hlo.builder import scalar_computation
from ..hlo.dims import DimExpr
from ..hlo.shape import ArrayShape
from ..hlo.types import from_numpy_dtype

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT64 = np.dtype(np.int64)
UINT64 = np.dtype(np.uint64)
BOOL = np.dtype(np.bool_)

# --- the public namespace -----------------------------------------------------------------

PUBLIC: dict[str, Callable] = {}


def export(fn: Callable | None = None, *, aliases: Sequence[str] = ()):
    """Register `fn` as pyxla.numpy.<name> (and its aliases); eager results become Arrays."""
    if fn is None:
        return lambda f: export(f, aliases=aliases)

    @functools.wraps(fn)
    def public(*args, **kwargs):
        return eager_result(fn(*args, **kwargs))

    for name in (fn.__name__, *aliases):
        PUBLIC[name] = public
    return public


def eager_result(out: Any) -> Any:
    """NumPy arrays in `out` as pyxla.Array when no trace is active (inside one, as they are)."""
    if current_trace() is not None:
        return out
    from ..frontend.array import Array
    if isinstance(out, np.ndarray):
        if not out.flags.writeable:   # broadcast views and module constants: NumPy would hand out a fresh array
            out = out.copy()
        return out.view(Array)
    if isinstance(out, (tuple, list)):
        return type(out)(eager_result(o) for o in out)
    return out


_computation_ids = itertools.count(1)


def computation_name(base: str) -> str:
    """A computation name not made before: a module needs distinct names for its reducers."""
    return f"{base}.{next(_computation_ids)}"


def scalar_reducer(opcode: str, dtype: np.dtype):
    """`(a, b) -> opcode(a, b)` on scalars of `dtype`, freshly named."""
    etype = from_numpy_dtype(dtype)
    return scalar_computation(opcode, etype, computation_name(f"{opcode}_{etype.name}"))


def fail(name: str, message: str) -> TraceError:
    """A TraceError naming the NumPy function and the user's source line."""
    return TraceError(f"pyxla.numpy.{name}: {message}{where()}")


# --- operands and dtypes ------------------------------------------------------------------

def is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def supported_dtype(name: str, dtype: Any) -> np.dtype:
    """`dtype` as a NumPy dtype that pyxla has an element type for; else a TypeError."""
    try:
        dtype = np.dtype(dtype)
        from_numpy_dtype(dtype)
    except TypeError:
        raise TypeError(f"pyxla.numpy.{name}: dtype {dtype} is not supported (pyxla has bool, "
                        "integer and real floating types only)") from None
    return dtype


def holds_array(x: Any) -> bool:
    """Whether a (nested) list or tuple holds an array: a Tracer inside a trace, an ndarray
    or NumPy scalar (the same program's values) outside one; Python numbers are data."""
    if isinstance(x, (list, tuple)):
        return any(holds_array(v) for v in x)
    return isinstance(x, (Tracer, np.ndarray, np.generic, DimExpr))


def _refuse_list_argument(x: list | tuple) -> None:
    """A list that is a jitted function's own list argument (a pytree of traced scalars) is
    refused naming that argument (SequenceOperandError, a TypeError too)."""
    for leaf in list_leaves(x):
        if isinstance(leaf, Tracer):
            found = getattr(leaf.trace, "sequence_leaves", {}).get(id(leaf.instr))
            if found is not None:
                raise SequenceOperandError(*found)


def list_leaves(x: Any) -> list:
    """The elements of a (nested) list or tuple, depth first; anything else is its own one."""
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in list_leaves(v)]
    return [x]


def operand(name: str, x: Any, position: int | None = None) -> Any:
    """`x` as an operand: a Tracer, a Python scalar (weak) or a NumPy array of a supported dtype.

    A list or tuple holding arrays is refused with JAX's TypeError: NumPy would convert it
    element by element, which a traced element cannot be (a confusing ConcretizationError),
    and eagerly it would build an array jit could not, so both say the same.
    pyxla.numpy.asarray / array / stack make an array of such a list. `position` is the
    argument's place in the call, for the message."""
    if isinstance(x, Tracer) or is_python_scalar(x):
        return x
    if isinstance(x, DimExpr):   # a symbolic size used as a value: a traced (weak) integer
        return dimension_value(x)
    if isinstance(x, (list, tuple)) and holds_array(x):
        _refuse_list_argument(x)
        at = "" if position is None else f" at position {position}"
        raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)}{at}. "
                        f"(pyxla.numpy.{name}: a {type(x).__name__} of arrays is not an array; make one with "
                        f"pyxla.numpy.asarray or pyxla.numpy.stack{where()})")
    if isinstance(x, complex):
        raise TypeError(f"pyxla.numpy.{name}: complex numbers are not supported")
    arr = np.asarray(x)
    if arr.dtype == object:
        raise TypeError(f"pyxla.numpy.{name}: cannot use a {type(x).__name__} as an array")
    supported_dtype(name, arr.dtype)
    return arr


def dtype_of(x: Any) -> np.dtype:
    if isinstance(x, Tracer):
        return x.dtype
    if isinstance(x, bool):
        return BOOL
    if isinstance(x, int):
        return INT64
    if isinstance(x, float):
        return FLOAT64
    return np.asarray(x).dtype


def shape_of(x: Any) -> tuple[int, ...]:
    if isinstance(x, Tracer):
        return x.shape
    if is_python_scalar(x):
        return ()
    return np.shape(x)


def is_weak(x: Any) -> bool:
    return is_python_scalar(x) or (isinstance(x, Tracer) and x.weak)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BFLOAT16


def is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """NumPy's promotion of two strong dtypes, with bfloat16 placed as JAX places it:
    integers and bool promote to it, f16 and bf16 meet in f32."""
    if a == b:
        return a
    if BFLOAT16 in (a, b):
        other = b if a == BFLOAT16 else a
        if other.kind in "biu":
            return BFLOAT16
        return FLOAT32 if other == FLOAT16 else other
    return np.promote_types(a, b)


def _weak_dtype(x: Any, strong: np.dtype | None) -> np.dtype:
    """The dtype a weak operand takes next to operands whose promoted dtype is `strong`
    (NEP 50: a Python int adopts any numeric type, a Python float any float type)."""
    kind = dtype_of(x)
    if kind == BOOL:
        return BOOL
    if strong is None:
        return kind
    if kind.kind in "iu":
        return strong if strong != BOOL else INT64
    return strong if is_float(strong) else FLOAT64


def operand_dtypes(xs: Sequence[Any]) -> list[np.dtype]:
    """The dtype each operand takes part in promotion with (weak ones adapted to the strong)."""
    strong = None
    for x in xs:
        if not is_weak(x):
            strong = dtype_of(x) if strong is None else promote_types(strong, dtype_of(x))
    return [_weak_dtype(x, strong) if is_weak(x) else dtype_of(x) for x in xs]


@export
def result_type(*xs: Any) -> np.dtype:
    """np.result_type of operands under NumPy 2's rules (Python scalars and weak Tracers weak).
    dtype objects and type names count as strong operands."""
    values = [np.empty(0, dtype=x) if isinstance(x, (np.dtype, type, str)) else x for x in xs]
    dtypes = operand_dtypes(values)
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote_types(out, d)
    return out


def mark_weak(value: Any, weak: bool) -> Any:
    if weak and isinstance(value, Tracer):
        value.weak = True
    return value


# --- primitives on single values ---------------------------------------------------------

def element_shape(dtype: np.dtype, dims: Sequence[int]) -> ArrayShape:
    return ArrayShape(from_numpy_dtype(dtype), tuple(dims))


def convert(x: Any, dtype: Any) -> Any:
    """`x` as `dtype`. Python scalars convert as NumPy converts them (a value that does not
    fit raises OverflowError, as NumPy 2 does); arrays and Tracers through HLO convert."""
    dtype = np.dtype(dtype)
    if is_python_scalar(x):
        return np.asarray(x, dtype=dtype)
    if dtype_of(x) == dtype:
        return x
    return bind("convert", x, shape=element_shape(dtype, shape_of(x)))


def reshape_to(x: Any, dims: Sequence[int]) -> Any:
    dims = tuple(as_dim(d) for d in dims)
    if shape_of(x) == dims:
        return x
    if is_python_scalar(x):
        x = np.asarray(x)
    return bind("reshape", x, shape=element_shape(dtype_of(x), dims))


def transpose_to(x: Any, perm: Sequence[int]) -> Any:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    return bind("transpose", x, dimensions=perm)


def broadcast_shapes(name: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast shape of `shapes`; a TraceError naming `name` and the shapes if none."""
    out = broadcast_dims(*[tuple(s) for s in shapes])
    if out is None:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise fail(name, f"operands with shapes {listed} cannot be broadcast together")
    return out


def broadcast_to(x: Any, shape: Sequence[int], name: str = "broadcast_to") -> Any:
    """`x` broadcast to `shape` by NumPy's rules (trailing dims align, size 1 stretches)."""
    shape = tuple(as_dim(d) for d in shape)
    xs = shape_of(x)
    if xs == shape:
        return x
    if broadcast_shapes(name, xs, shape) != shape:
        raise fail(name, f"cannot broadcast an array of shape {xs} to shape {shape}")
    if is_python_scalar(x):
        x = np.asarray(x)
    lead = len(shape) - len(xs)
    # XLA's broadcast maps operand dims onto result dims of the same size: drop the
    # size-1 dims that stretch first.
    kept = [i for i, d in enumerate(xs) if d == shape[lead + i]]
    if len(kept) < len(xs):
        x = reshape_to(x, [xs[i] for i in kept])
    return bind("broadcast", x, shape=element_shape(dtype_of(x), shape),
                dimensions=tuple(lead + i for i in kept))


def full(value: Any, dtype: np.dtype, shape: Sequence[int]) -> Any:
    """A value of `shape` filled with `value` (a scalar, or a 0-d Tracer) as `dtype`."""
    return broadcast_to(convert(value, dtype), shape)


def constant_like(value: Any, x: Any) -> Any:
    """`value` with the dtype and shape of `x`."""
    return full(value, dtype_of(x), shape_of(x))


def compare(a: Any, b: Any, direction: str) -> Any:
    return bind("compare", a, b, direction=direction)


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    return bind("select", pred, on_true, on_false)


def normalize_axis(name: str, axis: int, ndim: int) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"pyxla.numpy.{name}: axis {axis} is out of bounds for an "
                                      f"array of dimension {ndim}")
    return axis % ndim


def normalize_axes(name: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """`axis` (None: all, an int, or a sequence) as sorted, distinct, non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Tracer):
        raise TypeError(f"pyxla.numpy.{name}: axis must be a static int, not a traced value")
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out = tuple(normalize_axis(name, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"pyxla.numpy.{name}: repeated axis in {axis}")
    return tuple(sorted(out))


def static_int(name: str, value: Any, what: str) -> int:
    """A Python int from a static value; a traced value is a clear error."""
    if isinstance(value, Tracer):
        raise TypeError(f"pyxla.numpy.{name}: {what} must be static (a Python int), "
                        f"got a traced value{where()}")
    return int(value)


def static_dim(name: str, value: Any, what: str) -> Any:
    """A size from a static value: an int, or a symbolic size (a DimExpr) of a
    shape-polymorphic trace."""
    if isinstance(value, DimExpr):
        return value
    return static_int(name, value, what)


class _HloOps:
    """`hlo.exponential_minus_one(x)` emits HLO `exponential-minus-one(x)` through `bind`.

    For implementations that work on operands already converted to one dtype and shape."""

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(bind, name.replace("_", "-"))


hlo = _HloOps()
