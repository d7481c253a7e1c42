"""The graph walk: an ONNX graph's nodes, in topological order, each turned into pyxla
operations by its converter while `pyxla.jit` traces the whole graph.

Values flow through an environment keyed by ONNX value name. A value is a NumPy array when
it is known at import time (initializers, Constant nodes, anything computed only from
those), else a traced array. Every converter is chosen by (domain, op type, the model's
opset for that domain); an operator without a converter but with a function body (a
model-local function, or an ONNX operator the standard defines as a function of others)
is expanded into its body's nodes. Whatever cannot be imported is refused when the model
is loaded, naming the node and its op type; a node whose converter did not read every
attribute the node carries is refused too, so no attribute is ignored silently.
"""
from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import PyxlaError
from ...frontend.tracing import Tracer
from . import ops  # noqa: F401  (registers every converter)
from .model_file import tensor_to_array
from .registry import DEFAULT_DOMAIN, NeedsKnownValue, NodeContext, OnnxImportError, find_converter, is_known
from .symbolic_sizes import PASS_THROUGH, as_traced, is_sizes, size_arithmetic

DOMAIN_ALIASES = {"ai.onnx": DEFAULT_DOMAIN}


def canonical_domain(domain: str) -> str:
    return DOMAIN_ALIASES.get(domain, domain)


def node_label(node, index: int) -> str:
    return node.name or f"{node.op_type} #{index}"


# --- attributes -----------------------------------------------------------------------------

def decode_attribute(attr, where: str) -> Any:
    """An AttributeProto's value: ints, floats, str, NumPy arrays for tensors, GraphProtos,
    TypeProtos, or lists of those."""
    from onnx import AttributeProto as A

    kind = attr.type or _infer_attribute_type(attr)
    if kind == A.FLOAT:
        return float(attr.f)
    if kind == A.INT:
        return int(attr.i)
    if kind == A.STRING:
        return attr.s.decode("utf-8", "surrogateescape")
    if kind == A.TENSOR:
        return tensor_to_array(attr.t, f"{where}: attribute {attr.name!r}")
    if kind == A.GRAPH:
        return attr.g
    if kind == A.TYPE_PROTO:
        return attr.tp
    if kind == A.FLOATS:
        return [float(v) for v in attr.floats]
    if kind == A.INTS:
        return [int(v) for v in attr.ints]
    if kind == A.STRINGS:
        return [s.decode("utf-8", "surrogateescape") for s in attr.strings]
    if kind == A.TENSORS:
        return [tensor_to_array(t, f"{where}: attribute {attr.name!r}") for t in attr.tensors]
    if kind == A.GRAPHS:
        return list(attr.graphs)
    if kind == A.TYPE_PROTOS:
        return list(attr.type_protos)
    name = A.AttributeType.Name(kind) if kind in A.AttributeType.values() else str(kind)
    raise OnnxImportError(f"{where}: attribute {attr.name!r} of type {name} is not supported")


def _infer_attribute_type(attr) -> int:
    """The type of an attribute written without one (old exporters): the field it sets."""
    from onnx import AttributeProto as A

    for field, kind in (("floats", A.FLOATS), ("ints", A.INTS), ("strings", A.STRINGS),
                        ("tensors", A.TENSORS), ("graphs", A.GRAPHS)):
        if len(getattr(attr, field)):
            return kind
    for field, kind in (("t", A.TENSOR), ("g", A.GRAPH), ("tp", A.TYPE_PROTO)):
        if attr.HasField(field):
            return kind
    for field, kind in (("f", A.FLOAT), ("i", A.INT), ("s", A.STRING)):
        if attr.HasField(field):
            return kind
    return A.UNDEFINED


# --- nodes ------------------------------------------------------------------------------------

@dataclass
class NodeStep:
    """One node ready to convert: its converter, decoded attributes and value names."""
    node: Any                  # NodeProto
    label: str
    domain: str
    opset: int
    converter: Any             # registry.Converter, or None when the node expands to a function body
    attrs: dict[str, Any]
    inputs: list[str]
    outputs: list[str]


