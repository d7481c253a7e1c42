"""gpu-sim: the GPU backend's kernels compiled for the host and run over their launch grid
on NumPy buffers (simt.py's host wrappers: blocks in turn, a block's threads as loops split
at barriers and shuffles, shared memory and the threads' locals as host arrays). The phases
are the ones the NVPTX kernels call, so their index arithmetic, shared-memory code and
reduction trees are tested on machines without a GPU."""
from __future__ import annotations

import ctypes

import numpy as np

from ..cpu.runtime.llvm_jit import host_jit
from .simt import Launch

_SIM_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
GARBAGE = 0xA5   # shared memory and locals start as this, not zeros: a read before a write shows


class SimKernels:
    """The host wrappers of a kernel module, loaded into the host's JIT."""

    def __init__(self, ir_text: str, names: list[str]):
        # LLVM's O1 pipeline: the emulation's speed matters less than its compile time (the
        # corpus through gpu-sim compiles in about half the time of O3), and the IR's
        # semantics do not depend on the level
        compiled = host_jit().compile(ir_text, functions=tuple(names), speed_level=1)
        self.functions = {name: _SIM_KERNEL(compiled.addresses[name]) for name in names}

    def launch(self, launch: Launch, addresses: list[int]) -> None:
        """Run `launch` over its grid on the buffers at `addresses` (its kernel's arguments)."""
        argv = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
        blocks = launch.sim_blocks or launch.blocks
        shared = np.full(max(16, launch.shared_bytes), GARBAGE, np.uint8)
        local = np.full(launch.threads * launch.local_bytes, GARBAGE, np.uint8)
        self.functions[launch.name](ctypes.addressof(argv), blocks, launch.threads, shared.ctypes.data,
                                    local.ctypes.data)
