"""torch dtypes <-> NumPy dtypes, and tensors across the boundary without copies."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

_TO_NUMPY = {
    torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.int64: np.dtype(np.int64), torch.int32: np.dtype(np.int32), torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8), torch.uint8: np.dtype(np.uint8), torch.bool: np.dtype(np.bool_),
}
_TO_TORCH = {v: k for k, v in _TO_NUMPY.items()}


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return _TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"pyxla has no element type for {dtype}") from None


def to_torch_dtype(dtype) -> torch.dtype:
    return _TO_TORCH[np.dtype(dtype)]


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous NumPy array of a CPU tensor: its own memory when the tensor is
    contiguous (no copy), else one copy."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.is_contiguous():
        return t.numpy()
    return np.ascontiguousarray(t.numpy())


def numpy_to_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor over the array's memory (no copy) where torch can take it."""
    a = np.asarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True)
    return torch.from_numpy(a)
