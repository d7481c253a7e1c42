"""`import pyxla` and `import pyxla.onnx` are light: the API loads on first use of one of its
names, onnx and the tracer only when a model must be parsed or traced; and a program that
reaches the tracer without the API still gets Tracer's operators (pyxla/__init__.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_pyxla_onnx_imports_neither_the_tracer_nor_the_compiler():
    out = _run("import sys, pyxla.onnx\n"
               "heavy = ['onnx', 'pyxla.frontend', 'pyxla.numpy', 'pyxla.lax', 'pyxla.compiler', 'pyxla.backends.cpu',"
               " 'pyxla.hlo']\n"
               "print([m for m in heavy if m in sys.modules])")
    assert out == "[]"


def test_the_api_loads_on_first_use():
    out = _run("import sys, numpy as np, pyxla\n"
               "print('pyxla.numpy' in sys.modules)\n"
               "f = pyxla.jit(lambda x: x * 3 + 1)\n"
               "print('pyxla.numpy' in sys.modules, f(np.arange(3, dtype=np.float32)).tolist())\n"
               "print(all(hasattr(pyxla, n) for n in ('grad', 'vmap', 'lax', 'nn', 'random', 'Array', 'onnx')))\n"
               "print({'jit', 'numpy', 'onnx'} <= set(dir(pyxla)))")
    assert out.split("\n") == ["False", "True [1.0, 4.0, 7.0]", "True", "True"]


def test_tracer_operators_without_the_api():
    """jit imported from the front end directly: operators, methods, properties and NumPy's
    protocols on tracers work on first use, and a missing attribute is an AttributeError."""
    out = _run("import sys, numpy as np\n"
               "from pyxla.frontend.jit import jit\n"
               "print('pyxla.numpy' in sys.modules)\n"
               "x = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)\n"
               "got = jit(lambda x: ((2 - x).T.reshape(-1) ** 2).sum() + np.sin(x)[0, 1] - abs(-x)[1, 0])(x)\n"
               "want = ((2 - x.astype(np.float64)) ** 2).sum() + np.sin(x[0, 1]) - abs(x[1, 0])\n"
               "print(abs(float(got) - want) < 1e-4 * max(1, abs(want)))\n"
               "def bad(x):\n"
               "    return x.no_such_method()\n"
               "try:\n"
               "    jit(bad)(x)\n"
               "except AttributeError as e:\n"
               "    print('no_such_method' in str(e))\n")
    assert out.split("\n") == ["False", "True", "True"]
