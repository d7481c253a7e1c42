"""The ONNX load index (importers/onnx/load_index.py): a process that loads a model this
host compiled before makes its executable from the index entry (the optimised module's
text, the weights' recipes, the executable cache's object), with results bit for bit those
of the cold path; any mismatch or bad entry falls back to importing and compiling."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pyxla  # noqa: E402
import pyxla.onnx  # noqa: E402
from pyxla.importers.onnx import load_index  # noqa: E402
from pyxla.runtime import disk_cache  # noqa: E402
from pyxla.runtime.memory import aligned_empty  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def small_model(seed: int = 0) -> bytes:
    """x[n, 64] -> relu(x @ W + b) @ filled: W an initializer (a weight parameter), `filled`
    made by ConstantOfShape (a weight computed at import); a second output known at import."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("ConstantOfShape", ["shape"], ["filled"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("MatMul", ["r", "filled"], ["y"]),
        helper.make_node("Shape", ["W"], ["wshape"]),
    ]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64]),
         helper.make_tensor_value_info("wshape", TensorProto.INT64, [2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([96, 64], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _reference(data: bytes, x: np.ndarray) -> dict:
    from onnx.reference import ReferenceEvaluator
    ref = ReferenceEvaluator(onnx.load_from_string(data))
    return dict(zip(["y", "wshape"], ref.run(None, {"x": x})))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(folder))
    for name in ("PYXLA_DUMP", "PYXLA_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return folder


def _entries(folder: Path, kind: str) -> list[Path]:
    return sorted(folder.glob(f"{kind}-*.bin"))


def _run(data, x):
    model = pyxla.onnx.load(data)
    out = model(x=x)
    return model, out


def test_warm_load_uses_the_index_and_matches_the_cold_results_bit_for_bit(cache_dir):
    data = small_model()
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    cold_model, cold = _run(data, x)
    assert cold_model.compile({"x": x}).module is not None           # traced
    assert len(_entries(cache_dir, load_index.MODEL_KIND)) == 1
    assert len(_entries(cache_dir, load_index.CALL_KIND)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyxla.CacheWarning)
        warm_model, warm = _run(data, x)
    sig = warm_model.compile({"x": x})
    assert sig.module is None                                         # made from the index, not traced
    assert warm_model._importer is None                               # the graph was never walked
    for name in cold:
        assert cold[name].dtype == warm[name].dtype
        np.testing.assert_array_equal(cold[name], warm[name])
    want = _reference(data, x)
    np.testing.assert_allclose(warm["y"], want["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(warm["wshape"], want["wshape"])
    # the module as imported is still available (traced on demand)
    assert "parameter" in warm_model.hlo_text({"x": x})


def test_warm_process_matches_cold_process(cache_dir, tmp_path):
    """Cold and warm in separate processes: same bytes out."""
    path = tmp_path / "small.onnx"
    path.write_bytes(small_model(seed=3))
    x = np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, warnings, pyxla, pyxla.onnx\n"
        "warnings.simplefilter('error', pyxla.CacheWarning)\n"
        "m = pyxla.onnx.load(sys.argv[1]); out = m(x=np.load(sys.argv[2]))\n"
        "np.save(sys.argv[3], out['y'])\n"
        "print('traced' if m.compile({'x': np.load(sys.argv[2])}).module is not None else 'index')\n")
    env = {**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)}
    results = []
    for k in range(2):
        out = tmp_path / f"y{k}.npy"
        proc = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"), str(out)],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
        results.append((proc.stdout.strip(), np.load(out)))
    assert [r[0] for r in results] == ["traced", "index"]
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_other_model_bytes_or_shapes_miss(cache_dir):
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    _run(small_model(seed=0), x)
    other, out = _run(small_model(seed=1), x)          # other weights: another model key
    assert other.compile({"x": x}).module is not None
    np.testing.assert_allclose(out["y"], _reference(small_model(seed=1), x)["y"], rtol=1e-5, atol=1e-5)
    x5 = np.random.default_rng(6).standard_normal((5, 64)).astype(np.float32)
    model = pyxla.onnx.load(small_model(seed=0))        # known model, new signature: traced
    out5 = model(x=x5)
    assert model.compile({"x": x5}).module is not None
    np.testing.assert_allclose(out5["y"], _reference(small_model(seed=0), x5)["y"], rtol=1e-5, atol=1e-5)
    assert len(_entries(cache_dir, load_index.CALL_KIND)) == 3


@pytest.mark.parametrize("damage", ["garbage-json", "wrong-parameters", "unknown-executable", "bad-shape",
                                    "missing-weight-bytes", "weights-entry-gone"])
def test_bad_call_entry_warns_and_gives_the_right_result(cache_dir, damage):
    import json
    data = small_model(seed=7)
    x = np.random.default_rng(8).standard_normal((2, 64)).astype(np.float32)
    model = pyxla.onnx.load(data)
    cold = model(x=x)
    [path] = _entries(cache_dir, load_index.CALL_KIND)
    key = path.name[len(load_index.CALL_KIND) + 1:-len(disk_cache.SUFFIX)]
    meta = json.loads(disk_cache.load(load_index.CALL_KIND, key))
    assert any("stored" in w for w in meta["weights"]) and any("runs" in w for w in meta["weights"])
    if damage == "garbage-json":
        new = b"{nope"
    else:
        if damage == "wrong-parameters":
            meta["weights"] = meta["weights"][:-1]
        elif damage == "unknown-executable":
            meta["executable"]["key"] = "0" * 64
        elif damage == "bad-shape":
            meta["executable"]["parameters"][0]["dims"] = [-1, 64]
        elif damage == "missing-weight-bytes":
            for w in meta["weights"]:
                if "runs" in w:
                    w.pop("runs")
                    w.update(stored=1 << 20, nbytes=4 * int(np.prod(w["shape"])))
        else:
            (cache_dir / f"{load_index.WEIGHTS_KIND}-{key}{disk_cache.SUFFIX}").unlink()
        new = json.dumps(meta).encode()
    if damage != "weights-entry-gone":
        disk_cache.store(load_index.CALL_KIND, key, new)
    with pytest.warns(pyxla.CacheWarning):
        warm_model, warm = _run(data, x)
    assert warm_model.compile({"x": x}).module is not None         # fell back to tracing
    for name in cold:
        np.testing.assert_array_equal(cold[name], warm[name])
    # the fallback wrote a good entry again
    again, out = _run(data, x)
    assert again.compile({"x": x}).module is None
    np.testing.assert_array_equal(out["y"], cold["y"])


def test_warm_load_neither_parses_the_model_nor_imports_the_tracer(cache_dir, tmp_path):
    """A warm process finds the model by its file's bytes: the ModelProto is never parsed,
    and neither onnx nor pyxla's tracer and importer nor LLVM are imported; the results are the
    cold process's bit for bit. A call with new shapes still traces (parsing the bytes
    read at load, not the file again) and is kept, so a third process serves both
    signatures from the index."""
    path = tmp_path / "small.onnx"
    path.write_bytes(small_model(seed=21))
    x = np.random.default_rng(22).standard_normal((3, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, warnings, pyxla.onnx\n"
        "warnings.simplefilter('error', pyxla.CacheWarning)\n"
        "m = pyxla.onnx.load(sys.argv[1]); out = m(x=np.load(sys.argv[2]))\n"
        "np.save(sys.argv[3], out['y'])\n"
        "print(m._proto is None, 'onnx' in sys.modules, 'pyxla.frontend.jit' in sys.modules,\n"
        "      'pyxla.importers.onnx.importer' in sys.modules, 'llvmlite' in sys.modules)\n"
        "if sys.argv[4] == 'edit':\n"
        "    open(sys.argv[1], 'wb').write(b'not a model any more')\n"
        "x5 = np.random.default_rng(5).standard_normal((5, 64)).astype(np.float32)\n"
        "if sys.argv[4] != 'first':\n"
        "    np.save(sys.argv[3] + '.5.npy', m(x=x5)['y'])\n"
        "    print(m.compile({'x': x5}).module is None)\n"
        "from pyxla.backends.cpu.runtime import parallel, pool_threads\n"
        "print(parallel.worker_pool() is pool_threads.current())\n")
    env = {**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)}
    runs = []
    for k, action in enumerate(["first", "edit", "keep"]):
        if k == 2:
            path.write_bytes(small_model(seed=21))
        out = tmp_path / f"y{k}.npy"
        proc = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"), str(out), action],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append((proc.stdout.split(), np.load(out), np.load(str(out) + ".5.npy") if k else None))
    # warm: not parsed, onnx, the tracer and LLVM not imported (cached_executable.py); one
    # pool for the code loaded so and the code compiled after it
    assert runs[0][0] == ["False", "True", "True", "True", "True", "True"]          # cold: parsed, checked, traced
    assert runs[1][0] == ["True", "False", "False", "False", "False", "False", "True"]  # new shapes traced
    assert runs[2][0] == ["True", "False", "False", "False", "False", "True", "True"]   # both from the index
    for run in runs[1:]:
        np.testing.assert_array_equal(runs[0][1], run[1])
    np.testing.assert_array_equal(runs[1][2], runs[2][2])
    x5 = np.random.default_rng(5).standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(runs[1][2], _reference(small_model(seed=21), x5)["y"], rtol=1e-5, atol=1e-5)


def test_corrupt_model_entry_warns_and_loads_normally(cache_dir):
    data = small_model(seed=9)
    x = np.random.default_rng(10).standard_normal((2, 64)).astype(np.float32)
    _, cold = _run(data, x)
    [path] = _entries(cache_dir, load_index.MODEL_KIND)
    key = path.name[len(load_index.MODEL_KIND) + 1:-len(disk_cache.SUFFIX)]
    disk_cache.store(load_index.MODEL_KIND, key, b'{"format": "onnx-index-1", "static_inputs": 3}')
    with pytest.warns(pyxla.CacheWarning):
        model, warm = _run(data, x)
    assert model._importer is not None                              # checked and walked as on a cold load
    np.testing.assert_array_equal(cold["y"], warm["y"])


def test_tampered_entry_in_foreign_directory_is_never_used(cache_dir):
    data = small_model(seed=11)
    x = np.random.default_rng(12).standard_normal((2, 64)).astype(np.float32)
    _, cold = _run(data, x)
    os.chmod(cache_dir, 0o777)     # writable by others: the directory is refused whole
    try:
        with pytest.warns(pyxla.CacheWarning):
            model, warm = _run(data, x)
        assert model.compile({"x": x}).module is not None           # traced: nothing read from the cache
        np.testing.assert_array_equal(cold["y"], warm["y"])
    finally:
        os.chmod(cache_dir, 0o700)


def test_cache_off_or_other_backends_skip_the_index(cache_dir, monkeypatch):
    data = small_model(seed=13)
    x = np.random.default_rng(14).standard_normal((2, 64)).astype(np.float32)
    model = pyxla.onnx.load(data, backend="interpreter")
    out = model(x=x)
    assert model.index_key is None and not list(cache_dir.glob(f"{load_index.CALL_KIND}-*"))
    np.testing.assert_allclose(out["y"], _reference(data, x)["y"], rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    assert pyxla.onnx.load(data).index_key is None


def test_light_model_cold_and_warm_bit_for_bit(cache_dir):
    from benchmarks.onnx_models import model_case
    data, feeds, want = model_case("squeezenet")
    cold = pyxla.onnx.load(data)(feeds)
    model = pyxla.onnx.load(data)
    warm = model(feeds)
    assert model.compile(feeds).module is None
    for name in cold:
        np.testing.assert_array_equal(cold[name], warm[name])
    for got, w in zip(warm.values(), want):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("case", ["fill", "padded-tiles", "random", "empty", "float16-runs", "int8-random"])
def test_weight_recipes_make_the_same_bytes(case):
    """A packed weight kept as runs of values, or as raw bytes at an aligned offset, comes
    back bit for bit (NaN payloads and negative zeros included)."""
    rng = np.random.default_rng(30)
    if case == "fill":
        w = np.full((64, 3, 3, 8), -0.0, np.float32)
    elif case == "padded-tiles":   # a filled kernel whose last tile is padded with zeros
        w = np.zeros((2, 9, 16), np.float32)
        w[:, :, :11] = np.float32(0.25)
        w = w.reshape(-1)[:-3].copy()
    elif case == "random":
        w = rng.standard_normal((33, 7)).astype(np.float32)
        w[0, 0] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]   # a NaN with a payload
    elif case == "empty":
        w = np.zeros((0, 5), np.float32)
    elif case == "float16-runs":
        w = np.repeat(rng.standard_normal(3).astype(np.float16), 1000)
    else:
        w = rng.integers(-128, 128, (17, 5), dtype=np.int8)
    recipe, raw = load_index.weight_recipe(w, 128)
    assert ("runs" in recipe) == (case in ("fill", "padded-tiles", "float16-runs"))
    kept = None
    if raw is not None:
        assert recipe["stored"] == 128
        kept = aligned_empty(128 + raw.size, np.uint8)   # (as disk_cache.load(aligned=True) gives it)
        kept[128:] = raw
    back = load_index.make_weight(recipe, kept)
    assert back.shape == w.shape and back.dtype == w.dtype
    assert back.ctypes.data % 64 == 0 or back.size == 0
    assert back.tobytes() == w.tobytes()


def test_weight_recipe_refuses_a_stored_weight_outside_its_entry():
    w = np.random.default_rng(31).standard_normal(400).astype(np.float32)
    recipe, raw = load_index.weight_recipe(w, 64)
    assert raw is not None
    kept = np.zeros(64 + raw.size - 4, np.uint8)          # the entry is 4 bytes short
    with pytest.raises(load_index.BadEntry):
        load_index.make_weight(recipe, kept)
    with pytest.raises(load_index.BadEntry):
        load_index.make_weight(dict(recipe, stored=63), np.zeros(4096, np.uint8))   # not aligned


def test_model_with_external_data_is_keyed_by_its_content(cache_dir, tmp_path):
    """A model whose weights lie in another file is keyed by its content with that file read
    in: a warm load parses it (the file's own bytes do not say what the weights are) and
    still makes the executable from the index; an edited weight file misses."""
    from onnx.external_data_helper import convert_model_to_external_data
    model = onnx.load_from_string(small_model(seed=40))
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(41).standard_normal((2, 64)).astype(np.float32)
    cold = pyxla.onnx.load(path)(x=x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyxla.CacheWarning)
        warm_model = pyxla.onnx.load(path)
        warm = warm_model(x=x)
    assert warm_model._proto is not None                       # parsed: its key needs the weights
    assert warm_model.compile({"x": x}).module is None         # but not traced
    np.testing.assert_array_equal(cold["y"], warm["y"])
    weights = tmp_path / "weights.bin"
    raw = np.frombuffer(weights.read_bytes(), np.float32).copy()
    raw[:64 * 96] *= -1                                        # W (the first tensor) negated
    weights.write_bytes(raw.tobytes())
    edited_model = pyxla.onnx.load(path)
    edited = edited_model(x=x)
    assert edited_model.compile({"x": x}).module is not None   # another key: traced
    want = _reference(onnx.load(str(path)).SerializeToString(), x)
    np.testing.assert_allclose(edited["y"], want["y"], rtol=1e-5, atol=1e-5)
    assert not np.array_equal(edited["y"], cold["y"])


def test_executable_without_its_module_takes_only_packed_constants(cache_dir):
    """An executable made from the index has no module: its packed parameters must come as
    the FormedArgument they were packed into, and run_flat (which checks against the
    module) says to call run_unchecked."""
    from benchmarks.onnx_models import model_case
    from pyxla.backends.cpu.runtime.executable import FormedArgument
    data, feeds, _ = model_case("squeezenet")
    pyxla.onnx.load(data)(feeds)
    sig = pyxla.onnx.load(data).compile(feeds)
    executable = sig.executable
    assert executable.module is None and executable.parameter_forms
    number = next(iter(executable.parameter_forms))
    formed = sig.weights[number - len(sig.traced_inputs)]
    assert isinstance(formed, FormedArgument)
    with pytest.raises(ValueError, match="FormedArgument"):
        executable.prepare_argument(number, np.zeros(executable.parameter_shapes[number].dims, np.float32))
    with pytest.raises(ValueError, match="run_unchecked"):
        executable.run_flat([])


def test_another_machine_sharing_the_cache_misses(monkeypatch):
    """The index names code compiled for this machine: a machine with another CPU (a cache
    directory on a shared home) has other model keys, and never loads that code."""
    data = small_model(seed=3)
    here = load_index.model_key(data, "cpu", True)
    assert here == load_index.model_key(data, "cpu", True)
    monkeypatch.setattr(load_index, "host_identity", lambda: disk_cache.host_identity() + " with other flags")
    assert load_index.model_key(data, "cpu", True) != here
