"""The operator converters, one module per family; importing this package registers them."""
from . import (activation, elementwise, indexing, linalg, normalization, quantization, reduction, resize,  # noqa: F401
               shape, spectral)
from . import control_flow, nn  # noqa: F401
