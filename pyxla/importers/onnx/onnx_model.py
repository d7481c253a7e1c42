"""An imported ONNX model as a callable: NumPy arrays in by input name, NumPy arrays out by
output name, compiled once per input signature.

    model = pyxla.onnx.load("resnet50.onnx")
    out = model(data=x)                 # or model({"data": x}) or model(x)
    probs = out["softmax"]

The graph is traced by `pyxla.jit` for the shapes and dtypes of the given inputs (a
symbolic dimension, `dim_param`, takes its size from them; the same name must have the
same size everywhere), so shape computations in the graph resolve at import time. Weights
are known to the converters as NumPy arrays, so everything computed only from weights
(BatchNormalization's scale and shift, transposed Gemm matrices, the targets of Reshape)
is computed once, in NumPy, when the model is imported; the large arrays that result are
then passed to the executable as parameters rather than embedded in the module as
constants, which keeps compilation fast (see PARAMETER_MIN_ELEMENTS).
"""
from __future__ import annotations

import re
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...errors import ArgumentError
from ...frontend.jit import jit
from ...frontend.tracing import Tracer
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape
from ...hlo.types import from_numpy_dtype
from .importer import GraphImporter
from .model_file import tensor_to_array
from .registry import NeedsKnownValue, OnnxImportError

# Constants with at least this many elements become parameters of the executable. On
# ResNet-50, embedding every weight as a constant made compilation slower (every pass that
# looks at literals - constant folding, CSE, the module hash - touches 25M floats) for no
# gain at run time; small constants stay, so fusion can still see them.
PARAMETER_MIN_ELEMENTS = 4096


@dataclass(frozen=True)
class InputSpec:
    """A graph input as the model declares it: name, element type and dimensions, each an
    int (dim_value), a str (dim_param) or None (unknown)."""
    name: str
    dtype: np.dtype | None
    dims: tuple[int | str | None, ...] | None    # None: the rank is not declared either

    def describe(self) -> str:
        dims = "?" if self.dims is None else "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"
        return f"{self.name}: {self.dtype or '?'}{dims}"


@dataclass
class CompiledSignature:
    """The executable for one set of input shapes and dtypes."""
    executable: Any
    module: HloModule            # as traced, weights as parameters (before optimisation)
    optimized: HloModule         # as it runs
    traced_inputs: list[str]     # the inputs passed to the executable, in parameter order
    weights: list[np.ndarray]    # the parameters after them
    traced_outputs: list[str]    # outputs the executable computes, in its result order
    known_outputs: dict[str, np.ndarray] = field(default_factory=dict)   # outputs known at import
    compile_seconds: float = 0.0


