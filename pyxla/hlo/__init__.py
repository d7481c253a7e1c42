"""The HLO IR: types and shapes, the opcode registry, modules, text format, verifier, evaluator."""
from ..errors import EvaluationError, ParseError, ShapeError, VerifierError
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
