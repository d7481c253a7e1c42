"""ATen -> HLO lowerings, one module per op family; importing this package fills
registry.LOWERINGS."""
from . import (  # noqa: F401
    activation,
    conv,
    creation,
    elementwise,
    fused,
    indexing,
    linalg,
    norm,
    pool,
    reduction,
    shape,
    vision,
)
from .registry import LOWERINGS, LoweringContext, LoweringError, lowering, op_key

__all__ = ["LOWERINGS", "LoweringContext", "LoweringError", "lowering", "op_key"]
