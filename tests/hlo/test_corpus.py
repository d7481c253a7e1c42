"""Conformance: every corpus case, at its three levels (module.hlo, optimized.hlo and
module.stablehlo.mlir), on the interpreter backend, within its tolerances."""
import pytest

from pyxla.backends import get_backend
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo.stablehlo import parse_program

CASES = corpus_case_dirs()


def test_corpus_is_complete():
    assert len(CASES) >= 82


@pytest.mark.parametrize("level", ["module", "optimized", "stablehlo"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_matches_xla(case_dir, level):
    case = load_case(case_dir)
    backend = get_backend("interpreter")
    problems = run_case(case, level, lambda text, ins: backend.compile(parse_program(text)).run_flat(ins))
    assert not problems, f"{case.name} [{level}]:\n" + "\n".join(problems)
