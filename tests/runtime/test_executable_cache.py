"""The persistent executable cache (backends/cpu/runtime/executable_cache.py): a warm process
loads the object instead of compiling and gets the same bits; keys change with what the code
depends on; planted, copied or foreign entries are refused and never run; several processes
fill one cache; compiled code is released with its executable."""
import gc
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import pyxla
from pyxla.backends import get_backend
from pyxla.backends.cpu.runtime import cached_executable, executable_cache, llvm_jit
from pyxla.conformance import default_corpus
from pyxla.hlo.stablehlo import parse_program
from pyxla.runtime import disk_cache
from pyxla.runtime.disk_cache import CacheWarning

ROOT = Path(__file__).resolve().parents[2]
OTHER_UID = 12345

ADD_ONE = """HloModule add_one
ENTRY main {
  x = f32[64] parameter(0)
  one = f32[] constant(1)
  ones = f32[64] broadcast(one), dimensions={}
  ROOT y = f32[64] add(x, ones)
}
"""
TIMES_SEVEN = ADD_ONE.replace("add_one", "times_seven").replace("constant(1)", "constant(7)").replace("add(", "multiply(")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(folder))
    disk_cache._reported.clear()
    yield folder
    disk_cache._reported.clear()


def _compile(text):
    return get_backend("cpu").compile(parse_program(text))


def _entries(folder):
    return sorted(p.name for p in folder.glob("executable-*.bin")) if folder.exists() else []


def _run(x=None):
    x = np.arange(64, dtype=np.float32) if x is None else x
    return _compile(ADD_ONE).run_flat([x])[0]


def test_miss_then_hit(cache_dir):
    first = _run()
    assert len(_entries(cache_dir)) == 1
    exe = _compile(ADD_ONE)
    assert exe.module is not None
    np.testing.assert_array_equal(exe.run_flat([np.arange(64, dtype=np.float32)])[0], first)
    np.testing.assert_array_equal(first, np.arange(64, dtype=np.float32) + 1)
    assert len(_entries(cache_dir)) == 1


def test_hit_skips_llvm(cache_dir):
    module = parse_program(ADD_ONE)
    exe = get_backend("cpu").compile(module)
    stages = _stages_of_second_compile()
    assert "executable cache load" in stages and "LLVM optimisation" not in stages and "machine code" not in stages
    assert exe is not None


def _stages_of_second_compile():
    from pyxla.compiler import compile_module
    compiled = compile_module(parse_program(ADD_ONE))
    get_backend("cpu").compile(compiled.module, compiled=compiled)
    return compiled.stage_seconds


def test_key_changes_with_features_and_version(cache_dir, monkeypatch):
    _run()
    jit = llvm_jit.host_jit()
    monkeypatch.setattr(jit, "features", jit.features + ",+madeup")
    _run()
    assert len(_entries(cache_dir)) == 2
    monkeypatch.undo()
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(pyxla, "__version__", "99.0")
    _run()
    assert len(_entries(cache_dir)) == 3
    monkeypatch.setenv("PYXLA_NUM_THREADS", "1")
    key = executable_cache.executable_key(jit, "m", ())
    monkeypatch.setenv("PYXLA_NUM_THREADS", "2")
    assert executable_cache.executable_key(jit, "m", ()) != key


def test_cache_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    np.testing.assert_array_equal(_run(), np.arange(64, dtype=np.float32) + 1)


def _plant(cache_dir):
    """The entry of TIMES_SEVEN stored (valid header, key and checksum) under ADD_ONE's key;
    the path of ADD_ONE's entry."""
    _run()
    (entry,) = _entries(cache_dir)
    _compile(TIMES_SEVEN)
    (other,) = [e for e in _entries(cache_dir) if e != entry]
    key = entry[len("executable-"):-len(".bin")]
    payload = disk_cache.load("executable", other[len("executable-"):-len(".bin")])
    disk_cache.store("executable", key, payload)
    return cache_dir / entry


def test_planted_entry_runs_only_when_this_user_wrote_it(cache_dir):
    _plant(cache_dir)
    # the defence is who may write: an entry of ours, valid in every way, is run
    np.testing.assert_array_equal(_run(), np.arange(64, dtype=np.float32) * 7)


