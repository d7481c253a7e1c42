"""Dot on the CPU: SciPy's BLAS called from generated code (dot/blas.py), pyxla's own tiled GEMM
(gemm.py) and matrix-vector product (gemv.py), and a dot cut into tasks of the worker pool
with the output fusion's epilogue applied per block (tasks.py). codegen.py chooses the route."""
