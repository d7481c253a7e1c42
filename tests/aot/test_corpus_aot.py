"""Every case of the conformance corpus compiled ahead of time: `pyxla aot` writes the
header and object, a C driver linked with cc runs it in a subprocess (no Python in it) on
the case's inputs, and its outputs must match XLA's within the case's tolerances. The
object may need only libc, libm and pthreads (`nm -u`). A case the CPU backend refuses is
skipped, saying so (none today)."""
import pytest

from pyxla.cli import main
from pyxla.conformance import compare, corpus_case_dirs, load_case

from .harness import Program, foreign_symbols, link_driver, needs_cc, read_results, run_driver, write_inputs

CASES = corpus_case_dirs()


@needs_cc
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_from_c(case_dir, tmp_path, capsys):
    case = load_case(case_dir)
    status = main(["aot", str(case_dir / "module.hlo"), "--name", "prog", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    if status != 0 and "the CPU backend cannot" in err:
        pytest.skip(f"refused by the CPU backend: {err.strip()}")
    assert status == 0, err
    prog = Program.read(tmp_path, "prog")
    foreign = foreign_symbols(prog.object)
    assert not foreign, f"symbols from outside libc/libm/pthreads: {sorted(foreign)}"
    exe = link_driver(prog)
    write_inputs(tmp_path, prog, case.inputs)
    run_driver(exe, tmp_path)
    outputs = read_results(tmp_path, prog)
    specs = case.meta["outputs"]
    assert len(outputs) == len(specs)
    problems = [f"out{i}: {why}" for i, (got, want, spec) in enumerate(zip(outputs, case.expected, specs))
                if (why := compare(got, want, spec))]
    assert not problems, "\n".join(problems)
