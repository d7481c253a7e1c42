"""Every corpus module still matches XLA's outputs after the whole compiler: passes, fusion,
multi-output fusion, scheduling and buffer assignment."""
import pytest

from pyxla.compiler import compile_module
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo import evaluate_module, flatten_result, parse_module, verify_module

CASES = corpus_case_dirs()


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_after_compilation(case_dir, level):
    case = load_case(case_dir)

    def run(text, inputs):
        compiled = compile_module(parse_module(text))
        verify_module(compiled.module)
        assert compiled.buffers.arena_size <= sum(b.size for b in compiled.buffers.temps) + 64 * len(
            compiled.buffers.temps)
        return flatten_result(evaluate_module(compiled.module, inputs))

    problems = run_case(case, level, run)
    assert not problems, "\n".join(problems)
