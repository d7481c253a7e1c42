"""gpu-sim: the GPU backend's kernels compiled for the host and run over their launch grid,
every thread in turn, on NumPy buffers. The kernels are the same bodies the NVPTX wrappers
call (kernels.py), so their index arithmetic, grid-stride loops and elemental code are
tested on machines without a GPU."""
from __future__ import annotations

import ctypes

import numpy as np

from ..cpu.runtime.llvm_jit import host_jit

_SIM_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)


class SimKernels:
    """The host wrappers of a kernel module, loaded into the host's JIT."""

    def __init__(self, ir_text: str, names: list[str]):
        compiled = host_jit().compile(ir_text, functions=tuple(names))
        self.functions = {name: _SIM_KERNEL(compiled.addresses[name]) for name in names}

    def launch(self, name: str, threads: int, buffers: list[np.ndarray]) -> None:
        argv = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
        self.functions[name](ctypes.addressof(argv), threads)
