"""Compiling a module as parts on several threads (runtime/split_compile.py): the parts
together define every function once (shared internal ones copied), the program they make
computes the same bits as the module compiled whole, and its packed objects go through the
executable cache."""
import ctypes
import gc
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax, nn
from pyxla.backends.cpu.runtime import split_compile
from pyxla.backends.cpu.runtime.llvm_jit import host_jit
from pyxla.runtime import disk_cache


def network(x, w, w2):
    """A convolution, bias-free ReLU, a max pool, a dense layer, a softmax and a loop: kernels
    of most kinds, parallel tasks among them."""
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = pnp.maximum(y, 0.0)
    y = lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = y.reshape(y.shape[0], -1) @ w2
    h = lax.fori_loop(0, 3, lambda i, v: pnp.tanh(v) * 1.5, h)
    return nn.softmax(h, axis=-1), pnp.sum(y)


def inputs(rng):
    return (rng.standard_normal((4, 16, 16, 8)).astype(np.float32),
            (rng.standard_normal((3, 3, 8, 16)) / 8).astype(np.float32),
            (rng.standard_normal((8 * 8 * 16, 32)) / 32).astype(np.float32))


def reference(x, w, w2):
    x, w, w2 = (a.astype(np.float64) for a in (x, w, w2))
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    y = sum(np.einsum("nhwc,co->nhwo", xp[:, i:i + 16, j:j + 16], w[i, j]) for i in range(3) for j in range(3))
    y = np.maximum(y, 0).reshape(4, 8, 2, 8, 2, 16).max(axis=(2, 4))
    h = y.reshape(4, -1) @ w2
    for _ in range(3):
        h = np.tanh(h) * 1.5
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True), y.sum()


@pytest.fixture
def split_always(monkeypatch):
    """Every module cut into parts, on two threads."""
    monkeypatch.setattr(split_compile, "SPLIT_MIN_CHARS", 0)
    monkeypatch.setenv("PYXLA_COMPILE_THREADS", "2")
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")


def module_ir(rng) -> str:
    """The LLVM IR codegen emits for `network` (before optimisation)."""
    return network_codegen(rng).emit()


def network_codegen(rng):
    """The code generator of `network`'s optimised module, before emission."""
    from pyxla.backends.cpu import CpuBackend
    from pyxla.backends.cpu.codegen import ModuleCodegen
    from pyxla.compiler import compile_module
    lowered = pyxla.jit(network).lower(*inputs(rng))
    module = lowered.module.clone()
    CpuBackend().prepare(module)
    compiled = compile_module(module)
    return ModuleCodegen(compiled.module, compiled.buffers)


def defined(text: str) -> list[str]:
    return re.findall(r'^define [^@\n]*@"([^"]+)"', text, flags=re.MULTILINE)


def test_parts_define_every_kernel_once_and_parse(rng, monkeypatch):
    monkeypatch.setattr(split_compile, "SPLIT_MIN_CHARS", 0)
    text = module_ir(rng)
    parts = split_compile.split_module(text, "entry", 3)
    assert len(parts) == 3
    whole = defined(text)
    kernels = [name for name in whole if name.startswith("kernel.") and not re.search(r"\.task(\.\d+)?$", name)]
    assert len(kernels) >= 4
    in_parts = [name for part in parts for name in defined(part)]
    assert sorted(set(in_parts)) == sorted(whole)
    for kernel in kernels + ["entry"]:
        assert in_parts.count(kernel) == 1, kernel
    for part in parts:
        module = llvm.parse_assembly(part, context=llvm.create_context())
        module.verify()
        for name in defined(part):   # kernels are called across parts, so none stays internal
            assert (module.get_function(name).linkage == llvm.Linkage.internal) == (name not in kernels + ["entry"])


@pytest.mark.parametrize("enabled", [True, False])
def test_emission_pauses_the_cycle_collector_and_restores_it(rng, enabled, monkeypatch):
    codegen = network_codegen(rng)
    during = []
    inner = codegen._emit
    monkeypatch.setattr(codegen, "_emit", lambda: during.append(gc.isenabled()) or inner())
    (gc.enable if enabled else gc.disable)()
    try:
        text = codegen.emit()
        assert during == [False] and gc.isenabled() == enabled
    finally:
        gc.enable()
    assert defined(text)[0] == "entry"


def test_kernels_stay_functions_of_their_own_after_optimisation(rng):
    text = module_ir(rng)
    kernels = {name for name in defined(text) if name.startswith("kernel.") and ".task" not in name}
    jit = host_jit()
    module = llvm.parse_assembly(jit.with_host_attributes(text), context=llvm.create_context())
    jit.optimise(module)
    entry = str(module.get_function("entry"))
    called = set(re.findall(r'call [^@\n]*@"?(kernel\.[\w.]+)"?\(', entry))
    assert called == kernels   # not inlined into the entry function


def test_small_modules_and_one_thread_compile_whole(rng, monkeypatch):
    text = module_ir(rng)
    assert split_compile.split_module(text, "entry", 1) == [text]
    monkeypatch.setattr(split_compile, "SPLIT_MIN_CHARS", len(text) + 1)
    assert split_compile.split_module(text, "entry", 4) == [text]


def test_a_module_with_a_global_that_must_exist_once_is_not_cut(rng, monkeypatch):
    monkeypatch.setattr(split_compile, "SPLIT_MIN_CHARS", 0)
    text = module_ir(rng)
    assert len(split_compile.split_module(text, "entry", 2)) == 2
    counted = text + '\n@"counters" = global [2 x i64] zeroinitializer\n'
    assert split_compile.split_module(counted, "entry", 2) == [counted]


