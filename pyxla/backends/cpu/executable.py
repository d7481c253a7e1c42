"""A compiled CPU executable: native code plus the plan for its buffers.

A call checks the arguments, lays them out as the parameters' layouts say, allocates the
output buffers and a fresh arena (so concurrent calls from several threads do not share
memory), makes one foreign call, and returns the outputs as NumPy arrays the caller owns.
"""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from ...hlo.evaluator import check_arguments, flatten_result
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape, TupleShape
from .codegen import OutputSlot

ENTRY_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def to_physical(arr: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The array's bytes in the order of the shape's layout (major to minor)."""
    if shape.rank < 2 or shape.minor_to_major == tuple(range(shape.rank - 1, -1, -1)):
        return np.ascontiguousarray(arr)
    return np.ascontiguousarray(arr.transpose(tuple(reversed(shape.minor_to_major))))


def from_physical(raw: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """A logical array from bytes laid out as `shape` says."""
    major_to_minor = tuple(reversed(shape.minor_to_major))
    physical = raw.view(shape.dtype.np_dtype).reshape(tuple(shape.dims[d] for d in major_to_minor))
    if shape.rank < 2 or major_to_minor == tuple(range(shape.rank)):
        return physical
    return physical.transpose(np.argsort(major_to_minor))


class CpuExecutable:
    def __init__(self, module: HloModule, address: int, outputs: list[OutputSlot], output_sizes: list[int],
                 arena_size: int, keepalive: Any):
        self.module = module
        self._fn = ENTRY_SIGNATURE(address)
        self.outputs = outputs
        self.output_sizes = output_sizes
        self.arena_size = arena_size
        self._keepalive = keepalive   # the JIT must outlive the function pointer
        self._root_shape = module.entry.root.shape
        self._params = module.entry.parameters

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        checked = check_arguments(self.module.entry, args)
        physical = [to_physical(a, p.shape) for a, p in zip(checked, self._params)]
        param_ptrs = (ctypes.c_void_p * max(1, len(physical)))(*[a.ctypes.data for a in physical])
        out_raw = [np.empty(max(1, n), np.uint8) for n in self.output_sizes]
        out_ptrs = (ctypes.c_void_p * max(1, len(out_raw)))(*[o.ctypes.data for o in out_raw])
        arena = np.empty(max(1, self.arena_size) + 64, np.uint8)
        arena_ptr = arena.ctypes.data + (-arena.ctypes.data % 64)   # 64-byte aligned, as the plan assumes
        self._fn(ctypes.addressof(param_ptrs), ctypes.addressof(out_ptrs), arena_ptr)
        results = []
        for slot in self.outputs:
            if slot.kind == "parameter":
                results.append(np.array(checked[slot.index], copy=True))
            elif slot.kind == "constant":
                results.append(np.array(slot.literal, dtype=slot.shape.dtype.np_dtype, copy=True))
            else:
                raw = out_raw[slot.index][slot.offset: slot.offset + slot.shape.byte_size]
                results.append(from_physical(raw, slot.shape))
        return results

    def __call__(self, *args: Any) -> Any:
        flat = self.run_flat(args)
        if isinstance(self._root_shape, TupleShape):
            return _unflatten(self._root_shape, iter(flat))
        return flat[0]


def _unflatten(shape, it):
    if isinstance(shape, TupleShape):
        return tuple(_unflatten(e, it) for e in shape.elements)
    return next(it)
