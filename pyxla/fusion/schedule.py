"""A sequential schedule that keeps peak memory low (a list scheduler, as XLA's).

Among the instructions whose operands are all computed, pick the one that frees the most
memory net of what it allocates: it is the last reader of some buffers, and its own result
costs its size. Ties go to the earlier instruction in the current order, so a schedule of
a chain is the chain. The computation's instruction list becomes the schedule.
"""
from __future__ import annotations

import heapq

from ..hlo.computation import HloComputation
from ..hlo.cost_analysis import byte_size
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule

# Results that own no new buffer: views of operands or caller-owned memory.
NO_ALLOCATION = frozenset({"parameter", "tuple", "get-tuple-element", "bitcast", "constant"})


def _allocates(instr: HloInstruction) -> int:
    return 0 if instr.opcode in NO_ALLOCATION else byte_size(instr.shape)


def schedule_computation(comp: HloComputation) -> list[HloInstruction]:
    order = comp.post_order()
    position = {id(i): n for n, i in enumerate(order)}
    members = {id(i) for i in order}
    preds = {id(i): [o for o in dict.fromkeys(i.operands) if id(o) in members] for i in order}
    waiting = {id(i): len(preds[id(i)]) for i in order}
    users = {id(i): [u for u in dict.fromkeys(i.users) if id(u) in members] for i in order}
    unscheduled_users = {id(i): len(users[id(i)]) for i in order}

    def priority(instr: HloInstruction) -> tuple[int, int]:
        freed = sum(_allocates(o) for o in dict.fromkeys(instr.operands)
                    if id(o) in members and unscheduled_users[id(o)] == 1 and o is not comp.root)
        return (_allocates(instr) - freed, position[id(instr)])

    ready = [(priority(i), position[id(i)], i) for i in order if waiting[id(i)] == 0]
    heapq.heapify(ready)
    scheduled: list[HloInstruction] = []
    while ready:
        _, _, instr = heapq.heappop(ready)
        scheduled.append(instr)
        touched: set[int] = set()
        for op in dict.fromkeys(instr.operands):
            if id(op) in members:
                unscheduled_users[id(op)] -= 1
                touched.update(id(u) for u in users[id(op)])
        for user in users[id(instr)]:
            waiting[id(user)] -= 1
            if waiting[id(user)] == 0:
                heapq.heappush(ready, (priority(user), position[id(user)], user))
        if touched:   # freeing changed: re-rank the ready users of those operands
            ready = [(priority(i), position[id(i)], i) if id(i) in touched else (p, n, i) for p, n, i in ready]
            heapq.heapify(ready)
    return scheduled


def schedule_module(module: HloModule) -> None:
    """Schedule every non-fused computation in place and mark the module scheduled."""
    for comp in module.computations:
        if not comp.is_fusion_computation:
            comp.instructions = schedule_computation(comp)
    module.header_attrs["is_scheduled"] = "true"
