"""Arrays that live in a GPU backend's memory.

    x = pyxla.device_put(np_array, device="gpu")   # or "gpu-sim"
    y = jit(f, backend="gpu")(x)                    # y is a DeviceArray too: no copy back
    np.asarray(y)                                   # the copy to the host, on demand

A DeviceArray is a buffer of device memory with its logical shape and element type, and the
layout its bytes are in (row-major from device_put; a result keeps its ENTRY output's
layout). GPU executables take it as a parameter's buffer without a copy when its memory and
layout are the parameter's; anything else (a NumPy array, an array of the other GPU
backend) is copied in. Device arrays are never written after they are made, so calls may
share them. Operators and indexing work on the host copy (they return NumPy arrays).
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ...errors import ArgumentError
from ...hlo.shape import ArrayShape
from ...hlo.types import from_numpy_dtype
from .memory import Buffer, Memory, memory_for


def physical(array: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """`array` (logical order) as the bytes of `shape`'s layout."""
    array = np.asarray(array, dtype=shape.dtype.np_dtype)
    order = tuple(reversed(shape.minor_to_major))
    return np.ascontiguousarray(np.transpose(array, order) if shape.rank > 1 else array)


def logical(flat: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """A buffer's bytes in `shape`'s layout as a logical array."""
    order = tuple(reversed(shape.minor_to_major))
    data = flat.view(shape.dtype.np_dtype).reshape([shape.dims[d] for d in order])
    return np.ascontiguousarray(np.transpose(data, np.argsort(order))) if shape.rank > 1 else data.copy()


def same_layout(a: ArrayShape, b: ArrayShape) -> bool:
    """Element i of both arrays is at the same place in their buffers."""
    def order(s: ArrayShape) -> tuple[int, ...]:
        return tuple(d for d in s.minor_to_major if s.dims[d] != 1)
    return a.dims == b.dims and a.dtype == b.dtype and order(a) == order(b)


class DeviceArray:
    """An array in a GPU backend's memory (see the module's docstring)."""

    __pyxla_device_array__ = True   # (how jit recognises one without importing this backend)
    __array_priority__ = 100        # NumPy operators defer to ours, which work on the host copy

    def __init__(self, memory: Memory, buffer: Buffer, shape: ArrayShape, ready: Any = None):
        self.memory = memory
        self.buffer = buffer
        self.hlo_shape = shape
        self.ready = ready   # the marker of the work that writes it (None: written already)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.hlo_shape.dims)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.hlo_shape.dtype.np_dtype)

    @property
    def ndim(self) -> int:
        return len(self.hlo_shape.dims)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.hlo_shape.byte_size

    @property
    def device(self) -> str:
        return self.memory.name

    def block_until_ready(self) -> DeviceArray:
        self.memory.synchronize(self.ready)
        return self

    def to_numpy(self) -> np.ndarray:
        """A host copy (one download)."""
        self.memory.synchronize(self.ready)
        return logical(self.memory.download(self.buffer, self.nbytes), self.hlo_shape)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray({self.to_numpy()!r}, device={self.device!r})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    def __getitem__(self, index: Any) -> Any:
        return self.to_numpy()[index]

    def __iter__(self):
        return iter(self.to_numpy())

    def __bool__(self) -> bool:
        return bool(self.to_numpy())

    def __float__(self) -> float:
        return float(self.to_numpy())

    def __int__(self) -> int:
        return int(self.to_numpy())

    def item(self) -> Any:
        return self.to_numpy().item()

    def tolist(self) -> Any:
        return self.to_numpy().tolist()

    def astype(self, dtype: Any) -> np.ndarray:
        return self.to_numpy().astype(dtype)


def _host_operator(op):
    def forward(self, other):
        return op(self.to_numpy(), np.asarray(other))

    def backward(self, other):
        return op(np.asarray(other), self.to_numpy())
    return forward, backward


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor"):
    _forward, _backward = _host_operator(getattr(operator, _name + ("_" if _name in ("and", "or") else "")))
    setattr(DeviceArray, f"__{_name}__", _forward)
    setattr(DeviceArray, f"__r{_name}__", _backward)
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(DeviceArray, f"__{_name}__", _host_operator(getattr(operator, _name))[0])
for _name in ("neg", "pos", "abs", "invert"):
    setattr(DeviceArray, f"__{_name}__", (lambda op: lambda self: op(self.to_numpy()))(getattr(operator, _name)))
DeviceArray.__hash__ = None   # type: ignore[assignment]


def device_put(x: Any, device: str = "gpu") -> Any:
    """`x` (an array, or anything np.asarray takes) in `device`'s memory: 'gpu' or 'gpu-sim'
    give a DeviceArray (one copy; a DeviceArray already there is returned as it is), 'cpu' a
    NumPy array (copying a DeviceArray back)."""
    if device == "cpu":
        return np.asarray(x)
    if device not in ("gpu", "gpu-sim"):
        raise ArgumentError(f"device_put: unknown device {device!r} (expected 'gpu', 'gpu-sim' or 'cpu')")
    memory = memory_for(device)
    if isinstance(x, DeviceArray) and x.memory is memory:
        return x
    array = np.asarray(x)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        element = from_numpy_dtype(array.dtype)
    except TypeError:
        raise ArgumentError(f"device_put: a {type(x).__name__} of {array.dtype} "
                            "is not an array pyxla can hold") from None
    shape = ArrayShape(element, tuple(array.shape))
    return DeviceArray(memory, memory.upload(physical(array, shape)), shape)
