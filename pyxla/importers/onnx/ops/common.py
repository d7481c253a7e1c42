"""What the operator converters share: ONNX element types, axes, import-time integer inputs,
and the choice between NumPy and pyxla.numpy for one value."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ....hlo.dims import DimExpr
from ....hlo.types import from_numpy_dtype
from ..registry import NodeContext, is_known, known

# ONNX TensorProto element types pyxla has an element type for, as the dtypes
# onnx.numpy_helper gives their tensors (ml_dtypes' for bfloat16, the 8- and 4-bit floats
# and the 4- and 2-bit integers, one element per byte: ONNX's packing of 4- and 2-bit
# tensors is undone by numpy_helper). The rest (strings, complex, FLOAT8E8M0, the 6-bit
# floats) are refused by name.
_ONNX_DTYPES = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32),
    13: np.dtype(np.uint64), 16: np.dtype(ml_dtypes.bfloat16),
    17: np.dtype(ml_dtypes.float8_e4m3fn), 18: np.dtype(ml_dtypes.float8_e4m3fnuz),
    19: np.dtype(ml_dtypes.float8_e5m2), 20: np.dtype(ml_dtypes.float8_e5m2fnuz),
    21: np.dtype(ml_dtypes.uint4), 22: np.dtype(ml_dtypes.int4), 23: np.dtype(ml_dtypes.float4_e2m1fn),
    25: np.dtype(ml_dtypes.uint2), 26: np.dtype(ml_dtypes.int2),
}
# The types ONNX's `saturate` attribute (Cast, QuantizeLinear) applies to.
SATURATING_FLOAT8 = frozenset(_ONNX_DTYPES[t] for t in (17, 18, 19, 20))


def onnx_dtype(ctx: NodeContext, elem_type: int, what: str = "element type") -> np.dtype:
    """The NumPy dtype of ONNX element type `elem_type`; refused when pyxla has none."""
    try:
        return _ONNX_DTYPES[int(elem_type)]
    except KeyError:
        import onnx
        name = onnx.TensorProto.DataType.Name(int(elem_type)) if int(elem_type) in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        raise ctx.unsupported(f"{what} {name}") from None


def check_dtype(ctx: NodeContext, value: Any, what: str = "input") -> Any:
    """`value` unchanged, if pyxla has an element type for its dtype."""
    if is_known(value) and np.asarray(value).dtype not in _ONNX_DTYPES.values():
        raise ctx.unsupported(f"{what} of dtype {np.asarray(value).dtype}")
    return value


def xp_of(ctx: NodeContext, *values: Any):
    """NumPy when every value is known, else pyxla.numpy (for values made inside a converter)."""
    if all(v is None or is_known(v) for v in values):
        return np
    from .... import numpy as pnp
    return pnp


def axis_of(ctx: NodeContext, axis: int, ndim: int, what: str = "axis") -> int:
    """`axis` made non-negative; an error naming the node when it is out of range."""
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ctx.error(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim


def axes_of(ctx: NodeContext, axes: Sequence[int], ndim: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(axis_of(ctx, a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(axes)} repeat an axis")
    return out


def ints(ctx: NodeContext, value: Any, what: str) -> list[int]:
    """An import-time integer input (shape, axes, pads ...) as a list of Python ints."""
    return [v if isinstance(v, DimExpr) else int(v) for v in known(ctx, value, what).reshape(-1)]


def axes_input_or_attr(ctx: NodeContext, axes_input: Any, since_input: int) -> list[int] | None:
    """The `axes` of ops that moved them from an attribute to an input at opset `since_input`."""
    if ctx.opset >= since_input:
        return None if axes_input is None else ints(ctx, axes_input, "axes")
    axes = ctx.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def shape_of(value: Any) -> tuple[int, ...]:
    """The shape of a value (a traced one's sizes may be symbolic: DimExprs stay)."""
    return tuple(d if isinstance(d, DimExpr) else int(d) for d in np.shape(value))


def as_dtype(xp, value: Any, dtype: Any) -> Any:
    """`value` as `dtype` (no copy when it already is)."""
    dtype = np.dtype(dtype)
    if is_known(value):
        return np.asarray(value).astype(dtype, copy=False)
    return value if value.dtype == dtype else value.astype(dtype)


def full(xp, shape: Sequence[int], fill: Any, dtype: Any) -> Any:
    return xp.full(tuple(d if isinstance(d, DimExpr) else int(d) for d in shape), fill, dtype=np.dtype(dtype))


def _element_type(dtype: Any):
    try:
        return from_numpy_dtype(dtype)
    except TypeError:
        return None


def is_float_dtype(dtype: Any) -> bool:
    """Real floats, ml_dtypes' (NumPy "V" kinds) included."""
    t = _element_type(dtype)
    return np.issubdtype(np.dtype(dtype), np.floating) or (t is not None and t.is_float)


def is_int_dtype(dtype: Any) -> bool:
    """Integers, ml_dtypes' 4- and 2-bit ones included."""
    t = _element_type(dtype)
    return np.issubdtype(np.dtype(dtype), np.integer) or (t is not None and t.is_integral)


def integer_range(dtype: Any) -> tuple[int, int]:
    """The least and greatest value of an integer dtype (4- and 2-bit ones included)."""
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def convert_saturating(xp, value: Any, dtype: Any) -> Any:
    """`value` as 8-bit float `dtype`, clamped to its finite range first (ONNX's saturate:
    ±inf and values past the largest become ±largest, NaN stays NaN); the conversion itself
    is HLO's (rounding to nearest even). The clamp is done in f32 for floats narrower than
    f32, which cannot all hold the largest value."""
    dtype = np.dtype(dtype)
    largest = float(ml_dtypes.finfo(dtype).max)
    if is_float_dtype(value.dtype) and np.dtype(value.dtype).itemsize < 4:
        value = as_dtype(xp, value, np.float32)
    return as_dtype(xp, xp.clip(value, -largest, largest), dtype)
