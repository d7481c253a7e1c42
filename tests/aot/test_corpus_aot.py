"""Every case of the conformance corpus compiled ahead of time: `pyxla aot` writes the
header and object, a C driver linked with cc runs it in a subprocess (no Python in it) on
the case's inputs, and its outputs must match XLA's within the case's tolerances. The
object may need only libc, libm and pthreads (`nm -u`). A case the CPU backend refuses is
skipped, saying so (none today)."""
import numpy as np
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


HALF_CASES = [c for c in CASES if "f16" in load_case(c).meta["dtypes"]]


@needs_cc
@pytest.mark.parametrize("case_dir", HALF_CASES, ids=[c.name for c in HALF_CASES])
def test_half_cases_for_baseline_x86_64(case_dir, tmp_path):
    """For a CPU without F16C the object carries its own half conversions (soft_half.py):
    still only libc/libm/pthreads symbols, still XLA's results."""
    case = load_case(case_dir)
    assert main(["aot", "--quiet", "--target-cpu", "generic", str(case_dir / "module.hlo"), "--name", "prog",
                 "-o", str(tmp_path)]) == 0
    prog = Program.read(tmp_path, "prog")
    assert not foreign_symbols(prog.object)
    exe = link_driver(prog)
    write_inputs(tmp_path, prog, case.inputs)
    run_driver(exe, tmp_path)
    for i, (got, want, spec) in enumerate(zip(read_results(tmp_path, prog), case.expected, case.meta["outputs"])):
        assert compare(got, want, spec) is None, f"out{i}"


HALF_ROUND_TRIP = """HloModule halves
ENTRY e {
  h = f16[65536] parameter(0)
  f = f32[4096] parameter(1)
  wide = f32[65536] convert(h)
  narrow = f16[4096] convert(f)
  ROOT t = (f32[65536], f16[4096]) tuple(wide, narrow)
}
"""


@needs_cc
def test_soft_half_conversions_are_exact(tmp_path):
    """Every half widened, and floats around every rounding edge narrowed, as NumPy does."""
    (tmp_path / "m.hlo").write_text(HALF_ROUND_TRIP)
    assert main(["aot", "--quiet", "--target-cpu", "generic", str(tmp_path / "m.hlo"), "--name", "prog",
                 "-o", str(tmp_path)]) == 0
    prog = Program.read(tmp_path, "prog")
    rng = np.random.default_rng(3)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    edges = halves[rng.integers(0, 65536, 1024)].astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        floats = np.concatenate([edges, np.nextafter(edges, np.float32(np.inf)),
                                 np.nextafter(edges, np.float32(-np.inf)),
                                 rng.standard_normal(1024).astype(np.float32) * np.float32(1e3)])
    floats[:8] = [65519.0, 65520.0, 1e-8, -3e-8, np.inf, -np.inf, np.nan, 6.1e-5]
    exe = link_driver(prog)
    write_inputs(tmp_path, prog, [halves, floats])
    run_driver(exe, tmp_path)
    wide, narrow = read_results(tmp_path, prog)
    with np.errstate(over="ignore"):
        want_wide, want_narrow = halves.astype(np.float32), floats.astype(np.float16)
    nan = np.isnan(want_wide)
    assert np.array_equal(wide.view(np.uint32)[~nan], want_wide.view(np.uint32)[~nan]) and np.isnan(wide[nan]).all()
    nan = np.isnan(want_narrow)
    assert np.array_equal(narrow.view(np.uint16)[~nan], want_narrow.view(np.uint16)[~nan])
    assert np.isnan(narrow[nan]).all()
