"""The ONNX load index: what a warm process needs to run a model it has compiled before,
found before anything is imported or traced (docs/cache.md#the-onnx-load-index).

Two kinds of entries in the disk cache (runtime/disk_cache.py, same directory, same
trust rules):

- "onnx-model", keyed by the SHA-256 of the model's bytes, the load options (backend,
  check) and what decides the optimised module besides the model (pyxla's version and
  source hash, the PYXLA_* settings): the model loaded and checked with this pyxla, and the
  inputs it compiles for by value. When it is present `load` skips onnx.checker and the
  graph walk's checks (the same bytes passed them with the same code).
- "onnx-call", keyed by the model entry's key and the input signature (each input's
  shape and dtype, and the bytes' hash of an input compiled for by value): the optimised,
  scheduled module's text (parsed again, never imported or optimised again), the parameter
  order, how each weight parameter is made (an initializer, a fill value, or raw bytes kept
  as an "onnx-weights" entry), the constant parameters and how each output is assembled.
  The executable's object code comes from the executable cache under the key its module
  text gives (backends/cpu/runtime/executable_cache.py), so LLVM does not run either.

Entries are JSON and raw bytes, validated on read; anything unexpected is a CacheWarning,
the entry is deleted and the model is imported and compiled as on a cold start.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

import numpy as np

from ...backends.cpu.runtime.executable_cache import source_fingerprint
from ...hlo.types import element_type, from_numpy_dtype
from ...runtime import disk_cache
from ...runtime.memory import aligned_empty

MODEL_KIND = "onnx-model"
CALL_KIND = "onnx-call"
WEIGHTS_KIND = "onnx-weights"
FORMAT = "onnx-index-1"
PROTOBUF_LIMIT = 2 ** 31 - 1     # a larger model cannot be serialised to be hashed: not indexed
# settings that never change the optimised module (where the cache is, what is printed)
_NEUTRAL_SETTINGS = ("PYXLA_CACHE_DIR", "PYXLA_CACHE_MAX_BYTES", "PYXLA_DEBUG")


class BadEntry(ValueError):
    """An index entry that does not hold what this code writes."""


def enabled(backend: str, dynamic: bool) -> bool:
    """Whether the index serves this load: the CPU backend, static shapes, a cache directory,
    and no dump or kernel profile asked for (those need the code compiled here)."""
    return (backend == "cpu" and not dynamic and disk_cache.cache_directory() is not None
            and not os.environ.get("PYXLA_DUMP") and not os.environ.get("PYXLA_PROFILE"))


def model_key(model_bytes: bytes, backend: str, check: bool) -> str:
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PYXLA_") and k not in _NEUTRAL_SETTINGS)
    return disk_cache.make_key(FORMAT, hashlib.sha256(model_bytes).hexdigest(), backend, str(check), repr(settings),
                               str(getattr(sys.modules.get("pyxla"), "__version__", "")), source_fingerprint())


# --- the model entry ------------------------------------------------------------------------

def load_model_entry(key: str) -> dict | None:
    """The model entry's contents ({"static_inputs": [...]}) or None."""
    payload = disk_cache.load(MODEL_KIND, key)
    if payload is None:
        return None
    try:
        meta = json.loads(payload)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise BadEntry("not an entry of this format")
        static = meta["static_inputs"]
        if not isinstance(static, list) or not all(isinstance(n, str) for n in static):
            raise BadEntry("static_inputs is not a list of names")
        return {"static_inputs": static}
    except (ValueError, KeyError, TypeError) as e:
        disk_cache.discard(MODEL_KIND, key, f"unusable ({e})")
        return None


def store_model_entry(key: str, static_inputs) -> None:
    meta = {"format": FORMAT, "static_inputs": sorted(static_inputs)}
    disk_cache.store(MODEL_KIND, key, json.dumps(meta, sort_keys=True).encode())


# --- signatures -----------------------------------------------------------------------------

def _dtype_name(dtype: np.dtype) -> str:
    return f"{dtype.str}/{dtype.name}"


def value_signature(value: Any, by_value: bool) -> Any:
    """An input's part of the signature as JSON: shape and dtype (and the hash of its bytes
    when compiled for by value), a list for a sequence, None for an empty optional."""
    if value is None:
        return None
    if isinstance(value, list):
        return {"sequence": [value_signature(v, by_value) for v in value]}
    sig = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype)}
    if by_value:
        sig["sha256"] = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    return sig


def call_key(model: str, signature: list) -> str:
    return disk_cache.make_key(model, json.dumps(signature, sort_keys=True))


# --- writing a call entry ---------------------------------------------------------------------

