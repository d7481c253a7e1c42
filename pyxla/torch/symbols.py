"""Symbolic sizes specialised: each signature is traced with the sizes of its arguments."""
from __future__ import annotations

from typing import Any

import torch

from .ops.registry import LoweringError

# symbol -> its value in the signature being traced (sizes specialised to the arguments')
SYMBOLS: dict[Any, int] = {}


def bind_symbols(meta, arg) -> None:
    """Records the sizes of `arg` for the symbols its placeholder's metadata uses."""
    if isinstance(meta, torch.Tensor) and isinstance(arg, torch.Tensor):
        for dim, size in zip(meta.shape, arg.shape):
            _bind(dim, int(size))
    elif isinstance(meta, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        _bind(meta, arg)


def _bind(value, actual) -> None:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = value.node.expr
        if getattr(expr, "is_Symbol", False):
            SYMBOLS[expr] = actual


def concrete(value):
    """A symbolic size as its value in this signature."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = value.node.expr
        if SYMBOLS and hasattr(expr, "xreplace"):
            result = expr.xreplace(SYMBOLS)
            if isinstance(result, (int, float, bool)) or getattr(result, "is_number", False):
                kind = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(value)]
                return kind(result)
        hint = getattr(value.node, "hint", None)
        if hint is not None and not SYMBOLS:
            return hint
        raise LoweringError(f"the symbolic size {value} has no value in this signature")
    return value
