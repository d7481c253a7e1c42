"""`pyxla.torch.export(model, args)`: a torch model as an HloModule, through torch.export."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..frontend.jit import jit
from ..hlo.module import HloModule
from .dtypes import tensor_to_numpy
from .dynamo import decompositions
from .graph import graph_function, unsupported_ops
from .ops.registry import LoweringError


def export(model: torch.nn.Module, args: Sequence[Any], name: str | None = None) -> HloModule:
    """The HLO module computing `model(*args)` in inference: the exported program's
    parameters and buffers become constants, `args`' tensors the entry parameters (their
    shapes and dtypes fixed). The module's result is a tuple of the model's outputs."""
    args = tuple(args)
    exported = torch.export.export(model, args).run_decompositions(decompositions())
    gm = _inlined(exported)
    missing = unsupported_ops(gm)
    if missing:
        raise LoweringError("no lowering for " + ", ".join(missing))
    state = {**exported.state_dict, **exported.constants}
    sig = exported.graph_signature
    lifted = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    user = iter(args)
    call_args = [state[lifted[n.name]] if n.name in lifted else next(user) for n in placeholders]
    user_positions = [i for i, n in enumerate(placeholders) if n.name not in lifted]
    plan: list = []
    inner = graph_function(gm, call_args, plan)
    constants = {i: tensor_to_numpy(a) for i, a in enumerate(call_args) if i not in user_positions}

    def fn(*arrays):
        it = iter(arrays)
        full = [constants[i] if i in constants else next(it) for i in range(len(call_args))]
        return inner(*full)
    fn.__name__ = name or type(model).__name__
    lowered = jit(fn).lower(*[tensor_to_numpy(call_args[i]) for i in user_positions])
    if any(kind != "computed" for kind, _ in plan[0].parts):
        raise LoweringError("an output of the exported program is not computed from its inputs")
    return lowered.module


def _inlined(exported) -> torch.fx.GraphModule:
    """The exported program's graph module, every parameter and buffer a placeholder."""
    return exported.graph_module
