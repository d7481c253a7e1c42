"""The Dynamo backend: `torch.compile(model, backend="pyxla")`.

Dynamo hands over an FX graph of torch calls; AOTAutograd (with PyTorch's core-ATen
decompositions) turns it into a forward and a backward graph of ATen ops, each of which
`compile_graph` compiles with pyxla: the graph is traced into an HLO module for the
arguments' shapes and dtypes, optimised, fused and compiled by pyxla's default backend, and
the executable is cached per signature. A graph with an op pyxla cannot lower runs in eager
PyTorch instead, with a PyxlaFallbackWarning naming the op.

PYXLA_DEBUG=torch prints each graph, its HLO and every fallback to stderr.
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ..frontend.jit import jit
from .dtypes import numpy_to_tensor, tensor_to_numpy
from .graph import OutputPlan, graph_function, unsupported_ops
from .ops.registry import LoweringError


class PyxlaFallbackWarning(UserWarning):
    """A graph (or one signature of it) runs in eager PyTorch: pyxla could not lower an op."""


def debug_enabled() -> bool:
    return "torch" in os.environ.get("PYXLA_DEBUG", "").split(",")


def _debug(message: str) -> None:
    if debug_enabled():
        print(f"pyxla torch: {message}", file=sys.stderr)


def _signature(args: Sequence[Any]) -> tuple:
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.dtype))
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            key.append(("sym", repr(a)))
        else:
            key.append(("value", a))
    return tuple(key)


class _Executable:
    """One signature's compiled program and how its outputs become the graph's."""

    def __init__(self, compiled, plan: OutputPlan):
        self.call = compiled.fast_call
        self.plan = plan
        self.hlo = compiled.as_text

    def run(self, args: list) -> list:
        arrays = tuple(tensor_to_numpy(a) for a in args if isinstance(a, torch.Tensor))
        outs = self.call(arrays)
        results = []
        for kind, value in self.plan.parts:
            if kind == "computed":
                results.append(numpy_to_tensor(outs[value]))
            elif kind == "input":
                results.append(args[value])
            elif kind == "array":
                results.append(numpy_to_tensor(value.copy()))
            else:
                results.append(value)
        return results


class CompiledGraph:
    """A boxed callable (AOTAutograd's calling convention: one list of arguments) running an
    ATen graph through pyxla, one executable per argument signature."""
    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, name: str):
        self.gm = gm
        self.name = name
        self.executables: dict[tuple, _Executable | None] = {}
        self._boxed_call = True   # an instance attribute: functools.wraps (Dynamo's disable) copies it

    def __call__(self, args: list) -> list:
        key = _signature(args)
        executable = self.executables.get(key, False)
        if executable is False:
            executable = self.executables[key] = self._compile(args)
        if executable is None:
            result = self.gm(*args)
            return list(result) if isinstance(result, (tuple, list)) else [result]
        args = list(args)
        return executable.run(args)

    def _compile(self, args: list) -> _Executable | None:
        plan: list[OutputPlan] = []
        fn = graph_function(self.gm, args, plan)
        fn.__name__ = self.name
        arrays = [tensor_to_numpy(a) for a in args if isinstance(a, torch.Tensor)]
        try:
            lowered = jit(fn).lower(*arrays)
            compiled = lowered.compile()
        except LoweringError as e:
            _fallback(self.name, str(e))
            return None
        _debug(f"{self.name} for {[tuple(a.shape) for a in arrays]}:\n{lowered.as_text()}")
        return _Executable(compiled, plan[0])


def _fallback(name: str, why: str) -> None:
    message = f"pyxla: graph {name} runs in eager PyTorch: {why}"
    _debug(message)
    warnings.warn(message, PyxlaFallbackWarning, stacklevel=3)


_COUNTER = [0]


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str = "graph"):
    """AOTAutograd's compiler: a boxed callable for the ATen graph `gm`."""
    _COUNTER[0] += 1
    name = f"torch_{kind}_{_COUNTER[0]}"
    _debug(f"{name}:\n{gm.code}")
    missing = unsupported_ops(gm)
    if missing:
        _fallback(name, "no lowering for " + ", ".join(missing))

        def eager(args):
            result = gm(*args)
            return list(result) if isinstance(result, (tuple, list)) else [result]
        eager._boxed_call = True
        return eager
    return CompiledGraph(gm, name)


@functools.lru_cache(maxsize=1)
def decompositions() -> dict:
    from torch._decomp import core_aten_decompositions
    return dict(core_aten_decompositions())


def pyxla_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **options):
    """The Dynamo backend registered as "pyxla"."""
    from torch._dynamo.backends.common import aot_autograd
    compiler = aot_autograd(fw_compiler=functools.partial(compile_graph, kind="forward"),
                            bw_compiler=functools.partial(compile_graph, kind="backward"),
                            inference_compiler=functools.partial(compile_graph, kind="inference"),
                            decompositions=decompositions())
    return compiler(gm, example_inputs)
