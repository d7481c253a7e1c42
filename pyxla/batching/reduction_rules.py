"""Batching rules for reductions, windows, sorting: reduce (variadic too: argmax),
reduce-window (pooling, cumulative ops), select-and-scatter, sort and topk.

The batch dimension goes first and is left alone: reductions shift their dimensions past
it, windows get a window of size 1 along it, sorts sort along a shifted dimension. Init
values that differ per example have no single-reduction form and are refused, as in JAX.
"""
from __future__ import annotations

from typing import Any

from ..autodiff.staging import semantic_attrs
from ..frontend.tracing import bind
from ..hlo.attributes import WindowDim
from ..hlo.instruction import HloInstruction
from .interpreter import BATCH_RULES
from .rule_helpers import BatchingError, all_front, batch_size, shifted, to_front, with_batch


def _refuse_batched_inits(instr: HloInstruction, dims: list[Any], n_inputs: int) -> None:
    if any(d is not None for d in dims[n_inputs:]):
        loc = instr.source_location()
        raise BatchingError(f"vmap of HLO opcode '{instr.opcode}' with init values that differ per example is "
                            "not implemented" + (f" (the value traced at {loc})" if loc else ""))


def _reduce(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    n = len(values) // 2
    _refuse_batched_inits(instr, dims, n)
    size = batch_size(values, dims)
    inputs = all_front(values[:n], dims[:n], size)
    out = bind("reduce", *inputs, *values[n:], shape=with_batch(instr.shape, size),
               dimensions=shifted(instr.attrs["dimensions"]), to_apply=instr.attrs["to_apply"])
    return out, (tuple([0] * n) if n > 1 else 0)


def _window(instr: HloInstruction) -> tuple[WindowDim, ...]:
    return (WindowDim(1), *instr.attrs["window"])


def _reduce_window(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    n = len(values) // 2
    _refuse_batched_inits(instr, dims, n)
    size = batch_size(values, dims)
    inputs = all_front(values[:n], dims[:n], size)
    out = bind("reduce-window", *inputs, *values[n:], shape=with_batch(instr.shape, size),
               window=_window(instr), to_apply=instr.attrs["to_apply"])
    return out, (tuple([0] * n) if n > 1 else 0)


def _select_and_scatter(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, int]:
    _refuse_batched_inits(instr, dims, 2)
    size = batch_size(values, dims)
    operand, source = all_front(values[:2], dims[:2], size)
    attrs = {**semantic_attrs(instr), "window": _window(instr)}
    return bind("select-and-scatter", operand, source, values[2], shape=with_batch(instr.shape, size), **attrs), 0


def _sort(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)
    attrs = {**semantic_attrs(instr), "dimensions": shifted(instr.attrs["dimensions"])}
    out = bind("sort", *all_front(values, dims, size), shape=with_batch(instr.shape, size), **attrs)
    return out, (tuple([0] * len(values)) if len(values) > 1 else 0)


def _topk(instr: HloInstruction, values: list[Any], dims: list[Any]) -> tuple[Any, Any]:
    size = batch_size(values, dims)   # topk works along the last dimension: a leading batch is free
    out = bind("topk", to_front(values[0], dims[0], size), shape=with_batch(instr.shape, size),
               **semantic_attrs(instr))
    return out, (0, 0)


BATCH_RULES["reduce"] = _reduce
BATCH_RULES["reduce-window"] = _reduce_window
BATCH_RULES["select-and-scatter"] = _select_and_scatter
BATCH_RULES["sort"] = _sort
BATCH_RULES["topk"] = _topk
