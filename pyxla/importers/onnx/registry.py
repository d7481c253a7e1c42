"""The table of ONNX operator converters: one function per (domain, op type), in the file of
its family (ops/nn.py, ops/elementwise.py, ...).

A converter turns one ONNX node into pyxla operations while the importer traces the graph
under `pyxla.jit`. It receives a `NodeContext` and the node's inputs, each either

- a NumPy array: the value is known at import time (an initializer kept as a constant, a
  `Constant` node, or the result of a node whose inputs were all known, such as the
  `Shape -> Gather -> Concat` chains that compute a `Reshape` target), or
- a traced `pyxla.Array`: the value depends on the model's inputs or large weights,
- or None for an omitted optional input,

and returns one value or a tuple of values, one per node output. `ctx.xp` is `numpy` when
every input is known and `pyxla.numpy` otherwise, so a converter written against `ctx.xp`
keeps shape computations concrete (shapes that depend on input values are resolved at import
time for the given input shapes) and traces everything else.

An operator, attribute or attribute value a converter does not support raises
`ctx.unsupported(...)`, an `OnnxImportError` naming the node, its op type and the attribute.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import PyxlaError

DEFAULT_DOMAIN = ""          # "ai.onnx"; the importer maps "ai.onnx" to it


class OnnxImportError(PyxlaError, ValueError):
    """A model pyxla cannot import: names the node, its op type and what was wrong."""


@dataclass(frozen=True)
class Converter:
    fn: Callable[..., Any]
    since: int               # lowest opset this converter implements


CONVERTERS: dict[tuple[str, str], list[Converter]] = {}


def converter(*op_types: str, domain: str = DEFAULT_DOMAIN, since: int = 1):
    """Register `fn(ctx, *inputs)` for each op type, valid from opset `since` (a later
    registration with a higher `since` takes over from that opset on)."""
    def register(fn):
        for op in op_types:
            entries = CONVERTERS.setdefault((domain, op), [])
            entries.append(Converter(fn, since))
            entries.sort(key=lambda c: c.since)
        return fn
    return register


def find_converter(domain: str, op_type: str, opset: int) -> Converter | None:
    """The converter for this op at this opset: the registration with the highest `since`
    not above `opset`."""
    best = None
    for c in CONVERTERS.get((domain, op_type), []):
        if c.since <= opset:
            best = c
    return best


@dataclass
class NodeContext:
    """What a converter knows about the node it converts."""
    name: str                            # the node's name, or "<op_type> #<index>" when unnamed
    op_type: str
    domain: str
    opset: int                           # the model's opset for this node's domain
    attrs: dict[str, Any]                # decoded attributes (ints, floats, str, tensors as np arrays, graphs)
    input_names: list[str]
    output_names: list[str]
    xp: Any                              # numpy when all inputs are known, else pyxla.numpy
    used_attrs: set[str] = field(default_factory=set)
    importer: Any = None                 # the importer, for control-flow subgraphs
    scope: Any = None                    # the values visible at this node (subgraphs read outer names)

    def attr(self, name: str, default: Any = None) -> Any:
        self.used_attrs.add(name)
        return self.attrs.get(name, default)

    def unsupported(self, what: str) -> OnnxImportError:
        return OnnxImportError(f"node {self.name!r} ({self.op_type}, opset {self.opset}): {what} "
                               f"is not supported")

    def error(self, what: str) -> OnnxImportError:
        return OnnxImportError(f"node {self.name!r} ({self.op_type}, opset {self.opset}): {what}")


def is_known(value: Any) -> bool:
    """True when the value is known at import time (a NumPy array or scalar)."""
    return isinstance(value, (np.ndarray, np.generic))


class NeedsKnownValue(OnnxImportError):
    """A converter needs the value of a traced input at import time. The importer answers
    by compiling for that graph input's value (see onnx_model.py), as jit does for a
    static argument; `value` is the traced input."""

    def __init__(self, message: str, value: Any):
        super().__init__(message)
        self.value = value


def known(ctx: NodeContext, value: Any, what: str) -> np.ndarray:
    """The import-time value of an input that must be known (a shape, axes, pads ...)."""
    if not is_known(value):
        raise NeedsKnownValue(str(ctx.unsupported(f"{what} computed from the model's inputs (it must be known "
                                                  "when the model is loaded)")), value)
    return np.asarray(value)
