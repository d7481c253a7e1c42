"""The call from Python into a compiled entry function, kept to one cheap foreign call.

An entry function takes an array of parameter data pointers, an array of output data
pointers and the arena. Building those arrays in Python (`a.ctypes.data` per array, a ctypes
array per call) costs microseconds per argument, more than a small kernel runs. Instead one
native shim, loaded once per process (its machine code from the on-disk cache), takes the
tuple of parameter arrays and the tuple of output arrays themselves (ctypes passes a
`py_object` as the object's address), reads each array's data pointer out of the NumPy
array object, and calls the entry function.

The shim reads CPython's tuple layout (`ob_size`, `ob_item`) and NumPy's `PyArrayObject`
(`data`), whose offsets are part of both projects' stable ABI; they are checked against the
running interpreter when this module loads, and where they do not hold (another Python
implementation, say) calls fall back to building the pointer arrays in Python. ctypes
releases the GIL during the call; the caller's references keep every object alive.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence

import numpy as np

from . import helper_registry

SHIM_NAME = "pyxla_call_entry"
ENTRY_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
SHIM_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.py_object, ctypes.py_object, ctypes.c_void_p)


def _object_offsets() -> tuple[int, int, int] | None:
    """(tuple ob_size offset, tuple ob_item offset, ndarray data offset) for this process,
    or None when the layouts are not the expected ones."""
    word = ctypes.sizeof(ctypes.c_void_p)
    size_at, items_at, data_at = 2 * word, 3 * word, 2 * word
    probe = (np.arange(3.0), np.zeros((2, 2), np.float32))
    try:
        ok = (ctypes.c_ssize_t.from_address(id(probe) + size_at).value == len(probe)
              and all(ctypes.c_void_p.from_address(id(probe) + items_at + i * word).value == id(a)
                      for i, a in enumerate(probe))
              and all(ctypes.c_void_p.from_address(id(a) + data_at).value == a.ctypes.data for a in probe))
    except (ValueError, OSError):
        ok = False
    return (size_at, items_at, data_at) if ok else None


def _shim_ir(size_at: int, items_at: int, data_at: int) -> str:
    import llvmlite.ir as ir  # (a process that finds the shim loaded builds no IR)
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    module = ir.Module(name="pyxla_call_shim")
    module.triple = ""
    entry_type = ir.FunctionType(ir.VoidType(), [i8p, i8p, i8p])
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i8p, i8p, i8p]), name=SHIM_NAME)
    entry_ptr, params, outs, arena = fn.args
    b = ir.IRBuilder(fn.append_basic_block("start"))

    def field(obj, offset, ty):
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(i64, offset)]), ty.as_pointer()))

    def data_pointers(tup, what):
        """An array of the data pointers of the arrays in tuple `tup`."""
        n = field(tup, size_at, i64)
        slots = b.alloca(i8p, size=b.add(n, ir.Constant(i64, 1)), name=what)
        items = b.bitcast(b.gep(tup, [ir.Constant(i64, items_at)]), i8p.as_pointer())
        head = b.append_basic_block(f"{what}.head")
        body = b.append_basic_block(f"{what}.body")
        done = b.append_basic_block(f"{what}.done")
        before = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(i64)
        i.add_incoming(ir.Constant(i64, 0), before)
        b.cbranch(b.icmp_signed("<", i, n), body, done)
        b.position_at_end(body)
        array = b.load(b.gep(items, [i]))
        b.store(field(array, data_at, i8p), b.gep(slots, [i]))
        nxt = b.add(i, ir.Constant(i64, 1))
        i.add_incoming(nxt, body)
        b.branch(head)
        b.position_at_end(done)
        return b.bitcast(slots, i8p)

    param_ptrs = data_pointers(params, "params")
    out_ptrs = data_pointers(outs, "outs")
    b.call(b.bitcast(entry_ptr, entry_type.as_pointer()), [param_ptrs, out_ptrs, arena])
    b.ret_void()
    return str(module)


_shim: Callable | None = None
_OFFSETS = _object_offsets()


def _native_shim() -> Callable:
    global _shim
    if _shim is None:
        address = helper_registry.ADDRESSES.get(SHIM_NAME)
        if address is None:
            from .llvm_jit import host_jit
            address = host_jit().compile_helper("call-shim", _shim_ir(*_OFFSETS), (SHIM_NAME,))[SHIM_NAME]
        _shim = SHIM_SIGNATURE(address)
    return _shim


def load_shim() -> None:
    """Load the shim now (where this interpreter's layouts allow it), so that its cache
    entry is known when an executable's is written (helper_registry.py)."""
    if _OFFSETS is not None:
        _native_shim()


def entry_caller(address: int) -> Callable[[tuple, tuple, int | None], None]:
    """`call(params, outputs, arena_address)` running the entry function at `address` on a
    tuple of C-contiguous parameter arrays and a tuple of output arrays."""
    if _OFFSETS is not None:
        shim = _native_shim()
        return functools.partial(shim, address)
    entry = ENTRY_SIGNATURE(address)

    def call(params: Sequence[np.ndarray], outs: Sequence[np.ndarray], arena: int | None) -> None:
        param_ptrs = (ctypes.c_void_p * max(1, len(params)))(*[a.ctypes.data for a in params])
        out_ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
        entry(ctypes.addressof(param_ptrs), ctypes.addressof(out_ptrs), arena)
    return call