def topological_order(nodes: list, where: str) -> list:
    """The nodes ordered so every value is produced before it is used (ONNX requires graphs
    in this order already; some exporters do not quite). An input that no node produces
    comes from the graph's inputs, initializers or enclosing scopes, or is reported when
    the node is converted."""
    produced_by = {}
    for node in nodes:
        for out in node.output:
            if out:
                produced_by[out] = node
    done: set[int] = set()
    order, visiting = [], set()
    for start in nodes:
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            if expanded:
                visiting.discard(id(node))
                done.add(id(node))
                order.append(node)
                continue
            if id(node) in visiting:
                raise OnnxImportError(f"{where}: the graph has a cycle through node {node.name or node.op_type!r}")
            visiting.add(id(node))
            stack.append((node, True))
            for name in reversed(_consumed_names(node)):
                producer = produced_by.get(name)
                if producer is not None and id(producer) not in done:
                    if id(producer) in visiting:
                        raise OnnxImportError(f"{where}: the graph has a cycle through node "
                                              f"{producer.name or producer.op_type!r}")
                    stack.append((producer, False))
    return order


def _consumed_names(node) -> list[str]:
    """The values a node reads: its inputs and the outer-scope names its subgraphs use."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            names.extend(sorted(outer_names(g)))
    return names


def outer_names(graph) -> set[str]:
    """Names a (sub)graph reads from enclosing scopes."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(_consumed_names(node))
        local.update(o for o in node.output if o)
    return used - local


def check_opsets_known(opsets: Mapping[str, int]) -> None:
    """Refuses an opset of ONNX's own domains newer than the installed onnx defines: its
    operators' schemas (types, attributes, function bodies) are unknown, so nothing could
    check or expand them, and a converter would guess."""
    import onnx

    newest = {DEFAULT_DOMAIN: onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.defs.onnx_ml_opset_version()}
    for domain, version in opsets.items():
        if domain in newest and version > newest[domain]:
            name = "the default domain (ai.onnx)" if domain == DEFAULT_DOMAIN else f"domain {domain!r}"
            raise OnnxImportError(f"the model imports opset {version} of {name}, but the installed onnx "
                                  f"{onnx.__version__} knows opsets up to {newest[domain]}")


