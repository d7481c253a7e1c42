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

A sequence value (an input, output or intermediate of sequence type) is a Python list of
arrays, its length part of the signature: each element is traced as an array of its own.
An optional value is its content, or None when empty.
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import ArgumentError, PyxlaError
from ...runtime import disk_cache
from . import load_index
from .registry import NeedsKnownValue, OnnxImportError

if TYPE_CHECKING:
    from ...frontend.polymorphic import PolymorphicFunction
    from ...hlo.module import HloModule
    from .importer import GraphImporter

# (The tracer, the importer's converters and the compiler are imported where a call traces:
# a model served by the load index never needs them.)

# Constants with at least this many elements become parameters of the executable. On
# ResNet-50, embedding every weight as a constant made compilation slower (every pass that
# looks at literals - constant folding, CSE, the module hash - touches 25M floats) for no
# gain at run time; small constants stay, so fusion can still see them.
PARAMETER_MIN_ELEMENTS = 4096


@dataclass(frozen=True)
class InputSpec:
    """A graph input as the model declares it: name, element type and dimensions, each an
    int (dim_value), a str (dim_param) or None (unknown). A sequence's dtype and dims are
    its elements'; an optional's content is `element`."""
    name: str
    dtype: np.dtype | None
    dims: tuple[int | str | None, ...] | None    # None: the rank is not declared either
    kind: str = "tensor"                         # "tensor", "sequence" or "optional"
    element: InputSpec | None = None             # an optional's content

    def describe(self) -> str:
        if self.kind == "optional":
            return f"{self.name}: optional({self.element.describe().split(': ', 1)[1]})"
        dims = "?" if self.dims is None else "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"
        tensor = f"{self.dtype or '?'}{dims}"
        return f"{self.name}: " + (f"sequence({tensor})" if self.kind == "sequence" else tensor)


@dataclass
class CompiledSignature:
    """The executable for one set of input shapes and dtypes."""
    executable: Any
    module: HloModule | None     # as traced, weights as parameters (before optimisation); None when
                                 # made from the load index (hlo_text traces again)
    optimized: HloModule | None  # as it runs (None when made from the load index)
    # the arrays passed to the executable, in parameter order: (input name, element index
    # in a sequence input or None)
    traced_inputs: list[tuple[str, int | None]]
    # the parameters after them, as the executable takes them (a convolution kernel may be
    # reordered once into the order its kernel reads it: CpuExecutable.prepare_argument)
    weights: list[Any]
    # how to assemble each output (see _output_layout): from the executable's results and
    # values known at import
    outputs: dict[str, Any] = field(default_factory=dict)
    compile_seconds: float = 0.0


