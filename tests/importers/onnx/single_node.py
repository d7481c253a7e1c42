"""Single-node ONNX models for the operator tests: build one with onnx.helper, run it with
pyxla and with onnx's reference evaluator on the same inputs, compare.

Inputs listed in `known` become initializers (values the importer knows at load time, as
a model's shape and axes inputs usually are); the rest are graph inputs, traced (unless a
converter needs their value, when the model compiles for it).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pyxla.importers.onnx import OnnxImportError, load


def make_model(op_type: str, inputs: dict[str, Any], outputs: Sequence[str], attrs: dict[str, Any],
               opset: int, known: Sequence[str] = (), domain: str = "") -> onnx.ModelProto:
    """A model of one node `op_type(inputs) -> outputs`; an input whose value is None is omitted
    (an empty name)."""
    graph_inputs, initializers, names = [], [], []
    for name, value in inputs.items():
        if value is None:
            names.append("")
            continue
        names.append(name)
        value = np.asarray(value)
        if name in known:
            initializers.append(numpy_helper.from_array(value, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    node = helper.make_node(op_type, names, list(outputs), domain=domain, **attrs)
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)],
                             ir_version=min(onnx.IR_VERSION, 10))


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def with_output_types(model: onnx.ModelProto, values: Sequence[np.ndarray] | None = None) -> onnx.ModelProto:
    """The model with its outputs typed (the checker requires it): from `values` (the
    reference's results) when given, else by onnx's shape inference."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if values is None:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for out in model.graph.output:
            if out.name in types and types[out.name].HasField("tensor_type"):
                out.type.CopyFrom(types[out.name])
        return model
    for out, value in zip(model.graph.output, values):
        value = np.asarray(value)
        out.CopyFrom(helper.make_tensor_value_info(out.name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                   value.shape))
    return model


def run_pyxla(model: onnx.ModelProto, feeds: dict[str, np.ndarray], check_model: bool = True) -> list[np.ndarray]:
    """The model's outputs through pyxla.importers.onnx.load, in the graph's order."""
    out = load(model, check=check_model)(**feeds)
    return [np.asarray(out[o.name]) for o in model.graph.output]


def check(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any] | None = None, *, opset: int,
          outputs: Sequence[str] = ("result",), known: Sequence[str] = (), rtol: float = 1e-5,
          atol: float = 1e-6, domain: str = "") -> list[np.ndarray]:
    """Run the node with pyxla and the reference evaluator; assert the outputs match
    (dtype, shape and values)."""
    model = make_model(op_type, inputs, outputs, attrs or {}, opset, known, domain)
    feeds = {k: np.asarray(v) for k, v in inputs.items() if v is not None and k not in known}
    expected = reference(model, feeds)
    got = run_pyxla(with_output_types(model, expected), feeds)
    assert len(got) == len(expected)
    for name, g, e in zip(outputs, got, expected):
        e = np.asarray(e)
        assert g.dtype == e.dtype, f"{op_type} output {name}: dtype {g.dtype}, expected {e.dtype}"
        assert g.shape == e.shape, f"{op_type} output {name}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "fc" or e.dtype.name == "bfloat16":
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{op_type} output {name}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"{op_type} output {name}")
    return got


def refuses(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any] | None = None, *, opset: int,
            match: str, outputs: Sequence[str] = ("result",), known: Sequence[str] = (),
            check_model: bool = True) -> None:
    """The node is refused with an OnnxImportError whose message matches `match`."""
    model = make_model(op_type, inputs, outputs, attrs or {}, opset, known)
    feeds = {k: np.asarray(v) for k, v in inputs.items() if v is not None and k not in known}
    with pytest.raises(OnnxImportError, match=match):
        run_pyxla(with_output_types(model), feeds, check_model)
