"""The package's layers import downwards only, and no module imports another's private name.

Read from the source with `ast` (nothing is imported), so a violation fails here with the
file and line, before it becomes an import cycle somewhere else."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "pyxla"

# layer -> the pyxla layers it may import (besides itself). A layer is a top-level module or
# package of pyxla, or a backend package under pyxla/backends.
MAY_IMPORT = {
    "errors": set(),
    "hlo": {"errors"},
    "passes": {"errors", "hlo"},
    "fusion": {"errors", "hlo", "passes"},
    "compiler": {"errors", "hlo", "passes", "fusion"},
    "runtime": {"errors"},
    "backends": {"errors", "hlo", "compiler"},
    "backends.llvm": {"errors", "hlo"},
    "backends.interpreter": {"errors", "hlo", "compiler"},
    "backends.cpu": {"errors", "hlo", "passes", "fusion", "compiler", "runtime", "backends.llvm"},
    # gpu-sim runs its kernels through the host's JIT (cpu/runtime/llvm_jit.py)
    "backends.gpu": {"errors", "hlo", "passes", "fusion", "compiler", "runtime", "backends.llvm", "backends.cpu"},
    "frontend": {"errors", "hlo", "passes", "fusion", "compiler", "runtime", "backends"},
}


def _layer(parts: list[str]) -> str:
    """The layer of a module given as its dotted parts after 'pyxla'."""
    if not parts:
        return "(package)"
    if parts[0] == "backends" and len(parts) > 1 and (ROOT / "backends" / parts[1]).is_dir():
        return f"backends.{parts[1]}"
    return parts[0]


def _imports(path: Path):
    """(line, imported module's parts after 'pyxla', names) for each import of pyxla code."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "pyxla":
                parts = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            if not node.module and node.level:   # from . import x: x is a module of the package
                for name in names:
                    yield node.lineno, parts + [name], []
            else:
                yield node.lineno, parts, names
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "pyxla":
                    yield node.lineno, a.name.split(".")[1:], []


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_imports_go_downwards(path):
    me = _layer(list(path.relative_to(ROOT).with_suffix("").parts))
    allowed = MAY_IMPORT.get(me)
    if allowed is None:   # the layers above (numpy, lax, importers, cli, ...) may import anything below
        return
    wrong = [f"line {line}: {'.'.join(parts)}" for line, parts, _ in _imports(path)
             if _layer(parts) not in allowed | {me}]
    assert not wrong, f"{path.relative_to(ROOT)} ({me}) imports from a layer above it: {wrong}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_private_names_imported(path):
    """`from m import _name` only inside the package that owns a private module (lax's
    _values.py and _windows.py are lax's own)."""
    wrong = []
    for line, parts, names in _imports(path):
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                wrong.append(f"line {line}: {name} from {'.'.join(parts)}")
    assert not wrong, f"{path.relative_to(ROOT)} imports private names: {wrong}"


def test_the_checks_see_imports():
    """The walk finds the imports it judges (a check that reads nothing passes anything)."""
    found = list(_imports(ROOT / "backends" / "cpu" / "codegen.py"))
    assert any(_layer(parts) == "backends.llvm" for _, parts, _ in found)
    assert any(_layer(parts) == "hlo" for _, parts, _ in found)


MAX_FILE_LINES = 900
MAX_FUNCTION_LINES = 100


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_files_and_functions_stay_small(path):
    """No module over 900 lines and no function over 100: a longer emitter is split into a
    plan (decisions in Python) and its emission."""
    text = path.read_text()
    assert text.count("\n") <= MAX_FILE_LINES, f"{path.relative_to(ROOT)} has {text.count(chr(10))} lines"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def _module_aliases(path: Path) -> set[str]:
    """The local names a file binds to pyxla modules (`from ..dot import gemm`)."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])
    aliases = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "pyxla"):
            if node.level:
                parts = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            else:
                parts = node.module.split(".")[1:]
            for a in node.names:
                target = ROOT.joinpath(*parts, a.name)
                if target.with_suffix(".py").exists() or target.is_dir():
                    aliases.add(a.asname or a.name)
    return aliases


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_private_names_read_through_a_module(path):
    """`gemm._GemmIr` is the same reach into another module's privates as importing it."""
    aliases = _module_aliases(path)
    wrong = [f"line {node.lineno}: {node.value.id}.{node.attr}" for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
             and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert not wrong, f"{path.relative_to(ROOT)} reads private names of other modules: {wrong}"
