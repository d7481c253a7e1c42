"""Instruction fusion: merge producer -> consumer chains into fusion instructions.

Consumers are visited from the outputs backwards; each pulls in its producers for as long
as the policy allows, so a chain of cheap ops ends up computed inside the kernel of its
last consumer and its intermediates never reach memory. What can be a consumer: an
elementwise, broadcast or data-movement op (loop fusion), a reduce (input fusion), a
fusion already made. A dot or convolution is pulled into an elementwise epilogue (output
fusion) when the backend can emit one. Every refusal is logged with its reason when
PYXLA_DEBUG includes `fusion`.
"""
from __future__ import annotations

import os
import sys

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape
from ..passes.hlo_pass import HloPass
from .fusion_builder import fuse_producer, make_fusion, prepare_fusions
from .policy import FusionPolicy, not_duplicated

CONSUMER_KINDS = frozenset({"elementwise", "broadcast", "injective", "reduce"})
NOT_CONSUMERS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reduce-window",
                           "select-and-scatter", "copy"})


def _log_enabled() -> bool:
    return "fusion" in os.environ.get("PYXLA_DEBUG", "").split(",")


class FusionLog:
    """Every decision with its reason; printed under PYXLA_DEBUG=fusion, kept for dumps."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.echo = _log_enabled()

    def __call__(self, text: str) -> None:
        self.lines.append(text)
        if self.echo:
            print(f"pyxla fusion: {text}", file=sys.stderr)


def _can_consume(instr: HloInstruction) -> bool:
    if instr.opcode == "fusion":
        return instr.attrs.get("kind") in ("kLoop", "kInput", "kOutput")
    if instr.opcode in NOT_CONSUMERS:
        return False
    if not isinstance(instr.shape, ArrayShape) and instr.opcode != "reduce":   # a variadic reduce (argmax) may
        return False
    return op_def(instr.opcode).fusion_kind in CONSUMER_KINDS


def fuse_computation(module: HloModule, comp: HloComputation, policy: FusionPolicy, log: FusionLog) -> bool:
    changed = False
    kept = not_duplicated(comp)
    for consumer in reversed(comp.post_order()):
        if consumer.parent is not comp or not _can_consume(consumer):
            continue
        while True:
            producer = _next_producer(consumer, policy, log, kept)
            if producer is None:
                break
            if consumer.opcode != "fusion":
                consumer = make_fusion(module, consumer)
            log(f"fuse %{producer.name} ({producer.opcode}) into %{consumer.name}")
            fuse_producer(module, consumer, producer)
            changed = True
    return changed


def _next_producer(consumer: HloInstruction, policy: FusionPolicy, log: FusionLog,
                   kept: frozenset[HloInstruction]) -> HloInstruction | None:
    seen: set[int] = set()
    for producer in consumer.operands:
        if id(producer) in seen:
            continue
        seen.add(id(producer))
        if producer.opcode == "parameter":
            continue
        reason = policy.refuse(producer, consumer, kept)
        if reason is None:
            return producer
        log(f"not fusing %{producer.name} ({producer.opcode}) into %{consumer.name} ({consumer.opcode}): {reason}")
    return None


def fusion_pass(policy: FusionPolicy | None = None, log: FusionLog | None = None) -> HloPass:
    """The fusion pass for a backend's policy."""
    policy = policy or FusionPolicy()

    def run(module: HloModule) -> bool:
        decisions = log or FusionLog()
        changed = prepare_fusions(module)
        for comp in list(module.computations):
            if comp.is_fusion_computation or _is_scalar_computation(module, comp):
                continue
            changed |= fuse_computation(module, comp, policy, decisions)
        # An annotation on the module, as front ends attach theirs (clone() copies it, the
        # compiler's dump reads it with getattr): not a field HloModule declares.
        module.fusion_log = decisions.lines   # type: ignore[attr-defined]
        return changed

    return HloPass("fusion", run, "Merge producer-consumer chains of cheap ops into fusion kernels.")


def _is_scalar_computation(module: HloModule, comp: HloComputation) -> bool:
    """Reducers, comparators and scatter combiners: called per element, never fused into."""
    for c in module.computations:
        for instr in c.instructions:
            for attr in ("to_apply", "select", "scatter"):
                if instr.attrs.get(attr) is comp and instr.opcode != "call":
                    return True
            if instr.opcode == "custom-call" and comp in instr.attrs.get("called_computations", ()):
                return True
    return False


# Instructions that launch no kernel of their own: bookkeeping and views.
NO_KERNEL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "opt-barrier"})


def kernels(comp: HloComputation) -> list[HloInstruction]:
    """The instructions of `comp` that run as kernels (each fusion counts once)."""
    return [i for i in comp.post_order() if i.opcode not in NO_KERNEL]
