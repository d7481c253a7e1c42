"""The conformance corpus through the GPU backend's kernels, on a machine without a GPU.

Each case is compiled once (passes, fusion, schedule) and its kernels emitted twice from
the same plan: for the host, run over their launch grid by gpu-sim and compared with XLA's
outputs; and for NVPTX, printed as PTX that ptxas must accept for sm_90 (when ptxas is on
the PATH). A case the backend refuses must be listed in REFUSED with the op it names, so a
newly refused case fails, and so does a listed case that now compiles.
"""
import shutil
import subprocess

import pytest

from pyxla.backends.gpu import SIM_BACKEND, GpuUnsupported, kernel_ir
from pyxla.backends.gpu.ptx import compile_ptx
from pyxla.compiler import compile_module
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo import parse_module

CASES = corpus_case_dirs()

# case -> the op the GPU backend names when it refuses the case (both levels)
REFUSED: dict[str, str | None] = {}
# refused at the module level only: the optimised module has the op removed
MODULE_LEVEL_ONLY: set[str] = set()
PTXAS = shutil.which("ptxas")


def refused(name: str, level: str) -> bool:
    return name in REFUSED and (level == "module" or name not in MODULE_LEVEL_ONLY)


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_on_gpu_sim_and_ptxas(case_dir, level, tmp_path):
    case = load_case(case_dir)
    try:
        module = parse_module(case.hlo_text(level))
        compiled = compile_module(module.clone())
        executable = SIM_BACKEND.compile(module, compiled=compiled, placement="device")   # every kernel runs
    except GpuUnsupported as e:
        assert refused(case.name, level), f"newly refused: {e}"
        assert "the GPU backend cannot" in str(e)
        if REFUSED[case.name]:
            assert f"emit {REFUSED[case.name]} " in str(e)
        return
    assert not refused(case.name, level), "compiles now: remove it from REFUSED"
    problems = run_case(case, level, lambda text, inputs: executable.run_flat(inputs))
    assert not problems, "\n".join(problems)
    if PTXAS:
        ptx = compile_ptx(kernel_ir(compiled, "ptx")[0], "sm_90")
        path = tmp_path / "kernels.ptx"
        path.write_text(ptx)
        done = subprocess.run([PTXAS, "-arch=sm_90", str(path), "-o", str(tmp_path / "kernels.cubin")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
