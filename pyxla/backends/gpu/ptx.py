"""PTX from a kernel module through LLVM's NVPTX target (llvmlite ships it): the module is
optimised at O3 for the GPU architecture and printed as PTX, which the CUDA driver compiles
to machine code when it loads it (and `ptxas -arch=sm_90` checks without a GPU)."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import llvmlite.binding as llvm

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"
PTX_VERSION = "+ptx80"   # PTX ISA 8.0: what sm_90 needs at least; CUDA 12 drivers and later load it

_lock = threading.Lock()
_machines: dict[str, llvm.TargetMachine] = {}


def architecture() -> str:
    """The GPU architecture PTX is made for: PYXLA_GPU_ARCH (sm_80, sm_90, ...), else sm_90."""
    arch = os.environ.get("PYXLA_GPU_ARCH", DEFAULT_ARCH)
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ValueError(f"PYXLA_GPU_ARCH={arch!r}: expected an architecture such as sm_80 or sm_90")
    return arch


def _target_machine(arch: str) -> llvm.TargetMachine:
    with _lock:
        if arch not in _machines:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _machines[arch] = llvm.Target.from_triple(TRIPLE).create_target_machine(
                cpu=arch, features=PTX_VERSION, opt=3)
        return _machines[arch]


# The C library functions the elemental emitter calls, as libdevice names them.
LIBDEVICE_NAMES = {"cbrtf": "__nv_cbrtf", "cbrt": "__nv_cbrt", "fmodf": "__nv_fmodf", "fmod": "__nv_fmod"}


def libdevice_path() -> Path:
    """CUDA's libdevice bitcode: PYXLA_LIBDEVICE, else under CUDA_HOME or /usr/local/cuda."""
    explicit = os.environ.get("PYXLA_LIBDEVICE")
    if explicit:
        return Path(explicit)
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    return home / "nvvm" / "libdevice" / "libdevice.10.bc"


def _with_libdevice(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """`module` linked with libdevice when it calls a C library function, those functions
    then internal so the optimiser drops what no kernel calls."""
    path = libdevice_path()
    if not path.is_file():
        raise FileNotFoundError(f"the kernels call {sorted(LIBDEVICE_NAMES)}-style C library functions, which "
                                f"the GPU takes from CUDA's libdevice, not found at {path} (set PYXLA_LIBDEVICE)")
    kernels = {f.name for f in module.functions if not f.is_declaration}
    module.link_in(llvm.parse_bitcode(path.read_bytes()))
    for f in module.functions:
        if not f.is_declaration and f.name not in kernels:
            f.linkage = llvm.Linkage.internal
    return module


def compile_ptx(ir_text: str, arch: str | None = None) -> str:
    """PTX for the kernels of `ir_text` (a module without a triple: it is set here)."""
    tm = _target_machine(arch or architecture())
    calls = [name for name in LIBDEVICE_NAMES if re.search(rf'@"?{name}"?\(', ir_text)]
    for name in calls:   # (llvmlite quotes the names it prints)
        ir_text = re.sub(rf'@"?{name}"?\(', f"@{LIBDEVICE_NAMES[name]}(", ir_text)
    module = llvm.parse_assembly(ir_text)
    module.triple = TRIPLE
    module.data_layout = str(tm.target_data)
    if calls:
        module = _with_libdevice(module)
    module.verify()
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    with _lock:   # the target machine's code generator is not reentrant
        return tm.emit_assembly(module)
