"""Placement: which instructions that compute run on the host instead of as a kernel.

A kernel costs a launch (several microseconds through the driver) however little it does,
and a value the host needs (a conditional's selector) or the device needs (a kernel's
operand) costs a copy each way. Small scalar work on values the host already has (scalar
parameters, constants, other host results) is cheaper on the host, and a conditional's
selector computed there needs no copy back. So each instruction is placed, in schedule
order, where its estimated cost is lower:

    device: LAUNCH_US per launch + a copy in for each operand only the host has
            + a copy back when the host needs the result (a conditional's selector, a
              while condition's result)
    host:   HOST_OP_US + HOST_NS_PER_FLOP per flop (the evaluator on NumPy)
            + a copy back for each operand only the device has
            + a copy in when the device needs the result (a kernel's operand that is
              not itself small, control flow's operands, the ENTRY's outputs, a loop
              body's, branch's or callee's results)

where a copy is TRANSFER_US + bytes at TRANSFER_GBPS. Only small work is a candidate
(at most HOST_MAX_ELEMENTS output elements and HOST_MAX_FLOPS); the rest is always a kernel.
The ENTRY's parameters count as the host's when small (a scalar argument is a NumPy value)
and the device's otherwise; a called computation's parameters are the device's (control
flow passes buffers); constants are on both. The constants are estimates for a PCIe GPU
driven from Python, not measurements.

Modes: "auto" (the cost model), "device" (every instruction a kernel: what gpu-sim does by
default, so its tests run the kernels), "host" (everything the host can run on the host).
`jit(f, backend="gpu", device="auto"|"device"|"host")` or PYXLA_GPU_PLACEMENT choose it;
PYXLA_DUMP=DIR writes the decisions with their costs to DIR/<module>/gpu-placement.txt.
Every computation is placed, those control flow runs too: a loop's `i < n` then runs on the
host (the counter read back instead of the pred, and no launch per iteration).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...errors import ArgumentError
from ...hlo.computation import HloComputation
from ...hlo.cost_analysis import byte_size, kernel_cost
from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape
from .kernels import ALIASES, KernelSpec
from .program import Program

HOST, DEVICE = "host", "device"
MODES = ("auto", "device", "host")

LAUNCH_US = 8.0
HOST_OP_US = 4.0
HOST_NS_PER_FLOP = 2.0
TRANSFER_US = 12.0
TRANSFER_GBPS = 12.0
HOST_MAX_ELEMENTS = 1024
HOST_MAX_FLOPS = 100_000
CONTROL_FLOW = frozenset({"while", "conditional", "call"})


@dataclass
class Placement:
    mode: str
    where: dict[int, str] = field(default_factory=dict)    # id(instr) -> HOST or DEVICE, for kernels
    why: dict[int, str] = field(default_factory=dict)      # id(instr) -> the costs compared

    def on_host(self, instr: HloInstruction) -> bool:
        return self.where.get(id(instr)) == HOST

    def to_text(self, computation: HloComputation) -> str:
        if not self.where:
            return f"placement of {computation.name}: nothing computes"
        lines = [f"placement of {computation.name} ({self.mode}): "
                 f"{sum(w == HOST for w in self.where.values())} on the host, "
                 f"{sum(w == DEVICE for w in self.where.values())} on the device"]
        for instr in computation.instructions:
            if id(instr) in self.where:
                lines.append(f"  {self.where[id(instr)]:<6} %{instr.name}  {self.why[id(instr)]}")
        return "\n".join(lines)


def placement_mode(requested: str | None, backend: str) -> str:
    """The mode a compile uses: the one asked for, else PYXLA_GPU_PLACEMENT, else "device"
    on gpu-sim (its purpose is to run the kernels) and "auto" on the GPU."""
    mode = requested or os.environ.get("PYXLA_GPU_PLACEMENT") or ("device" if backend == "gpu-sim" else "auto")
    if mode not in MODES:
        raise ArgumentError(f"placement {mode!r}: expected one of {', '.join(MODES)}")
    return mode


def transfer_us(nbytes: int) -> float:
    return TRANSFER_US + nbytes / (TRANSFER_GBPS * 1e3)


def _elements(instr: HloInstruction) -> int:
    return instr.shape.size if isinstance(instr.shape, ArrayShape) else 0


def _small(instr: HloInstruction) -> bool:
    return (isinstance(instr.shape, ArrayShape) and _elements(instr) <= HOST_MAX_ELEMENTS
            and kernel_cost(instr)[0] <= HOST_MAX_FLOPS)


def place_programs(entry: Program, mode: str) -> dict[int, Placement]:
    """id(program) -> its placement, for the ENTRY's program and every program its control
    flow runs. A called program's parameters are on the device (the host passes control
    flow buffers); a while condition's result is read by the host, every other program's
    is needed on the device (a loop's next state, a branch's or call's result)."""
    placements: dict[int, Placement] = {}

    def walk(program: Program, entry_program: bool, read_by_host: bool) -> None:
        placements[id(program)] = place(program.computation, program.kernels, mode,
                                        small_parameters_on_host=entry_program, result_read_by_host=read_by_host)
        for instr_id, called in program.called.items():
            condition = len(called) == 2 and _is_while(program, instr_id)
            for k, p in enumerate(called):
                walk(p, False, condition and k == 0)
    walk(entry, True, False)
    return placements


def _is_while(program: Program, instr_id: int) -> bool:
    return any(id(i) == instr_id and i.opcode == "while" for i in program.computation.instructions)


def place(computation: HloComputation, kernels: dict[int, KernelSpec], mode: str, *,
          small_parameters_on_host: bool = True, result_read_by_host: bool = False) -> Placement:
    """Where each kernel instruction of `computation` runs."""
    placement = Placement(mode)
    resident: dict[int, set[str]] = {}   # id(value) -> where it is, as the walk goes
    output_ids = {id(v) for v in _root_values(computation.root)}
    for instr in computation.instructions:
        op = instr.opcode
        if op == "parameter":
            resident[id(instr)] = {HOST} if small_parameters_on_host and _small(instr) else {DEVICE}
        elif op == "constant":
            resident[id(instr)] = {HOST, DEVICE}
        elif op in ALIASES and instr.operands:
            resident[id(instr)] = set().union(*(resident.get(id(o), {DEVICE}) for o in instr.operands))
        elif id(instr) in kernels:
            output = id(instr) in output_ids
            where, why = _decide(instr, kernels[id(instr)], mode, resident,
                                 to_host=_needed_on_host(instr) or (output and result_read_by_host),
                                 to_device=_needed_on_device(instr) or (output and not result_read_by_host))
            placement.where[id(instr)] = where
            placement.why[id(instr)] = why
            resident[id(instr)] = {where}
        else:
            resident[id(instr)] = {DEVICE}
    return placement


def _decide(instr: HloInstruction, spec: KernelSpec, mode: str, resident: dict[int, set[str]], *,
            to_host: bool, to_device: bool) -> tuple[str, str]:
    if mode != "auto":
        return (HOST if mode == "host" else DEVICE), f"({mode})"
    if not _small(instr):
        return DEVICE, f"(not small: {_elements(instr)} elements, {kernel_cost(instr)[0]} flops)"
    out_bytes = byte_size(instr.shape)
    device = LAUNCH_US * len(spec.launches)
    host = HOST_OP_US + HOST_NS_PER_FLOP * max(kernel_cost(instr)[0], _elements(instr)) / 1e3
    for o in dict.fromkeys(instr.operands):
        where = resident.get(id(o), {DEVICE})
        if DEVICE not in where:
            device += transfer_us(byte_size(o.shape))
        if HOST not in where:
            host += transfer_us(byte_size(o.shape))
    if to_host:
        device += transfer_us(out_bytes)
    if to_device:
        host += transfer_us(out_bytes)
    return (HOST if host < device else DEVICE), f"(host {host:.1f} us, device {device:.1f} us)"


def _needed_on_host(instr: HloInstruction) -> bool:
    """The host reads it: a conditional's selector."""
    return any(u.opcode == "conditional" and u.operands[0] is instr for u in instr.users)


def _needed_on_device(instr: HloInstruction) -> bool:
    """A user that surely runs on the device reads it: a kernel too big for the host,
    control flow's operands (its computations' kernels), or a view of it."""
    for u in instr.users:
        if u.opcode == "conditional" and u.operands[0] is instr and u.operands.count(instr) == 1:
            continue
        if u.opcode in CONTROL_FLOW or u.opcode in ALIASES or not _small(u):
            return True
    return False


def _root_values(root: HloInstruction) -> list[HloInstruction]:
    """The instructions whose values the ENTRY returns (through tuples)."""
    if root.opcode == "tuple":
        return [v for o in root.operands for v in _root_values(o)]
    return [root]