class GraphImporter:
    """Converts a model's graphs node by node; shared by the main graph and the subgraphs of
    control-flow operators (If, Loop, Scan call `run_subgraph`)."""

    def __init__(self, model):
        self.model = model
        self.opsets: dict[str, int] = {}
        for imp in model.opset_import:
            self.opsets[canonical_domain(imp.domain)] = int(imp.version)
        check_opsets_known(self.opsets)
        self.functions = {(canonical_domain(f.domain), f.name): f for f in model.functions}
        # id(graph) -> (graph, its steps); holding the graph keeps its id from being reused
        self._steps: dict[int, tuple[Any, list[NodeStep]]] = {}
        self.steps(model.graph, self.opsets, "graph")    # refuses what cannot be imported, now

    # --- load-time checks ----------------------------------------------------------------
    def steps(self, graph, opsets: Mapping[str, int], where: str) -> list[NodeStep]:
        """The graph's steps, made once per graph.
        Making them checks that every node (and every node of its subgraphs) has a
        converter or a function body and well-formed attributes."""
        cached = self._steps.get(id(graph))
        if cached is None or cached[0] is not graph:
            cached = self._steps[id(graph)] = (graph, self.make_steps(graph, opsets, where))
        return cached[1]

    def make_steps(self, graph, opsets: Mapping[str, int], where: str) -> list[NodeStep]:
        nodes = topological_order(list(graph.node), where)
        return [self._make_step(node, index, opsets, where) for index, node in enumerate(nodes)]

    def _make_step(self, node, index: int, opsets: Mapping[str, int], where: str) -> NodeStep:
        domain = canonical_domain(node.domain)
        label = node_label(node, index)
        prefix = f"node {label!r} ({node.op_type})" if where == "graph" else f"{where}: node {label!r} ({node.op_type})"
        if domain not in opsets:
            raise OnnxImportError(f"{prefix}: the model imports no opset for domain {node.domain!r}")
        opset = opsets[domain]
        attrs = {a.name: decode_attribute(a, prefix) for a in node.attribute}
        conv = find_converter(domain, node.op_type, opset)
        step = NodeStep(node, label, domain, opset, conv, attrs, list(node.input), list(node.output))
        if conv is None and not self._has_function(domain, node.op_type, opset):
            what = node.op_type if domain == DEFAULT_DOMAIN else f"{domain}::{node.op_type}"
            raise OnnxImportError(f"{prefix}: operator {what} (opset {opset}) is not supported")
        for name, value in attrs.items():
            for g in value if isinstance(value, list) else [value]:
                if _is_graph(g):
                    self.steps(g, opsets, f"{prefix}, attribute {name!r}")
        if conv is None and (domain, node.op_type) in self.functions:
            function = self.functions[(domain, node.op_type)]
            self.steps(function, self._function_opsets(function, opsets), f"{prefix}, function {node.op_type!r}")
        return step

    def _has_function(self, domain: str, op_type: str, opset: int) -> bool:
        if (domain, op_type) in self.functions:
            return True
        schema = _schema(domain, op_type, opset)
        return schema is not None and (schema.has_function or schema.has_context_dependent_function)

    def _function_opsets(self, function, opsets: Mapping[str, int]) -> dict[str, int]:
        out = dict(opsets)
        out.update({canonical_domain(o.domain): int(o.version) for o in function.opset_import})
        return out

    # --- conversion ----------------------------------------------------------------------
    def run_graph(self, graph, env: Mapping[str, Any], opsets: Mapping[str, int] | None = None,
                  where: str = "graph") -> dict[str, Any]:
        """Convert every node of `graph` with the values in `env` (inputs, initializers and
        enclosing scopes' values); the environment with every node's outputs added."""
        opsets = self.opsets if opsets is None else opsets
        scope = ChainMap({}, env)
        for step in self.steps(graph, opsets, where):
            self.run_step(step, scope, opsets)
        return scope

    def run_subgraph(self, graph, inputs: Mapping[str, Any], outer: Mapping[str, Any],
                     where: str = "subgraph") -> list[Any]:
        """A control-flow body: its inputs bound by name over the enclosing scope's values
        (`outer`); returns its outputs in order."""
        env = ChainMap(dict(inputs), {t.name: tensor_to_array(t) for t in graph.initializer}, outer)
        scope = self.run_graph(graph, env, where=where)
        return [self.lookup(scope, o.name, f"{where}: output") for o in graph.output]

    @staticmethod
    def lookup(scope: Mapping[str, Any], name: str, what: str) -> Any:
        try:
            return scope[name]
        except KeyError:
            raise OnnxImportError(f"{what} {name!r} is not produced by any node, initializer or input") from None

    def run_step(self, step: NodeStep, scope: ChainMap, opsets: Mapping[str, int]) -> None:
        where = f"node {step.label!r} ({step.node.op_type})"
        values = [self.lookup(scope, n, f"{where}: input") if n else None for n in step.inputs]
        if step.converter is None:
            outputs = self._expand_function(step, values, scope, opsets)
        else:
            outputs = self._convert(step, values, scope)
        for name, value in zip(step.outputs, outputs):
            if name:
                scope[name] = value

    def _convert(self, step: NodeStep, values: list[Any], scope: Mapping[str, Any]) -> list[Any]:
        from ... import numpy as pnp

        if any(is_sizes(v) for v in values):
            # sizes computed from symbolic dimensions (dynamic=True): see symbolic_sizes.py
            op_type = step.node.op_type
            attrs = {k: v for k, v in step.attrs.items()}
            done = size_arithmetic(op_type, attrs, values) if step.domain == DEFAULT_DOMAIN else None
            if done is not None:
                return [done]
            if op_type not in PASS_THROUGH or step.domain != DEFAULT_DOMAIN:
                values = [as_traced(v) if is_sizes(v) else v for v in values]
        known = all(v is None or is_known(v) for v in values)
        ctx = NodeContext(name=step.label, op_type=step.node.op_type, domain=step.domain, opset=step.opset,
                          attrs=step.attrs, input_names=step.inputs, output_names=step.outputs,
                          xp=np if known else pnp, importer=self, scope=scope)
        try:
            result = step.converter.fn(ctx, *values)
        except NeedsKnownValue as e:
            e.value_name = next((n for n, v in zip(step.inputs, values) if v is e.value), None)
            raise
        except OnnxImportError:
            raise
        except NotImplementedError as e:
            raise ctx.unsupported(str(e) or "this use") from e
        except (PyxlaError, ValueError, TypeError, IndexError, KeyError, ArithmeticError) as e:
            raise ctx.error(f"{type(e).__name__}: {e}") from e
        unread = sorted(set(step.attrs) - ctx.used_attrs)
        if unread:
            raise ctx.unsupported("attribute " + ", ".join(f"{a!r}={_short(step.attrs[a])}" for a in unread))
        outputs = list(result) if isinstance(result, tuple) else [result]
        missing = [n for n in step.outputs[len(outputs):] if n]
        if missing:
            raise ctx.unsupported(f"output {missing[0]!r} (output {step.outputs.index(missing[0])})")
        return [_as_value(v) for v in outputs]

    # --- functions ---------------------------------------------------------------------------
    def _expand_function(self, step: NodeStep, values: list[Any], scope: ChainMap,
                         opsets: Mapping[str, int]) -> list[Any]:
        """A node computed by its function body: the body's nodes run in a scope of their own
        with the node's inputs bound to the function's formal inputs."""
        function = self.functions.get((step.domain, step.node.op_type))
        if function is not None:
            defaults = {a.name: a for a in function.attribute_proto}
        else:
            function = self._schema_function(step, values)
            schema = _schema(step.domain, step.node.op_type, step.opset)
            defaults = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.name}
        body_opsets = self._function_opsets(function, opsets)
        body = _bind_attributes(function, step.node, defaults)
        env = ChainMap({formal: value for formal, value in zip(function.input, values) if formal}, {})
        where = f"node {step.label!r} ({step.node.op_type}), function body"
        inner = ChainMap({}, env)
        for body_step in self.make_steps(body, body_opsets, where):
            self.run_step(body_step, inner, body_opsets)
        wanted = set(n for n in step.outputs if n)
        return [self.lookup(inner, formal, f"{where}: output") if i < len(step.outputs) and step.outputs[i] in wanted
                else None for i, formal in enumerate(function.output)]

    def _schema_function(self, step: NodeStep, values: list[Any]):
        """The ONNX standard's function body for this op, made for the inputs' types."""
        import onnx
        from onnx import helper

        schema = _schema(step.domain, step.node.op_type, step.opset)
        if schema.has_context_dependent_function:
            types = [helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)),
                                                   list(np.shape(v))) if v is not None else onnx.TypeProto()
                     for v in values]
            raw = schema.get_context_dependent_function_with_opset_version(
                _body_version(schema.context_dependent_function_opset_versions, step.opset),
                step.node.SerializeToString(), [t.SerializeToString() for t in types])
            function = onnx.FunctionProto()
            function.ParseFromString(raw)
            return function
        if schema.function_opset_versions:
            function = onnx.FunctionProto()
            function.ParseFromString(schema.get_function_with_opset_version(
                _body_version(schema.function_opset_versions, step.opset)))
            return function
        return schema.function_body


