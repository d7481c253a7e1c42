"""`import pyxla` alone reaches the submodules a user expects as attributes: pyxla.numpy,
pyxla.lax, pyxla.nn, pyxla.random and pyxla.optimizers at once, pyxla.onnx on first use
(it needs the optional onnx package). Checked in a fresh interpreter, where no test has
imported a submodule already."""
import subprocess
import sys

import pytest


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", ["numpy", "lax", "nn", "random", "optimizers"])
def test_submodule_is_an_attribute(name):
    out = _fresh(f"import pyxla, types; m = pyxla.{name}; print(isinstance(m, types.ModuleType), m.__name__)")
    assert out.split() == ["True", f"pyxla.{name}"]


def test_onnx_is_imported_on_first_use():
    pytest.importorskip("onnx")
    out = _fresh("import sys, pyxla; print('pyxla.onnx' in sys.modules, 'onnx' in sys.modules); "
                 "print(pyxla.onnx.load.__module__.startswith('pyxla'), 'onnx' in dir(pyxla))")
    assert out.split() == ["False", "False", "True", "True"]


def test_unknown_attribute_is_an_attribute_error():
    import pyxla
    with pytest.raises(AttributeError, match="no attribute 'tensorflow'"):
        pyxla.tensorflow  # noqa: B018
