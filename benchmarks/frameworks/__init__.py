"""One module per framework; each has NAME, version() and BUILDERS: workload name ->
build(inputs) returning a zero-argument callable that computes the workload and returns a
NumPy array (synchronised: the work is done when it returns)."""
FRAMEWORKS = ("numpy", "pyxla", "jax", "torch", "torch_compile", "torch_pyxla", "onnxruntime")
