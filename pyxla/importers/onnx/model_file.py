"""Reading an ONNX model: a path, serialized bytes or a ModelProto becomes a checked
ModelProto whose tensors all hold their data in memory.

Tensors stored outside the model file (external data) are read only from files inside the
model's own directory: a location that is absolute, climbs out with '..', passes through a
symlink, or names anything but a regular file with one link is refused (the file is opened
once, component by component without following links, and checked through its descriptor),
so a model file cannot make pyxla read arbitrary files. Anything malformed (not a protobuf, a truncated tensor, a
graph onnx.checker rejects) is an OnnxImportError naming what was wrong, never a crash.
"""
from __future__ import annotations

import errno
import os
import re
import stat
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
    model, _ = read_model(source, base_dir)
    if check:
        check_model(model)
    return model


def read_model(source, base_dir: str | os.PathLike | None = None, data: bytes | None = None):
    """(the model in `source` with external data read in, whether it had any), unchecked.
    `data`: the file's bytes when `source` is a path the caller has read already (so the
    model parsed is the one those bytes are, even if the file changes meanwhile)."""
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
                data = path.read_bytes() if data is None else data
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
    external = has_external_data(model)
    load_external_data(model, base_dir)
    return model, external


def check_model(model, data: bytes | None = None) -> None:
    """onnx.checker's full check: the structural checks (types, attributes, opset imports,
    graph wiring) and strict shape and type inference, which refuses what ONNX runtimes
    refuse (a Conv with integer weights, Gather with float indices, a Loop whose condition
    does not match its body's). A refusal is an OnnxImportError with the checker's message
    and the node it names.

    `data`: the bytes `model` was parsed from, when it keeps no data outside them. The
    checker then reads those instead of the model serialized again, and their length is
    the model's size: measuring and serializing a 650 MB model (GPT-2 small's weights)
    took 2.4 and 1.5 s here."""
    import onnx

    if (len(data) if data is not None else model.ByteSize()) >= _PROTOBUF_LIMIT:
        return       # the checker cannot serialize it; the importer still checks every node
    error = _checker_error(data if data is not None else model)
    if error is not None and isinstance(error, onnx.shape_inference.InferenceError):
        # ONNX's inference does not give a function-defined operator's body the schema's
        # default for an attribute the node leaves unset (MeanVarianceNormalization's
        # `axes`, referenced by the body's Constant), so a valid model fails it; the
        # importer expands bodies with defaults, so check it the same way.
        filled = _with_function_defaults(model)
        if filled is not None and _checker_error(filled) is None:
            return
    if error is not None:
        raise OnnxImportError(f"the ONNX model is malformed: {_checker_message(model, error)}")


def _checker_error(model) -> Exception | None:
    """What onnx.checker says of `model` (a ModelProto or its bytes), None when it passes."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return e
    return None


def _checker_message(model, error: Exception) -> str:
    """The checker's message on one line, led by the node it is about: the one ONNX names,
    or, for an unnamed node, the one node of the main graph with the op type it gives."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    message = " ".join(lines) if lines else type(error).__name__
    found = re.search(r"\(op_type:([A-Za-z0-9_]+)(?:, node name: ([^)]*))?\)", message)
    if found is None:
        return message
    op_type, name = found.group(1), found.group(2)
    if not name:
        matches = [k for k, node in enumerate(model.graph.node) if node.op_type == op_type]
        if len(matches) != 1:
            return message
        name = f"{op_type} #{matches[0]}"
    return f"node {name!r} ({op_type}): {message}"


def _with_function_defaults(model):
    """A copy of the model whose nodes of function-defined operators carry every attribute
    their schema gives a default, or None when no node lacks one."""
    import onnx
    from onnx import helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    opsets = {imp.domain or "": int(imp.version) for imp in copy.opset_import}
    changed = False
    for node in _all_nodes(copy.graph):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if domain not in opsets:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
        except onnx.defs.SchemaError:
            continue
        if not (schema.has_function or schema.has_context_dependent_function):
            continue
        present = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():
            default = attr.default_value
            if name not in present and default.type:
                node.attribute.append(helper.make_attribute(name, helper.get_attribute_value(default)))
                changed = True
    return copy if changed else None


def _all_nodes(graph) -> Iterator:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _all_nodes(attr.g)
            for g in attr.graphs:
                yield from _all_nodes(g)


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


def has_external_data(model) -> bool:
    """Whether any tensor of the model keeps its data in another file."""
    return any(t.data_location == t.EXTERNAL for t in model_tensors(model))


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
    parts = location_parts(location, name)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxImportError(f"{name}: external data offset/length {info} are not integers") from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxImportError(f"{name}: negative external data offset or length {info}")
    what = f"{name}: external data file {location!r} in {str(base_dir)!r}"
    fd = _open_inside(base_dir, parts, what)
    try:
        return _read_checked(fd, offset, length, what)
    finally:
        os.close(fd)


def location_parts(location: str, what: str = "external data") -> list[str]:
    """The path components of an external data location; refused when it is absolute or
    climbs out with '..'."""
    if location.startswith(("/", "\\")) or Path(location).is_absolute() or (len(location) > 1 and location[1] == ":"):
        raise OnnxImportError(f"{what}: external data location {location!r} is an absolute path; only "
                              "files in the model's directory are read")
    parts = [p for p in location.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OnnxImportError(f"{what}: external data location {location!r} leaves the model's directory")
    if not parts:
        raise OnnxImportError(f"{what}: external data location {location!r} names no file")
    return parts


def _open_inside(base_dir, parts: list[str], what: str) -> int:
    """A descriptor of the file at `parts` under `base_dir`, each component opened relative to
    the one before without following symlinks: what is checked is what is read, so a file
    swapped for a symlink between a check and an open cannot lead outside the directory."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        current = os.open(base_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise OnnxImportError(f"{what}: cannot open the model's directory: {e.strerror or e}") from None
    try:
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            flags = os.O_RDONLY | nofollow | (getattr(os, "O_NONBLOCK", 0) if last else getattr(os, "O_DIRECTORY", 0))
            try:
                opened = os.open(part, flags, dir_fd=current)
            except OSError as e:
                why = ("is a symlink, which could lead outside the model's directory (external data: plain files)"
                       if e.errno in (errno.ELOOP, errno.EMLINK) or (e.errno == errno.ENOTDIR and not last)
                       else "does not exist" if e.errno == errno.ENOENT else f"cannot be opened: {e.strerror or e}")
                raise OnnxImportError(f"{what}: {'/'.join(parts[:k + 1])!r} {why}") from None
            os.close(current)
            current = opened
        return current
    except BaseException:
        os.close(current)
        raise


def _read_checked(fd: int, offset: int, length: int | None, what: str) -> bytes:
    """The tensor's bytes from the opened file, after checking that it is a regular file with
    one link (as onnx's checker requires: a hard link could name a file outside) and long enough."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OnnxImportError(f"{what} is not a regular file")
        if st.st_nlink != 1:
            raise OnnxImportError(f"{what} has {st.st_nlink} hard links; external data must have one")
        end = st.st_size if length is None else offset + length
        if end > st.st_size or offset > st.st_size:
            raise OnnxImportError(f"{what} has {st.st_size} bytes, the tensor needs bytes {offset}..{end}")
        chunks, at = [], offset
        while at < end:
            chunk = os.pread(fd, end - at, at)
            if not chunk:
                raise OnnxImportError(f"{what} ended at byte {at} while reading bytes {offset}..{end}")
            chunks.append(chunk)
            at += len(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise OnnxImportError(f"{what}: cannot read: {e.strerror or e}") from None
