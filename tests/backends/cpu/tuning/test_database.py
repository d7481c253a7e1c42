"""The tuning database: round trip, machine identity in its key, damaged or foreign files."""
import json
import warnings

import pytest

from pyxla.backends.cpu.tuning import database, machine, selection
from pyxla.backends.cpu.tuning.database import Database, Record
from pyxla.backends.cpu.tuning.params import ConvParams, GemmParams
from pyxla.runtime.disk_cache import CacheWarning


def _db():
    db = Database(machine.identity())
    db.kernels["dot f32 batch=1 m=128 n=96 k=256 a=n b=n"] = Record(GemmParams(kc=256, blocks_per_thread=1),
                                                                      "gemm", 0.001, 0.002, "test")
    db.kernels["convolution x"] = Record(ConvParams(route="tiles", positions=5), "tiles", None, None, "test")
    return db


def test_round_trip():
    database.store(_db())
    back = database.load()
    assert back.machine == machine.identity()
    assert back.kernels == _db().kernels
    assert database.path().exists()


def test_no_database_is_the_defaults_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert database.load().kernels == {}
        assert selection.current().kernels == {}


def test_key_includes_the_machine_identity():
    identity = machine.identity()
    assert {"cpu_model", "llvm_cpu", "features", "threads", "cores", "caches"} <= set(identity)
    keys = {database.key(identity)}
    for field, other in (("cpu_model", "another CPU"), ("features", identity["features"] + ",+other"),
                         ("threads", identity["threads"] + 1), ("caches", {"L1": 1})):
        keys.add(database.key({**identity, field: other}))
    assert len(keys) == 5


def _overwrite_payload(payload: bytes):
    """Store `payload` as this machine's database entry (as valid a file as disk_cache writes)."""
    from pyxla.runtime import disk_cache
    disk_cache.store(database.KIND, database.key(), payload)


@pytest.mark.parametrize("payload", [b"\xff not json", b"[]", json.dumps({"format": "other"}).encode(),
                                     json.dumps({"format": database.FORMAT, "machine": {"cpu_model": "elsewhere"},
                                                 "kernels": {}}).encode()])
def test_unusable_payload_is_a_warning_and_the_defaults(payload):
    if b"machine" in payload:   # a whole database, but another machine's identity
        data = json.loads(payload)
        data["machine"] = {**machine.identity(), "cpu_model": "elsewhere"}
        payload = json.dumps(data).encode()
    _overwrite_payload(payload)
    with pytest.warns(CacheWarning, match="tuning database"):
        assert database.load().kernels == {}


def test_malformed_entry_is_a_warning_and_the_defaults():
    data = json.loads(_db().payload())
    data["kernels"]["convolution x"]["params"] = {"kind": "conv", "positions": "many"}
    _overwrite_payload(json.dumps(data).encode())
    with pytest.warns(CacheWarning, match="tuning database"):
        assert selection.current().kernels == {}


def test_damaged_file_is_a_warning_and_the_defaults():
    database.store(_db())
    path = database.path()
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF   # a flipped byte in the payload: its SHA-256 no longer holds
    path.write_bytes(bytes(raw))
    with pytest.warns(CacheWarning):
        assert database.load().kernels == {}
