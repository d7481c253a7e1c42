"""The JIT (runtime/llvm_jit.py): asking for the assembly (PYXLA_DUMP) must not change the code the
engine runs."""
import ctypes

import numpy as np

from pyxla.backends.cpu.runtime.llvm_jit import LlvmJit

IR = """
define void @scale(ptr %x, ptr %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %p = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %p
  %w = fmul float %v, 3.0
  %q = getelementptr float, ptr %y, i64 %i
  store float %w, ptr %q
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


class _Recording:
    """Forwards to `target`, recording the arguments of the method `name`."""

    def __init__(self, target, name: str):
        self._target, self._name, self.seen = target, name, []

    def __getattr__(self, attr):
        value = getattr(self._target, attr)
        if attr != self._name:
            return value

        def record(*args):
            self.seen.append(args[0])
            return value(*args)
        return record


def test_assembly_is_printed_from_a_copy(rng):
    jit = LlvmJit()
    jit.target_machine = printed = _Recording(jit.target_machine, "emit_assembly")
    jit.engine = added = _Recording(jit.engine, "add_module")
    result = jit.compile(IR, want_assembly=True, functions=("scale",))
    assert "scale" in result.assembly and len(printed.seen) == len(added.seen) == 1
    assert printed.seen[0] is not added.seen[0]   # the code generator rewrites the IR it prints
    x = rng.standard_normal(37).astype(np.float32)
    y = np.empty_like(x)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(result.addresses["scale"])(
        x.ctypes.data, y.ctypes.data, x.size)
    np.testing.assert_array_equal(y, x * np.float32(3))
