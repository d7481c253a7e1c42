"""What a compiled CPU program runs on: LLVM's JIT for the host (runtime/llvm_jit.py), the executable
and its per-call buffers (runtime/executable.py), the one-foreign-call shim (runtime/call_shim.py), the worker
pool (runtime/parallel.py), per-kernel profiling (runtime/kernel_profile.py) and the forms constant
parameters are taken in (runtime/parameter_forms.py)."""