def weight_recipe(weight: np.ndarray, initializers: dict[str, np.ndarray], call: str, number: int) -> dict:
    """How to make `weight` again without importing the graph: an initializer with the same
    bytes, one value repeated, or its bytes kept in the cache."""
    base = {"shape": list(weight.shape), "dtype": from_numpy_dtype(weight.dtype).name}
    raw = np.ascontiguousarray(weight).view(np.uint8).reshape(-1)
    for name, init in initializers.items():
        if init.shape == weight.shape and init.dtype == weight.dtype and \
                np.array_equal(np.ascontiguousarray(init).view(np.uint8).reshape(-1), raw):
            return {**base, "initializer": name}
    items = raw.reshape(weight.size, weight.dtype.itemsize) if weight.size else raw.reshape(0, 1)
    if weight.size and (items == items[0]).all():
        return {**base, "fill": items[0].tobytes().hex()}
    key = disk_cache.make_key(call, "weight", str(number))
    disk_cache.store(WEIGHTS_KIND, key, raw.tobytes())
    return {**base, "stored": key}


def output_recipe(layout: Any) -> Any:
    kind = layout[0]
    if kind == "traced":
        return ["traced", int(layout[1])]
    if kind == "none":
        return ["none"]
    if kind == "sequence":
        return ["sequence", [output_recipe(item) for item in layout[1]]]
    array = np.asarray(layout[1])
    return ["known", {"shape": list(array.shape), "dtype": from_numpy_dtype(array.dtype).name,
                      "bytes": np.ascontiguousarray(array).tobytes().hex()}]


def store_call_entry(key: str, signature: list, module_text: str, traced_inputs, first: int,
                     weights: list[dict], outputs: dict[str, Any]) -> None:
    meta = {"format": FORMAT, "signature": signature, "traced_inputs": [[n, i] for n, i in traced_inputs],
            "first_weight": first, "weights": weights,
            "outputs": {name: output_recipe(layout) for name, layout in outputs.items()}}
    header = json.dumps(meta, sort_keys=True).encode()
    disk_cache.store(CALL_KIND, key, len(header).to_bytes(8, "little") + header + module_text.encode())


# --- reading a call entry ---------------------------------------------------------------------

def load_call_entry(key: str, signature: list, output_names: list[str]) -> tuple[dict, str] | None:
    """(metadata, module text) of the call entry, validated, or None."""
    payload = disk_cache.load(CALL_KIND, key)
    if payload is None:
        return None
    try:
        length = int.from_bytes(payload[:8], "little")
        if length > len(payload) - 8:
            raise BadEntry("its metadata runs past the entry")
        meta = json.loads(payload[8:8 + length])
        text = payload[8 + length:].decode()
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise BadEntry("not an entry of this format")
        if meta["signature"] != signature:
            raise BadEntry("it is for another input signature")
        if sorted(meta["outputs"]) != sorted(output_names):
            raise BadEntry("it is for other outputs")
        traced = [(str(n), None if i is None else int(i)) for n, i in meta["traced_inputs"]]
        if int(meta["first_weight"]) != len(traced) or not isinstance(meta["weights"], list):
            raise BadEntry("its parameters do not add up")
        meta["traced_inputs"] = traced
        return meta, text
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        disk_cache.discard(CALL_KIND, key, f"unusable ({e})")
        return None


def make_weight(recipe: dict, initializer) -> np.ndarray:
    """The weight a recipe describes, 64-byte aligned; `initializer(name)` gives an
    initializer's array. A BadEntry when the recipe cannot be followed."""
    dtype = element_type(recipe["dtype"]).np_dtype
    shape = tuple(int(d) for d in recipe["shape"])
    if any(d < 0 for d in shape):
        raise BadEntry("a weight of negative size")
    out = aligned_empty(shape, dtype)
    if "initializer" in recipe:
        init = initializer(recipe["initializer"])
        if init is None or init.shape != shape or init.dtype != dtype:
            raise BadEntry(f"initializer {recipe['initializer']!r} is not the weight it describes")
        out[...] = init
    elif "fill" in recipe:
        item = bytes.fromhex(recipe["fill"])
        if len(item) != dtype.itemsize:
            raise BadEntry("a fill value of the wrong size")
        out.reshape(-1).view(np.uint8).reshape(-1, dtype.itemsize)[...] = np.frombuffer(item, np.uint8)
    else:
        raw = disk_cache.load(WEIGHTS_KIND, str(recipe["stored"]))
        if raw is None or len(raw) != out.nbytes:
            raise BadEntry("a kept weight is missing or of the wrong size")
        out.reshape(-1).view(np.uint8)[...] = np.frombuffer(raw, np.uint8)
    return out


def make_output_layout(recipe: Any) -> Any:
    """An output recipe back as onnx_model's layout tuple."""
    kind = recipe[0]
    if kind == "traced":
        return ("traced", int(recipe[1]))
    if kind == "none":
        return ("none",)
    if kind == "sequence":
        return ("sequence", [make_output_layout(item) for item in recipe[1]])
    if kind == "known":
        spec = recipe[1]
        dtype = element_type(spec["dtype"]).np_dtype
        return ("known", np.frombuffer(bytes.fromhex(spec["bytes"]), dtype).reshape(spec["shape"]).copy())
    raise BadEntry(f"an output of kind {kind!r}")
