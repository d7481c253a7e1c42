"""Static cost and memory figures of a module, as `Compiled.cost_analysis()` and
`Compiled.memory_analysis()` report them.

Flops count one per output element of arithmetic ops, 2*M*N*K for dot and the
multiply-adds of a convolution; transcendental ops are also counted apart. Bytes accessed
are every operand read plus the result written, per instruction (an upper bound until
fusion keeps intermediates out of memory).
"""
from __future__ import annotations

from math import prod
from typing import Protocol

from .computation import HloComputation
from .instruction import HloInstruction
from .module import HloModule
from .ops import op_def
from .ops.registry import is_transcendental
from .shape import ArrayShape, Shape, TupleShape


class BufferPlan(Protocol):
    """What memory_analysis reads of a buffer assignment (fusion/buffer_assignment.py)."""
    arena_size: int
    temps: list


# Ops that move no data of their own or compute nothing.
FREE = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "opt-barrier"})


def byte_size(shape: Shape) -> int:
    if isinstance(shape, TupleShape):
        return sum(byte_size(e) for e in shape.elements)
    if isinstance(shape, ArrayShape):
        return shape.byte_size
    return 0


def _elements(shape: Shape) -> int:
    return shape.size if isinstance(shape, ArrayShape) else 0


def instruction_flops(instr: HloInstruction) -> int:
    opcode = instr.opcode
    if opcode == "dot":
        lhs = instr.operands[0].array_shape
        contracted = prod(lhs.dims[d] for d in instr.attrs.get("lhs_contracting_dims", ()))
        return 2 * _elements(instr.shape) * contracted
    if opcode == "convolution":
        kernel = instr.operands[1].array_shape
        dn = instr.attrs["dim_labels"]
        per_output = prod(kernel.dims[d] for d in dn.kernel_spatial) * kernel.dims[dn.kernel_input_feature]
        return 2 * _elements(instr.shape) * per_output
    if opcode in ("reduce", "reduce-window"):
        return sum(_elements(op.shape) for op in instr.operands[: len(instr.operands) // 2])
    kind = op_def(opcode).fusion_kind
    if kind == "elementwise":
        return _elements(instr.shape)
    return 0


def kernel_cost(instr: HloInstruction) -> tuple[int, int, int]:
    """(flops, transcendentals, bytes read and written) of one kernel: a fusion counts its
    fused instructions' flops, and its bytes are what it reads and writes in memory."""
    body = instr.attrs["calls"].instructions if instr.opcode == "fusion" else [instr]
    k_flops = sum(instruction_flops(i) for i in body if i.opcode not in FREE)
    k_trans = sum(_elements(i.shape) for i in body if is_transcendental(i.opcode))
    k_bytes = byte_size(instr.shape) + sum(byte_size(o.shape) for o in dict.fromkeys(instr.operands))
    return k_flops, k_trans, k_bytes


def _entry(module: HloModule) -> HloComputation:
    assert module.entry is not None, f"module {module.name} has no ENTRY computation"
    return module.entry


def cost_analysis(module: HloModule) -> dict:
    """Totals and a per-kernel list: each ENTRY instruction that runs (kernel_cost)."""
    flops = transcendentals = bytes_accessed = 0
    kernels = []
    for instr in _entry(module).instructions:
        if instr.opcode in FREE:
            continue
        k_flops, k_trans, k_bytes = kernel_cost(instr)
        kernels.append({"name": instr.name, "opcode": instr.opcode, "kind": instr.attrs.get("kind"),
                        "flops": float(k_flops), "bytes accessed": float(k_bytes)})
        flops += k_flops
        transcendentals += k_trans
        bytes_accessed += k_bytes
    return {"flops": float(flops), "transcendentals": float(transcendentals),
            "bytes accessed": float(bytes_accessed), "kernels": kernels}


def memory_analysis(module: HloModule, buffers: BufferPlan | None = None) -> dict:
    """Bytes by kind. With a buffer assignment the temp figure is its arena; without one,
    every intermediate value is counted as if it had its own buffer."""
    entry = _entry(module)
    args = sum(byte_size(p.shape) for p in entry.parameters)
    root = entry.root
    assert root is not None, f"computation {entry.name} has no ROOT"
    out = byte_size(root.shape)
    consts = sum(byte_size(i.shape) for c in module.computations for i in c.instructions if i.opcode == "constant")
    if buffers is not None:
        temps = buffers.arena_size
        unshared = sum(b.size for b in buffers.temps)
    else:
        temps = unshared = sum(byte_size(i.shape) for i in entry.instructions
                               if i.opcode not in FREE and i is not root)
    return {"argument_size_in_bytes": args, "output_size_in_bytes": out, "constant_size_in_bytes": consts,
            "temp_size_in_bytes": temps, "temp_bytes_without_reuse": unshared,
            "peak_bytes": args + out + consts + temps}
