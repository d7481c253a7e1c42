"""StableHLO (MLIR text) in: `parse_stablehlo(text) -> HloModule`.

Reads what JAX prints (`jax.jit(f).lower(...).as_text()`, `jax.export`'s `mlir_module()`):
lexer.py and parser.py read the text into an op tree (optree.py); converter.py and the op
families (ops_basic, ops_dot_conv, ops_reduce, ops_control, chlo) build the same HloModule
the HLO parser builds, so everything downstream is shared. See docs/stablehlo.md.
"""
from __future__ import annotations

from ..module import HloModule
from . import chlo, ops_basic, ops_control, ops_dot_conv, ops_reduce  # noqa: F401  (register handlers)
from .converter import HANDLERS, Converter
from .parser import MlirParser, parse_mlir


def parse_stablehlo(text: str, source: str = "<stablehlo>") -> HloModule:
    """Parse StableHLO MLIR text into an HloModule; a ParseError names the line and column."""
    tree = parse_mlir(text, source)
    return Converter(tree, MlirParser(text, source)).convert()


def looks_like_stablehlo(text: str) -> bool:
    """True for MLIR text (`module @...`, `func.func`), False for HLO text (`HloModule`)."""
    head = text.lstrip()[:4096]
    if head.startswith("HloModule"):
        return False
    return head.startswith(("module", "func.func", "#loc")) or "func.func" in head


def parse_program(text: str, source: str = "<input>") -> HloModule:
    """HLO text or StableHLO MLIR text, told apart by content, as an HloModule."""
    if looks_like_stablehlo(text):
        return parse_stablehlo(text, source)
    from ..parser import parse_module
    return parse_module(text, source)


def supported_ops() -> list[str]:
    return sorted(HANDLERS)


__all__ = ["looks_like_stablehlo", "parse_program", "parse_stablehlo", "supported_ops"]
