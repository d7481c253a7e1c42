"""`pyxla.onnx`: import and run ONNX models (needs the `onnx` package: pip install 'pyxla[onnx]').

    import pyxla.onnx
    model = pyxla.onnx.load("model.onnx")
    outputs = model(input_name=x)           # {output name: np.ndarray}

`pyxla.onnx.backend` is an onnx.backend.base.Backend, for onnx.backend.test.BackendTest.
"""
from .importers.onnx import (  # noqa: F401
    OnnxImportError,
    OnnxModel,
    backend,
    load,
)
