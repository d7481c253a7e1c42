"""Entry parameters whose arguments the executable takes in an order of its own choosing.

A caller that passes the same array for a parameter on every call (an ONNX model's
weights: the `constant_parameters` of compile) lets the backend choose how that array lies
in memory, as an accelerator's runtime lays out a buffer when it is copied to the device:
the executable reorders the argument once (`CpuExecutable.prepare_argument`) and the
kernels read it in the order they walk it. The convolution emitters say which form they
want (`kernel_form`): the tiles (conv/tiles.py) a kernel in panel order, one sequential
stream per panel (3x3 512 -> 512 at 14x14: 253 -> 289 GFLOP/s, 2 threads), the 1x1 plane
kernels (conv/planes.py) weight tiles, one stream per tile of output features. A
parameter gets a form only when every use of it wants the same one; any other use (an
output, a slice, a dot) keeps the layout's order.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from ....hlo.instruction import HloInstruction
from ....hlo.module import HloModule
from ..conv.tiles import kernel_form


def choose_parameter_forms(module: HloModule, constant_parameters: tuple[int, ...] | frozenset[int]) -> dict[int, Any]:
    """{parameter number: form} for the entry parameters among `constant_parameters` whose
    every use wants one and the same form."""
    entry = module.entry
    uses: dict[int, list[tuple[HloInstruction, int]]] = defaultdict(list)
    for instr in entry.instructions:
        for index, operand in enumerate(instr.operands):
            if operand.opcode == "parameter":
                uses[id(operand)].append((instr, index))
    forms: dict[int, Any] = {}
    for param in entry.parameters:
        if param.parameter_number not in constant_parameters or not uses[id(param)] or param is entry.root:
            continue
        wanted = {_wanted_form(user, index) for user, index in uses[id(param)]}
        if len(wanted) == 1 and None not in wanted:
            forms[param.parameter_number] = wanted.pop()
    return forms


def _wanted_form(user: HloInstruction, index: int) -> Any:
    """The form `user` wants its operand `index` in: a convolution's kernel (alone, or the
    one use of a fusion's parameter) as its emitter wants it (tiles.kernel_form); else
    None."""
    conv = user
    if user.opcode == "fusion":
        param = user.attrs["calls"].parameters[index]
        inner = [(i, k) for i in user.attrs["calls"].instructions for k, op in enumerate(i.operands) if op is param]
        if len(inner) != 1:
            return None
        conv, index = inner[0]
    if conv.opcode != "convolution" or index != 1:
        return None
    return kernel_form(conv)
