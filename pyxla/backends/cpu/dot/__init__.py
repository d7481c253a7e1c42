"""Dot on the CPU: pyxla's own tiled GEMM (gemm.py) and matrix-vector product (gemv.py), a
dot cut into tasks of the worker pool with the output fusion's epilogue applied per block
(tasks.py), and which dots take them (plan.py). codegen.py chooses the route; no dot calls
BLAS (docs/cpu-backend.md says why)."""
