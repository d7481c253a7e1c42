import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def seed(rng):
    """torch's global generator seeded from the session's seed (fresh each run)."""
    value = int(rng.integers(2**31))
    torch.manual_seed(value)
    torch._dynamo.reset()
    return value


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