def test_planted_entry_of_another_user_is_never_run(cache_dir):
    path = _plant(cache_dir)
    os.chown(path, OTHER_UID, -1)
    with pytest.warns(CacheWarning, match="owned by uid"):
        got = _run()
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 1)


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_planted_entry_in_a_shared_directory_is_never_run(cache_dir, mode):
    _plant(cache_dir)
    os.chmod(cache_dir, mode)
    with pytest.warns(CacheWarning, match="writable by group or others"):
        got = _run()
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 1)


def test_directory_of_another_user_is_refused(cache_dir):
    _plant(cache_dir)
    os.chown(cache_dir, OTHER_UID, -1)
    before = _entries(cache_dir)
    with pytest.warns(CacheWarning, match="refusing"):
        got = _run()
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 1)
    _compile(TIMES_SEVEN.replace("times_seven", "third"))
    assert _entries(cache_dir) == before   # nothing written there either


def test_entry_copied_over_another_is_refused_and_rebuilt(cache_dir):
    _run()
    (entry,) = _entries(cache_dir)
    _compile(TIMES_SEVEN)
    (other,) = [e for e in _entries(cache_dir) if e != entry]
    shutil.copyfile(cache_dir / other, cache_dir / entry)
    with pytest.warns(CacheWarning, match="names another entry"):
        got = _run()
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(_run(), got)   # rebuilt: later runs hit without a warning


def test_damaged_object_is_reported_and_rebuilt(cache_dir):
    _run()
    (entry,) = _entries(cache_dir)
    key = entry[len("executable-"):-len(".bin")]
    payload = disk_cache.load("executable", key)
    disk_cache.store("executable", key, payload[:8] + b"{not json" + payload[20:])
    with pytest.warns(CacheWarning, match="unusable"):
        got = _run()
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 1)


# --- cold and warm processes -------------------------------------------------------------------

_PROGRAMS = textwrap.dedent("""
    import sys
    import numpy as np
    import pyxla
    from pyxla import lax
    sys.path.insert(0, {root!r})
    from benchmarks.frameworks.pyxla_impl import FUNCTIONS
    from benchmarks.workloads import WORKLOADS
    from pyxla.backends import get_backend
    from pyxla.conformance import load_case
    from pyxla.hlo.stablehlo import parse_program

    results, stages = {{}}, []
    rng = np.random.default_rng(0)
    for name in ("mlp", "cnn_block"):
        w = next(w for w in WORKLOADS if w.name == name)
        f = pyxla.jit(FUNCTIONS[name])
        results[name] = f(*w.make_inputs(rng, 0.25))
        stages.append(f.lower(*w.make_inputs(rng, 0.25)).compile().stage_seconds)

    def loop(x, n):
        return lax.fori_loop(0, n, lambda i, c: lax.cond(i % 2 == 0, lambda c: c * 1.5 - 1, lambda c: c + 0.25, c), x)
    results["control_flow"] = pyxla.jit(loop)(rng.standard_normal((32, 16)).astype(np.float32), 7)
    case = load_case({case!r})
    exe = get_backend("cpu").compile(parse_program(case.hlo_text("module")))
    for i, out in enumerate(exe.run_flat(case.inputs)):
        results[f"corpus{{i}}"] = out
    np.savez(sys.argv[1], **{{k: np.asarray(v) for k, v in results.items()}})
    print("WARM" if all("executable cache load" in s for s in stages) else "COLD")
""")


