"""Entry parameters whose arguments the executable takes in an order of its own choosing.

A caller that passes the same array for a parameter on every call (an ONNX model's
weights: the `constant_parameters` of compile) lets the backend choose how that array lies
in memory, as an accelerator's runtime lays out a buffer when it is copied to the device:
the executable reorders the argument once (`CpuExecutable.prepare_argument`) and the
kernels read it in the order they walk it. The convolution emitters say which form they
want (`kernel_form`): the tiles (conv/tiles.py) a kernel in panel order, one sequential
stream per panel (3x3 512 -> 512 at 14x14: 253 -> 289 GFLOP/s, 2 threads), the 1x1 plane
kernels (conv/planes.py) weight tiles, one stream per tile of output features. A dot's B
that pyxla's GEMM computes with (alone, or a parameter of the fusion around the dot) comes in
the GEMM's panels (dot/plan.py GemmPanels), which each call would otherwise pack again: a
transformer's weights. A parameter gets a form only when every use of it wants the same
one; any other use (an output, a slice, a dot's A) keeps the layout's order.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from ....fusion.attention import is_attention_fusion
from ....hlo.instruction import HloInstruction
from ....hlo.module import HloModule
from ..codegen import KERNELS, OUTPUT_FUSION_KERNELS
from ..conv.tiles import kernel_form
from ..dot.plan import gemm_panels, plan_gemm


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
    one use of a fusion's parameter) as its emitter wants it (tiles.kernel_form), a GEMM's
    B in its panels (_gemm_form); else None."""
    if any(i.opcode == "dot" for i in (user.attrs["calls"].instructions if user.opcode == "fusion" else (user,))):
        return _gemm_form(user, index)
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


def _gemm_form(user: HloInstruction, index: int) -> Any:
    """The GEMM panels of a dot's B when `user`'s kernel computes the dot with pyxla's GEMM
    (codegen.py KernelEmitter.emit: no kernel of its own for the root, no attention fusion,
    the dot's plan, dot/plan.py) and operand `index` is that B (the fusion's parameter used
    by nothing else); else None."""
    from ..ops import indexing, rng, sorting, windows  # noqa: F401  (the kernels they register in KERNELS)
    fused = user.attrs["calls"] if user.opcode == "fusion" else None
    root = fused.root if fused is not None else user
    if is_attention_fusion(user) or KERNELS.get(root.opcode) is not None:
        return None
    if fused is not None and user.attrs.get("kind") == "kOutput" and \
            any(i.opcode in OUTPUT_FUSION_KERNELS for i in fused.instructions):
        return None
    plan = plan_gemm(root, fused, user.shape)
    if plan is None:
        return None
    if fused is None:
        wanted = index == 1
    else:
        param = fused.parameters[index]
        inner = [(i, k) for i in fused.instructions for k, op in enumerate(i.operands) if op is param]
        wanted = len(inner) == 1 and inner[0][0] is plan.dot and inner[0][1] == 1
    return gemm_panels(plan) if wanted else None
