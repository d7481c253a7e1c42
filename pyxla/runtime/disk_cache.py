"""The on-disk cache: compiled code kept between processes, found again by a key that hashes
everything its bytes depend on. One implementation serves the runtime's native helpers
(the call shim, the worker pool) and whole compiled executables.

Where: `PYXLA_CACHE_DIR`, else `$XDG_CACHE_HOME/pyxla`, else `~/.cache/pyxla`;
`PYXLA_CACHE_DIR=` (empty) turns the cache off. Size: `PYXLA_CACHE_MAX_BYTES` (default
2 GiB); past it the least recently used entries are deleted (checked by listing the
directory on a process's first store into it, when what it has stored since may pass the
limit, and every 64 stores).

An entry is one file, `<kind>-<key>.bin`: a header (magic and format number, the entry's
kind and key, the payload's length and its SHA-256) followed by the payload.

Trust. The cache holds machine code that the process runs, so whoever may write the
directory may run code in every process that reads it; a checksum guards against damage,
never against tampering. The defence is who may write: the directory is created 0700, and
every read opens the directory, then the entry in it with O_NOFOLLOW | O_NONBLOCK, and checks
by fstat on the opened descriptors that

- the directory is owned by this user and not writable by group or others;
- the entry is owned by this user, not writable by group or others, a regular file with one
  link, no larger than the size limit;
- the header's kind and key are the ones asked for, and the checksum holds.

Anything else is reported with a `CacheWarning` and the entry is treated as absent: deleted
when it is ours (a file of another user is left alone), and the caller compiles afresh. A
directory that fails its check is not read or written at all. A FIFO cannot block the
open (O_NONBLOCK) and is refused by its type; a symbolic link is refused by O_NOFOLLOW; a
hard link by its link count; a valid entry copied over another by its key.

Writes go to a temporary file in the same directory, fsync'd, then renamed into place, so
a reader in another process sees a whole entry or none, and processes filling one cache
at the same time are safe (the last rename wins; both entries are whole). A directory that
cannot be created or written is reported once per process and the cache is skipped.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"PYXLAC02"
OLD_MAGICS = (b"PYXLAC01",)   # entries of an earlier format: replaced without a warning
# magic and format, kind (NUL padded), key (hex, NUL padded), payload length, SHA-256 of the payload
_HEADER = struct.Struct("<8s16s64sQ32s")
DEFAULT_MAX_BYTES = 2 << 30
SUFFIX = ".bin"

_reported: set[tuple[str, Path]] = set()   # (problem, directory) already reported in this process


class CacheWarning(UserWarning):
    """An on-disk cache entry was unusable (and is being rebuilt), or the cache cannot be used."""


_fingerprint: list[str] = []


def source_fingerprint() -> str:
    """A hash of pyxla's Python source files' names, sizes and modification times, so that
    code changed without a new version number (a checkout, an edit) misses rather than
    loads what older code compiled. Stat data, as Python's own bytecode cache checks it:
    hashing the 3 MB of source would cost a warm first call about 20 ms."""
    if not _fingerprint:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for name, size, mtime in sorted(_source_stats(str(root), "")):
            h.update(f"{name}\0{size}\0{mtime}\0".encode())
        _fingerprint.append(h.hexdigest())
    return _fingerprint[0]


def _source_stats(folder: str, prefix: str):
    """(relative name, size, mtime in ns) of every .py file under `folder`."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    yield from _source_stats(entry.path, prefix + entry.name + "/")
            elif entry.name.endswith(".py"):
                st = entry.stat()
                yield prefix + entry.name, st.st_size, st.st_mtime_ns


