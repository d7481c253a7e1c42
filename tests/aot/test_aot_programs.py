"""AOT objects of jitted programs (the benchmarks' MLP and CNN block, small), called from C:
results against the JIT's, two threads at once, the header from C++, --shared, a portable
object, and the inputs refused before anything is written."""
import os
import subprocess

import numpy as np
import pytest

import pyxla
import pyxla.aot
import pyxla.numpy as pnp
from pyxla import lax, nn
from pyxla.backends.cpu.runtime.pool_threads import thread_count
from pyxla.cli import main

from .harness import CC, CXX, build, foreign_symbols, link_driver, needs_cc, run_driver, run_program

pytestmark = needs_cc


def mlp(x, w1, b1, w2, b2):
    return nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2


def cnn_block(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = nn.relu(y + b)
    return lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def two_outputs(x, w):
    """A small dot (pyxla's GEMM on the calling thread), a tuple result and a parameter passing through."""
    y = x @ w
    return y, pnp.tanh(y).sum(axis=0), x


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _mlp_inputs(rng):
    return [_f32(rng, 64, 256), _f32(rng, 256, 512) * 0.05, _f32(rng, 512), _f32(rng, 512, 128) * 0.05,
            _f32(rng, 128)]


def _cnn_inputs(rng):
    return [_f32(rng, 2, 16, 16, 32), _f32(rng, 3, 3, 32, 32) * 0.1, _f32(rng, 32)]


PROGRAMS = {"mlp": (mlp, _mlp_inputs), "cnn_block": (cnn_block, _cnn_inputs),
            "two_outputs": (two_outputs, lambda rng: [_f32(rng, 8, 16), _f32(rng, 16, 4)])}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each program compiled once (from the jitted function), linked and run from C."""
    rng = np.random.default_rng(int(os.environ.get("PYXLA_TEST_SEED", "0") or 0))
    out = {}
    for name, (fn, make) in PROGRAMS.items():
        folder = tmp_path_factory.mktemp(name)
        args = make(rng)
        results, prog, exe = run_program(pyxla.jit(fn), folder, args, *args, name=name)
        out[name] = (fn, args, results, prog, exe, folder)
    return out


@pytest.mark.parametrize("name", PROGRAMS)
def test_matches_the_jit(built, name):
    fn, args, results, prog, _, _ = built[name]
    want = pyxla.jit(fn)(*args)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(results) == len(want)
    for got, w in zip(results, want):
        np.testing.assert_allclose(got, np.asarray(w), rtol=2e-5, atol=2e-5)
    assert not foreign_symbols(prog.object)


@pytest.mark.parametrize("name", ["mlp", "cnn_block"])
def test_the_object_needs_no_blas_python_or_numpy(built, name):
    symbols = subprocess.run(["nm", "-u", str(built[name][3].object)], capture_output=True, text=True).stdout
    for word in ("gemm", "cblas", "Py", "numpy", "openblas", "scipy"):
        assert word not in symbols, symbols
    # the pool is in the object when its kernels were cut for several threads (the default:
    # this process's thread count)
    assert ("pthread_create" in symbols) == (thread_count() > 1)


@pytest.mark.parametrize("name", ["mlp", "cnn_block", "two_outputs"])
def test_two_threads_at_once(built, name):
    """Two threads call NAME_run 20 times each at once, each with its own temp; every result
    equals the single call's bit for bit (the tasks are fixed when compiling)."""
    _, _, _, _, exe, folder = built[name]
    run_driver(exe, folder, "threads", "20")


def test_header_from_cplusplus(built, tmp_path):
    if CXX is None:
        pytest.skip("c++ is not on PATH")
    prog = built["two_outputs"][3]
    source = tmp_path / "main.cpp"
    source.write_text(f"""#include <cstdio>
#include <vector>
#include "{prog.header}"
int main() {{
    std::vector<float> x(8 * 16, 1.0f), w(16 * 4, 0.5f), y(8 * 4), s(4), xs(8 * 16);
    const void *args[two_outputs_NUM_ARGS] = {{x.data(), w.data()}};
    void *results[two_outputs_NUM_RESULTS] = {{y.data(), s.data(), xs.data()}};
    static_assert(two_outputs_NUM_RESULTS == 3, "three results");
    if (two_outputs_result_sizes[0] != y.size() * sizeof(float)) return 3;
    two_outputs_set_num_threads(1);
    int status = two_outputs_run(args, results, nullptr);
    std::printf("%g %g\\n", y[0], xs[5]);
    return status;
}}
""")
    exe = tmp_path / "cpp_main"
    done = subprocess.run([CXX, "-std=c++17", "-Wall", "-Werror", str(source), str(prog.object), "-lm", "-lpthread",
                           "-o", str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.split() == ["8", "1"], ran


def test_shared_library_and_portable_object(tmp_path):
    """--shared links libNAME.so; --target-cpu generic makes an object for any x86-64."""
    rng = np.random.default_rng(1)
    args = _mlp_inputs(rng)
    folder = tmp_path / "generic"
    status = main(["aot", "--quiet", "--shared", "--target-cpu", "generic", "--name", "mlp", "-o", str(folder),
                   str(_hlo_file(tmp_path, pyxla.jit(mlp).lower(*args).as_text()))])
    assert status == 0
    assert (folder / "libmlp.so").is_file()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(folder / "libmlp.so")], capture_output=True,
                             text=True).stdout
    exported = sorted(line.split()[-1] for line in symbols.splitlines() if line.split()[-1].startswith("mlp_"))
    assert exported == ["mlp_arg_sizes", "mlp_result_sizes", "mlp_run", "mlp_set_num_threads", "mlp_temp_size"]
    results, prog, _ = run_program(pyxla.jit(mlp), tmp_path / "generic_run", args, *args, name="mlp",
                                   target_cpu="generic")
    np.testing.assert_allclose(results[0], np.asarray(pyxla.jit(mlp)(*args)), rtol=2e-5, atol=2e-5)
    assert "x86-64" in prog.header.read_text()


def _hlo_file(folder, text):
    path = folder / "module.hlo"
    path.write_text(text)
    return path


TUPLE_PARAMETER = """HloModule tuple_param
ENTRY e {
  p = (f32[2], f32[2]) parameter(0)
  a = f32[2] get-tuple-element(p), index=0
  b = f32[2] get-tuple-element(p), index=1
  ROOT s = f32[2] add(a, b)
}
"""


def test_refused_module_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["aot", str(_hlo_file(tmp_path, TUPLE_PARAMETER)), "--name", "prog", "-o", str(out)])
    assert status == 2
    assert "the CPU backend cannot take a tuple-shaped ENTRY parameter" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", ["1prog", "my-prog", "int", "", "a b", "pyxla_x"])
