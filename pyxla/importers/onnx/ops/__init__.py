"""The operator converters, one module per family; importing this package registers them."""
from . import (activation, elementwise, indexing, linalg, normalization, quantization, reduction, resize,  # noqa: F401
               shape, spectral)
from . import control_flow, detection, legacy, nn, patches, pool_indices, recurrent, sampling, sequence  # noqa: F401
