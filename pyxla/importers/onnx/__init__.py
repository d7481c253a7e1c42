"""The ONNX importer: an ONNX model becomes an HLO module, compiled and callable with NumPy
arrays by input name.

    import pyxla.onnx
    model = pyxla.onnx.load("model.onnx")        # a path, bytes or an onnx.ModelProto
    outputs = model(input_name=x)                # {output name: np.ndarray}

Files, in pipeline order: model_file.py (reading and checking the file, external data),
importer.py (the graph walk), ops/ (one converter per operator, by family, registered in
registry.py), onnx_model.py (the callable: input checks, one executable per input
signature), backend.py (onnx.backend.base.Backend, for ONNX's own test suite).
"""
from __future__ import annotations

import os

from .onnx_model import OnnxModel
from .registry import OnnxImportError

__all__ = ["load", "OnnxModel", "OnnxImportError"]


def load(source, *, backend: str | None = None, base_dir: str | os.PathLike | None = None,
         check: bool = True, dynamic: bool = False, shape_constraints=(), size_buckets=None) -> OnnxModel:
    """Import an ONNX model (a path, serialized bytes or an onnx.ModelProto).

    Operators, attributes and types pyxla cannot import are refused here, naming the node.
    The model compiles on its first call for the shapes of the inputs given (and again for
    new shapes). `backend` is a pyxla backend name (default: jit's default, "cpu");
    `base_dir` is where external data files are read from (default: the model file's
    directory); `check=False` skips onnx.checker.

    `dynamic=True`: each input dimension given by name (`dim_param`) is a symbol of that name,
    shared by the inputs that name it; the graph is traced once and compiled once per size
    bucket, as `jit(polymorphic_shapes=...)` (docs/dynamic-shapes.md). `shape_constraints`
    and `size_buckets` are jit's."""
    from ...frontend.jit import default_backend
    from . import load_index
    from .model_file import check_model, load_model

    proto = load_model(source, base_dir=base_dir, check=False)
    index_key = known = None
    name = backend or default_backend()
    if load_index.enabled(name, dynamic) and proto.ByteSize() < load_index.PROTOBUF_LIMIT:
        # the model's whole content (external data read in), so an edited weight file misses
        index_key = load_index.model_key(proto.SerializeToString(deterministic=True), name, check)
        known = load_index.load_model_entry(index_key)
    if check and known is None:
        check_model(proto)
    return OnnxModel(proto, backend=backend, dynamic=dynamic, shape_constraints=tuple(shape_constraints),
                     size_buckets=size_buckets, index_key=index_key, known=known)
