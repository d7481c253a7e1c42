"""The table of ATen lowerings: overload name ("addmm.default", "sum.dim_IntList") -> a
function `fn(ctx, *args, **kwargs)` that records the op with pyxla.lax / pyxla.numpy.

Arguments arrive as the FX node's, with every node replaced by its value: a traced pyxla
array for a tensor, a Python number for a (specialised) SymInt, a tuple for a node with
several results. `ctx` (LoweringContext) knows the node and its fake-tensor metadata: the
result's dtype and shape, which every lowering may rely on (PyTorch's type promotion is
read from there rather than re-derived).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

LOWERINGS: dict[str, Callable[..., Any]] = {}


def lowering(*names: str):
    """Register a lowering under one or more overload names ("relu.default", ...); a name
    without a namespace is ATen's, others keep theirs ("prims.convert_element_type.default")."""
    def register(fn):
        for name in names:
            if name in LOWERINGS:
                raise ValueError(f"two lowerings for {name}")
            LOWERINGS[name] = fn
        return fn
    return register


def op_key(target: Any) -> str:
    """The table key of an FX call_function target."""
    name = str(target)
    if name.startswith("aten."):
        return name[len("aten."):]
    module = getattr(target, "__module__", None)
    if module in ("_operator", "operator") or (callable(target) and not hasattr(target, "_schema")):
        return f"{getattr(target, '__module__', '?')}.{getattr(target, '__name__', name)}".replace("_operator.",
                                                                                                   "operator.")
    return name


class LoweringContext:
    """What a lowering may ask about the node it lowers."""

    def __init__(self, node, meta: Any):
        self.node = node
        self.meta = meta        # the node's "val": a FakeTensor, a tuple of them, or a number

    def _tensor_meta(self, index: int | None):
        meta = self.meta if index is None else self.meta[index]
        return meta

    def out_dtype(self, index: int | None = None) -> np.dtype:
        from ..dtypes import to_numpy_dtype
        return to_numpy_dtype(self._tensor_meta(index).dtype)

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        from ..symbols import concrete
        return tuple(int(concrete(d)) for d in self._tensor_meta(index).shape)

    def result_used(self, index: int) -> bool:
        """Whether the graph reads result `index` of this multi-result node (through
        getitem; any other use reads them all)."""
        import operator
        return any(user.target is not operator.getitem or user.args[1] == index for user in self.node.users)

    def arg_meta(self, index: int):
        arg = self.node.args[index]
        return arg.meta.get("val") if hasattr(arg, "meta") else arg

    def arg_dtype(self, index: int) -> np.dtype | None:
        from ..dtypes import to_numpy_dtype
        meta = self.arg_meta(index)
        return to_numpy_dtype(meta.dtype) if hasattr(meta, "dtype") else None


class LoweringError(Exception):
    """An op pyxla cannot lower in this form; the graph falls back to eager PyTorch."""
