"""Array methods: pyxla.numpy's functions as the operators and methods of traced arrays.

`Tracer` (pyxla/frontend/tracing.py) gets NumPy's operators (with reflected forms), ndarray
methods (`.sum()`, `.reshape()`, `.T`, ...), indexing and `.at`, and it answers NumPy's
dispatch protocols, so `np.sin(tracer)` and `ndarray + tracer` are traced too. `Array`
(pyxla/frontend/array.py, what eager calls return) gets `.at`.

The front end does not import this package: `install()` puts the methods onto its classes,
once, when pyxla.numpy is imported (`import pyxla` imports it).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..frontend.array import Array
from ..frontend.tracing import Tracer
from ..hlo.dims import DimExpr
from . import core, indexing


def _pnp() -> Any:
    """This package, pyxla.numpy: its functions are looked up when a method runs."""
    from .. import numpy as pnp
    return pnp


# --- .at ----------------------------------------------------------------------------------

class IndexUpdateHelper:
    """`x.at`: indexing it names the elements an update applies to."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __getitem__(self, index: Any) -> IndexUpdateRef:
        return IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"_IndexUpdateHelper({self.array!r})"


class IndexUpdateRef:
    """`x.at[index]`: each method returns a new array; `x` is never changed.

    Repeated indices combine in order (add accumulates them, as np.add.at does; set keeps
    the last). Updates are converted to x's dtype.
    """

    __slots__ = ("array", "index")

    def __init__(self, array: Any, index: Any):
        self.array = array
        self.index = index

    def get(self) -> Any:
        """x[index]."""
        return indexing.getitem(self.array, self.index)

    def _update(self, values: Any, how: str) -> Any:
        return indexing.scatter_update(self.array, self.index, values, how)

    def set(self, values: Any) -> Any:
        return self._update(values, "set")

    def add(self, values: Any) -> Any:
        return self._update(values, "add")

    def subtract(self, values: Any) -> Any:
        return self._update(_pnp().negative(values), "add")

    def multiply(self, values: Any) -> Any:
        return self._update(values, "multiply")

    mul = multiply

    def divide(self, values: Any) -> Any:
        """x / values at index (XLA's divide: integers truncate)."""
        return self._update(values, "divide")

    def power(self, values: Any) -> Any:
        return self._update(values, "power")

    def min(self, values: Any) -> Any:
        return self._update(values, "min")

    def max(self, values: Any) -> Any:
        return self._update(values, "max")


# --- Tracer's operators and methods -------------------------------------------------------

def _is_operand(x: Any) -> bool:
    return isinstance(x, (Tracer, np.ndarray, np.generic, bool, int, float, list, tuple, DimExpr))


def _binary(name: str, reflected: bool = False) -> Callable[..., Any]:
    def method(self, other):
        if not _is_operand(other):
            return NotImplemented
        fn = getattr(_pnp(), name)
        return fn(other, self) if reflected else fn(self, other)
    method.__name__ = name
    return method


def _unary(name: str) -> Callable[..., Any]:
    def method(self):
        return getattr(_pnp(), name)(self)
    method.__name__ = name
    return method


def _forward(name: str) -> Callable[..., Any]:
    """A method that calls pyxla.numpy.<name>(self, ...), like ndarray's methods."""
    def method(self, *args, **kwargs):
        return getattr(_pnp(), name)(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"pyxla.numpy.{name}(self, ...)."
    return method


_OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "divmod": "divmod", "pow": "power",
    "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "left_shift", "rshift": "right_shift",
}
_COMPARISONS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
                "eq": "equal", "ne": "not_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}
_METHODS = ("sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all", "any",
            "cumsum", "cumprod", "ptp", "ravel", "squeeze", "swapaxes", "clip", "round", "take",
            "sort", "argsort", "dot", "repeat", "diagonal", "conj", "conjugate", "nonzero",
            "searchsorted")


def _reshape(self, *shape, order="C"):
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    return _pnp().reshape(self, shape, order=order)


def _transpose(self, *axes):
    if len(axes) == 1 and axes[0] is not None and not isinstance(axes[0], int):
        axes = axes[0]
    return _pnp().transpose(self, axes or None)


def _astype(self, dtype, copy=True):
    return _pnp().asarray(self, dtype=dtype)


def _getitem(self, index):
    return indexing.getitem(self, index)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """np.<ufunc>(..., tracer, ...) -> pyxla.numpy.<ufunc>(...)."""
    fn = core.PUBLIC.get(ufunc.__name__)
    if method != "__call__" or fn is None:
        return NotImplemented
    return fn(*inputs, **kwargs)


def _array_function(self, func, types, args, kwargs):
    """np.<function>(tracer, ...) -> pyxla.numpy.<function>(...) where it exists."""
    fn = core.PUBLIC.get(func.__name__)
    if fn is None:
        return NotImplemented
    return fn(*args, **kwargs)


def install_tracer_methods(cls: type) -> None:
    """Give `cls` (Tracer) NumPy's operators, ndarray methods, indexing and `.at`."""
    for dunder, name in _OPERATORS.items():
        setattr(cls, f"__{dunder}__", _binary(name))
        setattr(cls, f"__r{dunder}__", _binary(name, reflected=True))
    for dunder, name in _COMPARISONS.items():
        setattr(cls, f"__{dunder}__", _binary(name))
    for dunder, name in _UNARY.items():
        setattr(cls, f"__{dunder}__", _unary(name))
    for name in _METHODS:
        setattr(cls, name, _forward(name))
    cls.reshape = _reshape
    cls.transpose = _transpose
    cls.astype = _astype
    cls.flatten = _forward("ravel")
    cls.__round__ = lambda self, ndigits=None: _pnp().round(self, ndigits or 0)
    cls.__getitem__ = _getitem
    cls.__array_ufunc__ = _array_ufunc
    cls.__array_function__ = _array_function
    cls.T = property(lambda self: _pnp().transpose(self))
    cls.mT = property(lambda self: _pnp().swapaxes(self, -1, -2))
    cls.at = property(IndexUpdateHelper)
    cls.imag = property(lambda self: _pnp().imag(self))


def install() -> None:
    """Install the methods onto the front end's classes: Tracer's operators and methods, Array.at."""
    install_tracer_methods(Tracer)
    Array.at = property(IndexUpdateHelper)


__all__ = ["IndexUpdateHelper", "IndexUpdateRef", "install", "install_tracer_methods"]
