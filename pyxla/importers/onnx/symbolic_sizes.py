"""Shape values in a dynamic-shape import (`pyxla.onnx.load(path, dynamic=True)`).

`Shape` of a tensor with symbolic dimensions gives a NumPy array of dtype object holding
ints and DimExprs: a value known while tracing, though not as numbers. Models compute
Reshape targets from such values (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`), so
the ops that select, join and do arithmetic on sizes run on them at import time, symbolic
sizes included, and the target reaches Reshape, Expand or ConstantOfShape as symbolic
dimensions. Any other op given such a value gets it as a traced int64 tensor instead, its
symbolic entries read at run time (get-dimension-size).
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ...hlo.dims import DimExpr

# Ops whose converters take size arrays as they are (selection, joining, shape targets).
PASS_THROUGH = frozenset({"Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Identity", "Reshape", "Expand",
                          "ConstantOfShape"})
_ARITHMETIC = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul}


def is_sizes(value: Any) -> bool:
    """A size array: NumPy dtype object, its entries ints and DimExprs."""
    return isinstance(value, np.ndarray) and value.dtype == object


def sizes_array(dims: Any) -> np.ndarray:
    out = np.empty(len(dims), dtype=object)
    out[:] = list(dims)
    return out


def as_traced(value: np.ndarray) -> Any:
    """A size array as a traced int64 tensor of its shape."""
    from ... import numpy as _pnp
    pnp: Any = _pnp   # its functions are registered at import time
    flat = [pnp.asarray(v, dtype=np.int64) for v in value.reshape(-1)]
    if value.ndim == 0:
        return flat[0]
    return pnp.reshape(pnp.stack(flat), value.shape)


def _floor_divide(a: Any, b: Any) -> Any:
    if isinstance(a, DimExpr) or isinstance(b, DimExpr):
        return a // b   # exact division only; otherwise InconclusiveDimensionOperation
    return int(a) // int(b)


def size_arithmetic(op_type: str, attrs: dict, values: list[Any]) -> np.ndarray | None:
    """The result of an op on size arrays when it is arithmetic on sizes (Add, Sub, Mul,
    integer Div, a Cast to an integer type), else None."""
    if op_type == "Cast":
        from onnx import helper
        to = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"]))
        return values[0] if to.kind in "iu" else None
    fn = _ARITHMETIC.get(op_type) or (_floor_divide if op_type == "Div" else None)
    if fn is None or len(values) != 2:
        return None
    a, b = (v if is_sizes(v) else np.asarray(v) for v in values)
    if not all(is_sizes(v) or v.dtype.kind in "iu" for v in (a, b)):
        return None
    out = np.frompyfunc(lambda x, y: fn(_plain(x), _plain(y)), 2, 1)(a, b)
    return np.asarray(out, dtype=object)


def _plain(v: Any) -> Any:
    return v if isinstance(v, DimExpr) else int(v)