class OnnxModel:
    """A model ready to run; call it with the inputs (see the module docstring)."""

    def __init__(self, proto, backend: str | None = None):
        self.proto = proto
        self.backend = backend
        graph = proto.graph
        if len(graph.sparse_initializer):
            raise OnnxImportError(f"sparse initializer {graph.sparse_initializer[0].values.name!r} is not supported")
        self.initializers = {t.name: tensor_to_array(t, f"initializer {t.name!r}") for t in graph.initializer}
        specs = [_input_spec(v) for v in graph.input]
        self.importer = GraphImporter(proto)
        self.inputs = [s for s in specs if s.name not in self.initializers]
        # Inputs with an initializer (IR version 3 lists every weight as an input) may be fed
        # to replace the initializer; otherwise the initializer is their value.
        self.overridable = {s.name: s for s in specs if s.name in self.initializers}
        self.input_names = [s.name for s in self.inputs]
        self.output_names = [o.name for o in graph.output]
        self._compiled: dict[tuple, CompiledSignature] = {}
        self.static_inputs: set[str] = set()     # inputs compiled for by value (see _signature)

    # --- calling -----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> dict[str, np.ndarray]:
        if len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
            return self.run(args[0])
        if len(args) > len(self.input_names):
            raise ArgumentError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                f"got {len(args)} positional arguments")
        feeds = dict(zip(self.input_names, args))
        for name in kwargs:
            if name in feeds:
                raise ArgumentError(f"input {name!r} given both by position and by name")
        feeds.update(kwargs)
        return self.run(feeds)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The outputs for inputs `feeds` (name -> array), as a dict in output order."""
        arrays = self._check_inputs(feeds)
        sig = self._signature(arrays)
        outs = sig.executable.run_unchecked([arrays[n] for n in sig.traced_inputs] + sig.weights)
        computed = dict(zip(sig.traced_outputs, outs))
        return {name: computed[name] if name in computed else sig.known_outputs[name].copy()
                for name in self.output_names}

    def compile(self, feeds: Mapping[str, Any] | None = None) -> CompiledSignature:
        """The executable for these inputs' shapes and dtypes (by default the declared shapes,
        when every dimension is a number)."""
        return self._signature(self._check_inputs(self._example_feeds() if feeds is None else feeds))

    def hlo_text(self, feeds: Mapping[str, Any] | None = None, optimized: bool = False) -> str:
        """The HLO module for these inputs (by default the declared shapes): as imported
        (weights as parameters) or, with optimized=True, as it runs after fusion."""
        sig = self.compile(feeds)
        return (sig.optimized if optimized else sig.module).to_text()

    # --- inputs ------------------------------------------------------------------------------
    def _check_inputs(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ArgumentError(f"missing input {missing[0]!r}; the model's inputs are "
                                + ", ".join(s.describe() for s in self.inputs))
        unknown = [n for n in feeds if n not in self.input_names and n not in self.overridable]
        if unknown:
            raise ArgumentError(f"the model has no input {unknown[0]!r}; its inputs are "
                                + ", ".join(s.describe() for s in self.inputs))
        arrays: dict[str, np.ndarray] = {}
        symbols: dict[str, tuple[int, str]] = {}
        for spec in self.inputs + [self.overridable[n] for n in feeds if n in self.overridable]:
            arrays[spec.name] = _check_input(spec, feeds[spec.name], symbols)
        return arrays

    def _example_feeds(self) -> dict[str, np.ndarray]:
        feeds = {}
        for s in self.inputs:
            if s.dims is None or not all(isinstance(d, int) for d in s.dims) or s.dtype is None:
                raise ArgumentError(f"input {s.describe()} has no fixed shape: give example inputs")
            feeds[s.name] = np.zeros(s.dims, s.dtype)
        return feeds

    # --- compiling ---------------------------------------------------------------------------
    def _signature(self, arrays: dict[str, np.ndarray]) -> CompiledSignature:
        """The executable for these inputs. An input whose value a converter needs (a
        Reshape target, Slice bounds, axes fed as an input) becomes static: its value is
        part of the cache key and known while tracing, as jit's static arguments are."""
        fed = [n for n in self.input_names] + sorted(n for n in arrays if n in self.overridable)
        while True:
            traced = [n for n in fed if n not in self.static_inputs]
            static = {n: arrays[n] for n in fed if n in self.static_inputs}
            key = tuple((n, arrays[n].shape, arrays[n].dtype.str) for n in traced) + \
                tuple((n, a.shape, a.dtype.str, a.tobytes()) for n, a in static.items())
            sig = self._compiled.get(key)
            if sig is not None:
                return sig
            try:
                sig = self._trace_and_compile(traced, [arrays[n] for n in traced], static)
            except NeedsKnownValue as e:
                more = self._inputs_behind(e, arrays) - self.static_inputs
                if not more:
                    raise
                self.static_inputs |= more
                continue
            self._compiled[key] = sig
            return sig

    def _inputs_behind(self, error: NeedsKnownValue, arrays: dict[str, np.ndarray]) -> set[str]:
        """The graph inputs that the value a converter needs is computed from: the input
        itself, or the integer (or tiny) inputs among its ancestors."""
        name = getattr(error, "value_name", None)
        if name in arrays:
            return {name}
        producers = {o: node for node in self.proto.graph.node for o in node.output}
        ancestors, stack = set(), [name] if name else []
        while stack:
            n = stack.pop()
            if n in ancestors:
                continue
            ancestors.add(n)
            if n in producers:
                stack.extend(i for i in producers[n].input if i)
        candidates = ancestors if name in producers else set(arrays)
        return {n for n in candidates if n in arrays and (arrays[n].dtype.kind in "iub" or arrays[n].size <= 16)}

    def _trace_and_compile(self, names: list[str], arrays: list[np.ndarray],
                           static: dict[str, np.ndarray]) -> CompiledSignature:
        known_outputs: dict[str, np.ndarray] = {}
        traced_outputs: list[str] = []

        def graph_fn(*values):
            env = ChainMap(dict(zip(names, values)), static, self.initializers)
            scope = self.importer.run_graph(self.proto.graph, env)
            results = []
            for name in self.output_names:
                value = self.importer.lookup(scope, name, "graph output")
                if isinstance(value, Tracer):
                    traced_outputs.append(name)
                    results.append(value)
                elif isinstance(value, (np.ndarray, np.generic)):
                    known_outputs[name] = np.asarray(value)
                else:
                    raise OnnxImportError(f"graph output {name!r} is a {type(value).__name__}, not a tensor")
            return tuple(results)

        graph_fn.__name__ = _identifier(self.proto.graph.name or "onnx_graph")
        lowered = jit(graph_fn, backend=self.backend).lower(*arrays)
        weights = constants_to_parameters(lowered.module, PARAMETER_MIN_ELEMENTS)
        compiled = lowered.compile()          # compiles a copy: lowered.module stays as imported
        return CompiledSignature(compiled.executable, lowered.module, compiled.module, names, weights, traced_outputs,
                                 known_outputs, compiled.compile_seconds)


