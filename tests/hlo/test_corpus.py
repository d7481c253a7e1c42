"""Conformance: every corpus case, both levels, on the interpreter backend, within its tolerances."""
import pytest

from pyxla.backends import get_backend
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo import parse_module

CASES = corpus_case_dirs()


def test_corpus_is_complete():
    assert len(CASES) >= 82


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_matches_xla(case_dir, level):
    case = load_case(case_dir)
    backend = get_backend("interpreter")
    problems = run_case(case, level, lambda text, ins: backend.compile(parse_module(text)).run_flat(ins))
    assert not problems, f"{case.name} [{level}]:\n" + "\n".join(problems)