def _process(script, out, cache):
    env = {**os.environ, "PYXLA_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_cold_and_warm_processes_give_the_same_bits(cache_dir, tmp_path):
    corpus = default_corpus()
    case = corpus / "conv2d_nhwc_stride_same"
    if not case.is_dir():
        pytest.skip("no conformance corpus")
    script = _PROGRAMS.format(root=str(ROOT), case=str(case))
    assert _process(script, tmp_path / "cold.npz", cache_dir) == "COLD"
    assert _process(script, tmp_path / "warm.npz", cache_dir) == "WARM"
    assert _process(script, tmp_path / "off.npz", "") == "COLD"
    with np.load(tmp_path / "cold.npz") as cold, np.load(tmp_path / "warm.npz") as warm, \
            np.load(tmp_path / "off.npz") as off:
        assert sorted(cold.files) == sorted(warm.files) and len(cold.files) >= 4
        for name in cold.files:
            assert cold[name].tobytes() == warm[name].tobytes() == off[name].tobytes(), name


_FILLER = textwrap.dedent("""
    import sys
    import numpy as np
    from pyxla.backends import get_backend
    from pyxla.hlo.stablehlo import parse_program
    text = {text!r}
    for n in range(6):
        module = parse_program(text.replace("constant(1)", f"constant({{n % 3}})"))
        out = get_backend("cpu").compile(module).run_flat([np.arange(64, dtype=np.float32)])[0]
        assert (out == np.arange(64, dtype=np.float32) + n % 3).all()
""")


def test_several_processes_fill_one_cache(cache_dir):
    script = _FILLER.format(text=ADD_ONE)
    env = {**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, "-W", "error::UserWarning", "-c", script], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    assert len(_entries(cache_dir)) == 3


# --- memory --------------------------------------------------------------------------------------

def test_executables_release_their_engines(cache_dir):
    import pyxla.numpy as pnp
    gc.collect()
    before = llvm_jit.live_engines()
    for n in range(1, 9):
        f = pyxla.jit(lambda x: pnp.tanh(x) * 2)
        f(np.ones(n, np.float32))
        del f
    gc.collect()
    assert llvm_jit.live_engines() <= before + 2   # (helpers a first compile loads)
    f = pyxla.jit(lambda x: x + 1)
    for n in range(1, 9):
        f(np.ones(n, np.float32))
    gc.collect()
    assert llvm_jit.live_engines() >= before + 8
    f.clear_cache()
    gc.collect()
    assert llvm_jit.live_engines() <= before + 2


TUPLE_OUT = """HloModule two_outputs
ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4]{0,1} parameter(1)
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[3] constant({1, 2, 3})
  ROOT t = (f32[8,4], f32[8,16], f32[3]) tuple(d, x, c)
}
"""


@pytest.mark.parametrize("loader", ["object_loader", "llvm"])
def test_executable_made_from_its_description_matches_bit_for_bit(cache_dir, rng, monkeypatch, loader):
    """describe_executable / executable_from_description (the ONNX load index's executable):
    the object from the cache, parameter and output shapes (a column-major parameter, a
    passed-through parameter and a constant among the outputs) without the module; loaded
    without LLVM (object_loader.py, the helpers from the entries the executable's records),
    or through LLVM where the object loader refuses."""
    from pyxla.backends.cpu.runtime import object_loader
    compiled = _compile(TUPLE_OUT)
    description = executable_cache.describe_executable(compiled)
    assert description is not None and description["key"] == compiled.cache_key
    through_llvm = []
    load_native = executable_cache.load_native
    monkeypatch.setattr(executable_cache, "load_native", lambda *a: through_llvm.append(1) or load_native(*a))
    if loader == "llvm":
        def refuse(*args, **kwargs):
            raise object_loader.UnsupportedObject("refused for the test")
        monkeypatch.setattr(object_loader, "load_objects", refuse)
    made = cached_executable.executable_from_description(description)
    assert made.module is None and len(through_llvm) == (loader == "llvm")
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = np.asfortranarray(rng.standard_normal((16, 4)).astype(np.float32))
    want = compiled.run_unchecked([x, w])
    got = made.run_unchecked([x, w])
    assert len(got) == len(want) == 3
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)
    np.testing.assert_allclose(got[0], x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], [1, 2, 3])


def test_description_of_other_code_or_a_bad_shape_is_refused(cache_dir):
    compiled = _compile(TUPLE_OUT)
    description = executable_cache.describe_executable(compiled)
    other = dict(description, plan=[[k, i, o + 4] for k, i, o in description["plan"][:-1]] + [description["plan"][-1]])
    with pytest.warns(CacheWarning, match="does not fit"):
        assert cached_executable.executable_from_description(other) is None   # the entry is deleted
    assert cached_executable.executable_from_description(description) is None   # (gone: a miss)
    compiled = _compile(TUPLE_OUT)   # compiled and kept again
    bad = dict(description, parameters=[{"dtype": "f32", "dims": [8, 16], "layout": [0, 0]}] +
               description["parameters"][1:])
    with pytest.raises(ValueError, match="permutation"):
        cached_executable.executable_from_description(bad)
    assert executable_cache.describe_executable(_compile(ADD_ONE)) is not None
