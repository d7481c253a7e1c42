"""Device memory for the GPU backends, one object per backend in a process: `gpu-sim`'s is
host memory (NumPy byte arrays), `gpu`'s the GPU's through the CUDA driver (device.py).
Executables, device arrays and device_put all go through it, so the same code runs on both.

A Buffer is a span of that memory: an allocation of its own, alive while some Buffer or
device array refers to it, or a view of an executable's arena (`arena` set), which the next
call reuses and which must therefore never reach a caller. Work is ordered by streams (one
per executable on the GPU; gpu-sim runs everything at once, so its streams and markers are
None); a marker recorded after an executable's launches says when its results are ready.

Each memory counts its host<->device copies (`uploads`, `downloads` and their bytes) and its
allocations, which is how tests check that chained calls keep their data on the device and
that a call allocates only its parameters and outputs.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

ALIGNMENT = 256


class Buffer:
    """`nbytes` of device memory at `address`; `owner` keeps it allocated."""

    __slots__ = ("address", "nbytes", "owner", "arena")

    def __init__(self, address: int, nbytes: int, owner: Any, arena: Any = None):
        self.address = address
        self.nbytes = nbytes
        self.owner = owner
        self.arena = arena

    def view(self, offset: int, nbytes: int, arena: Any = None) -> Buffer:
        return Buffer(self.address + offset, nbytes, self.owner, arena)


class Memory:
    """What both memories share: the copy counters."""

    name = ""

    def __init__(self) -> None:
        self.uploads = self.downloads = self.upload_bytes = self.download_bytes = self.allocations = 0

    def counts(self) -> dict[str, int]:
        return {"uploads": self.uploads, "downloads": self.downloads, "allocations": self.allocations,
                "upload_bytes": self.upload_bytes, "download_bytes": self.download_bytes}

    # what each memory provides
    def alloc(self, nbytes: int, stream: Any = None) -> Buffer:
        raise NotImplementedError

    def upload(self, data: np.ndarray, stream: Any = None) -> Buffer:
        raise NotImplementedError

    def download(self, buffer: Buffer, nbytes: int, stream: Any = None) -> np.ndarray:
        raise NotImplementedError

    def copy(self, dst: Buffer, src: Buffer, nbytes: int, stream: Any = None) -> None:
        raise NotImplementedError

    def new_stream(self) -> Any:
        raise NotImplementedError

    def record(self, stream: Any, what: str) -> Any:
        raise NotImplementedError

    def wait(self, stream: Any, marker: Any) -> None:
        raise NotImplementedError

    def synchronize(self, marker: Any) -> None:
        raise NotImplementedError

    def _counted_upload(self, nbytes: int) -> None:
        self.uploads += 1
        self.upload_bytes += nbytes

    def _counted_download(self, nbytes: int) -> None:
        self.downloads += 1
        self.download_bytes += nbytes


class SimMemory(Memory):
    """gpu-sim's device memory: host byte arrays, aligned as the GPU's."""

    name = "gpu-sim"

    def alloc(self, nbytes: int, stream: Any = None) -> Buffer:
        self.allocations += 1
        raw = np.empty(max(1, nbytes) + ALIGNMENT, np.uint8)
        start = -raw.ctypes.data % ALIGNMENT
        owned = raw[start:start + max(1, nbytes)]
        return Buffer(owned.ctypes.data, nbytes, owned)

    def upload(self, data: np.ndarray, stream: Any = None) -> Buffer:
        data = np.ascontiguousarray(data)
        buffer = self.alloc(data.nbytes)
        ctypes.memmove(buffer.address, data.ctypes.data, data.nbytes)
        self._counted_upload(data.nbytes)
        return buffer

    def download(self, buffer: Buffer, nbytes: int, stream: Any = None) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        ctypes.memmove(out.ctypes.data, buffer.address, nbytes)
        self._counted_download(nbytes)
        return out

    def copy(self, dst: Buffer, src: Buffer, nbytes: int, stream: Any = None) -> None:
        ctypes.memmove(dst.address, src.address, nbytes)

    def new_stream(self) -> Any:
        return None

    def record(self, stream: Any, what: str) -> Any:
        return None

    def wait(self, stream: Any, marker: Any) -> None:
        pass

    def synchronize(self, marker: Any) -> None:
        pass


class _Allocation:
    """Device memory freed when the last Buffer referring to it goes."""

    __slots__ = ("device", "pointer")

    def __init__(self, device: Any, pointer: int):
        self.device = device
        self.pointer = pointer

    def __del__(self) -> None:
        try:
            self.device.free(self.pointer)
        except Exception:   # the driver is gone (interpreter exit): nothing left to free
            pass


class DeviceMemory(Memory):
    """The GPU's memory through the CUDA driver. Freeing (cuMemFree) waits for the work that
    may still read the memory."""

    name = "gpu"

    def __init__(self) -> None:
        super().__init__()
        from .device import device
        self.device = device()

    def alloc(self, nbytes: int, stream: Any = None) -> Buffer:
        self.allocations += 1
        pointer = self.device.alloc(nbytes)
        return Buffer(pointer, nbytes, _Allocation(self.device, pointer))

    def upload(self, data: np.ndarray, stream: Any = None) -> Buffer:
        data = np.ascontiguousarray(data)
        buffer = self.alloc(data.nbytes)
        self.device.upload(buffer.address, data, stream)
        self._counted_upload(data.nbytes)
        return buffer

    def download(self, buffer: Buffer, nbytes: int, stream: Any = None) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        self.device.download(buffer.address, out, stream)
        self._counted_download(nbytes)
        return out

    def copy(self, dst: Buffer, src: Buffer, nbytes: int, stream: Any = None) -> None:
        self.device.copy(dst.address, src.address, nbytes, stream)

    def new_stream(self) -> Any:
        return self.device.new_stream()

    def record(self, stream: Any, what: str) -> Any:
        return self.device.record(stream, what)

    def wait(self, stream: Any, marker: Any) -> None:
        if marker is not None:
            self.device.wait(stream, marker)

    def synchronize(self, marker: Any) -> None:
        if marker is not None:
            self.device.wait_for(marker)


_lock = threading.Lock()
_memories: dict[str, Memory] = {}


def memory_for(backend: str) -> Memory:
    """The process's memory of `backend` ('gpu' or 'gpu-sim'), made on first use."""
    if backend not in ("gpu", "gpu-sim"):
        raise ValueError(f"no GPU memory for {backend!r}: expected 'gpu' or 'gpu-sim'")
    with _lock:
        if backend not in _memories:
            _memories[backend] = SimMemory() if backend == "gpu-sim" else DeviceMemory()
        return _memories[backend]
