"""What a compiled CPU program runs on: LLVM's JIT for the host (llvm_jit.py), the executable
and its per-call buffers (executable.py), the one-foreign-call shim (call_shim.py), the worker
pool (parallel.py), per-kernel profiling (kernel_profile.py) and the forms constant
parameters are taken in (parameter_forms.py)."""
