"""The on-disk cache (runtime/disk_cache.py): entries round-trip, keys separate their parts,
and a damaged entry of any kind is reported, deleted and read as absent, never returned."""
import warnings

import pytest

from pyxla.runtime import disk_cache
from pyxla.runtime.disk_cache import CacheWarning


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def payload(rng, n=3000) -> bytes:
    return rng.integers(0, 256, n, dtype="uint8").tobytes()


def test_round_trip(cache_dir, rng):
    data = payload(rng)
    key = disk_cache.make_key("some ir", "x86_64")
    assert disk_cache.load("thing", key) is None
    disk_cache.store("thing", key, data)
    assert disk_cache.load("thing", key) == data
    assert [p.name for p in cache_dir.iterdir()] == [f"thing-{key}.bin"]   # no temporary left behind


def test_keys_separate_their_parts():
    assert disk_cache.make_key("ab", "c") != disk_cache.make_key("a", "bc")
    assert disk_cache.make_key("a") != disk_cache.make_key("a", "")
    assert disk_cache.make_key("a", b"b") == disk_cache.make_key("a", "b")


def test_directory_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(tmp_path / "x"))
    assert disk_cache.cache_directory() == tmp_path / "x"
    monkeypatch.delenv("PYXLA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.cache_directory() == tmp_path / "xdg" / "pyxla"


def test_empty_setting_turns_the_cache_off(monkeypatch, tmp_path, rng):
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_directory() is None
    disk_cache.store("thing", "k", payload(rng))
    assert disk_cache.load("thing", "k") is None
    assert list(tmp_path.iterdir()) == []


def _truncated(raw):
    return raw[:len(raw) // 2]


def _header_only_part(raw):
    return raw[:20]


def _flipped_payload_byte(raw):
    i = len(raw) - 17
    return raw[:i] + bytes([raw[i] ^ 0x40]) + raw[i + 1:]


def _other_magic(raw):
    return b"NOTPYXLA" + raw[8:]


def _extra_bytes(raw):
    return raw + b"\0"


@pytest.mark.parametrize("damage", [_truncated, _header_only_part, _flipped_payload_byte, _other_magic,
                                    _extra_bytes, lambda raw: b""])
def test_damaged_entry_is_reported_deleted_and_absent(cache_dir, rng, damage):
    key = disk_cache.make_key(str(rng.integers(1 << 30)))
    disk_cache.store("thing", key, payload(rng))
    path = disk_cache.entry_path("thing", key)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(CacheWarning, match="damaged"):
        assert disk_cache.load("thing", key) is None
    assert not path.exists()
    data = payload(rng)   # and the entry can be written again
    disk_cache.store("thing", key, data)
    assert disk_cache.load("thing", key) == data


def test_parts_stored_in_order_and_read_back_aligned(cache_dir, rng):
    """A payload given as parts is one entry; read with aligned=True it comes back as a
    64-byte aligned uint8 array (large weights are used where they lie)."""
    import numpy as np
    parts = [payload(rng, 100), np.arange(1000, dtype=np.float32), bytes(28)]
    key = disk_cache.make_key("parts")
    assert disk_cache.store("thing", key, parts) is True
    joined = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    assert disk_cache.load("thing", key) == joined
    got = disk_cache.load("thing", key, aligned=True)
    assert got.dtype == np.uint8 and got.ctypes.data % 64 == 0
    assert got.tobytes() == joined


@pytest.mark.parametrize("damage", [_truncated, _flipped_payload_byte, _extra_bytes])
def test_damaged_entry_read_aligned_is_reported_and_absent(cache_dir, rng, damage):
    key = disk_cache.make_key(str(rng.integers(1 << 30)))
    disk_cache.store("thing", key, payload(rng, 5000))
    path = disk_cache.entry_path("thing", key)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(CacheWarning, match="damaged"):
        assert disk_cache.load("thing", key, aligned=True) is None
    assert not path.exists()


def test_store_says_whether_it_kept_the_entry(cache_dir, rng, monkeypatch):
    assert disk_cache.store("thing", "k", payload(rng)) is True
    monkeypatch.setenv("PYXLA_CACHE_MAX_BYTES", "100")
    assert disk_cache.store("thing", "big", payload(rng, 101)) is False     # over the limit: not kept
    assert disk_cache.load("thing", "big") is None
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    assert disk_cache.store("thing", "k", payload(rng)) is False


def test_unwritable_directory_warns_once(tmp_path, monkeypatch, rng):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"x")
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(blocker / "cache"))   # a directory that cannot be made
    with pytest.warns(CacheWarning, match="cannot write"):
        disk_cache.store("thing", "k1", payload(rng))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        disk_cache.store("thing", "k2", payload(rng))   # reported once per directory
        assert disk_cache.load("thing", "k1") is None


def test_a_store_lists_the_directory_only_when_it_may_have_outgrown_the_limit(cache_dir, rng, monkeypatch):
    """Listing the directory stats every entry; stores list it on the first store, when
    the bytes stored since may pass the limit, and every RELIST_EVERY stores."""
    listed = []
    entries = disk_cache._entries
    monkeypatch.setattr(disk_cache, "_entries", lambda fd: listed.append(1) or entries(fd))
    for n in range(5):
        disk_cache.store("thing", f"k{n}", payload(rng, 1000))
    assert len(listed) == 1
    monkeypatch.setenv("PYXLA_CACHE_MAX_BYTES", str(7 * 1200))
    for n in range(5, 9):
        disk_cache.store("thing", f"k{n}", payload(rng, 1000))
    assert len(listed) >= 2                                        # past the limit: listed and evicted
    kept = [n for n in range(9) if disk_cache.entry_path("thing", f"k{n}").exists()]
    assert 0 < len(kept) <= 7 and 8 in kept
    monkeypatch.delenv("PYXLA_CACHE_MAX_BYTES")
    before = len(listed)
    for n in range(disk_cache.RELIST_EVERY + 1):
        disk_cache.store("thing", f"again{n}", payload(rng, 10))
    assert len(listed) == before + 1                               # once in RELIST_EVERY stores
