"""The device path's streams, events and error messages, against a stand-in for the CUDA
driver (no GPU here): the calls device.py makes and the GpuErrors it raises, and the
executable's own stream and the marker that names its last kernel (through gpu-sim)."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.gpu.device import Device, GpuError
from pyxla.backends.gpu.memory import SimMemory
from pyxla.hlo import parse_module


class _Result:
    def __init__(self, name):
        self.name = name


class FakeDriver:
    """Records every call; the calls named in `failing` return an error."""

    class CUresult:
        CUDA_SUCCESS = _Result("CUDA_SUCCESS")

    def __init__(self, failing=()):
        self.calls = []
        self.failing = set(failing)

    def cuGetErrorString(self, err):
        return self.CUresult.CUDA_SUCCESS, b"an illegal memory access was encountered"

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            if name in self.failing:
                return (_Result("CUDA_ERROR_ILLEGAL_ADDRESS"),)
            return self.CUresult.CUDA_SUCCESS, f"{name}#{len(self.calls)}"
        return call


def fake_device(failing=()):
    dev = Device.__new__(Device)
    dev.cu = FakeDriver(failing)
    dev.stream, dev.context, dev.name = "default-stream", "context", "fake"
    return dev


def test_events_order_streams_and_copies_use_the_stream_given():
    dev = fake_device()
    stream = dev.new_stream()
    assert dev.cu.calls[-1] == ("cuStreamCreate", (1,))
    event = dev.record(stream, "m's kernels (the last: gpu0_3_fusion)")
    assert [c[0] for c in dev.cu.calls[-2:]] == ["cuEventCreate", "cuEventRecord"]
    assert dev.cu.calls[-1][1] == (event.handle, stream)
    other = dev.new_stream()
    dev.wait(other, event)
    assert dev.cu.calls[-1] == ("cuStreamWaitEvent", (other, event.handle, 0))
    dev.copy(1024, 2048, 64, other)
    assert dev.cu.calls[-1] == ("cuMemcpyDtoDAsync", (1024, 2048, 64, other))
    dev.launch("function", "gpu0_1_add", (3, 256), [1024, 2048], other)
    name, args = dev.cu.calls[-1]
    assert name == "cuLaunchKernel" and args[:8] == ("function", 3, 1, 1, 256, 1, 1, 0) and args[8] == other
    dev.download(1024, np.empty(8, np.uint8), other)
    assert [c[0] for c in dev.cu.calls[-2:]] == ["cuMemcpyDtoHAsync", "cuStreamSynchronize"]
    assert dev.cu.calls[-1][1] == (other,)


def test_a_kernel_failure_seen_at_an_event_names_the_kernel():
    dev = fake_device(failing={"cuEventSynchronize"})
    event = dev.record(dev.new_stream(), "m's kernels (the last: gpu0_3_fusion_7)")
    with pytest.raises(GpuError, match=r"waiting for m's kernels \(the last: gpu0_3_fusion_7\).*ILLEGAL_ADDRESS"):
        dev.wait_for(event)


def test_a_failed_launch_names_the_kernel():
    dev = fake_device(failing={"cuLaunchKernel"})
    with pytest.raises(GpuError, match="launching kernel gpu0_2_reduce.*illegal memory access"):
        dev.launch("function", "gpu0_2_reduce", (1, 32), [0], "stream")


class RecordingMemory(SimMemory):
    def __init__(self):
        super().__init__()
        self.streams, self.records = 0, []

    def new_stream(self):
        self.streams += 1
        return f"stream{self.streams}"

    def record(self, stream, what):
        self.records.append((stream, what))
        return None


def test_each_executable_has_its_stream_and_its_marker_names_its_last_kernel(rng):
    backend = get_backend("gpu-sim")
    text = """HloModule streams
ENTRY e {
  x = f32[40] parameter(0)
  ROOT n = f32[40] negate(x)
}
"""
    a, b = backend.compile(parse_module(text)), backend.compile(parse_module(text))
    memory = RecordingMemory()
    for ex in (a, b):
        ex.memory = memory
        ex.stream = memory.new_stream()
    x = rng.standard_normal(40).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(b.run_device([a.run_device([x])[0]])[0]), x)
    (sa, what_a), (sb, what_b) = memory.records
    assert (sa, sb) == ("stream1", "stream2")
    assert "streams's kernels (the last: gpu" in what_a and what_a.endswith("_n)")
