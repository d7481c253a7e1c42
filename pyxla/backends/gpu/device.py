"""The CUDA driver API through NVIDIA's Python bindings (`cuda-bindings`, the `[gpu]` extra):
a context on device 0, modules loaded from PTX (the driver compiles them for the GPU it
has), device memory, copies and launches on streams (one per executable, and the device's
own for copies outside any executable), and events that mark when an executable's results
are ready. Every failure is a GpuError naming what was being done (and the kernel, for a
launch; an error a kernel raises shows when its stream is waited for, and names the
executable's last kernel)."""
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
        self.set_current()   # (called when the last reference goes, on any thread)
        self._check(self.cu.cuMemFree(pointer), "freeing device memory")

    def upload(self, pointer: int, array: np.ndarray, stream: Any = None) -> None:
        """Copy `array` to `pointer` after the work queued on `stream` (the device's own when
        None); returns when the copy is done."""
        array = np.ascontiguousarray(array)
        stream = self.stream if stream is None else stream
        if array.nbytes:
            self._check(self.cu.cuMemcpyHtoDAsync(pointer, array.ctypes.data, array.nbytes, stream),
                        "copying to the device")
            self.synchronize(stream)

    def download(self, pointer: int, out: np.ndarray, stream: Any = None) -> None:
        """Copy device memory into `out` after the work queued on `stream`; returns when done."""
        stream = self.stream if stream is None else stream
        if out.nbytes:
            self._check(self.cu.cuMemcpyDtoHAsync(out.ctypes.data, pointer, out.nbytes, stream),
                        "copying from the device")
            self.synchronize(stream)

    def copy(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        """Queue a device-to-device copy on `stream`."""
        if nbytes:
            self._check(self.cu.cuMemcpyDtoDAsync(dst, src, nbytes, self.stream if stream is None else stream),
                        "copying on the device")

    def launch(self, function: Any, name: str, grid: tuple[int, int], pointers: list[int],
               stream: Any = None) -> None:
        values = np.array(pointers, dtype=np.uint64)
        params = np.array([values.ctypes.data + 8 * i for i in range(len(pointers))], dtype=np.uint64)
        blocks, threads = grid
        self._check(self.cu.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0,
                                           self.stream if stream is None else stream,
                                           params.ctypes.data, 0), f"launching kernel {name}")

    def new_stream(self) -> Any:
        """A stream of its own (an executable's): its work is ordered, apart from others'."""
        return self._check(self.cu.cuStreamCreate(1), "creating a stream")   # CU_STREAM_NON_BLOCKING

    def record(self, stream: Any, what: str) -> Event:
        """An event after the work queued on `stream` so far; `what` names that work."""
        event = self._check(self.cu.cuEventCreate(2), "creating an event")   # CU_EVENT_DISABLE_TIMING
        self._check(self.cu.cuEventRecord(event, stream), f"recording the end of {what}")
        return Event(self, event, what)

    def wait(self, stream: Any, event: Event) -> None:
        """Work queued on `stream` from now on starts after `event`."""
        self._check(self.cu.cuStreamWaitEvent(stream, event.handle, 0), f"ordering after {event.what}")

    def wait_for(self, event: Event) -> None:
        """Return when `event`'s work is done (a kernel's failure is raised here, naming it)."""
        self._check(self.cu.cuEventSynchronize(event.handle), f"waiting for {event.what}")

    def synchronize(self, stream: Any = None) -> None:
        self._check(self.cu.cuStreamSynchronize(self.stream if stream is None else stream), "waiting for the stream")


class Event:
    """A CUDA event and the work it follows (for error messages); destroyed with the object."""

    def __init__(self, device: Device, handle: Any, what: str):
        self.device = device
        self.handle = handle
        self.what = what

    def __del__(self) -> None:
        try:
            self.device.cu.cuEventDestroy(self.handle)
        except Exception:   # the driver is gone (interpreter exit)
            pass


def device() -> Device:
    """The process's device (created on first use)."""
    global _device
    with _lock:
        if _device is None:
            _device = Device()
        _device.set_current()
        return _device