SHARED = """
@"scale" = internal constant [4 x i8] c"\\00\\00@@", align 64

define internal double @"helper"(double %x) noinline {
  %s = load float, ptr @"scale"
  %d = fpext float %s to double
  %y = fmul double %x, %d
  ret double %y
}

define internal void @"kernel.a"(ptr %out, ptr %in) noinline {
  %x = load double, ptr %in
  %y = call double @"helper"(double %x)
  store double %y, ptr %out
  ret void
}

define internal void @"kernel.b"(ptr %out, ptr %in) noinline {
  %x = load double, ptr %in
  %y = call double @"helper"(double %x)
  %z = fadd double %y, 1.0
  store double %z, ptr %out
  ret void
}

define void @"entry_split_test"(ptr %out, ptr %in) {
  %second = getelementptr double, ptr %out, i64 1
  call void @"kernel.a"(ptr %out, ptr %in)
  call void @"kernel.b"(ptr %second, ptr %in)
  ret void
}
"""


def test_a_function_and_a_constant_two_kernels_share_are_copied_into_each_part(monkeypatch, rng):
    monkeypatch.setattr(split_compile, "SPLIT_MIN_CHARS", 0)
    parts = split_compile.split_module(SHARED, "entry_split_test", 3)
    assert len(parts) == 3
    for name in ("kernel.a", "kernel.b"):
        (part,) = [p for p in parts if f'define void @"{name}"' in p]
        assert 'define internal double @"helper"' in part and '@"scale" = internal constant' in part
    (entry,) = [p for p in parts if "entry_split_test" in p]
    assert "helper" not in entry and 'declare void @"kernel.a"(ptr %out, ptr %in)' in entry
    jit = host_jit()
    objects, _ = split_compile.compile_parts(jit, parts, 2)
    loaded = jit.load_object(split_compile.pack_objects(objects), ("entry_split_test",))
    x = np.array([rng.standard_normal()])
    out = np.zeros(2)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(loaded.addresses["entry_split_test"])(
        out.ctypes.data, x.ctypes.data)
    scale = np.frombuffer(b"\x00\x00@@", np.float32)[0]   # 3.0
    np.testing.assert_array_equal(out, [x[0] * scale, x[0] * scale + 1.0])


def test_split_program_computes_the_same_bits_as_the_whole_one(rng, split_always, monkeypatch):
    args = inputs(rng)
    split_probs, split_total = pyxla.jit(network)(*args)
    monkeypatch.setenv("PYXLA_COMPILE_THREADS", "1")
    whole_probs, whole_total = pyxla.jit(network)(*args)
    np.testing.assert_array_equal(split_probs, whole_probs)
    np.testing.assert_array_equal(split_total, whole_total)
    probs, total = reference(*args)
    np.testing.assert_allclose(split_probs, probs, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(split_total, total, rtol=1e-4)


def test_parts_compile_through_llvmlites_own_calls_where_the_library_lacks_them(rng, split_always, monkeypatch):
    args = inputs(rng)
    unlocked_probs, unlocked_total = pyxla.jit(network)(*args)
    monkeypatch.setattr(split_compile, "_unlocked", [])
    monkeypatch.setattr(split_compile, "_Unlocked", lambda: (_ for _ in ()).throw(AttributeError("no symbol")))
    locked_probs, locked_total = pyxla.jit(network)(*args)
    assert isinstance(split_compile._library(), split_compile._Locked)
    np.testing.assert_array_equal(locked_probs, unlocked_probs)
    np.testing.assert_array_equal(locked_total, unlocked_total)


def test_split_stages_are_timed(rng, split_always):
    compiled = pyxla.jit(network).lower(*inputs(rng)).compile()
    seconds = compiled.stage_seconds
    assert seconds["LLVM optimisation + machine code"] > 0
    assert seconds["LLVM optimisation cpu"] > 0 and seconds["machine code cpu"] > 0


def test_packed_objects_round_trip_and_damage_is_refused():
    objects = [bytes([i]) * (5 + i) for i in range(3)]
    blob = split_compile.pack_objects(objects)
    assert split_compile.unpack_objects(blob) == objects
    assert split_compile.pack_objects([b"one"]) == b"one"
    assert split_compile.unpack_objects(b"\x7fELF-an-object") == [b"\x7fELF-an-object"]
    with pytest.raises(ValueError, match="cut short"):
        split_compile.unpack_objects(blob[:-1])
    with pytest.raises(RuntimeError, match="damaged"):
        host_jit().load_object(blob[:len(split_compile.MAGIC) + 2], ("entry",))


def test_split_program_is_kept_and_loaded_by_the_executable_cache(rng, split_always, tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(tmp_path / "cache"))
    disk_cache._reported.clear()
    args = inputs(rng)
    lowered = pyxla.jit(network).lower(*args)
    cold = lowered.compile()
    warm = lowered.compile()
    assert "LLVM optimisation + machine code" in cold.stage_seconds
    assert "executable cache load" in warm.stage_seconds and "LLVM optimisation cpu" not in warm.stage_seconds
    for a, b in zip(cold(*args), warm(*args)):
        np.testing.assert_array_equal(a, b)


def test_compile_threads_setting(monkeypatch):
    monkeypatch.setenv("PYXLA_COMPILE_THREADS", "3")
    assert split_compile.compile_threads() == 3
    monkeypatch.setenv("PYXLA_COMPILE_THREADS", "three")
    with pytest.raises(ValueError, match="PYXLA_COMPILE_THREADS"):
        split_compile.compile_threads()
    monkeypatch.delenv("PYXLA_COMPILE_THREADS")
    assert split_compile.compile_threads() >= 1
