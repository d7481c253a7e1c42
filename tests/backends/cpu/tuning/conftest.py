"""Every tuning test gets a cache directory of its own (the tuning database lives there)."""
import pytest


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(folder))
    monkeypatch.delenv("PYXLA_AUTOTUNE", raising=False)
    monkeypatch.delenv("PYXLA_TUNING", raising=False)
    monkeypatch.delenv("PYXLA_WINOGRAD", raising=False)
    return folder