def test_bad_name_writes_nothing(tmp_path, capsys, name):
    out = tmp_path / "out"
    status = main(["aot", str(_hlo_file(tmp_path, TUPLE_PARAMETER)), "--name", name, "-o", str(out)])
    assert status == 2
    err = capsys.readouterr().err
    assert "--name" in err and "tuple-shaped" not in err   # refused before the module is compiled
    assert not out.exists()


def test_unwritable_folder(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    module = _hlo_file(tmp_path, pyxla.jit(lambda x: x + 1).lower(np.ones(3, np.float32)).as_text())
    assert main(["aot", str(module), "--name", "prog", "-o", str(blocker / "sub")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    if os.geteuid() != 0:   # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main(["aot", str(module), "--name", "prog", "-o", str(locked)]) == 2
        assert "is not writable" in capsys.readouterr().err
        assert list(locked.iterdir()) == []
    with pytest.raises(pyxla.aot.AotError, match="not a C identifier"):
        pyxla.aot.compile(module.read_text(), name="9", out_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_objects_of_two_programs_link_together(built, tmp_path):
    """Everything but NAME_* is internal: two objects (each with its own pool) link into one
    program."""
    a, b = built["mlp"][3], built["cnn_block"][3]
    source = tmp_path / "both.c"
    source.write_text(f'#include "{a.header}"\n#include "{b.header}"\n'
                      "int main(void) { return (int)(mlp_temp_size == 0) + (int)(cnn_block_temp_size == 0); }\n")
    exe = tmp_path / "both"
    done = subprocess.run([CC, str(source), str(a.object), str(b.object), "-lm", "-lpthread", "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert subprocess.run([str(exe)]).returncode == 0


def test_build_from_a_function_and_link(tmp_path):
    """pyxla.aot.compile traces a plain function with the example arguments."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    prog = build(lambda x: (x * 2, x.sum()), tmp_path, x, name="twice")
    exe = link_driver(prog)
    assert prog.result_shapes[0].dims == (2, 3) and prog.result_shapes[1].dims == ()
    (tmp_path / "arg0.bin").write_bytes(x.tobytes())
    run_driver(exe, tmp_path)
    assert np.frombuffer((tmp_path / "result0.bin").read_bytes(), np.float32).tolist() == (x * 2).ravel().tolist()
    assert np.frombuffer((tmp_path / "result1.bin").read_bytes(), np.float32).tolist() == [15.0]


def test_threads_option_after_the_jit_started_its_pool(tmp_path):
    """--threads decides how kernels are cut even in a process whose JIT pool is running:
    with one thread the object has no pool at all."""
    rng = np.random.default_rng(2)
    args = _mlp_inputs(rng)
    pyxla.jit(mlp)(*args)   # the JIT's pool starts here (on a machine with several cores)
    results, prog, _ = run_program(pyxla.jit(mlp), tmp_path, args, *args, name="mlp", threads=1)
    assert "no worker pool" in prog.header.read_text()
    assert "pthread_create" not in subprocess.run(["nm", "-u", str(prog.object)], capture_output=True,
                                                  text=True).stdout
    np.testing.assert_allclose(results[0], np.asarray(pyxla.jit(mlp)(*args)), rtol=2e-5, atol=2e-5)
