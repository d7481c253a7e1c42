"""Fixtures of the CPU backend's tests."""
import pytest

from pyxla.backends.cpu.runtime import parallel


@pytest.fixture
def pool(monkeypatch):
    """The process's pool, with at least two threads even on a one-core machine; whether it
    hands jobs to OpenMP is put back afterwards."""
    if parallel.worker_pool() is None:
        monkeypatch.setenv("PYXLA_NUM_THREADS", "3")
    started = parallel.worker_pool()
    assert started is not None and started.threads >= 2
    openmp = started.openmp
    yield started
    started.share_openmp(openmp)
