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

from .registry import OnnxImportError

__all__ = ["load", "OnnxModel", "OnnxImportError"]


def __getattr__(name: str):
    # the callable's module and the onnx.backend adapter load on first use
    if name == "OnnxModel":
        from .onnx_model import OnnxModel
        return OnnxModel
    if name == "backend":
        import importlib
        return importlib.import_module(".backend", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load(source, *, backend: str | None = None, base_dir: str | os.PathLike | None = None,
         check: bool = True, dynamic: bool = False, shape_constraints=(), size_buckets=None):
    """Import an ONNX model (a path, serialized bytes or an onnx.ModelProto) as an OnnxModel.

    Operators, attributes and types pyxla cannot import are refused here, naming the node.
    The model compiles on its first call for the shapes of the inputs given (and again for
    new shapes). `backend` is a pyxla backend name (default: jit's default, "cpu");
    `base_dir` is where external data files are read from (default: the model file's
    directory); `check=False` skips onnx.checker.

    `dynamic=True`: each input dimension given by name (`dim_param`) is a symbol of that name,
    shared by the inputs that name it; the graph is traced once and compiled once per size
    bucket, as `jit(polymorphic_shapes=...)` (docs/dynamic-shapes.md). `shape_constraints`
    and `size_buckets` are jit's.

    A model this host loaded and compiled before is found in the load index
    (load_index.py) by its bytes before it is parsed: then neither onnx nor the tracer is
    imported until a call needs to trace."""
    from . import load_index
    from .onnx_model import OnnxModel

    options = {"backend": backend, "dynamic": dynamic, "shape_constraints": tuple(shape_constraints),
               "size_buckets": size_buckets}
    name = backend or _default_backend()
    indexed = load_index.enabled(name, dynamic)
    data = _source_bytes(source)
    if indexed and data is not None and len(data) < load_index.PROTOBUF_LIMIT:
        # the file's own bytes: an entry under this key was written only for a model that
        # keeps no data outside them, and it describes the inputs and outputs
        index_key = load_index.model_key(data, name, check)
        known = load_index.load_model_entry(index_key)
        if known is not None and known.get("model") is not None:
            try:
                model = OnnxModel(None, **options, index_key=index_key, known=known,
                                  reload=lambda: _parse(source, base_dir, data)[0])
                model.index_describes = True
                return model
            except (ValueError, KeyError, TypeError) as e:
                load_index.discard_model_entry(index_key, f"unusable ({type(e).__name__}: {e})")
    proto, external = _parse(source, base_dir, data)
    index_key = known = None
    describes = False
    own_bytes = data if data is not None and not external else None   # all the model is, serialized
    # (their length is its size: ByteSize walks the whole message, seconds for a large model)
    if indexed and (len(own_bytes) if own_bytes is not None else proto.ByteSize()) < load_index.PROTOBUF_LIMIT:
        describes = own_bytes is not None
        # the model's whole content (external data read in), so an edited weight file misses
        index_key = load_index.model_key(data if describes else proto.SerializeToString(deterministic=True),
                                         name, check)
        known = load_index.load_model_entry(index_key)
    if check and known is None:
        from .model_file import check_model
        check_model(proto, own_bytes)
    model = OnnxModel(proto, **options, index_key=index_key, known=known)
    model.index_describes = describes
    return model


def _default_backend() -> str:
    # jit's default is "cpu" until set_default_backend, which imports jit: no need to
    # import the tracer just to ask
    import sys
    jit = sys.modules.get(f"{__name__.split('.')[0]}.frontend.jit")
    return jit.default_backend() if jit is not None else "cpu"


def _source_bytes(source) -> bytes | None:
    """The model's bytes as given (a file's contents), or None for a ModelProto or a file
    that cannot be read (load_model then says why)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                return f.read()
        except OSError:
            return None
    return None


def _parse(source, base_dir, data: bytes | None):
    """(the ModelProto, whether it kept data in other files), unchecked: from the bytes
    already read and hashed, when there are some."""
    from .model_file import read_model
    if data is not None and not isinstance(source, (str, os.PathLike)):
        source = data
    return read_model(source, base_dir, data if isinstance(source, (str, os.PathLike)) else None)