def constants_to_parameters(module: HloModule, min_elements: int) -> list[np.ndarray]:
    """Turn the entry computation's constants of at least `min_elements` elements into
    parameters after the existing ones; returns their values in parameter order. A literal
    used by several constants becomes one parameter."""
    entry = module.entry
    first = len(entry.parameters)
    weights: list[np.ndarray] = []
    by_literal: dict[int, HloInstruction] = {}
    for instr in list(entry.instructions):
        if instr.opcode != "constant" or not isinstance(instr.shape, ArrayShape) or instr.shape.size < min_elements:
            continue
        param = by_literal.get(id(instr.literal))
        if param is None:
            param = HloInstruction(module.fresh_name("weight"), "parameter", instr.shape,
                                   parameter_number=first + len(weights))
            entry.add_instruction(param)
            weights.append(np.ascontiguousarray(instr.literal, dtype=instr.shape.dtype.np_dtype))
            by_literal[id(instr.literal)] = param
        entry.replace_instruction(instr, param)
    if weights:
        entry.sort_topologically()
    return weights


def _input_spec(value_info) -> InputSpec:
    from onnx import helper

    which = value_info.type.WhichOneof("value")
    if which != "tensor_type":
        raise OnnxImportError(f"graph input {value_info.name!r} is a {which or 'value of no type'}; "
                              "only tensor inputs are supported")
    t = value_info.type.tensor_type
    dtype = None
    if t.elem_type:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
            from_numpy_dtype(dtype)
        except (KeyError, ValueError, TypeError):
            from onnx import TensorProto
            kind = TensorProto.DataType.Name(t.elem_type) if t.elem_type in TensorProto.DataType.values() \
                else str(t.elem_type)
            raise OnnxImportError(f"graph input {value_info.name!r} has element type {kind}, "
                                  "which pyxla does not support") from None
    dims = None
    if t.HasField("shape"):
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return InputSpec(value_info.name, dtype, dims)


def _check_input(spec: InputSpec, value: Any, symbols: dict[str, tuple[int, str]]) -> np.ndarray:
    """The fed value as an array of the declared dtype and rank; symbolic dimensions bind
    to its sizes (`symbols`: name -> (size, input that set it))."""
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__"):
        arr = np.asarray(value)
        if spec.dtype is not None and arr.dtype != spec.dtype:
            raise ArgumentError(f"input {spec.name!r}: expected {spec.dtype}, got an array of {arr.dtype}")
    else:
        try:
            arr = np.asarray(value, dtype=spec.dtype)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"input {spec.name!r}: {type(value).__name__} is not an array of {spec.dtype}: {e}") \
                from None
    if spec.dims is None:
        return arr
    if arr.ndim != len(spec.dims):
        raise ArgumentError(f"input {spec.describe()}: expected rank {len(spec.dims)}, got shape {list(arr.shape)}")
    for axis, (want, got) in enumerate(zip(spec.dims, arr.shape)):
        if isinstance(want, int) and want != got:
            raise ArgumentError(f"input {spec.describe()}: dimension {axis} must be {want}, got shape {list(arr.shape)}")
        if isinstance(want, str):
            size, source = symbols.setdefault(want, (got, spec.name))
            if size != got:
                raise ArgumentError(f"input {spec.describe()}: dimension {axis} ({want}) is {got}, but input "
                                    f"{source!r} gave {want} = {size}")
    return arr


def _identifier(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if cleaned and (cleaned[0].isalpha() or cleaned[0] == "_") else f"g_{cleaned}"