def _bind_attributes(function, node, defaults: Mapping[str, Any]):
    """The function body as a graph whose nodes carry the calling node's attribute values
    (or the defaults) in place of references (`ref_attr_name`)."""
    import onnx

    given = {a.name: a for a in node.attribute}
    body = onnx.GraphProto()
    for inner in function.node:
        copy = body.node.add()
        copy.CopyFrom(inner)
        del copy.attribute[:]
        for attr in inner.attribute:
            if attr.ref_attr_name:
                source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if source is None:
                    continue         # an optional attribute the caller did not set
                bound = copy.attribute.add()
                bound.CopyFrom(source)
                bound.name = attr.name
            else:
                copy.attribute.add().CopyFrom(attr)
    return body


def _body_version(versions, opset: int) -> int:
    """The opset of the function body that applies at `opset`: the newest not above it."""
    return max((v for v in versions if v <= opset), default=opset)


def _schema(domain: str, op_type: str, opset: int):
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _is_graph(value: Any) -> bool:
    return type(value).__name__ == "GraphProto"


def _as_value(value: Any) -> Any:
    """A converter's result as the importer keeps it: traced arrays as they are, known
    values as NumPy arrays (a Python or NumPy scalar becomes a 0-d array)."""
    if value is None or isinstance(value, (Tracer, np.ndarray, list)):
        return value
    return np.asarray(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
