"""object_loader.py: LLVM's relocatable objects loaded without LLVM run exactly as the same
objects loaded by LLVM's own loader (MCJIT): functions calling each other, libm, helpers
bound by symbol, constant tables, writable globals, objects in several parts; what it does
not take is refused naming the reason."""
import ctypes
import struct

import llvmlite.binding as llvm
import numpy as np
import pytest

from pyxla.backends.cpu.runtime import object_loader
from pyxla.backends.cpu.runtime.llvm_jit import host_jit

MODULE = r"""
@calls = global i64 0
@table = private constant [4 x float] [float 1.5, float 2.5, float -3.0, float 0.25]
declare float @expf(float)
declare float @scale(float)
define internal float @inner(float %x) {
  %e = call float @expf(float %x)
  %s = call float @scale(float %e)
  ret float %s
}
define void @work(ptr %out, ptr %in, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  %p = getelementptr float, ptr %in, i64 %i
  %v = load float, ptr %p
  %k = and i64 %i, 3
  %tp = getelementptr [4 x float], ptr @table, i64 0, i64 %k
  %t = load float, ptr %tp
  %y = call float @inner(float %v)
  %z = fmul float %y, %t
  %q = getelementptr float, ptr %out, i64 %i
  store float %z, ptr %q
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %n
  br i1 %c, label %loop, label %done
done:
  %old = load i64, ptr @calls
  %new = add i64 %old, 1
  store i64 %new, ptr @calls
  ret void
}
define i64 @count() {
  %v = load i64, ptr @calls
  ret i64 %v
}
"""

SECOND_PART = r"""
define double @twice(double %x) {
  %y = fmul double %x, 2.0
  ret double %y
}
"""
CALLS_SECOND = r"""
declare double @twice(double)
define double @quad(double %x) {
  %y = call double @twice(double %x)
  %z = call double @twice(double %y)
  ret double %z
}
"""

SCALE = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(lambda x: 3.0 * x)
WORK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
COUNT = ctypes.CFUNCTYPE(ctypes.c_int64)


def _object(ir_text: str) -> bytes:
    return host_jit().emit_object(ir_text)[0]


def _run(addresses, x):
    out = np.empty_like(x)
    work = WORK(addresses["work"])
    work(out.ctypes.data, x.ctypes.data, x.size)
    work(out.ctypes.data, x.ctypes.data, x.size)
    return out, COUNT(addresses["count"])()


def test_runs_as_llvms_loader_runs_it(rng):
    obj = _object(MODULE)
    bound = {"scale": ctypes.cast(SCALE, ctypes.c_void_p).value}
    x = rng.standard_normal(1003).astype(np.float32)
    for name, address in bound.items():
        llvm.add_symbol(name, address)
    by_llvm = host_jit().load_object(obj, ("work", "count"))
    ours = object_loader.load_objects(object_loader.unpack_objects(obj), ("work", "count"), bound)
    want, want_count = _run(by_llvm.addresses, x)
    got, got_count = _run(ours.addresses, x)
    np.testing.assert_array_equal(got, want)                     # the same machine code, bit for bit
    assert got_count == want_count == 2                           # a writable global of its own
    reference = 3.0 * np.exp(x.astype(np.float64)) * np.tile([1.5, 2.5, -3.0, 0.25], 251)[:x.size]
    np.testing.assert_allclose(got, reference, rtol=1e-6)


def test_parts_are_linked_to_each_other(rng):
    blob = object_loader.pack_objects([_object(CALLS_SECOND), _object(SECOND_PART)])
    loaded = object_loader.load_objects(object_loader.unpack_objects(blob), ("quad", "twice"))
    quad = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(loaded.addresses["quad"])
    x = float(rng.standard_normal())
    assert quad(x) == 4 * x


def test_what_it_does_not_load_is_refused_by_name(rng):
    obj = _object(CALLS_SECOND)
    with pytest.raises(object_loader.UnsupportedObject, match="not an ELF object"):
        object_loader.load_objects([b"not an object at all, but long enough to be read as a header"], ("quad",))
    other_machine = obj[:18] + struct.pack("<H", 183) + obj[20:]     # EM_AARCH64
    with pytest.raises(object_loader.UnsupportedObject, match="machine 183"):
        object_loader.load_objects([other_machine], ("quad",))
    with pytest.raises(object_loader.UnsupportedObject, match="symbol 'twice' is not in this process"):
        object_loader.load_objects([obj], ("quad",))
    with pytest.raises(object_loader.UnsupportedObject, match="define no missing"):
        object_loader.load_objects([_object(SECOND_PART)], ("twice", "missing"))
    # the small code model's 32-bit relocations are not the JIT's: refused by type
    machine = llvm.Target.from_default_triple().create_target_machine(codemodel="small", reloc="static")
    small = machine.emit_object(llvm.parse_assembly(MODULE))
    with pytest.raises(object_loader.UnsupportedObject, match="relocation type"):
        object_loader.load_objects([small], ("work",), {"scale": 1 << 40})
