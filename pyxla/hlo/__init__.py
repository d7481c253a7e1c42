"""The HLO IR: types and shapes, the opcode registry, modules, text format, verifier, evaluator."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import EvaluationError, ParseError, ShapeError, VerifierError

if TYPE_CHECKING:
    from .attributes import ConvDimensionNumbers, PadDim, SliceDim, WindowDim
    from .builder import HloBuilder, scalar_computation
    from .computation import HloComputation
    from .evaluator import evaluate_computation, evaluate_module, flatten_result
    from .instruction import HloInstruction
    from .module import HloModule
    from .ops import has_side_effects, known_opcodes, op_def
    from .parser import parse_module
    from .printer import print_module
    from .shape import ArrayShape, Shape, TokenShape, TupleShape, array, scalar
    from .types import (
        BF16,
        ELEMENT_TYPES,
        F4E2M1FN,
        F8E3M4,
        F8E4M3,
        F8E4M3B11FNUZ,
        F8E4M3FN,
        F8E4M3FNUZ,
        F8E5M2,
        F8E5M2FNUZ,
        F16,
        F32,
        F64,
        PRED,
        S2,
        S4,
        S8,
        S16,
        S32,
        S64,
        U2,
        U4,
        U8,
        U16,
        U32,
        U64,
        ElementType,
        element_type,
        from_numpy_dtype,
    )
    from .verifier import verify_module

# The names below load their module on first use: a process that only runs cached code
# (the ONNX load index) needs shapes and types, not the registry, parser or evaluator.
_SUBMODULE_OF = {
    "ConvDimensionNumbers": ".attributes", "PadDim": ".attributes", "SliceDim": ".attributes",
    "WindowDim": ".attributes", "HloBuilder": ".builder", "scalar_computation": ".builder",
    "HloComputation": ".computation", "evaluate_computation": ".evaluator",
    "evaluate_module": ".evaluator", "flatten_result": ".evaluator",
    "HloInstruction": ".instruction", "HloModule": ".module", "has_side_effects": ".ops",
    "known_opcodes": ".ops", "op_def": ".ops", "parse_module": ".parser",
    "print_module": ".printer", "ArrayShape": ".shape", "Shape": ".shape",
    "TokenShape": ".shape", "TupleShape": ".shape", "array": ".shape", "scalar": ".shape",
    "BF16": ".types", "ELEMENT_TYPES": ".types", "ElementType": ".types", "F16": ".types",
    "F32": ".types", "F4E2M1FN": ".types", "F64": ".types", "F8E3M4": ".types",
    "F8E4M3": ".types", "F8E4M3B11FNUZ": ".types", "F8E4M3FN": ".types",
    "F8E4M3FNUZ": ".types", "F8E5M2": ".types", "F8E5M2FNUZ": ".types", "PRED": ".types",
    "S16": ".types", "S2": ".types", "S32": ".types", "S4": ".types", "S64": ".types",
    "S8": ".types", "U16": ".types", "U2": ".types", "U32": ".types", "U4": ".types",
    "U64": ".types", "U8": ".types", "element_type": ".types", "from_numpy_dtype": ".types",
    "verify_module": ".verifier",
}


def __getattr__(name: str):
    module = _SUBMODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def parse_stablehlo(text: str, source: str = "<stablehlo>") -> HloModule:
    """Parse StableHLO MLIR text (what JAX's `lower().as_text()` prints) into an HloModule.
    The converter (pyxla/hlo/stablehlo) loads on first use."""
    from .stablehlo import parse_stablehlo as parse
    return parse(text, source)


__all__ = [
    "ArrayShape", "BF16", "ConvDimensionNumbers", "ELEMENT_TYPES", "ElementType", "EvaluationError",
    "F16", "F32", "F4E2M1FN", "F64", "F8E3M4", "F8E4M3", "F8E4M3B11FNUZ", "F8E4M3FN", "F8E4M3FNUZ",
    "F8E5M2", "F8E5M2FNUZ", "HloBuilder", "HloComputation", "HloInstruction", "HloModule", "PRED",
    "PadDim", "ParseError", "S16", "S2", "S32", "S4", "S64", "S8", "Shape", "ShapeError", "SliceDim",
    "TokenShape", "TupleShape", "U16", "U2", "U32", "U4", "U64", "U8", "VerifierError", "WindowDim", "array",
    "element_type", "evaluate_computation", "evaluate_module", "flatten_result", "from_numpy_dtype",
    "has_side_effects", "known_opcodes", "op_def", "parse_module", "parse_stablehlo", "print_module", "scalar",
    "scalar_computation",
    "verify_module",
]
