"""Indexing ops on the CPU backend: gather and dynamic-slice (elemental rules),
dynamic-update-slice and scatter (kernels), and the Sharding custom-call (a copy).

Semantics are the evaluator's (pyxla/hlo/ops/indexing.py), which are XLA's on CPU:
  - gather clamps each start index so that its whole slice fits in the operand;
  - dynamic-slice and dynamic-update-slice clamp their starts so that the slice fits;
  - scatter skips an update window that would reach outside the operand, and applies the
    updates of one position in order (batch positions row-major, then window elements
    row-major) with the `to_apply` combiner, compiled as scalar IR.
Index values are read as i64: signed types sign-extend, unsigned zero-extend, and u64 values
past i64's range saturate (so they clamp to the last position, or fall out of bounds).

dynamic-update-slice and scatter write their output in two steps: the operand is copied to
the output (a memcpy when it is a buffer in the output's layout; nothing when buffer
assignment put the output in the operand's own buffer), then the updates are written over
it. Both work on a lone instruction and on a fusion whose root they are (XLA's
`select_dynamic-update-slice_fusion`, `wrapped_scatter`): every operand is read through the
elemental emitter, so fused operand computations are computed where they are read.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ....hlo.instruction import HloInstruction
from ....hlo.ops.indexing import scatter_dims, scatter_operand_groups
from ....hlo.shape import ArrayShape
from ...llvm.elemental import Unsupported
from ...llvm.indexing import at_window, batch_starts, clamped_starts, join_index
from ...llvm.ir_types import I1, i64
from ...llvm.loops import for_range
from ..codegen import KERNELS, kernel_root, output_pointers, tuple_element_offsets
from ..control_flow import copy_array, value_leaves
from .sorting import CUSTOM_CALL_KERNELS

INT64_MAX = (1 << 63) - 1


# --- writing an operand to the output -----------------------------------------------------------------

def _outside_value(ke, value: HloInstruction) -> HloInstruction | None:
    """The value outside the kernel that `value` reads as a buffer, or None when the kernel
    computes it (a fused expression)."""
    if ke.fused is None:
        return value if any(op is value for op in ke.instr.operands) else None
    if value.opcode == "parameter":
        return ke.instr.operands[value.parameter_number]
    return None


def _in_place(ke, source: HloInstruction, out_offset: int, shape: ArrayShape) -> bool:
    """Whether buffer assignment put the kernel's output (at out_offset) in `source`'s memory:
    the buffer of a value computed before, or the element of a while body's parameter (the
    loop state) that the body updates in place."""
    codegen = ke.codegen
    storage, offset = codegen.storage_and_offset(source)
    out_storage, out_base = codegen.storage_and_offset(ke.instr)
    out_buffer = codegen.buffers.of(out_storage)
    if storage.opcode == "parameter":
        (leaf,) = value_leaves(source)
        same = out_buffer is not None and out_offset == 0 and out_buffer.in_parameter == leaf.position
    elif storage.opcode == "constant" or offset != out_base + out_offset:
        return False
    else:
        buffer = codegen.buffers.of(storage)
        same = buffer is not None and buffer is out_buffer
    if same and source.shape.minor_to_major != shape.minor_to_major:
        raise Unsupported(f"the CPU backend cannot update {source.describe()} in place in another layout "
                          f"({ke.instr.describe()})")
    return same


def copy_into(ke, value: HloInstruction, ptr: ir.Value, shape: ArrayShape, out_offset: int = 0) -> None:
    """Write `value` (of the output's dims) into the output array at `ptr`: nothing when it is
    already there, a copy when it is a buffer, else an element loop computing it."""
    source = _outside_value(ke, value)
    if source is not None:
        if not _in_place(ke, source, out_offset, shape):
            copy_array(ke.b, ke.codegen.ir, ptr, shape, ke.operand_pointer(value), source.shape)
        return

    def body(index):
        ke.e.push_scope()
        ke.store(ptr, shape, index, ke.e.value(value, index))
        ke.e.pop_scope()

    for_range(ke.b, shape.dims, body)


# --- dynamic-update-slice: a kernel ----------------------------------------------------------------

def emit_dynamic_update_slice(ke) -> None:
    """The operand, then the update written over it at its clamped starts."""
    root = kernel_root(ke)
    operand, update, *start_values = root.operands
    shape: ArrayShape = ke.instr.shape
    b, e = ke.b, ke.e
    copy_into(ke, operand, ke.out_ptr, shape)
    starts = clamped_starts(e, start_values, shape.dims, update.shape.dims)

    def body(index):
        e.push_scope()
        target = tuple(b.add(s, i) for s, i in zip(starts, index))
        ke.store(ke.out_ptr, shape, target, e.value(update, index))
        e.pop_scope()

    for_range(b, update.shape.dims, body)


# --- scatter: a kernel ----------------------------------------------------------------------------------

def emit_scatter(ke) -> None:
    """The inputs, then each update window that fits combined into them, in order."""
    root = kernel_root(ke)
    inputs, indices, updates = scatter_operand_groups(root.operands)
    dn = scatter_dims(root.attrs)
    combiner = root.attrs["to_apply"]
    b, e = ke.b, ke.e
    shapes = [ke.instr.shape] if len(inputs) == 1 else list(ke.instr.shape.elements)
    offsets = [0] if len(inputs) == 1 else tuple_element_offsets(ke.instr.shape)
    pointers = output_pointers(ke)
    for x, ptr, shape, offset in zip(inputs, pointers, shapes, offsets):
        copy_into(ke, x, ptr, shape, offset)

    dims = shapes[0].dims
    rank = len(dims)
    window_operand_dims = dn.window_operand_dims(rank)
    window_sizes = tuple(updates[0].shape.dims[d] for d in dn.window_dims)
    window = dn.scatter_window(rank, updates[0].shape.dims)
    if any(n < w for n, w in zip(dims, window)):   # an empty operand: no window fits
        return

    def per_window(batch):
        e.push_scope()
        starts = batch_starts(e, indices, dn, rank, batch)
        # A window with any element outside the operand is skipped whole.
        fits = ir.Constant(I1, 1)
        for od in dn.index_map:
            fits = b.and_(fits, b.and_(b.icmp_signed(">=", starts[od], i64(0)),
                                       b.icmp_signed("<=", starts[od], i64(dims[od] - window[od]))))
        with b.if_then(fits):
            def per_element(w):
                e.push_scope()
                target = at_window(b, starts, w, window_operand_dims)
                update_index = join_index(batch, w, dn.window_dims)
                current = [ke.load(ptr, shape, target) for ptr, shape in zip(pointers, shapes)]
                new = [e.value(u, update_index) for u in updates]
                combined = e.scalar_computation(combiner, current + new)
                for ptr, shape, value in zip(pointers, shapes, combined):
                    ke.store(ptr, shape, target, value)
                e.pop_scope()

            for_range(b, window_sizes, per_element)
        e.pop_scope()

    for_range(b, dn.batch_shape(indices.shape.dims), per_window)


# --- the Sharding custom-call: a copy -----------------------------------------------------------------

def emit_identity_custom_call(ke) -> None:
    """Sharding annotations (and SPMD shape markers, on one device) pass their operand through."""
    root = kernel_root(ke)
    if not isinstance(ke.instr.shape, ArrayShape):
        raise Unsupported(f"the CPU backend cannot pass a tuple through custom-call "
                          f"{root.attrs.get('custom_call_target')!r} yet: {ke.instr.describe()}")
    copy_into(ke, root.operands[0], ke.out_ptr, ke.instr.shape)


KERNELS["dynamic-update-slice"] = emit_dynamic_update_slice
KERNELS["scatter"] = emit_scatter
for _target in ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"):
    CUSTOM_CALL_KERNELS[_target] = emit_identity_custom_call
