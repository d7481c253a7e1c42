"""The on-disk cache trusts only what this user wrote (runtime/disk_cache.py): an entry or a
directory that someone else could have written, a FIFO, a link, an entry copied over
another, one above the size limit, are each reported with a CacheWarning and treated as
absent; atomic writes from several processes; LRU eviction; `pyxla cache info|clear`."""
import os
import stat
import subprocess
import sys
import warnings

import pytest

from pyxla.runtime import disk_cache
from pyxla.runtime.disk_cache import CacheWarning

OTHER_UID = 12345


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PYXLA_CACHE_DIR", str(folder))
    monkeypatch.delenv("PYXLA_CACHE_MAX_BYTES", raising=False)
    disk_cache._reported.clear()
    yield folder
    disk_cache._reported.clear()


def _stored(kind="thing", key=None, payload=b"payload" * 100):
    key = key or disk_cache.make_key(kind, os.urandom(8))
    disk_cache.store(kind, key, payload)
    return key, disk_cache.entry_path(kind, key)


def _refused(kind, key, match):
    with pytest.warns(CacheWarning, match=match):
        assert disk_cache.load(kind, key) is None


def test_directory_is_created_private(cache_dir):
    _stored()
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in cache_dir.iterdir())


def test_entry_of_another_user_is_ignored_and_kept(cache_dir):
    key, path = _stored()
    os.chown(path, OTHER_UID, -1)
    _refused("thing", key, "owned by uid 12345")
    assert path.exists()   # not ours: left alone


def test_directory_of_another_user_is_refused(cache_dir):
    key, path = _stored()
    os.chown(cache_dir, OTHER_UID, -1)
    _refused("thing", key, "owned by uid 12345.*refusing")
    assert path.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # reported once per process
        disk_cache.store("thing", "other", b"x")
    assert not disk_cache.entry_path("thing", "other").exists()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_writable_directory_is_refused(cache_dir, mode):
    key, path = _stored()
    os.chmod(cache_dir, mode)
    _refused("thing", key, "writable by group or others")
    assert path.exists()


def test_group_writable_entry_is_refused_and_deleted(cache_dir):
    key, path = _stored()
    os.chmod(path, 0o664)
    _refused("thing", key, "writable by group or others")
    assert not path.exists()


def test_fifo_does_not_block(cache_dir):
    key, path = _stored()
    path.unlink()
    os.mkfifo(path, 0o600)
    code = ("import warnings, sys; from pyxla.runtime import disk_cache as d\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    assert d.load('thing', {key!r}) is None\n"
            "print(w[0].message)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)})
    assert out.returncode == 0, out.stderr
    assert "not a regular file" in out.stdout
    assert not path.exists()


def test_symlink_to_dev_zero_is_refused(cache_dir):
    key, path = _stored()
    path.unlink()
    path.symlink_to("/dev/zero")
    _refused("thing", key, "symbolic link")
    assert not path.is_symlink() and os.path.exists("/dev/zero")


def test_symlink_to_a_valid_entry_is_refused(cache_dir, tmp_path):
    key, path = _stored()
    moved = tmp_path / "elsewhere.bin"
    os.replace(path, moved)
    path.symlink_to(moved)
    _refused("thing", key, "symbolic link")
    assert moved.exists()


def test_hard_link_is_refused(cache_dir, tmp_path):
    key, path = _stored()
    os.link(path, tmp_path / "second-name")
    _refused("thing", key, "2 hard links")


def test_entry_replaced_while_being_opened_is_a_quiet_miss_and_the_new_one_stays(cache_dir, monkeypatch):
    key, path = _stored(payload=b"old" * 100)
    real_fstat = os.fstat

    def fstat_after_another_process_replaced_it(fd):
        if stat.S_ISREG(real_fstat(fd).st_mode):   # the entry, opened (not the directory)
            monkeypatch.setattr(os, "fstat", real_fstat)
            disk_cache.store("thing", key, b"new" * 100)   # atomic rename over the opened name
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", fstat_after_another_process_replaced_it)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk_cache.load("thing", key) is None
    assert disk_cache.load("thing", key) == b"new" * 100


def test_valid_entry_copied_over_another_is_refused_and_replaced(cache_dir):
    key_a, path_a = _stored(payload=b"a" * 500)
    key_b, path_b = _stored(payload=b"b" * 500)
    path_b.write_bytes(path_a.read_bytes())
    _refused("thing", key_b, "names another entry")
    assert not path_b.exists()
    disk_cache.store("thing", key_b, b"b" * 500)   # rebuilt, and found from then on
    assert disk_cache.load("thing", key_b) == b"b" * 500
    assert disk_cache.load("thing", key_a) == b"a" * 500


def test_entry_above_the_limit_is_refused(cache_dir, monkeypatch):
    key, path = _stored(payload=b"x" * 5000)
    monkeypatch.setenv("PYXLA_CACHE_MAX_BYTES", "1000")
    _refused("thing", key, "above the cache's size limit")


def test_entry_of_an_earlier_format_is_replaced_quietly(cache_dir):
    key, path = _stored()
    path.write_bytes(b"PYXLAC01" + b"\0" * 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk_cache.load("thing", key) is None
    assert not path.exists()


def test_least_recently_used_entries_are_evicted(cache_dir, monkeypatch):
    keys = [_stored(payload=bytes([i]) * 1000)[0] for i in range(3)]
    for i, key in enumerate(keys):   # entry 0 used last
        os.utime(disk_cache.entry_path("thing", key), (1000 + i, 1000 + i))
    assert disk_cache.load("thing", keys[0]) is not None
    monkeypatch.setenv("PYXLA_CACHE_MAX_BYTES", str(3 * 1200))
    new, _ = _stored(payload=b"n" * 1000)
    present = {k for k in keys + [new] if disk_cache.entry_path("thing", k).exists()}
    assert present == {keys[0], keys[2], new}   # entry 1 was the least recently used


_WRITER = """
import sys
from pyxla.runtime import disk_cache as d
worker = int(sys.argv[1])
for round in range(40):
    key = d.make_key("shared", str(round % 5))
    got = d.load("thing", key)
    assert got is None or got == str(round % 5).encode() * 4000, "a torn or foreign entry"
    d.store("thing", key, str(round % 5).encode() * 4000)
"""


def test_several_processes_fill_one_cache(cache_dir):
    procs = [subprocess.Popen([sys.executable, "-W", "error::UserWarning", "-c", _WRITER, str(i)],
                              env={**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)},
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert sorted(p.name for p in cache_dir.iterdir() if p.name.startswith(".")) == []
    for i in range(5):
        assert disk_cache.load("thing", disk_cache.make_key("shared", str(i))) == str(i).encode() * 4000


def test_cache_info_and_clear_commands(cache_dir):
    _stored(kind="thing")
    _stored(kind="other")
    run = lambda *a: subprocess.run([sys.executable, "-m", "pyxla", "cache", *a], capture_output=True, text=True,  # noqa: E731
                                    env={**os.environ, "PYXLA_CACHE_DIR": str(cache_dir)}, timeout=300)
    info = run("info")
    assert info.returncode == 0, info.stderr
    assert str(cache_dir) in info.stdout and "2 entries" in info.stdout and "thing" in info.stdout
    cleared = run("clear")
    assert cleared.returncode == 0 and "2 entries" in cleared.stdout
    assert list(cache_dir.iterdir()) == []
