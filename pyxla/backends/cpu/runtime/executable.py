"""A compiled CPU executable: native code plus the plan for its buffers.

A call checks the arguments, lays them out as the parameters' layouts say, takes output
buffers and an arena, makes one foreign call (runtime/call_shim.py), and returns the outputs as
NumPy arrays the caller owns.

Memory is reused rather than allocated fresh on each call, because fresh large buffers cost
a page fault per 4 KiB page on first touch (for a 64 MiB result, about as long as the
kernel): an arena goes back to a free list after the call (a call from another thread at
the same time takes another one), and a large output buffer is handed out again once the
caller has dropped every reference to the array it got (see `ReusedBuffer`).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ....hlo.shape import ArrayShape, TupleShape
from ....runtime.memory import aligned_empty
from . import pool_threads
from .call_shim import entry_caller

if TYPE_CHECKING:
    from ....hlo.module import HloModule

REUSED_OUTPUT_BYTES = 1 << 20      # outputs at least this big are reused once the caller drops them


@dataclass
class OutputSlot:
    """Where ROOT leaf i comes from: a native output buffer (with a byte offset inside a
    tuple-valued buffer), or a parameter / constant that passes through."""
    kind: str                 # "buffer", "parameter" or "constant"
    index: int                # output buffer number, or parameter number
    offset: int
    shape: ArrayShape
    literal: np.ndarray | None = None


def to_physical(arr: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The array's bytes in the order of the shape's layout (major to minor)."""
    if shape.rank < 2 or shape.is_row_major:
        return np.ascontiguousarray(arr)
    return np.ascontiguousarray(arr.transpose(tuple(reversed(shape.minor_to_major))))


