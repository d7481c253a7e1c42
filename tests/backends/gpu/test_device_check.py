"""The device check script imports and, on a machine without a CUDA driver, stops at once
with a message naming what is missing (it cannot be run further here); its device-array
check runs on gpu-sim."""
import subprocess
import sys
from pathlib import Path

import pytest

from pyxla.backends.gpu.device import GpuError
from tests.backends.gpu import device_check

ROOT = Path(__file__).resolve().parents[3]


def _has_device() -> bool:
    try:
        device_check.open_device()
    except GpuError:
        return False
    return True


@pytest.mark.skipif(_has_device(), reason="a CUDA device is present: the script would run for minutes")
def test_without_a_driver_it_says_so_and_exits_2():
    done = subprocess.run([sys.executable, "-m", "tests.backends.gpu.device_check", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == device_check.NO_DEVICE
    assert "no usable GPU" in done.stderr
    assert "cuda" in done.stderr.lower()


def test_its_workloads_exist_for_both_frameworks():
    from benchmarks.frameworks import jax_impl, pyxla_impl
    from benchmarks.workloads import BY_NAME
    for name in device_check.WORKLOADS:
        assert name in BY_NAME and name in pyxla_impl.FUNCTIONS and name in jax_impl.BUILDERS


def test_its_device_array_check_passes_on_gpu_sim():
    # the same function the script runs on the GPU: its checks can fail (they compare with
    # NumPy in float64 and count copies and allocations), and pass on gpu-sim
    assert device_check.check_device_arrays("gpu-sim") == []
