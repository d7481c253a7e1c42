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

import sys as _sys

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


# Tracer's operators and ndarray methods are installed by pyxla.numpy, which the API above
# imports first. A program that reaches the tracer without it (`from pyxla.frontend.jit
# import jit`) gets them on first use: when pyxla.frontend.tracing is loaded, each operator
# it lacks, and attribute lookup, is a stand-in that imports pyxla.numpy (which replaces the
# stand-ins with the real methods) and dispatches again. Nothing is imported at that point,
# only on the first use, inside a trace, when every import has finished.
_OPERATOR_NAMES = [f"__{op}__" for op in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "divmod", "pow", "matmul", "and", "or", "xor",
    "lshift", "rshift")] + [f"__r{op}__" for op in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "divmod", "pow", "matmul", "and", "or", "xor",
        "lshift", "rshift")] + [f"__{op}__" for op in (
            "lt", "le", "gt", "ge", "eq", "ne", "neg", "pos", "abs", "invert", "round", "getitem",
            "array_ufunc", "array_function")]


def _install_on_first_use(tracer_class) -> None:
    import importlib

    def installed() -> bool:
        if f"{__name__}.numpy" in _sys.modules:
            return False
        importlib.import_module(".numpy", __name__)
        return True

    def stand_in(name):
        def method(self, *args, **kwargs):
            installed()
            return getattr(type(self), name)(self, *args, **kwargs)
        return method

    for name in _OPERATOR_NAMES:
        if name not in tracer_class.__dict__:
            setattr(tracer_class, name, stand_in(name))

    def __getattr__(self, name):
        if not name.startswith("__") and installed():
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    if "__getattr__" not in tracer_class.__dict__:
        tracer_class.__getattr__ = __getattr__


class _OnTracerImport:
    """A meta path finder that calls _install_on_first_use once pyxla.frontend.tracing has run."""
    target = f"{__name__}.frontend.tracing"

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        from importlib.machinery import PathFinder
        _sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _install_on_first_use(module.Tracer)
        spec.loader.exec_module = exec_module
        return spec


if f"{__name__}.frontend.tracing" not in _sys.modules:
    _sys.meta_path.insert(0, _OnTracerImport())


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