def from_physical(raw: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """A logical array from bytes laid out as `shape` says."""
    major_to_minor = tuple(reversed(shape.minor_to_major))
    physical = raw.view(shape.dtype.np_dtype).reshape(tuple(shape.dims[d] for d in major_to_minor))
    if shape.rank < 2 or major_to_minor == tuple(range(shape.rank)):
        return physical
    return physical.transpose(np.argsort(major_to_minor))


class ReusedBuffer:
    """Output buffers of one shape handed out again once nobody holds them.

    The list keeps one reference to each buffer; a buffer whose reference count shows no
    other holder (no array the caller kept, no view of it) is free. The reference that the
    checking loop itself holds is taken before the count is read, so two threads never both
    see the same buffer as free."""
    KEEP = 2

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape, self.dtype = shape, dtype
        self.buffers: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        for buffer in self.buffers:
            if sys.getrefcount(buffer) == 3:   # the list, `buffer` and getrefcount's argument
                return buffer
        fresh = np.empty(self.shape, self.dtype)
        if len(self.buffers) < self.KEEP:
            self.buffers.append(fresh)
        return fresh


class FormedArgument:
    """An argument already in the form its parameter takes (see prepare_argument)."""
    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


class PackedOnly:
    """The form of a constant parameter of an executable made without its module (the ONNX
    load index): its argument comes already packed, as a FormedArgument, and cannot be
    packed here."""

    def pack(self, array: np.ndarray) -> np.ndarray:
        raise ValueError("this executable was loaded without its module: pass its constant parameters as "
                         "the FormedArgument they were packed into when it was compiled")


class CpuExecutable:
    def __init__(self, module: HloModule | None, address: int, outputs: list[OutputSlot], output_sizes: list[int],
                 arena_size: int, keepalive: Any, parameter_forms: dict | None = None,
                 parameter_shapes: list | None = None, root_shape: Any = None):
        """`module` is the optimised module; an executable loaded without it (the ONNX load
        index: executable_cache.executable_from_description) gives the entry's parameter
        shapes and root shape instead."""
        self.module = module
        # parameter number -> the form its argument is taken in (runtime/parameter_forms.py)
        self.parameter_forms = parameter_forms or {}
        self._call = entry_caller(address)
        self.outputs = outputs
        self.output_sizes = output_sizes
        self.arena_size = arena_size
        self._keepalive = keepalive   # the JIT must outlive the function pointer
        self._root_shape = module.entry.root.shape if module is not None else root_shape
        self.root_shape = self._root_shape
        self.cache_key: str | None = None   # its code's key in the executable cache, when kept there
        self._params = module.entry.parameters if module is not None else None
        self.parameter_shapes = [p.shape for p in self._params] if module is not None else list(parameter_shapes)
        self._row_major = [isinstance(shape, ArrayShape) and shape.is_row_major for shape in self.parameter_shapes]
        self.params_are_row_major = all(self._row_major) and not self.parameter_forms
        for number in self.parameter_forms:   # a formed argument is C-contiguous in its own order
            self._row_major[number] = True
        # An output that is a whole row-major buffer is allocated as the array the caller gets.
        self._direct = [slot.kind == "buffer" and slot.offset == 0 and slot.shape.byte_size == output_sizes[slot.index]
                        and slot.shape.is_row_major
                        and self._single_use(slot) for slot in outputs]
        # what to allocate for each output buffer: the typed array itself, or raw bytes
        self._allocations = [((max(1, n),), np.dtype(np.uint8)) for n in output_sizes]
        for slot, direct in zip(outputs, self._direct):
            if direct:
                self._allocations[slot.index] = (slot.shape.dims, slot.shape.dtype.np_dtype)
        self._takers = [ReusedBuffer(shape, dtype).take if np.prod(shape) * dtype.itemsize >= REUSED_OUTPUT_BYTES
                        else (lambda shape=shape, dtype=dtype: np.empty(shape, dtype))
                        for shape, dtype in self._allocations]
        self._all_direct = all(self._direct) and [slot.index for slot in outputs] == list(range(len(output_sizes)))
        self._free_arenas: list[tuple[np.ndarray, int]] = []
        self.profile = None   # the kernel timings, when compiled under PYXLA_PROFILE (runtime/kernel_profile.py)

    def _single_use(self, slot: OutputSlot) -> bool:
        return sum(1 for s in self.outputs if s.kind == "buffer" and s.index == slot.index) == 1

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        """Check the arguments against the parameters, then run."""
        from ....hlo.evaluator import check_arguments
        if self.module is None:
            raise ValueError("this executable was loaded without its module: call run_unchecked")
        return self.run_unchecked(check_arguments(self.module.entry, args))

    def prepare_argument(self, number: int, array: np.ndarray) -> np.ndarray | FormedArgument:
        """`array`, passed for parameter `number` on every call, as the executable takes it:
        reordered once into the parameter's form when it has one (pass the result in place of
        the array; an array as it is is reordered on each call)."""
        from ....hlo.evaluator import check_argument
        form = self.parameter_forms.get(number)
        if form is None:
            return array
        return FormedArgument(form.pack(array if self._params is None else check_argument(self._params[number], array)))

    def run_unchecked(self, arrays: Sequence[np.ndarray | FormedArgument]) -> list[np.ndarray]:
        """Run on arrays already known to have the parameters' shapes and dtypes (jit's cache
        key guarantees it): the per-call path, kept short."""
        if self.parameter_forms:
            arrays = list(arrays)
            for number, form in self.parameter_forms.items():
                given = arrays[number]
                arrays[number] = given.array if isinstance(given, FormedArgument) else form.pack(given)
        physical = tuple(a if (fast and a.flags.c_contiguous) else to_physical(a, shape)
                         for a, shape, fast in zip(arrays, self.parameter_shapes, self._row_major))
        return self.run_physical(physical, arrays)

    def run_physical(self, physical: tuple, arrays: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """Run on a tuple of C-contiguous arrays in the parameters' physical layouts."""
        if len(sys.modules) != pool_threads.modules_seen:   # (an import may have brought OpenMP)
            pool_threads.look_for_openmp()
        out_raw = tuple([take() for take in self._takers])
        if self.arena_size:
            try:
                arena = self._free_arenas.pop()
            except IndexError:
                raw = aligned_empty(self.arena_size, np.uint8)
                arena = (raw, raw.ctypes.data)
            self._call(physical, out_raw, arena[1])
            self._free_arenas.append(arena)
        else:
            self._call(physical, out_raw, None)
        if self._all_direct:
            return list(out_raw)
        results = []
        for slot, direct in zip(self.outputs, self._direct):
            if direct:
                results.append(out_raw[slot.index])
            elif slot.kind == "parameter":
                results.append(np.array((arrays or physical)[slot.index], copy=True))
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
