"""The ONNX load index: what a warm process needs to run a model it has compiled before,
found before anything is imported, traced or parsed (docs/cache.md#the-onnx-load-index).

Three kinds of entries in the disk cache (runtime/disk_cache.py, same directory, same
trust rules):

- "onnx-model", keyed by the SHA-256 of the model's bytes (the file as given, when it
  keeps no data outside it; else the model serialised with its external data read in),
  the load options (backend, check) and what decides the optimised module besides the
  model (pyxla's version and source hash, the PYXLA_* settings): the model loaded and
  checked with this code, its inputs and outputs as declared, and the inputs it compiles
  for by value. With it `load` neither parses the protobuf nor imports onnx (the model is
  parsed only if a call must trace).
- "onnx-call", keyed by the model entry's key and the input signature (each input's
  shape and dtype, and the bytes' hash of an input compiled for by value): the
  executable's key in the executable cache with its output plan and the parameters' and
  outputs' shapes (backends/cpu/runtime/executable_cache.py: describe_executable), the
  parameter order, how each output is assembled, and each weight parameter as the
  executable takes it (packed into its form): one repeated value, a few runs of values,
  or raw bytes in the call's "onnx-weights" entry.
- "onnx-weights", under the call's key: those raw weights one after another, each at a
  64-byte aligned offset, read straight into place and used where they lie.

A hit is: hash the model, read the model and call entries, load the executable's object,
bind the weights, run; no HLO text is parsed or printed and LLVM does not run. Entries
are JSON and raw bytes, validated on read; anything unexpected is a CacheWarning, the
entry is deleted and the model is imported and compiled as on a cold start.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

import numpy as np

from ...hlo.types import element_type, from_numpy_dtype
from ...runtime import disk_cache
from ...runtime.disk_cache import host_identity, source_fingerprint
from ...runtime.memory import aligned_empty

MODEL_KIND = "onnx-model"
CALL_KIND = "onnx-call"
WEIGHTS_KIND = "onnx-weights"
FORMAT = "onnx-index-2"
RUNS_LIMIT = 64                  # a packed weight of at most this many runs of one value is kept as runs
ALIGN = 64
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


def model_key(model_bytes, backend: str, check: bool) -> str:
    """The model entry's key: the model's bytes (hashed where they lie, no copy), what else
    decides its optimised module, and the machine (the entries name code compiled for it)."""
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PYXLA_") and k not in _NEUTRAL_SETTINGS)
    return disk_cache.make_key(FORMAT, hashlib.sha256(memoryview(model_bytes)).hexdigest(), backend, str(check),
                               repr(settings), host_identity(),
                               str(getattr(sys.modules.get("pyxla"), "__version__", "")), source_fingerprint())


# --- the model entry ------------------------------------------------------------------------

def load_model_entry(key: str) -> dict | None:
    """The model entry's contents ({"static_inputs": [...], "model": {...} or None}) or None.
    "model" (the declared inputs and outputs, onnx_model.describe_model) is there when the
    key is the file's own bytes, so the model need not be parsed."""
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
        model = meta.get("model")
        if model is not None and not isinstance(model, dict):
            raise BadEntry("its model description is not an object")
        return {"static_inputs": static, "model": model}
    except (ValueError, KeyError, TypeError) as e:
        disk_cache.discard(MODEL_KIND, key, f"unusable ({e})")
        return None


def discard_model_entry(key: str, problem: str) -> None:
    disk_cache.discard(MODEL_KIND, key, problem)


def store_model_entry(key: str, static_inputs, model: dict | None = None) -> None:
    meta = {"format": FORMAT, "static_inputs": sorted(static_inputs), "model": model}
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

def weight_recipe(weight: np.ndarray, offset: int) -> tuple[dict, np.ndarray | None]:
    """How to make the (packed) weight again: one value repeated, a few runs of values, or
    its bytes at `offset` of the weights entry; (recipe, the bytes to keep there or None)."""
    base = {"shape": list(weight.shape), "dtype": from_numpy_dtype(weight.dtype).name}
    raw = np.ascontiguousarray(weight).view(np.uint8).reshape(-1)
    width = weight.dtype.itemsize
    if weight.size and width in (1, 2, 4, 8):
        items = raw.view(f"u{width}")
        sample = items[:1 << 16]
        if np.count_nonzero(sample[1:] != sample[:-1]) < RUNS_LIMIT:
            changes = np.flatnonzero(items[1:] != items[:-1])
            if len(changes) < RUNS_LIMIT:
                starts = [0, *(int(c) + 1 for c in changes)]
                return {**base, "runs": [[items[k:k + 1].view(np.uint8).tobytes().hex(), k] for k in starts]}, None
    return {**base, "stored": offset, "nbytes": int(raw.size)}, raw


