"""An executable made from the executable cache in a process that has not loaded LLVM: the
ONNX load index's warm path (importers/onnx/load_index.py), which knows the executable's
cache key and how to call it (executable_cache.describe_executable wrote it down).

The executable cache keeps, with an executable's object, the cache entries of the runtime
helpers its code calls (the worker pool, GEMM and GEMV kernels) and of the call shim
(helper_registry.py). Here those objects are read from the cache and loaded by
object_loader.py, without importing llvmlite (whose library alone takes a warm process
20-50 ms to load): each helper once per process, the pool started from its object. Where
that cannot be done (an entry written before helpers were recorded, one missing, an object
the loader does not take) the code is loaded through LLVM instead
(executable_cache.load_native), with the same result.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ....runtime import disk_cache
from . import helper_registry, object_loader, pool_threads
from .call_shim import SHIM_NAME

# the executable cache's entries (executable_cache.py writes them)
KIND = "executable"
FORMAT = "executable-1"
BOUND = "__pyxla_bound."   # prefix of the symbols an object calls the runtime's helpers by


@dataclass
class NativeCode:
    loaded: object               # LoadedCode (LLVM's engine) or LoadedObject (object_loader)
    entry: str
    arena_size: int
    cached: bool                 # loaded from the cache
    optimised_ir: str = ""
    assembly: str | None = None
    key: str | None = None       # its entry's key, when it is (or was just) kept in the cache


def executable_from_description(description: dict):
    """The executable `describe_executable` described, its code loaded from this cache; None
    when the entry is missing or unusable. A ValueError, KeyError or TypeError when the
    description itself is malformed. Its constant parameters with a form must be passed
    as the FormedArgument they were packed into when it was compiled (PackedOnly)."""
    from .executable import CpuExecutable, OutputSlot, PackedOnly
    key, plan = str(description["key"]), description["plan"]
    native = load_without_llvm(key, plan)
    if native is None:
        from .executable_cache import load_native
        from .llvm_jit import host_jit
        native = load_native(host_jit(), key, plan)
    if native is None:
        return None
    outputs = []
    for kind, index, offset, shape, literal in description["slots"]:
        if kind not in ("buffer", "parameter", "constant"):
            raise ValueError(f"an output slot of kind {kind!r}")
        value = None if literal is None else np_array(literal[0], literal[1], shape_from_json(shape))
        outputs.append(OutputSlot(kind, int(index), int(offset), shape_from_json(shape), value))
    sizes = [int(n) for n in description["plan"][-1]]
    parameters = [shape_from_json(p) for p in description["parameters"]]
    forms = {int(n): PackedOnly() for n in description["forms"]}
    if any(not 0 <= n < len(parameters) for n in forms) or any(s.index < 0 for s in outputs):
        raise ValueError("its parameter or output numbers are out of range")
    executable = CpuExecutable(None, native.loaded.addresses[native.entry], outputs, sizes, native.arena_size,
                               native.loaded, forms, parameters, shape_from_json(description["root"]))
    executable.cache_key = native.key
    return executable


def load_without_llvm(key: str, output_plan: list) -> NativeCode | None:
    """The executable cache's entry `key` loaded by object_loader with the helpers it
    records, or None where that cannot be done (the caller then loads it through LLVM)."""
    payload = disk_cache.load(KIND, key)
    if payload is None:
        return None
    try:
        meta, obj = entry_parts(payload, output_plan)
        helpers = meta.get("helpers")
        if not isinstance(helpers, dict):
            return None
        symbols = {}
        for symbol in meta["symbols"]:
            address = _helper(symbol, helpers.get(symbol))
            if address is None:
                return None
            symbols[BOUND + symbol] = address
        if SHIM_NAME not in helper_registry.ADDRESSES and _helper(SHIM_NAME, helpers.get(SHIM_NAME)) is None:
            return None
        loaded = object_loader.load_objects(object_loader.unpack_objects(obj), (meta["entry"],), symbols)
        return NativeCode(loaded, meta["entry"], int(meta["arena_size"]), True, key=key)
    except (object_loader.UnsupportedObject, ValueError, KeyError, TypeError):
        return None   # (load_native reads the entry again and says what is wrong with it)


def entry_parts(payload: bytes, output_plan: list) -> tuple[dict, bytes]:
    """An executable entry's metadata and object; a ValueError when its metadata is not of
    this format or does not hold `output_plan`."""
    length = int.from_bytes(payload[:8], "little")
    meta = json.loads(payload[8:8 + length])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta["outputs"] != output_plan:
        raise ValueError("its metadata does not fit the module")
    return meta, payload[8 + length:]


def _helper(symbol: str, entry) -> int | None:
    """This process's address of helper function `symbol`, loading its cache `entry`
    ([kind, key, functions]) when no helper of that name is loaded yet."""
    if symbol in (pool_threads.PARALLEL_FOR, pool_threads.YIELD_CORES):
        pool, threads = pool_threads.current(), pool_threads.thread_count()
        if pool is None and threads > 1 and entry is not None:
            addresses = _load_helper(entry)
            pool = None if addresses is None else pool_threads.start(addresses, threads)
        if pool is None:
            return None
        return pool.parallel_for if symbol == pool_threads.PARALLEL_FOR else pool.yield_cores
    address = helper_registry.ADDRESSES.get(symbol)
    if address is None and entry is not None:
        address = (_load_helper(entry) or {}).get(symbol)
    return address


def _load_helper(entry) -> dict[str, int] | None:
    kind, key, functions = str(entry[0]), str(entry[1]), tuple(str(f) for f in entry[2])
    obj = disk_cache.load(kind, key)
    if obj is None:
        return None
    loaded = object_loader.load_objects(object_loader.unpack_objects(obj), functions)
    helper_registry.record(kind, key, loaded.addresses, loaded)
    return loaded.addresses


def shape_json(shape):
    from ....hlo.shape import ArrayShape, TupleShape
    if isinstance(shape, TupleShape):
        return {"tuple": [shape_json(e) for e in shape.elements]}
    if isinstance(shape, ArrayShape) and shape.is_static:
        return {"dtype": shape.dtype.name, "dims": [int(d) for d in shape.dims],
                "layout": None if shape.layout is None else list(shape.layout)}
    raise TypeError(f"no description of shape {shape}")


def shape_from_json(data):
    from ....hlo.shape import ArrayShape, TupleShape
    from ....hlo.types import element_type
    if "tuple" in data:
        return TupleShape(tuple(shape_from_json(e) for e in data["tuple"]))
    dims = tuple(int(d) for d in data["dims"])
    if any(d < 0 for d in dims):
        raise ValueError("a negative dimension")
    layout = data["layout"]
    if layout is not None and sorted(int(d) for d in layout) != list(range(len(dims))):
        raise ValueError(f"layout {layout} is not a permutation of the dimensions")
    return ArrayShape(element_type(data["dtype"]), dims, None if layout is None else tuple(layout))


def np_name(array) -> str:
    from ....hlo.types import from_numpy_dtype
    return from_numpy_dtype(array.dtype).name


def np_bytes(array) -> str:
    import numpy as np
    return np.ascontiguousarray(array).tobytes().hex()


def np_array(dtype_name: str, hex_bytes: str, shape):
    import numpy as np

    from ....hlo.types import element_type
    dtype = element_type(dtype_name).np_dtype
    return np.frombuffer(bytes.fromhex(hex_bytes), dtype).reshape(shape.dims).copy()
