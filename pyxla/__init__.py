"""pyxla: an XLA-style machine-learning compiler written in Python.

    import pyxla
    import pyxla.numpy as pnp

    @pyxla.jit
    def f(x, w):
        return pnp.tanh(x @ w)

    dw = pyxla.jit(pyxla.grad(lambda w, x: pnp.sum(f(x, w))))(w, x)

`import pyxla` itself is light: the API below is imported on first use of any of its
names (all of it at once, pyxla.numpy first: it installs Tracer's operators and ndarray
methods, and Array.at), so that a process that only runs a cached ONNX model
(`pyxla.onnx`) never imports the tracer, the passes or the code generator.
"""
__version__ = "0.1.0"

from .errors import (  # noqa: F401
    ArgumentError,
    ConcretizationError,
    EvaluationError,
    ParseError,
    PyxlaError,
    ShapeError,
    TraceError,
    VerifierError,
)
from .runtime.disk_cache import CacheWarning  # noqa: F401

# name -> the module it comes from (relative to this package), imported on first use
_API = {
    "float0": ".autodiff", "grad": ".autodiff", "jvp": ".autodiff", "linearize": ".autodiff",
    "value_and_grad": ".autodiff", "vjp": ".autodiff",
    "checkpoint": ".autodiff.checkpoint", "checkpoint_policies": ".autodiff.checkpoint",
    "remat": ".autodiff.checkpoint",
    "custom_jvp": ".autodiff.custom", "custom_vjp": ".autodiff.custom",
    "hessian": ".autodiff.jacobians", "jacfwd": ".autodiff.jacobians", "jacrev": ".autodiff.jacobians",
    "vmap": ".batching",
    "device_put": ".backends.gpu.arrays",
    "default_backend": ".frontend", "jit": ".frontend", "register_pytree_node": ".frontend",
    "set_default_backend": ".frontend", "tree_flatten": ".frontend", "tree_map": ".frontend",
    "tree_unflatten": ".frontend",
    "Array": ".frontend.array",      # (what pyxla.numpy returns eagerly: an ndarray with .at)
    "stop_gradient": ".lax",
}
_SUBMODULES = ("numpy", "lax", "nn", "optimizers", "random")   # imported with the API, in this order


def _load_api() -> None:
    import importlib
    for name in _SUBMODULES:
        globals()[name] = importlib.import_module(f".{name}", __name__)
    for name, module in _API.items():
        globals()[name] = getattr(importlib.import_module(module, __name__), name)


def __getattr__(name: str):
    import importlib
    if name == "onnx":   # needs the optional onnx package only when a model is not in the cache
        return importlib.import_module(".onnx", __name__)
    if name in _API or name in _SUBMODULES:
        _load_api()
        return globals()[name]
    if not name.startswith("__"):   # another submodule (pyxla.frontend, pyxla.hlo, ...)
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'pyxla' has no attribute {name!r}")


def __dir__():
    # the lazy names too, so that completion offers them before their first use
    return sorted({*globals(), "onnx", *_API, *_SUBMODULES})
