"""pyxla: an XLA-style machine-learning compiler written in Python.

    import pyxla
    import pyxla.numpy as pnp

    @pyxla.jit
    def f(x, w):
        return pnp.tanh(x @ w)

    dw = pyxla.jit(pyxla.grad(lambda w, x: pnp.sum(f(x, w))))(w, x)
"""
__version__ = "0.1.0"

from . import (
    lax,  # noqa: F401
    nn,  # noqa: F401
    numpy,  # noqa: F401  (installs Tracer's operators and ndarray methods, and Array.at)
    optimizers,  # noqa: F401
    random,  # noqa: F401  (JAX's key-based random numbers)
)
from .autodiff import float0, grad, jvp, linearize, value_and_grad, vjp  # noqa: F401
from .autodiff.checkpoint import checkpoint, checkpoint_policies, remat  # noqa: F401
from .autodiff.custom import custom_jvp, custom_vjp  # noqa: F401
from .autodiff.jacobians import hessian, jacfwd, jacrev  # noqa: F401
from .batching import vmap  # noqa: F401
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
from .frontend import (  # noqa: F401
    default_backend,
    jit,
    register_pytree_node,
    set_default_backend,
    tree_flatten,
    tree_map,
    tree_unflatten,
)
from .frontend.array import Array  # noqa: F401  (what pyxla.numpy returns eagerly: an ndarray with .at)
from .lax import stop_gradient  # noqa: F401
from .runtime.disk_cache import CacheWarning  # noqa: F401


def __getattr__(name: str):
    # pyxla.onnx is imported on first use: it needs the optional onnx package
    if name == "onnx":
        import importlib
        return importlib.import_module(".onnx", __name__)
    raise AttributeError(f"module 'pyxla' has no attribute {name!r}")


def __dir__():
    # the lazy submodule too, so that completion offers pyxla.onnx before its first use
    return sorted({*globals(), "onnx"})
