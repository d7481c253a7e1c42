"""The conformance corpus on the native CPU backend.

A case either matches XLA's outputs within its tolerances, or is refused at compile time
with NotImplementedError naming the opcode. REFUSED lists the cases refused today: a case
refused but not listed fails (a regression), and a listed case that now compiles fails too,
so the list shrinks as the backend grows and never hides a wrong answer.
"""
import pytest

from pyxla.backends import get_backend
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo.stablehlo import parse_program

CASES = corpus_case_dirs()

REFUSED: set[tuple[str, str]] = set()   # every case compiles today


@pytest.mark.parametrize("level", ["module", "optimized", "stablehlo"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_on_cpu(case_dir, level):
    case = load_case(case_dir)
    backend = get_backend("cpu")

    def run(text, inputs):
        return backend.compile(parse_program(text)).run_flat(inputs)

    try:
        problems = run_case(case, level, run)
    except NotImplementedError as e:
        assert (case.name, level) in REFUSED, f"newly refused: {e}"
        assert "the CPU backend cannot" in str(e)
        return
    assert (case.name, level) not in REFUSED, "compiles now: remove it from REFUSED"
    assert not problems, "\n".join(problems)
