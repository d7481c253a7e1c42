"""Runtime helpers (worker pool, call shim) loaded from the on-disk cache
(LlvmJit.compile_helper): compiled and stored on a miss, loaded without LLVM on a hit,
rebuilt with a CacheWarning when the entry is damaged, and keyed by their IR (or by a
recipe and pyxla's source, the IR then built only on a miss); a fresh
process using cached helpers computes what NumPy does."""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pyxla.backends.cpu.runtime import llvm_jit
from pyxla.backends.cpu.runtime.llvm_jit import LlvmJit
from pyxla.runtime import disk_cache
from pyxla.runtime.disk_cache import CacheWarning

HELPER_IR = """
define i64 @"{name}"(i64 %x) {{
  %sq = mul i64 %x, %x
  %r = add i64 %sq, {constant}
  ret i64 %r
}}
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(tmp_path))
    return tmp_path


def helper(rng):
    """(unique function name, IR text, constant it adds)."""
    constant = int(rng.integers(1, 1 << 20))
    name = f"pyxla_test_helper_{constant}"
    return name, HELPER_IR.format(name=name, constant=constant), constant


JITS = []   # every engine the tests make stays alive: its code is freed with it


def load(text, *functions):
    jit = LlvmJit()
    JITS.append(jit)
    return jit.compile_helper("test-helper", text, functions)


def call(address: int, x: int) -> int:
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(address)(x)


def entries(folder, kind="test-helper"):
    return sorted(folder.glob(f"{kind}-*.bin"))


def test_miss_compiles_and_stores_then_hit_loads_without_llvm(cache_dir, rng, monkeypatch):
    name, text, constant = helper(rng)
    x = int(rng.integers(-1000, 1000))
    first = load(text, name)
    assert call(first[name], x) == x * x + constant
    (entry,) = entries(cache_dir)
    stored = entry.read_bytes()

    def no_llvm(self, ir_text):
        raise AssertionError("a cached helper was compiled again")
    monkeypatch.setattr(LlvmJit, "_optimised", no_llvm)
    second = load(text, name)
    assert call(second[name], x) == x * x + constant
    assert entry.read_bytes() == stored


def test_key_follows_the_ir(cache_dir, rng):
    name, text, constant = helper(rng)
    load(text, name)
    other = text.replace(f"add i64 %sq, {constant}", f"add i64 %sq, {constant + 1}")
    x = int(rng.integers(-1000, 1000))
    address = load(other, name)[name]
    assert call(address, x) == x * x + constant + 1
    assert len(entries(cache_dir)) == 2


def test_a_recipe_keys_the_helper_and_its_ir_is_built_only_on_a_miss(cache_dir, rng, monkeypatch):
    name, text, constant = helper(rng)
    built = []

    def build():
        built.append(name)
        return text

    jit = LlvmJit()
    JITS.append(jit)
    x = int(rng.integers(-1000, 1000))
    first = jit.compile_helper("test-helper", build, (name,), recipe=("square plus", constant))
    assert call(first[name], x) == x * x + constant and built == [name]
    second = jit.compile_helper("test-helper", build, (name,), recipe=("square plus", constant))
    assert call(second[name], x) == x * x + constant and built == [name]   # from the cache: no IR built
    jit.compile_helper("test-helper", build, (name,), recipe=("square plus", constant, "another"))
    assert built == [name, name] and len(entries(cache_dir)) == 2
    # pyxla's source is part of a recipe's key: changed code builds the helper again
    monkeypatch.setattr(llvm_jit, "source_fingerprint", lambda: "other source")
    jit.compile_helper("test-helper", build, (name,), recipe=("square plus", constant))
    assert built == [name, name, name] and len(entries(cache_dir)) == 3


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_damaged_entry_is_rebuilt_with_a_warning(cache_dir, rng, damage):
    name, text, constant = helper(rng)
    load(text, name)
    (entry,) = entries(cache_dir)
    raw = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(raw[:len(raw) // 3])
    elif damage == "flip":
        i = len(raw) // 2
        entry.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
    else:
        entry.write_bytes(rng.integers(0, 256, len(raw), dtype="uint8").tobytes())
    x = int(rng.integers(-1000, 1000))
    with pytest.warns(CacheWarning, match="damaged"):
        address = load(text, name)[name]
    assert call(address, x) == x * x + constant
    assert entry.read_bytes() == raw   # rebuilt: the same object code as the first build


def test_cache_off_still_compiles(monkeypatch, tmp_path, rng):
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name, text, constant = helper(rng)
    x = int(rng.integers(-1000, 1000))
    assert call(load(text, name)[name], x) == x * x + constant
    assert list(tmp_path.iterdir()) == []


def test_missing_function_is_an_error(cache_dir, rng):
    name, text, _ = helper(rng)
    with pytest.raises(RuntimeError, match="lacks pyxla_test_absent"):
        load(text, name, "pyxla_test_absent")


PROGRAM = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    import pyxla, pyxla.numpy as pnp
    warnings.simplefilter("always")
    x = np.load(sys.argv[1])
    f = pyxla.jit(lambda a: pnp.tanh(a) * 2.0 + a, backend="cpu")
    np.save(sys.argv[2], f(x))
""")


def run_program(tmp_path, cache, x):
    env = dict(os.environ, PYXLA_CACHE_DIR=str(cache), PYXLA_NUM_THREADS="2")
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(tmp_path / "y.npy"), proc.stderr


def test_fresh_processes_with_cached_and_damaged_helpers(tmp_path, rng):
    """A kernel big enough to run on the pool: first process fills the cache, the second
    loads the pool and the shim from it, the third finds the pool's entry damaged."""
    cache = tmp_path / "cache"
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    want = np.tanh(x.astype(np.float64)) * 2.0 + x
    y, _ = run_program(tmp_path, cache, x)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    pool_entries, shim_entries = entries(cache, "worker-pool"), entries(cache, "call-shim")
    assert len(pool_entries) == 1 and len(shim_entries) == 1
    # an entry written again is a new file (written aside, then renamed over); a use only
    # touches its time (least recently used goes first)
    stamps = [(p, p.stat().st_ino, p.read_bytes()) for p in pool_entries + shim_entries]

    x = rng.standard_normal((512, 1024)).astype(np.float32)
    y, stderr = run_program(tmp_path, cache, x)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)) * 2.0 + x, rtol=1e-5, atol=1e-5)
    assert "CacheWarning" not in stderr
    assert [(p, p.stat().st_ino, p.read_bytes()) for p, _, _ in stamps] == stamps   # loaded, not written again

    raw = pool_entries[0].read_bytes()
    pool_entries[0].write_bytes(raw[:-100])
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    y, stderr = run_program(tmp_path, cache, x)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)) * 2.0 + x, rtol=1e-5, atol=1e-5)
    assert "CacheWarning" in stderr and "damaged" in stderr
    assert pool_entries[0].read_bytes() == raw


def test_object_format_is_part_of_the_key(cache_dir, rng, monkeypatch):
    name, text, _ = helper(rng)
    load(text, name)
    monkeypatch.setattr(llvm_jit, "OBJECT_FORMAT", llvm_jit.OBJECT_FORMAT + "-next")
    load(text, name)
    assert len(entries(cache_dir)) == 2
    assert disk_cache.cache_directory() == cache_dir
