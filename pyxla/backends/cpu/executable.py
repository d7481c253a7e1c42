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
        self._param_ptrs_type = ctypes.c_void_p * max(1, len(self._params))
        self._out_ptrs_type = ctypes.c_void_p * max(1, len(output_sizes))
        self._row_major = [isinstance(p.shape, ArrayShape) and
                           p.shape.minor_to_major == tuple(range(p.shape.rank - 1, -1, -1)) for p in self._params]
        # An output that is a whole row-major buffer is allocated as the array the caller gets.
        self._direct = [slot.kind == "buffer" and slot.offset == 0 and slot.shape.byte_size == output_sizes[slot.index]
                        and slot.shape.minor_to_major == tuple(range(slot.shape.rank - 1, -1, -1))
                        and self._single_use(slot) for slot in outputs]
        # what to allocate for each output buffer: the typed array itself, or raw bytes
        self._allocations = [((max(1, n),), np.dtype(np.uint8)) for n in output_sizes]
        for slot, direct in zip(outputs, self._direct):
            if direct:
                self._allocations[slot.index] = (slot.shape.dims, slot.shape.dtype.np_dtype)

    def _single_use(self, slot: OutputSlot) -> bool:
        return sum(1 for s in self.outputs if s.kind == "buffer" and s.index == slot.index) == 1

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        """Check the arguments against the parameters, then run."""
        return self.run_unchecked(check_arguments(self.module.entry, args))

    def run_unchecked(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already known to have the parameters' shapes and dtypes (jit's cache
        key guarantees it): the per-call path, kept short."""
        physical = [a if (fast and a.flags.c_contiguous) else to_physical(a, p.shape)
                    for a, p, fast in zip(arrays, self._params, self._row_major)]
        param_ptrs = self._param_ptrs_type(*[a.ctypes.data for a in physical])
        out_raw = [np.empty(shape, dtype) for shape, dtype in self._allocations]
        out_ptrs = self._out_ptrs_type(*[o.ctypes.data for o in out_raw])
        arena_ptr = None
        if self.arena_size:
            arena = np.empty(self.arena_size + 64, np.uint8)
            arena_ptr = arena.ctypes.data + (-arena.ctypes.data % 64)   # 64-byte aligned, as the plan assumes
        self._fn(ctypes.addressof(param_ptrs), ctypes.addressof(out_ptrs), arena_ptr)
        results = []
        for slot, direct in zip(self.outputs, self._direct):
            if direct:
                results.append(out_raw[slot.index])
            elif slot.kind == "parameter":
                results.append(np.array(arrays[slot.index], copy=True))
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