def store_call_entry(key: str, signature: list, executable: dict, traced_inputs, weights: list,
                     outputs: dict[str, Any]) -> bool:
    """Keep the call entry and its weights entry; `weights` are the arrays (or FormedArguments)
    passed after the traced inputs. False when an entry could not be kept."""
    recipes, parts, offset = [], [], 0
    for w in weights:
        formed = not isinstance(w, np.ndarray)
        recipe, raw = weight_recipe(w.array if formed else w, offset)
        recipes.append({**recipe, "formed": formed})
        if raw is not None:
            pad = -raw.size % ALIGN
            parts += [raw, bytes(pad)]
            offset += raw.size + pad
    if parts and not disk_cache.store(WEIGHTS_KIND, key, parts):
        return False
    meta = {"format": FORMAT, "signature": signature, "traced_inputs": [[n, i] for n, i in traced_inputs],
            "executable": executable, "weights": recipes,
            "outputs": {name: output_recipe(layout) for name, layout in outputs.items()}}
    return disk_cache.store(CALL_KIND, key, json.dumps(meta, sort_keys=True).encode())


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


# --- reading a call entry ---------------------------------------------------------------------

def load_call_entry(key: str, signature: list, output_names: list[str]) -> dict | None:
    """The call entry's metadata, validated, or None."""
    payload = disk_cache.load(CALL_KIND, key)
    if payload is None:
        return None
    try:
        meta = json.loads(payload)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise BadEntry("not an entry of this format")
        if meta["signature"] != signature:
            raise BadEntry("it is for another input signature")
        if sorted(meta["outputs"]) != sorted(output_names):
            raise BadEntry("it is for other outputs")
        meta["traced_inputs"] = [(str(n), None if i is None else int(i)) for n, i in meta["traced_inputs"]]
        if not isinstance(meta["weights"], list) or not isinstance(meta["executable"], dict):
            raise BadEntry("its parameters do not add up")
        return meta
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        disk_cache.discard(CALL_KIND, key, f"unusable ({e})")
        return None


def make_weights(recipes: list[dict], key: str) -> list:
    """The weights the recipes describe, each 64-byte aligned, as the executable takes them
    (a FormedArgument for a packed one); kept bytes are views of the weights entry, read
    once. A BadEntry when a recipe cannot be followed."""
    from ...backends.cpu.runtime.executable import FormedArgument
    kept = None
    if any("stored" in r for r in recipes):
        kept = disk_cache.load(WEIGHTS_KIND, key, aligned=True)
        if kept is None:
            raise BadEntry("its weights entry is missing")
    weights = []
    for recipe in recipes:
        w = make_weight(recipe, kept)
        weights.append(FormedArgument(w) if recipe.get("formed") else w)
    return weights


def make_weight(recipe: dict, kept: np.ndarray | None) -> np.ndarray:
    dtype = element_type(recipe["dtype"]).np_dtype
    shape = tuple(int(d) for d in recipe["shape"])
    if any(d < 0 for d in shape):
        raise BadEntry("a weight of negative size")
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if "stored" in recipe:
        at = int(recipe["stored"])
        if kept is None or at % ALIGN or at < 0 or int(recipe["nbytes"]) != size or at + size > kept.size:
            raise BadEntry("a kept weight lies outside its weights entry or is of the wrong size")
        return kept[at:at + size].view(dtype).reshape(shape)
    out = aligned_empty(shape, dtype)
    runs = recipe["runs"]
    if dtype.itemsize not in (1, 2, 4, 8) or not runs or runs[0][1] != 0 or len(runs) > RUNS_LIMIT:
        raise BadEntry("a weight's runs are not runs of this code")
    items = out.reshape(-1).view(f"u{dtype.itemsize}")      # (filled as unsigned words: bit for bit)
    ends = [int(r[1]) for r in runs[1:]] + [items.size]
    for (value, begin), end in zip(runs, ends):
        item = bytes.fromhex(value)
        if len(item) != dtype.itemsize or not 0 <= int(begin) < end <= items.size:
            raise BadEntry("a weight's run is of the wrong size or out of order")
        items[int(begin):end] = np.frombuffer(item, items.dtype)[0]
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
