"""Every corpus module still matches XLA's outputs after the pipeline and fusion."""
import pytest

from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.fusion.instruction_fusion import fusion_pass
from pyxla.hlo import evaluate_module, flatten_result, parse_module, verify_module
from pyxla.passes.pipeline import run_pipeline

CASES = corpus_case_dirs()


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_after_fusion(case_dir, level):
    case = load_case(case_dir)

    def run(text, inputs):
        module = parse_module(text)
        run_pipeline(module)
        fusion_pass()(module)
        verify_module(module)
        return flatten_result(evaluate_module(module, inputs))

    problems = run_case(case, level, run)
    assert not problems, "\n".join(problems)
