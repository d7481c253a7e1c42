"""Reading an ONNX model: a path, serialized bytes or a ModelProto becomes a checked
ModelProto whose tensors all hold their data in memory.

Tensors stored outside the model file (external data) are read only from files inside the
model's own directory: a location that is absolute, climbs out with '..', or resolves
(through a symlink) to a file outside that directory is refused, so a model file cannot
make pyxla read arbitrary files. Anything malformed (not a protobuf, a truncated tensor, a
graph onnx.checker rejects) is an OnnxImportError naming what was wrong, never a crash.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Union

import numpy as np

from .registry import OnnxImportError

ModelSource = Union[str, os.PathLike, bytes, "onnx.ModelProto"]  # noqa: F821

_PROTOBUF_LIMIT = 2 ** 31 - 1     # onnx.checker serializes the model: only below protobuf's 2 GiB


def load_model(source, base_dir: str | os.PathLike | None = None, check: bool = True):
    """The model in `source` with external data read in, checked by onnx.checker.

    `base_dir` is the directory external data files are read from; for a path it defaults
    to the file's directory, for bytes or a ModelProto there is none (a model that refers
    to external data must then be given by path or with base_dir)."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
    else:
        if isinstance(source, (bytes, bytearray, memoryview)):
            data, what = bytes(source), "the model bytes"
        elif isinstance(source, (str, os.PathLike)):
            path = Path(source)
            try:
                data = path.read_bytes()
            except OSError as e:
                raise OnnxImportError(f"cannot read ONNX model {str(path)!r}: {e.strerror or e}") from None
            what = repr(str(path))
            if base_dir is None:
                base_dir = path.resolve().parent
        else:
            raise OnnxImportError("an ONNX model is a path, bytes or an onnx.ModelProto, "
                                  f"not a {type(source).__name__}")
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise OnnxImportError(f"{what} is not an ONNX model (protobuf decoding failed: {e})") from None
        if not model.HasField("graph"):
            raise OnnxImportError(f"{what} is not an ONNX model: it has no graph")
    load_external_data(model, base_dir)
    if check:
        check_model(model)
    return model


def check_model(model) -> None:
    """onnx.checker's structural checks (types, attributes, opset imports, graph wiring)."""
    import onnx

    if model.ByteSize() >= _PROTOBUF_LIMIT:
        return       # the checker cannot serialize it; the importer still checks every node
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, onnx.onnx_cpp2py_export.checker.ValidationError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxImportError(f"the ONNX model is malformed: {first}") from None


# --- tensors ------------------------------------------------------------------------------

def model_tensors(model) -> Iterator:
    """Every TensorProto in the model: initializers and tensor attributes, in subgraphs too."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph) -> Iterator:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node) -> Iterator:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        if attr.HasField("g"):
            yield from _graph_tensors(attr.g)
        for g in attr.graphs:
            yield from _graph_tensors(g)


def tensor_to_array(tensor, what: str | None = None) -> np.ndarray:
    """A TensorProto's value (its data in memory); malformed data is an OnnxImportError."""
    from onnx import numpy_helper

    what = what or f"tensor {tensor.name!r}"
    if tensor.data_location == tensor.EXTERNAL:
        raise OnnxImportError(f"{what} keeps its data in an external file that was not read "
                              "(load the model from its path)")
    try:
        return np.asarray(numpy_helper.to_array(tensor))
    except Exception as e:  # numpy_helper raises ValueError, TypeError or IndexError on bad data
        raise OnnxImportError(f"{what} is malformed: {e}") from None


# --- external data ------------------------------------------------------------------------

def load_external_data(model, base_dir: str | os.PathLike | None) -> None:
    """Read every externally stored tensor into the model (raw_data), from files inside
    `base_dir` only."""
    for tensor in model_tensors(model):
        if tensor.data_location == tensor.EXTERNAL:
            tensor.raw_data = _read_external(tensor, base_dir)
            del tensor.external_data[:]
            tensor.data_location = tensor.DEFAULT


def _read_external(tensor, base_dir) -> bytes:
    info = {entry.key: entry.value for entry in tensor.external_data}
    name = f"tensor {tensor.name!r}"
    location = info.get("location")
    if not location:
        raise OnnxImportError(f"{name} is stored externally but names no location")
    if base_dir is None:
        raise OnnxImportError(f"{name} is stored in the external file {location!r}: load the model "
                              "from its path (or give base_dir) so the file can be found")
    path = safe_external_path(base_dir, location, name)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxImportError(f"{name}: external data offset/length {info} are not integers") from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxImportError(f"{name}: negative external data offset or length {info}")
    try:
        size = path.stat().st_size
        if offset + (length or 0) > size:
            raise OnnxImportError(f"{name}: external data {location!r} has {size} bytes, the tensor needs "
                                  f"bytes {offset}..{offset + (length or 0)}")
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read() if length is None else f.read(length)
    except OSError as e:
        raise OnnxImportError(f"{name}: cannot read external data {location!r}: {e.strerror or e}") from None


def safe_external_path(base_dir: str | os.PathLike, location: str, what: str = "external data") -> Path:
    """`location` as a file inside `base_dir`; refused when it is absolute, contains '..',
    or resolves outside the directory (a symlink pointing out)."""
    loc = Path(location)
    if loc.is_absolute() or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise OnnxImportError(f"{what}: external data location {location!r} is an absolute path; only "
                              "files in the model's directory are read")
    if ".." in Path(location.replace("\\", "/")).parts:
        raise OnnxImportError(f"{what}: external data location {location!r} leaves the model's directory")
    base = Path(base_dir).resolve()
    path = (base / loc).resolve()
    if base != path and base not in path.parents:
        raise OnnxImportError(f"{what}: external data location {location!r} resolves to {str(path)!r}, "
                              "outside the model's directory")
    if not path.is_file():
        raise OnnxImportError(f"{what}: external data file {location!r} does not exist in {str(base)!r}")
    return path