def host_identity() -> str:
    """The machine as code compiled for it depends on, found without LLVM (for keys read
    before LLVM is loaded): the architecture, and on Linux the CPU's model and the feature
    flags the kernel reports, so a cache directory shared by machines of different CPUs
    (a network home directory) never hands one the other's code."""
    import platform
    parts = [platform.machine(), platform.system()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                field = line.split(":", 1)[0].strip()
                if field in ("vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU part"):
                    parts.append(line.strip())
                elif not line.strip():
                    break   # (the first processor's block is enough)
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def cache_directory() -> Path | None:
    """The cache's directory, or None when PYXLA_CACHE_DIR turns the cache off."""
    setting = os.environ.get("PYXLA_CACHE_DIR")
    if setting is not None:
        return Path(setting).expanduser() if setting.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyxla"


def max_bytes() -> int:
    """The cache's size limit (PYXLA_CACHE_MAX_BYTES), which is also the largest entry."""
    setting = os.environ.get("PYXLA_CACHE_MAX_BYTES", "").strip()
    try:
        return max(0, int(setting)) if setting else DEFAULT_MAX_BYTES
    except ValueError:
        _warn_once("bad-limit", Path(setting), f"PYXLA_CACHE_MAX_BYTES={setting!r} is not a number of bytes; "
                   f"using {DEFAULT_MAX_BYTES}")
        return DEFAULT_MAX_BYTES


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
    return None if folder is None else folder / f"{kind}-{key}{SUFFIX}"


def _warn(message: str, stacklevel: int = 3) -> None:
    warnings.warn(f"pyxla cache: {message}", CacheWarning, stacklevel=stacklevel + 1)


def _warn_once(problem: str, folder: Path, message: str) -> None:
    if (problem, folder) not in _reported:
        _reported.add((problem, folder))
        _warn(message, stacklevel=4)


def _unsafe(st: os.stat_result, what: str) -> str | None:
    """Why a file or directory with this status may not be trusted, or None."""
    if st.st_uid != os.geteuid():
        return f"{what} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open_directory(folder: Path, create: bool) -> int | None:
    """A descriptor of the cache directory once it checks out, else None (with a warning
    once per process and directory; a missing directory when not creating is silent)."""
    if create:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            _warn_once("unwritable", folder, f"cannot write to {folder} ({e}); set PYXLA_CACHE_DIR to a writable "
                       "directory, or to nothing to turn the cache off")
            return None
    try:
        # (a link to the directory is followed: what counts is the directory it opens)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        _warn_once("unreadable", folder, f"cannot open {folder} ({e}); not using the cache")
        return None
    problem = _unsafe(os.fstat(fd), f"the directory {folder}")
    if problem is not None:
        os.close(fd)
        _warn_once("unsafe", folder, f"{problem}: refusing to use it (anyone who can write it could plant code "
                   "that this process runs); compiling instead. Make it yours and mode 0700, or set PYXLA_CACHE_DIR")
        return None
    return fd


def load(kind: str, key: str, aligned: bool = False):
    """The payload stored under (kind, key), or None when there is none or it cannot be
    trusted (then a CacheWarning says why, and it is deleted when it is ours). `aligned`:
    the payload as a 64-byte aligned NumPy uint8 array read straight into place (large
    entries: arrays viewed in it need no copy), else bytes."""
    path = entry_path(kind, key)
    if path is None:
        return None
    dir_fd = _open_directory(path.parent, create=False)
    if dir_fd is None:
        return None
    try:
        return _load_from(dir_fd, path, kind, key, aligned)
    finally:
        os.close(dir_fd)


def _load_from(dir_fd: int, path: Path, kind: str, key: str, aligned: bool = False):
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        problem = "a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
        _reject(dir_fd, path, problem)
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
            # another process replaced (or evicted) the entry between our open and fstat: a
            # miss, not damage; the name may already hold the other process's good entry
            return None
        problem = _entry_problem(st)
        if problem is None:
            raw = _read_aligned(fd, st.st_size) if aligned else _read_all(fd, st.st_size)
            problem = _damage(memoryview(raw), kind, key)
        if problem is None:
            try:
                os.utime(fd)   # the entry's time is its last use: eviction goes oldest first
            except OSError:
                pass
            return raw[_HEADER.size:]
    finally:
        os.close(fd)
    if problem == _OLD_FORMAT:
        _remove(dir_fd, path)
        return None
    _reject(dir_fd, path, problem, st)
    return None


def _remove(dir_fd: int, path: Path) -> bool:
    try:
        os.unlink(path.name, dir_fd=dir_fd)
        return True
    except OSError:
        return False


def discard(kind: str, key: str, problem: str) -> None:
    """Delete the entry (kind, key) that its user found unusable, with a CacheWarning."""
    path = entry_path(kind, key)
    dir_fd = None if path is None else _open_directory(path.parent, create=False)
    if dir_fd is not None:
        try:
            _reject(dir_fd, path, problem)
        finally:
            os.close(dir_fd)


def _entry_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    problem = _unsafe(st, "the entry")
    if problem is not None:
        return problem
    if st.st_nlink != 1:
        return f"{st.st_nlink} hard links to it"
    if st.st_size > _HEADER.size + max_bytes():
        return f"{st.st_size} bytes, above the cache's size limit"
    return None


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], size + 1   # one byte more than fstat said: a file that grew is caught
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_aligned(fd: int, size: int):
    """The file's bytes in a 64-byte aligned array (the header is 128 bytes, so the payload
    is aligned too), read into place; one byte more is asked for, so a file that grew shows."""
    import numpy as np

    from .memory import aligned_empty
    raw = aligned_empty(size + 1, np.uint8)
    view, at = memoryview(raw), 0
    while at < size + 1:
        n = os.readv(fd, [view[at:]])
        if n == 0:
            break
        at += n
    return raw[:at]


def _reject(dir_fd: int, path: Path, problem: str, st: os.stat_result | None = None) -> None:
    """Report an entry that cannot be used; delete it when it is ours."""
    try:
        st = st if st is not None else os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        ours = st.st_uid == os.geteuid() and not stat.S_ISDIR(st.st_mode)
    except OSError:
        ours = False
    if ours:
        ours = _remove(dir_fd, path)
    _warn(f"ignoring {path}: {problem}; {'deleted it and ' if ours else ''}compiling again", stacklevel=4)


_OLD_FORMAT = "written by an earlier version"


