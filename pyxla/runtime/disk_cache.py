"""The on-disk cache: compiled code kept between processes, found again by a key that hashes
everything its bytes depend on.

Where: `PYXLA_CACHE_DIR`, else `$XDG_CACHE_HOME/pyxla`, else `~/.cache/pyxla`;
`PYXLA_CACHE_DIR=` (empty) turns the cache off.

An entry is one file, `<kind>-<key>.bin`: a header (magic and format number, the payload's
length and its SHA-256) followed by the payload. The key is made by the caller and names
the entry; the checksum is the entry's own and says the bytes are the ones written. A file
that does not check out (cut short by a crash or a full disk, overwritten, written by an
incompatible format) is reported with a `CacheWarning`, deleted and treated as absent, so
the caller builds the entry again: a damaged cache costs time, never a wrong load. Writes
go to a temporary file in the same directory renamed into place, so a reader in another
process sees a whole entry or none. A directory that cannot be created or written is
reported once per process and the cache is skipped.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import warnings
from pathlib import Path

MAGIC = b"PYXLAC01"
_HEADER = struct.Struct("<8sQ32s")    # magic and format, payload length, SHA-256 of the payload

_unwritable: set[Path] = set()        # directories already reported as unwritable


class CacheWarning(UserWarning):
    """An on-disk cache entry was unusable (and is being rebuilt), or the cache cannot be written."""


def cache_directory() -> Path | None:
    """The cache's directory, or None when PYXLA_CACHE_DIR turns the cache off."""
    setting = os.environ.get("PYXLA_CACHE_DIR")
    if setting is not None:
        return Path(setting).expanduser() if setting.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyxla"


def make_key(*parts: str | bytes) -> str:
    """A key from the parts that decide an entry's bytes (each part delimited, so no two
    different lists of parts give the same key)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def entry_path(kind: str, key: str) -> Path | None:
    folder = cache_directory()
    return None if folder is None else folder / f"{kind}-{key}.bin"


def load(kind: str, key: str) -> bytes | None:
    """The payload stored under (kind, key), or None when there is none or it was damaged
    (then it is deleted, with a CacheWarning)."""
    path = entry_path(kind, key)
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        warnings.warn(f"pyxla cache: cannot read {path} ({e}); compiling instead", CacheWarning, stacklevel=2)
        return None
    problem = _damage(raw)
    if problem is None:
        return raw[_HEADER.size:]
    warnings.warn(f"pyxla cache: {path} is damaged ({problem}); deleting it and compiling again",
                  CacheWarning, stacklevel=2)
    try:
        path.unlink()
    except OSError:
        pass
    return None


def _damage(raw: bytes) -> str | None:
    """What is wrong with an entry's bytes, or None."""
    if len(raw) < _HEADER.size:
        return f"{len(raw)} bytes, shorter than the header"
    magic, length, digest = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        return "not a pyxla cache entry of this format"
    if len(raw) - _HEADER.size != length:
        return f"payload of {len(raw) - _HEADER.size} bytes where the header says {length}"
    if hashlib.sha256(raw[_HEADER.size:]).digest() != digest:
        return "checksum mismatch"
    return None


def store(kind: str, key: str, payload: bytes) -> None:
    """Keep `payload` under (kind, key); a cache that cannot be written is skipped with one
    CacheWarning per directory and process."""
    path = entry_path(kind, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()))
                f.write(payload)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as e:
        if path.parent not in _unwritable:
            _unwritable.add(path.parent)
            warnings.warn(f"pyxla cache: cannot write to {path.parent} ({e}); "
                          "set PYXLA_CACHE_DIR to a writable directory, or to nothing to turn the cache off",
                          CacheWarning, stacklevel=2)
