import os
import random
import zlib

import numpy as np
import pytest

# Fresh inputs every run; the seed is printed so a failure can be reproduced with
# PYXLA_TEST_SEED=<seed>.
# Set in the environment at import so pytest-xdist workers share the controller's seed.
os.environ.setdefault("PYXLA_TEST_SEED", str(random.SystemRandom().randrange(2**31)))
SESSION_SEED = int(os.environ["PYXLA_TEST_SEED"])


def pytest_report_header(config):
    return f"pyxla random seed: PYXLA_TEST_SEED={SESSION_SEED}"


@pytest.fixture
def rng(request):
    """A generator per test: fresh each run, reproducible from the printed session seed."""
    return np.random.default_rng([SESSION_SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture
def nchw_convolutions(monkeypatch):
    """Convolutions compiled in the layout their HLO gives: the convolution layout pass
    leaves them be. For tests of the kernels' NCHW routes, which grouped convolutions,
    colour stems and modules compiled without optimisation take."""
    from pyxla.passes import convolution_layout
    monkeypatch.setattr(convolution_layout, "_wants_features_last", lambda conv, dn: False)


@pytest.fixture(params=["as-given", "features-last"])
def convolution_layouts(request):
    """Run a convolution test twice: in the HLO's own layout, and after the convolution layout
    pass (NHWC between transposes where the HLO says NCHW)."""
    if request.param == "as-given":
        request.getfixturevalue("nchw_convolutions")
    return request.param


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test compiles afresh into a cache of its own (PYXLA_CACHE_DIR): a test that checks
    which kernels codegen chose must see them emitted, not loaded from an earlier run."""
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(tmp_path_factory.mktemp("pyxla-cache")))


@pytest.fixture(autouse=True)
def _jax_precision_restored():
    """Tests that compare with JAX in float64 switch on its x64 flag; whatever a test does,
    the next one in the process starts with the flag as it was (JAX's default: off), since
    JAX's random bits and dtypes depend on it."""
    import sys

    before = sys.modules["jax"].config.jax_enable_x64 if "jax" in sys.modules else False
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_enable_x64", before)
