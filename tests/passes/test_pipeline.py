"""The default pipeline: corpus values unchanged, idempotent, redundancy removed, instruments work."""
import pytest

from pyxla.cli import main
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.errors import VerifierError
from pyxla.hlo import evaluate_module, flatten_result, parse_module, print_module
from pyxla.passes.hlo_pass import HloPass
from pyxla.passes.pipeline import describe_pipeline, run_pipeline

from .hlo_checks import entry_opcodes, run_pass

CASES = corpus_case_dirs()


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_corpus_after_pipeline_and_idempotent(case_dir, level):
    case = load_case(case_dir)

    def run(text, inputs):
        module = parse_module(text)
        run_pipeline(module, verify=True)
        once = print_module(module)
        assert not run_pipeline(module, verify=True), "the second run changed the module"
        assert print_module(module) == once
        return flatten_result(evaluate_module(module, inputs))

    problems = run_case(case, level, run)
    assert not problems, "\n".join(problems)


REDUNDANT = """
HloModule redundant
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
scale {
  v = f32[8,4] parameter(0)
  two = f32[] constant(2)
  tb = f32[8,4] broadcast(two), dimensions={}
  ROOT m = f32[8,4] multiply(v, tb)
}
ENTRY main {
  x = f32[8,4] parameter(0)
  w = f32[4,3] parameter(1)
  e1 = f32[8,4] exponential(x)
  e2 = f32[8,4] exponential(x)
  sum = f32[8,4] add(e1, e2)
  c1 = f32[] constant(3)
  c2 = f32[] constant(4)
  c3 = f32[] multiply(c1, c2)
  c4 = f32[] constant(12)
  c5 = f32[] subtract(c3, c4)
  zero_b = f32[8,4] broadcast(c5), dimensions={}
  minus_zero = f32[] constant(-0)
  mz = f32[8,4] broadcast(minus_zero), dimensions={}
  id1 = f32[8,4] add(sum, mz)
  one = f32[] constant(1)
  ones = f32[8,4] broadcast(one), dimensions={}
  id2 = f32[8,4] multiply(id1, ones)
  t1 = f32[4,8] transpose(id2), dimensions={1,0}
  t2 = f32[8,4] transpose(t1), dimensions={1,0}
  r1 = f32[32] reshape(t2)
  r2 = f32[2,16] reshape(r1)
  r3 = f32[8,4] reshape(r2)
  scaled = f32[8,4] call(r3), to_apply=scale
  n1 = f32[8,4] negate(scaled)
  n2 = f32[8,4] negate(n1)
  unused = f32[8,4] tanh(n2)
  d = f32[8,3] dot(n2, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  total = f32[8] reduce(d, z), dimensions={1}, to_apply=add_f32
  ROOT out = (f32[8], f32[8,4]) tuple(total, zero_b)
}
"""


def test_pipeline_removes_built_in_redundancy(rng):
    after = run_pass(run_pipeline_items(), REDUNDANT, rng, rtol=1e-5)
    ops = entry_opcodes(after)
    assert ops == {"exponential": 1, "add": 1, "multiply": 1, "broadcast": 2, "constant": 2, "dot": 1,
                   "reduce": 1, "tuple": 1}, ops
    assert [c.name for c in after.computations][-1] == "main" and len(after.computations) == 2


def run_pipeline_items():
    from pyxla.passes.pipeline import default_pipeline
    return default_pipeline()


def test_verifier_failure_names_the_pass(rng):
    def break_shapes(module):
        module.entry.root.shape = module.entry.root.operands[0].shape.with_dims((99,))
        return True

    module = parse_module("HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n")
    with pytest.raises(VerifierError, match="after pass shape-breaker"):
        run_pipeline(module, [HloPass("shape-breaker", break_shapes)], verify=True)


def test_dump_writes_module_after_each_changing_pass(tmp_path, rng):
    module = parse_module(REDUNDANT)
    run_pipeline(module, dump_dir=str(tmp_path))
    files = sorted(p.name for p in (tmp_path / "redundant").iterdir())
    assert files[0] == "000.input.hlo"
    assert any(".call-inliner.hlo" in f for f in files) and any(".cse.hlo" in f for f in files)
    last = (tmp_path / "redundant" / files[-1]).read_text()
    assert parse_module(last) is not None


def test_debug_prints_pass_times(capsys, monkeypatch):
    monkeypatch.setenv("PYXLA_DEBUG", "passes")
    run_pipeline(parse_module(REDUNDANT))
    err = capsys.readouterr().err
    assert "pyxla pass algebraic-simplifier" in err and " ms " in err and "changed" in err


def test_opt_command(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(REDUNDANT)
    assert main(["opt", str(path)]) == 0
    out = capsys.readouterr().out
    assert "call(" not in out and out.count("exponential(") == 1
    assert main(["opt", str(path), "--passes", "dce"]) == 0
    assert "call(" in capsys.readouterr().out
    assert main(["opt", str(path), "--passes", "nonsense"]) == 2
    assert "unknown pass(es) nonsense" in capsys.readouterr().err
    assert main(["opt", "--list"]) == 0
    assert capsys.readouterr().out.strip() == describe_pipeline()


def test_entry_layout_header_follows_the_module():
    module = parse_module("HloModule m, entry_computation_layout={(f32[4]{0}, f32[2]{0})->f32[4]{0}}\n"
                          "ENTRY e {\n  x = f32[4] parameter(0)\n  y = f32[2] parameter(1)\n"
                          "  ROOT t = (f32[4], f32[2]) tuple(x, y)\n}\n")
    assert "entry_computation_layout={(f32[4]{0}, f32[2]{0})->(f32[4]{0}, f32[2]{0})}" in print_module(module)
