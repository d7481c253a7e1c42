"""`pyxla.onnx`: import and run ONNX models (needs the `onnx` package: pip install 'pyxla[onnx]').

    import pyxla.onnx
    model = pyxla.onnx.load("model.onnx")
    outputs = model(input_name=x)           # {output name: np.ndarray}

`pyxla.onnx.backend` is an onnx.backend.base.Backend, for onnx.backend.test.BackendTest.
Importing this module is light: onnx, the importer and the compiler load when a model
needs them (a model found in the load index needs none of them).
"""
from .importers.onnx import OnnxImportError, load  # noqa: F401


def __getattr__(name: str):
    if name in ("OnnxModel", "backend"):
        from .importers import onnx
        return getattr(onnx, name)
    raise AttributeError(f"module 'pyxla.onnx' has no attribute {name!r}")