class OnnxModel:
    """A model ready to run; call it with the inputs (see the module docstring)."""

    def __init__(self, proto, backend: str | None = None, dynamic: bool = False,
                 shape_constraints: tuple[str, ...] = (), size_buckets: Mapping[str, Any] | None = None,
                 index_key: str | None = None, known: dict | None = None, reload=None):
        """`index_key`: the model's key in the load index (load_index.py), when it serves this
        model; `known`: its model entry, when this model was imported before with this code
        (the graph walk's checks are then skipped, and made only when a call must trace).
        `proto` may be None when the entry describes the model's inputs and outputs; then
        `reload()` parses it, the first time it is needed."""
        self._proto = proto
        self._reload = reload
        self.backend = backend
        self.dynamic = dynamic
        self._initializers: dict[str, np.ndarray] | None = None
        self._importer: GraphImporter | None = None
        described = known.get("model") if known else None
        if proto is None and described is None:
            raise ValueError("OnnxModel needs the model, or a load index entry that describes it")
        if proto is not None and len(proto.graph.sparse_initializer):
            raise OnnxImportError(f"sparse initializer {proto.graph.sparse_initializer[0].values.name!r} "
                                  "is not supported")
        if known is None:   # refuse what cannot be imported, now
            from .importer import GraphImporter
            self._initializers = self.initializers
            self._importer = GraphImporter(proto)
        if described is not None:
            self.inputs = [spec_from_json(s) for s in described["inputs"]]
            self.overridable = {s.name: s for s in (spec_from_json(d) for d in described["overridable"])}
            self.output_names = [str(n) for n in described["outputs"]]
        else:
            graph = proto.graph
            specs = [_input_spec(v) for v in graph.input]
            initialized = {t.name for t in graph.initializer}
            self.inputs = [s for s in specs if s.name not in initialized]
            # Inputs with an initializer (IR version 3 lists every weight as an input) may be
            # fed to replace the initializer; otherwise the initializer is their value.
            self.overridable = {s.name: s for s in specs if s.name in initialized}
            self.output_names = [o.name for o in graph.output]
        self.index_key = index_key
        # whether the model entry may describe the model (its key is the file's own bytes,
        # so a warm load need not parse it): set by load
        self.index_describes = False
        self.input_names = [s.name for s in self.inputs]
        self._compiled: dict[tuple, CompiledSignature] = {}
        self.static_inputs: set[str] = set(known["static_inputs"]) if known else set()   # (see _signature)
        self.polymorphic: PolymorphicFunction | None = None
        self._dynamic_outputs: dict[str, Any] = {}
        if dynamic:
            self.polymorphic = self._polymorphic_function(tuple(shape_constraints), size_buckets)

    @property
    def proto(self):
        """The onnx.ModelProto (parsed on first use when the load index described the model)."""
        if self._proto is None:
            self._proto = self._reload()
        return self._proto

    def describe(self) -> dict | None:
        """The declared inputs and outputs as JSON for the load index's model entry, or None
        when a dtype would not read back the same."""
        try:
            return {"inputs": [spec_json(s) for s in self.inputs],
                    "overridable": [spec_json(s) for s in self.overridable.values()],
                    "outputs": list(self.output_names)}
        except (TypeError, ValueError):
            return None

    @property
    def initializers(self) -> dict[str, np.ndarray]:
        """The initializers as arrays, by name (converted on first use)."""
        if self._initializers is None:
            from .model_file import tensor_to_array
            self._initializers = {t.name: tensor_to_array(t, f"initializer {t.name!r}")
                                  for t in self.proto.graph.initializer}
        return self._initializers

    @property
    def importer(self) -> GraphImporter:
        if self._importer is None:
            from .importer import GraphImporter
            self._importer = GraphImporter(self.proto)
        return self._importer

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
        if self.polymorphic is not None:
            return self._run_dynamic(arrays)
        sig = self._signature(arrays)
        leaves = [arrays[n] if i is None else arrays[n][i] for n, i in sig.traced_inputs]
        outs = sig.executable.run_unchecked(leaves + sig.weights)
        return {name: _assemble(sig.outputs[name], outs) for name in self.output_names}

    def compile(self, feeds: Mapping[str, Any] | None = None) -> CompiledSignature:
        """The executable for these inputs' shapes and dtypes (by default the declared shapes,
        when every dimension is a number)."""
        return self._signature(self._check_inputs(self._example_feeds() if feeds is None else feeds))

    def hlo_text(self, feeds: Mapping[str, Any] | None = None, optimized: bool = False) -> str:
        """The HLO module for these inputs (by default the declared shapes): as imported
        (weights as parameters) or, with optimized=True, as it runs after fusion."""
        sig = self.compile(feeds)
        if sig.module is None:   # made from the load index: trace again for the modules
            arrays = self._check_inputs(self._example_feeds() if feeds is None else feeds)
            fed = self.input_names + sorted(n for n in arrays if n in self.overridable)
            traced = {n: arrays[n] for n in fed if n not in self.static_inputs}
            static = {n: arrays[n] for n in fed if n in self.static_inputs}
            again = self._trace_and_compile(traced, static)[0]
            sig.module, sig.optimized = again.module, again.optimized
        return (sig.optimized if optimized else sig.module).to_text()

    # --- inputs ------------------------------------------------------------------------------
    def _check_inputs(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ArgumentError(f"missing input {missing[0]!r}; the model's inputs are "
                                + ", ".join(s.describe() for s in self.inputs))
        unknown = [n for n in feeds if n not in self.input_names and n not in self.overridable]
        if unknown:
            raise ArgumentError(f"the model has no input {unknown[0]!r}; its inputs are "
                                + ", ".join(s.describe() for s in self.inputs))
        arrays: dict[str, Any] = {}
        symbols: dict[str, tuple[int, str]] = {}
        for spec in self.inputs + [self.overridable[n] for n in feeds if n in self.overridable]:
            arrays[spec.name] = _check_value(spec, feeds[spec.name], symbols)
        return arrays

    def _example_feeds(self) -> dict[str, np.ndarray]:
        feeds = {}
        for s in self.inputs:
            if s.kind != "tensor" or s.dims is None or not all(isinstance(d, int) for d in s.dims) or s.dtype is None:
                raise ArgumentError(f"input {s.describe()} has no fixed shape: give example inputs")
            feeds[s.name] = np.zeros(s.dims, s.dtype)
        return feeds

    # --- compiling ---------------------------------------------------------------------------
    def _signature(self, arrays: dict[str, Any]) -> CompiledSignature:
        """The executable for these inputs. An input whose value a converter needs (a
        Reshape target, Slice bounds, axes fed as an input) becomes static: its value is
        part of the cache key and known while tracing, as jit's static arguments are."""
        fed = [n for n in self.input_names] + sorted(n for n in arrays if n in self.overridable)
        while True:
            traced = [n for n in fed if n not in self.static_inputs]
            static = {n: arrays[n] for n in fed if n in self.static_inputs}
            key = tuple((n, _value_key(arrays[n], False)) for n in traced) + \
                tuple((n, _value_key(v, True)) for n, v in static.items())
            sig = self._compiled.get(key)
            if sig is not None:
                return sig
            signature = call_key = None
            if self.index_key is not None:
                signature = [[n, n in static, load_index.value_signature(arrays[n], n in static)] for n in fed]
                call_key = load_index.call_key(self.index_key, signature)
                sig = self._from_index(call_key, signature)
                if sig is not None:
                    self._compiled[key] = sig
                    return sig
            try:
                sig = self._trace_and_compile({n: arrays[n] for n in traced}, static)[0]
            except NeedsKnownValue as e:
                more = self._inputs_behind(e, arrays) - self.static_inputs
                if not more:
                    raise
                self.static_inputs |= more
                continue
            self._compiled[key] = sig
            if call_key is not None:
                self._record(call_key, signature, sig)
            return sig

    # --- the load index (load_index.py) ----------------------------------------------------------
    def _from_index(self, call_key: str, signature: list) -> CompiledSignature | None:
        """The executable for this signature made from the load index's entry: the object
        code from the executable cache under the key the entry names, the weights as the
        executable takes them (load_index.py); None when there is no usable entry."""
        from ...backends.cpu.runtime.cached_executable import executable_from_description
        meta = load_index.load_call_entry(call_key, signature, self.output_names)
        if meta is None:
            return None
        start = time.perf_counter()
        try:
            executable = executable_from_description(meta["executable"])
            if executable is None:
                raise load_index.BadEntry("its executable is not in the cache")
            first = len(meta["traced_inputs"])
            weights = load_index.make_weights(meta["weights"], call_key)
            if len(executable.parameter_shapes) != first + len(weights) or \
                    any(w.shape != tuple(shape.dims) for w, shape in
                        zip(weights, executable.parameter_shapes[first:]) if isinstance(w, np.ndarray)):
                raise load_index.BadEntry("its parameters do not match the executable's")
            if sorted(n for n, w in enumerate(weights) if not isinstance(w, np.ndarray)) != \
                    [n - first for n in sorted(executable.parameter_forms)]:
                raise load_index.BadEntry("its packed weights are not the executable's formed parameters")
            outputs = {name: load_index.make_output_layout(r) for name, r in meta["outputs"].items()}
        except (PyxlaError, ValueError, KeyError, TypeError, IndexError) as e:
            disk_cache.discard(load_index.CALL_KIND, call_key, f"unusable ({type(e).__name__}: {e})")
            return None
        return CompiledSignature(executable, None, None, meta["traced_inputs"], weights, outputs,
                                 time.perf_counter() - start)

    def _record(self, call_key: str, signature: list, sig: CompiledSignature) -> None:
        """Keep what a later process needs to make this signature's executable without
        importing or compiling (load_index.py)."""
        from ...backends.cpu.runtime.executable_cache import describe_executable
        assert self.index_key is not None
        executable = describe_executable(sig.executable)
        try:
            kept = executable is not None and load_index.store_call_entry(
                call_key, signature, executable, sig.traced_inputs, sig.weights, sig.outputs)
        except (PyxlaError, TypeError) as e:   # (a value with no HLO element type)
            if os.environ.get("PYXLA_DEBUG"):
                print(f"pyxla onnx: not kept in the load index: {e}", file=sys.stderr)
            return
        if kept:
            load_index.store_model_entry(self.index_key, self.static_inputs,
                                         self.describe() if self.index_describes else None)

    # --- dynamic shapes ------------------------------------------------------------------------
    def _polymorphic_function(self, constraints: tuple[str, ...], size_buckets) -> PolymorphicFunction:
        """The graph traced once with each input's dim_param a symbol of that name (the same
        name in two inputs, the same size), compiled per size bucket (docs/dynamic-shapes.md)."""
        from ...frontend.jit import jit
        from .symbolic_sizes import as_traced, is_sizes
        specs = []
        for spec in self.inputs:
            if spec.kind != "tensor" or spec.dims is None:
                raise NotImplementedError(f"pyxla.onnx.load(dynamic=True): input {spec.describe()} is not a tensor "
                                          "of declared rank; dynamic shapes need tensor inputs of known rank")
            specs.append(", ".join("_" if d is None else str(d) if isinstance(d, int) else _symbol_name(d)
                                   for d in spec.dims) + ("," if len(spec.dims) == 1 else ""))
        names = list(self.input_names)
        outputs = self._dynamic_outputs

        def graph_fn(*values):
            env = ChainMap(dict(zip(names, values)), self.initializers)
            try:
                scope = self.importer.run_graph(self.proto.graph, env)
            except NeedsKnownValue as e:
                raise OnnxImportError(f"{e} (pyxla.onnx.load(dynamic=True) traces the graph once for all sizes: a "
                                      "value a converter needs must be computable from the weights alone)") from None
            results: list = []
            for name in self.output_names:
                value = self.importer.lookup(scope, name, "graph output")
                if is_sizes(value):   # sizes computed from symbolic dimensions: read at run time
                    value = as_traced(value)
                outputs[name] = _output_layout(value, results, f"graph output {name!r}")
            return tuple(results)

        graph_fn.__name__ = _identifier(self.proto.graph.name or "onnx_graph")
        return jit(graph_fn, backend=self.backend, polymorphic_shapes=tuple(specs),
                   shape_constraints=constraints, size_buckets=size_buckets)

    def _run_dynamic(self, arrays: dict[str, Any]) -> dict[str, np.ndarray]:
        fed = [n for n in arrays if n in self.overridable]
        if fed:
            raise ArgumentError(f"input {fed[0]!r} has an initializer: feeding it is not supported with "
                                "dynamic=True")
        assert self.polymorphic is not None
        outs = self.polymorphic(*[arrays[n] for n in self.input_names])
        return {name: _assemble(self._dynamic_outputs[name], list(outs)) for name in self.output_names}

    def _inputs_behind(self, error: NeedsKnownValue, arrays: dict[str, Any]) -> set[str]:
        """The graph inputs that the value a converter needs is computed from: the input
        itself, or the integer (or tiny) inputs among its ancestors."""
        from ...frontend.pytree import tree_leaves
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
        return {n for n in candidates if n in arrays and arrays[n] is not None
                and all(a.dtype.kind in "iub" or a.size <= 16 for a in tree_leaves(arrays[n]))}

    def _trace_and_compile(self, traced: dict[str, Any], static: dict[str, Any]) -> CompiledSignature:
        """Trace the graph with the `traced` inputs as the executable's parameters (a
        sequence's elements one parameter each) and the `static` ones known."""
        from ... import numpy as pnp  # noqa: F401  (installs Tracer's operators, which converters use)
        from ...frontend.jit import jit
        from ...frontend.pytree import tree_flatten, tree_leaves, tree_unflatten
        names = list(traced)
        leaf_names = [(n, None if isinstance(v, np.ndarray) else i)
                      for n, v in traced.items() for i in range(len(tree_leaves(v)))]
        leaf_arrays, layout = tree_flatten([traced[n] for n in names])
        outputs: dict[str, Any] = {}

        def graph_fn(*values):
            env = ChainMap(dict(zip(names, tree_unflatten(layout, values))), static, self.initializers)
            scope = self.importer.run_graph(self.proto.graph, env)
            results: list = []
            for name in self.output_names:
                outputs[name] = _output_layout(self.importer.lookup(scope, name, "graph output"), results,
                                               f"graph output {name!r}")
            return tuple(results)

        graph_fn.__name__ = _identifier(self.proto.graph.name or "onnx_graph")
        lowered = jit(graph_fn, backend=self.backend).lower(*leaf_arrays)
        first = len(lowered.module.entry.parameters)
        weights = constants_to_parameters(lowered.module, PARAMETER_MIN_ELEMENTS)
        # compiles a copy: lowered.module stays as imported
        compiled = lowered.compile(constant_parameters=tuple(range(first, first + len(weights))))
        prepared = [compiled.executable.prepare_argument(first + i, w) for i, w in enumerate(weights)]
        return CompiledSignature(compiled.executable, lowered.module, compiled.module, leaf_names, prepared, outputs,
                                 compiled.compile_seconds), weights


# --- sequences and optionals ---------------------------------------------------------------------

def _value_key(value: Any, by_value: bool) -> tuple:
    """An input's part of the signature: kind, shapes and dtypes (and contents when static)."""
    def one(a: np.ndarray) -> tuple:
        return (a.shape, a.dtype.str) + ((a.tobytes(),) if by_value else ())
    if value is None:
        return ("none",)
    if isinstance(value, list):
        return ("sequence",) + tuple(one(a) for a in value)
    return one(value)


def _output_layout(value: Any, results: list, what: str) -> Any:
    """How to assemble an output after a run: ("traced", k) is the executable's k-th result
    (appended to `results`), ("known", array) a value known at import, ("none",) an empty
    optional, ("sequence", [layouts]) a list."""
    from ...frontend.tracing import Tracer
    if isinstance(value, Tracer):
        results.append(value)
        return ("traced", len(results) - 1)
    if isinstance(value, (np.ndarray, np.generic)):
        return ("known", np.array(value))
    if value is None:
        return ("none",)
    if isinstance(value, list):
        return ("sequence", [_output_layout(v, results, f"{what} element {i}") for i, v in enumerate(value)])
    raise OnnxImportError(f"{what} is a {type(value).__name__}, not a tensor, sequence or optional")


def _assemble(layout: Any, results: list[np.ndarray]) -> Any:
    kind = layout[0]
    if kind == "traced":
        return results[layout[1]]
    if kind == "known":
        return layout[1].copy()
    if kind == "none":
        return None
    return [_assemble(item, results) for item in layout[1]]


def constants_to_parameters(module: HloModule, min_elements: int) -> list[np.ndarray]:
    """Turn the entry computation's constants of at least `min_elements` elements into
    parameters after the existing ones; returns their values in parameter order, each
    64-byte aligned (runtime/memory.py). A literal used by several constants becomes one
    parameter."""
    from ...hlo.instruction import HloInstruction
    from ...hlo.shape import ArrayShape
    from ...runtime.memory import aligned_copy
    entry = module.entry
    first = len(entry.parameters)
    weights: list[np.ndarray] = []
    by_literal: dict[int, Any] = {}
    for instr in list(entry.instructions):
        if instr.opcode != "constant" or not isinstance(instr.shape, ArrayShape) or instr.shape.size < min_elements:
            continue
        param = by_literal.get(id(instr.literal))
        if param is None:
            param = HloInstruction(module.fresh_name("weight"), "parameter", instr.shape,
                                   parameter_number=first + len(weights))
            entry.add_instruction(param)
            weights.append(aligned_copy(instr.literal, instr.shape.dtype.np_dtype))
            by_literal[id(instr.literal)] = param
        entry.replace_instruction(instr, param)
    if weights:
        entry.sort_topologically()
    return weights


def _input_spec(value_info) -> InputSpec:
    return _type_spec(value_info.name, value_info.type)


def _type_spec(name: str, type_proto, inside: str | None = None) -> InputSpec:
    """The spec of a value of this TypeProto: a tensor, a sequence of tensors, or an optional
    tensor or sequence."""
    from onnx import helper

    from ...hlo.types import from_numpy_dtype
    which = type_proto.WhichOneof("value")
    if which == "sequence_type" and inside != "sequence_type":
        element = _type_spec(name, type_proto.sequence_type.elem_type, "sequence_type")
        return InputSpec(name, element.dtype, element.dims, "sequence")
    if which == "optional_type" and inside is None:
        content = _type_spec(name, type_proto.optional_type.elem_type, "optional_type")
        return InputSpec(name, content.dtype, content.dims, "optional", content)
    if which != "tensor_type":
        what = f"a {which or 'value of no type'}" + (f" inside a {inside}" if inside else "")
        raise OnnxImportError(f"graph input {name!r} is {what}; only tensors, sequences of tensors and "
                              "optional tensors or sequences are supported")
    t = type_proto.tensor_type
    dtype = None
    if t.elem_type:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
            from_numpy_dtype(dtype)
        except (KeyError, ValueError, TypeError):
            from onnx import TensorProto
            kind = TensorProto.DataType.Name(t.elem_type) if t.elem_type in TensorProto.DataType.values() \
                else str(t.elem_type)
            raise OnnxImportError(f"graph input {name!r} has element type {kind}, "
                                  "which pyxla does not support") from None
    dims = None
    if t.HasField("shape"):
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return InputSpec(name, dtype, dims)


def _check_value(spec: InputSpec, value: Any, symbols: dict[str, tuple[int, str]]) -> Any:
    """The fed value checked against its spec: an array for a tensor, a list of arrays for
    a sequence (each element with its own sizes for symbolic dimensions), None or the
    content for an optional."""
    if spec.kind == "optional":
        return None if value is None else _check_value(spec.element, value, symbols)
    if spec.kind == "sequence":
        if not isinstance(value, (list, tuple)):
            raise ArgumentError(f"input {spec.describe()}: expected a list of arrays, got {type(value).__name__}")
        return [_check_input(spec, v, {}, f" element {i}") for i, v in enumerate(value)]
    if value is None or isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        raise ArgumentError(f"input {spec.describe()}: expected an array, got "
                            f"{'None' if value is None else 'a list of arrays'}")
    return _check_input(spec, value, symbols)


def _check_input(spec: InputSpec, value: Any, symbols: dict[str, tuple[int, str]], where: str = "") -> np.ndarray:
    """The fed value as an array of the declared dtype and rank; symbolic dimensions bind
    to its sizes (`symbols`: name -> (size, input that set it)). `where` names the element
    of a sequence input."""
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__"):
        arr = np.asarray(value)
        if spec.dtype is not None and arr.dtype != spec.dtype:
            raise ArgumentError(f"input {spec.name!r}{where}: expected {spec.dtype}, got an array of {arr.dtype}")
    else:
        try:
            arr = np.asarray(value, dtype=spec.dtype)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"input {spec.name!r}{where}: {type(value).__name__} is not an array of "
                                f"{spec.dtype}: {e}") from None
    if spec.dims is None:
        return arr
    if arr.ndim != len(spec.dims):
        raise ArgumentError(f"input {spec.describe()}{where}: expected rank {len(spec.dims)}, "
                            f"got shape {list(arr.shape)}")
    for axis, (want, got) in enumerate(zip(spec.dims, arr.shape)):
        if isinstance(want, int) and want != got:
            raise ArgumentError(f"input {spec.describe()}{where}: dimension {axis} must be {want}, "
                                f"got shape {list(arr.shape)}")
        if isinstance(want, str):
            size, source = symbols.setdefault(want, (got, spec.name))
            if size != got:
                raise ArgumentError(f"input {spec.describe()}{where}: dimension {axis} ({want}) is {got}, "
                                    f"but input {source!r} gave {want} = {size}")
    return arr


