"""What the host runs: per computation, its instructions in schedule order, each a kernel,
a value the host holds (parameter, constant), an alias of another value's buffer, or
control flow the host drives (while, conditional, call), whose computations are programs
of their own with their kernels on the device.

A while loop reads its condition's pred result back to the host after each evaluation (one
byte), a conditional its selector; the state passes between iterations as buffers, never
copied: no kernel writes a buffer it did not allocate, so sharing one is safe.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...hlo.computation import HloComputation
from ...hlo.instruction import HloInstruction
from ...hlo.ops.control import branch_computations
from .kernels import ALIASES, HOST_VALUES, KernelSpec, is_identity_custom_call, plan_kernel


@dataclass
class Program:
    computation: HloComputation
    kernels: dict[int, KernelSpec] = field(default_factory=dict)     # id(instr) -> its kernel
    called: dict[int, list[Program]] = field(default_factory=dict)   # id(instr) -> the programs it runs


def called_computations(instr: HloInstruction) -> list[HloComputation]:
    """While: [condition, body]; conditional: its branches; call: [callee]."""
    if instr.opcode == "while":
        return [instr.attrs["condition"], instr.attrs["body"]]
    if instr.opcode == "conditional":
        return branch_computations(instr.attrs)
    return [instr.attrs["to_apply"]]


def plan_program(computation: HloComputation, prefix: str, specs: list[KernelSpec]) -> Program:
    """The program of `computation`; every kernel it (and the programs it calls) launches is
    appended to `specs`, named from `prefix` (unique among the modules a process loads)."""
    program = Program(computation)
    for instr in computation.instructions:
        if instr.opcode in ALIASES or instr.opcode in HOST_VALUES or is_identity_custom_call(instr):
            continue
        if instr.opcode in ("while", "conditional", "call"):
            program.called[id(instr)] = [plan_program(c, prefix, specs) for c in called_computations(instr)]
            continue
        spec = plan_kernel(instr, f"{prefix}_{len(specs)}_{instr.name}")
        specs.append(spec)
        program.kernels[id(instr)] = spec
    return program
