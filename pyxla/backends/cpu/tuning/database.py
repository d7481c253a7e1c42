"""The per-machine tuning database: the winners `pyxla tune` (or PYXLA_AUTOTUNE=1) measured
on this machine, by kernel, kept as one entry of the on-disk cache (runtime/disk_cache.py,
kind "tuning", keyed by the machine's identity), so it is written and read under the
cache's rules: a temporary file fsync'd and renamed into place, opened without following
links, owned by this user and not writable by others, checked against its SHA-256.

The payload is JSON:

    {"format": "pyxla-tuning-1", "machine": {...machine.identity()...},
     "kernels": {kernel key: {"params": {...}, "route": ..., "seconds": ...,
                              "default_seconds": ..., "program": ...}}}

Anything unusable (damaged, another format, another machine's identity, a malformed
entry) is a CacheWarning and the defaults are used; nothing in it is ever executed, it
only chooses among the emitters' parameters, each checked as it is read (params.from_json).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ....runtime import disk_cache
from ....runtime.disk_cache import CacheWarning
from . import machine
from .params import Params, from_json, to_json

KIND = "tuning"
FORMAT = "pyxla-tuning-1"


@dataclass
class Record:
    params: Params
    route: str = ""
    seconds: float | None = None            # the program's time with this choice, when measured
    default_seconds: float | None = None    # ... and with the defaults, back to back
    program: str = ""                       # where it was measured (a workload's or a file's name)

    def to_json(self) -> dict:
        return {"params": to_json(self.params), "route": self.route, "seconds": self.seconds,
                "default_seconds": self.default_seconds, "program": self.program}


@dataclass
class Database:
    machine: dict
    kernels: dict[str, Record] = field(default_factory=dict)

    def payload(self) -> bytes:
        return json.dumps({"format": FORMAT, "machine": self.machine,
                           "kernels": {k: r.to_json() for k, r in sorted(self.kernels.items())}},
                          sort_keys=True, indent=1).encode()


def key(identity: dict | None = None) -> str:
    return disk_cache.make_key(FORMAT, json.dumps(identity or machine.identity(), sort_keys=True))


def path():
    """Where this machine's database is (None when the cache is off)."""
    return disk_cache.entry_path(KIND, key())


def _warn(message: str) -> None:
    import warnings
    warnings.warn(f"pyxla tuning database: {message}; using the default parameters", CacheWarning, stacklevel=4)


def parse(payload: bytes, identity: dict) -> Database:
    """The database in `payload`; ValueError saying what is wrong with it."""
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} database")
    if data.get("machine") != identity:
        raise ValueError("it was measured on another machine")
    kernels = data.get("kernels")
    if not isinstance(kernels, dict):
        raise ValueError("no table of kernels")
    db = Database(identity)
    for name, entry in kernels.items():
        if not isinstance(entry, dict):
            raise ValueError(f"kernel {name!r}: not a record")
        seconds, default = entry.get("seconds"), entry.get("default_seconds")
        if not all(s is None or isinstance(s, (int, float)) for s in (seconds, default)):
            raise ValueError(f"kernel {name!r}: times are not numbers")
        db.kernels[name] = Record(from_json(entry.get("params")), str(entry.get("route", "")), seconds, default,
                                  str(entry.get("program", "")))
    return db


def load() -> Database:
    """This machine's database; an empty one when there is none or it cannot be used (then
    a CacheWarning says why)."""
    identity = machine.identity()
    payload = disk_cache.load(KIND, key(identity))
    if payload is None:
        return Database(identity)
    try:
        return parse(payload, identity)
    except ValueError as e:
        _warn(str(e))
        return Database(identity)


def store(db: Database) -> None:
    disk_cache.store(KIND, key(db.machine), db.payload())


def stamp() -> tuple | None:
    """What changes when the database file does (for the process's copy), or None."""
    p = path()
    if p is None:
        return None
    try:
        st = os.stat(p, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
