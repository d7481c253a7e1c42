"""One block of device memory per executable, laid out from buffer assignment, as the CPU
backend's arena is:

    arena = [ENTRY temps | region of each program control flow runs | kernel scratch]

Each computation's temps come from its buffer assignment (fusion/buffer_assignment.py):
values that share a buffer there (a result written in place over an operand that dies at
it) share it here, and buffers whose values are never live at once share memory. The
offsets are chosen again here, with the same rule (largest first, lowest free offset),
because the GPU wants more: every array leaf starts on an ALIGNMENT boundary (a
multi-output fusion's leaves too, which the CPU packs). A program that control flow runs
gets a region of its own, so a loop body's temps never meet its caller's; programs never
run re-entrantly (HLO has no recursion). Kernels run one at a time on the executable's
stream, so they share one scratch region.

Values outside the arena get memory of their own per evaluation: the ENTRY's outputs (the
caller keeps them), a called computation's results (a loop's state outlives the body's
run), and a loop body's results that buffer assignment writes into the loop state (the
host passes the state as buffers instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...fusion.buffer_assignment import BufferAssignment, assign_buffers
from ...hlo.cost_analysis import byte_size
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape, TupleShape
from .program import Program

ALIGNMENT = 256   # what cuMemAlloc guarantees; coalesced accesses start on it


def align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass
class ArenaPlan:
    size: int = 0
    leaves: dict[int, list[int]] = field(default_factory=dict)   # id(instr) -> arena offset of each array leaf
    regions: dict[int, tuple[int, int]] = field(default_factory=dict)   # id(program) -> (offset, bytes)
    scratch_offset: int = 0
    scratch: dict[str, list[int]] = field(default_factory=dict)   # kernel name -> offset of each scratch buffer

    def describe(self) -> str:
        return (f"arena {self.size} bytes: " + ", ".join(f"region {o}..{o + n}" for o, n in self.regions.values())
                + f", scratch from {self.scratch_offset}")


def array_sizes(shape) -> list[int]:
    """The bytes of each array leaf of `shape`, depth first."""
    if isinstance(shape, TupleShape):
        return [n for e in shape.elements for n in array_sizes(e)]
    return [byte_size(shape)] if isinstance(shape, ArrayShape) else []


def plan_arena(module: HloModule, entry: Program, entry_buffers: BufferAssignment) -> ArenaPlan:
    plan = ArenaPlan()
    every = programs(entry)
    at = 0
    for program in every:
        assignment = entry_buffers if program is entry else assign_buffers(module, program.computation)
        size = _place_region(program, assignment, at, plan)
        plan.regions[id(program)] = (at, size)
        at = align(at + size)
    plan.scratch_offset = at
    most = 0
    for program in every:
        for spec in program.kernels.values():
            offsets, end = [], 0
            for n in spec.scratch:
                offsets.append(at + end)
                end = align(end + n)
            plan.scratch[spec.name] = offsets
            most = max(most, end)
    plan.size = max(1, at + most)
    return plan


def programs(program: Program) -> list[Program]:
    """`program` and every program its control flow runs, callers first."""
    found = [program]
    for called in program.called.values():
        for p in called:
            found.extend(programs(p))
    return found


def _place_region(program: Program, assignment: BufferAssignment, base: int, plan: ArenaPlan) -> int:
    """Offsets (from `base`) for the temps of `program` that a kernel writes; the region's size."""
    placed: list[tuple[int, int, int, int]] = []   # (offset, size, start, end)
    size = 0
    temps = [b for b in assignment.temps if any(id(v) in program.kernels for v in b.values)]
    for b in sorted(temps, key=lambda b: (-b.size, b.start)):
        leaves = array_sizes(b.values[0].shape)
        need = sum(align(n) for n in leaves)
        busy = sorted((o, o + n) for o, n, s, e in placed if s <= b.end and b.start <= e)
        offset = 0
        for lo, hi in busy:
            if offset + need <= lo:
                break
            offset = max(offset, align(hi))
        placed.append((offset, need, b.start, b.end))
        size = max(size, offset + need)
        starts, at = [], base + offset
        for n in leaves:
            starts.append(at)
            at += align(n)
        for v in b.values:
            # values sharing a buffer have its bytes (in place: the same array size)
            if id(v) in program.kernels:
                plan.leaves[id(v)] = starts
    return size
