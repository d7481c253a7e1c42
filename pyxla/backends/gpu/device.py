"""The CUDA driver API through NVIDIA's Python bindings (`cuda-bindings`, the `[gpu]` extra):
a context on device 0, modules loaded from PTX (the driver compiles them for the GPU it
has), device memory, copies and launches on one stream. Every failure is a GpuError naming
what was being done (and the kernel, for a launch)."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...errors import PyxlaError


class GpuError(PyxlaError):
    """The CUDA driver refused something."""


_lock = threading.Lock()
_device: Device | None = None


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise GpuError("the gpu backend needs NVIDIA's cuda-bindings (pip install 'pyxla[gpu]') "
                       f"and a CUDA driver: {e}") from None
    return driver


class Device:
    """Device 0's primary context and a stream."""

    def __init__(self):
        self.cu = _driver()
        self._check(self.cu.cuInit(0), "initialising CUDA")
        dev = self._check(self.cu.cuDeviceGet(0), "opening device 0")
        self.context = self._check(self.cu.cuDevicePrimaryCtxRetain(dev), "creating a context")
        self.set_current()
        self.stream = self._check(self.cu.cuStreamCreate(0), "creating a stream")
        name = self._check(self.cu.cuDeviceGetName(256, dev), "reading the device name")
        self.name = bytes(name).split(b"\0", 1)[0].decode()

    def _check(self, result: Any, doing: str) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, text = self.cu.cuGetErrorString(err)
            raise GpuError(f"CUDA error while {doing}: {err.name} ({text.decode() if text else ''})")
        return rest[0] if len(rest) == 1 else (rest or None)

    def set_current(self) -> None:
        self._check(self.cu.cuCtxSetCurrent(self.context), "making the context current")

    def load(self, ptx: str) -> Any:
        return self._check(self.cu.cuModuleLoadData(ptx.encode() + b"\0"), "loading PTX")

    def function(self, module: Any, name: str) -> Any:
        return self._check(self.cu.cuModuleGetFunction(module, name.encode()), f"finding kernel {name}")

    def alloc(self, nbytes: int) -> int:
        return int(self._check(self.cu.cuMemAlloc(max(1, nbytes)), f"allocating {nbytes} bytes"))

    def free(self, pointer: int) -> None:
        self._check(self.cu.cuMemFree(pointer), "freeing device memory")

    def upload(self, pointer: int, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes:
            self._check(self.cu.cuMemcpyHtoDAsync(pointer, array.ctypes.data, array.nbytes, self.stream),
                        "copying to the device")
            self.synchronize()

    def download(self, pointer: int, out: np.ndarray) -> None:
        if out.nbytes:
            self._check(self.cu.cuMemcpyDtoHAsync(out.ctypes.data, pointer, out.nbytes, self.stream),
                        "copying from the device")
            self.synchronize()

    def launch(self, function: Any, name: str, grid: tuple[int, int], pointers: list[int]) -> None:
        values = np.array(pointers, dtype=np.uint64)
        params = np.array([values.ctypes.data + 8 * i for i in range(len(pointers))], dtype=np.uint64)
        blocks, threads = grid
        self._check(self.cu.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, self.stream,
                                           params.ctypes.data, 0), f"launching kernel {name}")

    def synchronize(self) -> None:
        self._check(self.cu.cuStreamSynchronize(self.stream), "waiting for the stream")


def device() -> Device:
    """The process's device (created on first use)."""
    global _device
    with _lock:
        if _device is None:
            _device = Device()
        _device.set_current()
        return _device
