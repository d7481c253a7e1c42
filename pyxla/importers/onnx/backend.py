"""pyxla as an ONNX backend (onnx.backend.base.Backend), so ONNX's own test runner runs
against it:

    import onnx.backend.test
    from pyxla.onnx import backend
    globals().update(onnx.backend.test.BackendTest(backend, __name__).test_cases)

`prepare` imports the model (refusing what pyxla cannot import, as `load` does); the
returned rep's `run` takes the inputs in the order of the graph's inputs (or a dict by
name; positional inputs skip those that have an initializer) and returns the outputs in
the graph's order. Devices: CPU.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from . import load
from .onnx_model import OnnxModel


class PyxlaBackendRep(BackendRep):
    def __init__(self, model: OnnxModel):
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            # positional inputs are the graph's inputs that have no initializer, in order (as
            # the test runner writes them)
            feeds = dict(zip(self.model.input_names, inputs))
        out = self.model.run(feeds)
        return namedtupledict("Outputs", list(out))(*out.values())


class PyxlaBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> PyxlaBackendRep:
        cls._check_device(device)
        return PyxlaBackendRep(load(model, **kwargs))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[Any], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """One node as a model of its own, its inputs the given arrays."""
        from onnx import helper

        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain, opset)])
        return cls.run_model(model, dict(zip(names, arrays)), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except AttributeError:
            return False

    @classmethod
    def _check_device(cls, device: str) -> None:
        if not cls.supports_device(device):
            raise NotImplementedError(f"pyxla's ONNX backend runs on CPU, not {device!r}")


prepare = PyxlaBackend.prepare
run_model = PyxlaBackend.run_model
run_node = PyxlaBackend.run_node
supports_device = PyxlaBackend.supports_device
is_compatible = PyxlaBackend.is_compatible