def _damage(raw: bytes, kind: str, key: str) -> str | None:
    """What is wrong with an entry's bytes (for this kind and key), or None."""
    if bytes(raw[:8]) in OLD_MAGICS:
        return _OLD_FORMAT
    if len(raw) < _HEADER.size:
        return f"damaged ({len(raw)} bytes, shorter than the header)"
    magic, stored_kind, stored_key, length, digest = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        return "damaged (not a pyxla cache entry of this format)"
    if stored_kind.rstrip(b"\0") != kind.encode()[:16] or stored_key.rstrip(b"\0") != key.encode()[:64]:
        return "its header names another entry (copied over this one?)"
    if len(raw) - _HEADER.size != length:
        return f"damaged (payload of {len(raw) - _HEADER.size} bytes where the header says {length})"
    if hashlib.sha256(memoryview(raw)[_HEADER.size:]).digest() != digest:
        return "damaged (checksum mismatch)"
    return None


def store(kind: str, key: str, payload) -> bool:
    """Keep `payload` (bytes, or a list of bytes-like parts written one after another) under
    (kind, key), then evict the least recently used entries past the size limit; whether it
    was kept. A cache that cannot be written is skipped with one CacheWarning per directory
    and process."""
    parts = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else list(payload)
    length = sum(memoryview(p).nbytes for p in parts)
    path = entry_path(kind, key)
    if path is None or length > max_bytes():
        return False
    dir_fd = _open_directory(path.parent, create=True)
    if dir_fd is None:
        return False
    try:
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEADER.pack(MAGIC, kind.encode()[:16], key.encode()[:64], length, digest.digest()))
                for part in parts:
                    f.write(part)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        _account(dir_fd, path.parent, path.name, _HEADER.size + length)
        return True
    except OSError as e:
        _warn_once("unwritable", path.parent, f"cannot write to {path.parent} ({e}); set PYXLA_CACHE_DIR to a "
                   "writable directory, or to nothing to turn the cache off")
        return False
    finally:
        os.close(dir_fd)


@dataclass
class Entry:
    name: str
    size: int
    last_used: float


def _entries(dir_fd: int) -> list[Entry]:
    """The cache's entries (regular files of ours named as entries), by name."""
    found = []
    for name in os.listdir(dir_fd):
        if not name.endswith(SUFFIX) or name.startswith("."):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            found.append(Entry(name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda e: e.name)


# folder -> (bytes of its entries when last listed plus those stored since, stores since)
_known_bytes: dict[Path, tuple[int, int]] = {}
RELIST_EVERY = 64   # stores into a folder between listings (to see other processes' entries)


def _account(dir_fd: int, folder: Path, name: str, size: int) -> None:
    """After an entry of `size` bytes was stored: evict when the folder may have outgrown
    the size limit. Listing the folder stats every entry (tens of milliseconds for a few
    thousand), so it is listed on the first store into it in this process, when the bytes
    known since pass the limit, and every RELIST_EVERY stores, not on every store."""
    known = _known_bytes.get(folder)
    if known is not None and known[1] < RELIST_EVERY and known[0] + size <= max_bytes():
        _known_bytes[folder] = (known[0] + size, known[1] + 1)
        return
    _known_bytes[folder] = (evict(dir_fd, folder, keep=name)[1], 0)


def evict(dir_fd: int, folder: Path, keep: str | None = None) -> tuple[list[str], int]:
    """Delete the least recently used entries until the rest fit the size limit (never
    `keep`, the entry just written); (the names deleted, the bytes of those left)."""
    entries = _entries(dir_fd)
    total, limit, gone = sum(e.size for e in entries), max_bytes(), []
    for entry in sorted(entries, key=lambda e: e.last_used):
        if total <= limit:
            break
        if entry.name == keep:
            continue
        try:
            os.unlink(entry.name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass   # another process evicted it first
        total -= entry.size
        gone.append(entry.name)
    return gone, total


def info() -> dict:
    """The cache's directory, limit, and its entries' count and bytes per kind."""
    folder = cache_directory()
    summary: dict = {"directory": str(folder) if folder else None, "max_bytes": max_bytes(), "entries": 0,
                     "bytes": 0, "kinds": {}}
    dir_fd = None if folder is None else _open_directory(folder, create=False)
    if dir_fd is None:
        summary["usable"] = folder is not None and not folder.exists()
        return summary
    try:
        summary["usable"] = True
        for entry in _entries(dir_fd):
            kind = entry.name[:-len(SUFFIX)].rsplit("-", 1)[0]
            counts = summary["kinds"].setdefault(kind, {"entries": 0, "bytes": 0})
            counts["entries"] += 1
            counts["bytes"] += entry.size
            summary["entries"] += 1
            summary["bytes"] += entry.size
    finally:
        os.close(dir_fd)
    return summary


def clear() -> int:
    """Delete every entry (and leftover temporary file) of ours; the number of entries deleted."""
    folder = cache_directory()
    dir_fd = None if folder is None else _open_directory(folder, create=False)
    if dir_fd is None:
        return 0
    _known_bytes.pop(folder, None)
    try:
        entries = _entries(dir_fd)
        for entry in entries:
            try:
                os.unlink(entry.name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
        for name in os.listdir(dir_fd):
            if name.startswith(".") and name.endswith(".tmp"):
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except OSError:
                    pass
        return len(entries)
    finally:
        os.close(dir_fd)
