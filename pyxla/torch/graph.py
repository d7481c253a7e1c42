"""An FX graph of ATen ops -> a Python function that pyxla.jit traces into HLO.

Each call_function node is looked up in the lowering table (ops/registry.py) by its
overload name and recorded with pyxla.lax / pyxla.numpy. After every node its value is
checked against the node's fake-tensor metadata: the dtype is converted to the one
PyTorch promotes to, and a shape that differs is a LoweringError (the graph then runs in
eager PyTorch), so a lowering's mistake is never a silent wrong result.

Symbolic sizes (SymInt placeholders, `sym_size` nodes, arithmetic on them) take their
concrete values from the call's arguments: each signature is traced for its own sizes.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import numpy as pnp
from ..frontend.tracing import Tracer
from . import ops  # noqa: F401  (fills the table)
from .dtypes import to_numpy_dtype
from .ops.registry import LOWERINGS, LoweringContext, LoweringError, op_key
from .symbols import SYMBOLS as _SYMBOLS
from .symbols import bind_symbols as _bind_symbols
from .symbols import concrete as _concrete

_PYTHON_OPS = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.floordiv: operator.floordiv, operator.truediv: operator.truediv, operator.mod: operator.mod,
    operator.neg: operator.neg, operator.pow: operator.pow, operator.eq: operator.eq, operator.ne: operator.ne,
    operator.lt: operator.lt, operator.le: operator.le, operator.gt: operator.gt, operator.ge: operator.ge,
}


def unsupported_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The overload names of the graph's calls that have no lowering, sorted."""
    missing = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and not _is_python_op(node.target) and op_key(node.target) not in LOWERINGS:
            missing.add(op_key(node.target))
        elif node.op in ("call_module", "call_method"):
            missing.add(f"{node.op} {node.target}")
    return sorted(missing)


def _is_python_op(target) -> bool:
    return target is operator.getitem or target in _PYTHON_OPS or _is_sym_op(target)


def _is_sym_op(target) -> bool:
    name = getattr(target, "__name__", "")
    return name.startswith("sym_") and not hasattr(target, "_schema") or str(target).startswith("aten.sym_")


@dataclass
class OutputPlan:
    """How the graph's outputs are made from the executable's: ("computed", k), ("input", i)
    for a placeholder returned as it is, ("value", v) for a constant or None."""
    parts: list[tuple[str, Any]]


def placeholder_kinds(example_args: Sequence[Any]) -> list[str]:
    return ["tensor" if isinstance(a, torch.Tensor) else "value" for a in example_args]


def graph_function(gm: torch.fx.GraphModule, args: Sequence[Any], plan_out: list):
    """A function of the graph's tensor arguments (as traced arrays) for pyxla.jit; the
    graph's non-tensor arguments (sizes) are fixed to their values in `args`. The output
    plan is appended to `plan_out` when it is traced."""
    def fn(*arrays):
        tensors = iter(arrays)
        env: dict[Any, Any] = {}
        placeholders = {}
        _SYMBOLS.clear()
        nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, arg in zip(nodes, args):
            _bind_symbols(node.meta.get("val"), arg)
        for node, arg in zip(nodes, args):
            env[node] = next(tensors) if isinstance(arg, torch.Tensor) else _concrete(arg)
            placeholders[node] = len(placeholders)
        outputs = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                env[node] = _attr_value(gm, node.target)
            elif node.op == "call_function":
                env[node] = _run_node(node, env)
            elif node.op == "output":
                outputs = node.args[0]
            else:
                raise LoweringError(f"{node.op} {node.target}")
        return _outputs(outputs, env, placeholders, plan_out)
    return fn


def _attr_value(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return value


def _map(value, env):
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, env) for k, v in value.items()}
    return _concrete(value)


def _run_node(node, env):
    args, kwargs = _map(node.args, env), _map(node.kwargs, env)
    target = node.target
    if target is operator.getitem:
        return args[0][args[1]]
    if target in _PYTHON_OPS:
        return _PYTHON_OPS[target](*args)
    fn = LOWERINGS.get(op_key(target))
    if fn is None and _is_sym_op(target):
        return target(*args, **kwargs)
    if fn is None:
        raise LoweringError(f"no lowering for {op_key(target)}")
    meta = node.meta.get("val")
    try:
        value = fn(LoweringContext(node, meta), *args, **kwargs)
    except LoweringError:
        raise
    except Exception as e:
        raise LoweringError(f"{op_key(target)} ({node.name}): {type(e).__name__}: {e}") from e
    return _conform(node, value, meta)


def _conform(node, value, meta):
    """The value with the dtype PyTorch gives the node, its shape checked."""
    if isinstance(meta, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(meta):
            raise LoweringError(f"{op_key(node.target)} ({node.name}): expected {len(meta)} results")
        return tuple(_conform_one(node, v, m) for v, m in zip(value, meta))
    return _conform_one(node, value, meta)


def _conform_one(node, value, meta):
    if not isinstance(meta, torch.Tensor) or value is None:
        return value
    want = to_numpy_dtype(meta.dtype)
    if not isinstance(value, Tracer):
        value = np.asarray(value)
    shape = tuple(_concrete(d) for d in meta.shape)
    if tuple(value.shape) != shape:
        if value.ndim == 0:
            value = pnp.broadcast_to(value, shape)
        else:
            raise LoweringError(f"{op_key(node.target)} ({node.name}): lowered to shape {tuple(value.shape)}, "
                                f"PyTorch gives {shape}")
    if value.dtype != want:
        value = pnp.asarray(value).astype(want) if isinstance(value, Tracer) else value.astype(want)
    return value


def _outputs(outputs, env, placeholders, plan_out):
    parts, computed = [], []
    for out in outputs:
        if isinstance(out, torch.fx.Node) and out in placeholders:
            parts.append(("input", placeholders[out]))
            continue
        value = _map(out, env)
        if isinstance(value, Tracer):
            parts.append(("computed", len(computed)))
            computed.append(value)
        elif isinstance(value, np.ndarray):
            parts.append(("array", np.array(value, copy=True)))
        else:
            parts.append(("value", value))
    plan_out.append(OutputPlan(parts))
    return tuple(computed)
