"""The front end does not depend on pyxla.numpy: pyxla.numpy installs the array methods."""
import ast
import pathlib
import subprocess
import sys

import pyxla

FRONTEND = pathlib.Path(pyxla.__file__).parent / "frontend"


def _imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            names.update(f"{base}.{a.name}" if node.module else f"{base}{a.name}" for a in node.names)
    return names


def test_frontend_does_not_import_pyxla_numpy():
    for path in sorted(FRONTEND.glob("*.py")):
        for name in _imported_modules(path):
            assert name not in ("..numpy", "pyxla.numpy") and not name.startswith(("..numpy.", "pyxla.numpy.")), \
                f"{path.name} imports {name}"


def test_import_pyxla_installs_array_methods():
    # (`import pyxla` loads its API on first use of one of its names: here pyxla.jit)
    code = ("import pyxla\n"
            "pyxla.jit\n"
            "from pyxla.frontend.tracing import Tracer\n"
            "from pyxla.frontend.array import Array\n"
            "assert all(hasattr(Tracer, n) for n in ('__add__', '__radd__', '__getitem__', 'sum', 'reshape',\n"
            "                                        'T', 'at', '__array_ufunc__'))\n"
            "assert hasattr(Array, 'at')\n")
    subprocess.run([sys.executable, "-c", code], check=True)
