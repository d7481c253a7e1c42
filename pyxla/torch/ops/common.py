"""Helpers the lowerings share: dtype conversion, PyTorch's type promotion, axes."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ... import numpy as pnp
from ...frontend.tracing import Tracer
from ..dtypes import to_numpy_dtype


def is_array(x: Any) -> bool:
    return isinstance(x, (Tracer, np.ndarray))


def cast(x: Any, dtype: np.dtype) -> Any:
    """x as `dtype`: an array converted, a Python number left weak (it adopts the array's type)."""
    if not is_array(x):
        return x
    return x if x.dtype == dtype else pnp.asarray(x).astype(dtype)


def promoted(ctx, *indices: int) -> np.dtype:
    """The dtype PyTorch computes the node's arguments at `indices` in (comparisons, where)."""
    metas = [ctx.arg_meta(i) for i in indices]
    metas = [m for m in metas if m is not None]
    try:
        dtype = metas[0] if len(metas) == 1 and isinstance(metas[0], torch.Tensor) else None
        if dtype is None:
            result = torch.result_type(*metas[:2]) if len(metas) >= 2 else torch.get_default_dtype()
        else:
            result = dtype.dtype
        return to_numpy_dtype(result)
    except (TypeError, RuntimeError):
        return np.result_type(*[m.dtype if hasattr(m, "dtype") else type(m) for m in metas])


def axes(dims: Any, rank: int) -> tuple[int, ...]:
    """Dimension arguments (an int, a list, None or [] for all) as non-negative axes."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted(d % rank if rank else 0 for d in dims))


def axis(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


def channel(v: Any, rank: int) -> Any:
    """A per-channel vector shaped (C, 1, ...) to broadcast against (N, C, spatial...)."""
    return pnp.reshape(v, (-1,) + (1,) * (rank - 2))


def ints(values: Sequence[int] | int, n: int) -> list[int]:
    if isinstance(values, int):
        return [values] * n
    values = [int(v) for v in values]
    return values * n if len(values) == 1 else values