def _symbol_name(dim_param: str) -> str:
    """An ONNX dim_param as a dimension symbol's name (identifier characters only)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", dim_param)
    return cleaned if cleaned[0].isalpha() or cleaned[0] == "_" else f"d_{cleaned}"


def _identifier(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if cleaned and (cleaned[0].isalpha() or cleaned[0] == "_") else f"g_{cleaned}"


# --- the declared inputs as JSON (the load index's model entry) -----------------------------------

def _dtype_from_name(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


def spec_json(spec: InputSpec) -> dict:
    """An InputSpec as JSON; a ValueError when its dtype's name would not read back."""
    if spec.dtype is not None and _dtype_from_name(spec.dtype.name) != spec.dtype:
        raise ValueError(f"dtype {spec.dtype} does not read back from its name")
    return {"name": spec.name, "dtype": None if spec.dtype is None else spec.dtype.name,
            "dims": None if spec.dims is None else list(spec.dims), "kind": spec.kind,
            "element": None if spec.element is None else spec_json(spec.element)}


def spec_from_json(data: dict) -> InputSpec:
    dims = data["dims"]
    if dims is not None and not all(d is None or isinstance(d, (int, str)) for d in dims):
        raise ValueError("an input's dimensions are not ints, names or None")
    if data["kind"] not in ("tensor", "sequence", "optional"):
        raise ValueError(f"an input of kind {data['kind']!r}")
    return InputSpec(str(data["name"]), None if data["dtype"] is None else _dtype_from_name(data["dtype"]),
                     None if dims is None else tuple(dims), data["kind"],
                     None if data["element"] is None else spec_from_json(data["element"]))
