"""pyxla.nn.initializers: JAX's `jax.nn.initializers`, with JAX's names, arguments and values.

    from pyxla import random
    from pyxla.nn import initializers

    init = initializers.glorot_uniform()
    w = init(random.PRNGKey(0), (784, 512))   # float32[784, 512], the values JAX gives

Each factory returns `init(key, shape, dtype=float32)`; `zeros` and `ones` are themselves
such functions, as in JAX. The random ones draw from pyxla.random, whose bits are JAX's, and
scale in the order JAX does with the scale computed in `dtype` (NumPy's float32 arithmetic
and square root round as XLA's do): the uniform-based initializers give JAX's floats bit for
bit, the normal-based ones differ where pyxla's erf_inv does (a few ulp).

Unlike JAX without `jax_enable_x64`, a float64 `dtype` gives float64 values.
`orthogonal` needs a concrete key: it runs NumPy's QR on the host.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import numpy as pnp
from .. import random
from ..frontend.tracing import Tracer

__all__ = ["zeros", "ones", "constant", "uniform", "normal", "truncated_normal", "variance_scaling",
           "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal", "lecun_uniform",
           "lecun_normal", "he_uniform", "he_normal", "kaiming_uniform", "kaiming_normal", "orthogonal",
           "compute_fans", "Initializer"]

Initializer = Callable[..., Any]   # init(key, shape, dtype=float32) -> array

# The standard deviation of a standard normal truncated to (-2, 2): dividing by it makes
# variance_scaling's truncated normal have the variance asked for (JAX's constant).
TRUNCATED_STDDEV = .87962566103423978


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def _scalar(value: Any, dtype: Any) -> np.ndarray:
    """`value` rounded to `dtype`, as JAX's jnp.array(value, dtype) (a 0-d NumPy array so
    that it keeps its dtype in pyxla.numpy's arithmetic)."""
    return np.asarray(value, dtype=np.dtype(dtype))


def zeros(key: Any, shape: Sequence[int], dtype: Any = np.float32) -> Any:
    """An array of zeros; the key is not used."""
    return pnp.zeros(_shape(shape), np.dtype(dtype))


def ones(key: Any, shape: Sequence[int], dtype: Any = np.float32) -> Any:
    """An array of ones; the key is not used."""
    return pnp.ones(_shape(shape), np.dtype(dtype))


def constant(value: Any, dtype: Any = np.float32) -> Initializer:
    """An initializer filling every element with `value`."""
    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        return pnp.full(_shape(shape), value, dtype=np.dtype(dtype))
    return init


def uniform(scale: float = 1e-2, dtype: Any = np.float32) -> Initializer:
    """Uniform values in [0, scale)."""
    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        return pnp.multiply(random.uniform(key, _shape(shape), dtype), _scalar(scale, dtype))
    return init


def normal(stddev: float = 1e-2, dtype: Any = np.float32) -> Initializer:
    """Normal values of mean 0 and standard deviation `stddev`."""
    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        return pnp.multiply(random.normal(key, _shape(shape), dtype), _scalar(stddev, dtype))
    return init


def truncated_normal(stddev: float = 1e-2, dtype: Any = np.float32, lower: float = -2.0,
                     upper: float = 2.0) -> Initializer:
    """stddev times a standard normal truncated to (lower, upper) (the standard deviation of
    the result is therefore below `stddev`, as in JAX)."""
    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        values = random.truncated_normal(key, lower, upper, _shape(shape), dtype)
        return pnp.multiply(values, _scalar(stddev, dtype))
    return init


def _axes_size(shape: tuple[int, ...], axes: int | Sequence[int]) -> int:
    if isinstance(axes, (int, np.integer)):
        return shape[axes]
    return math.prod(shape[i] for i in axes)


def compute_fans(shape: Sequence[int], in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                 batch_axis: int | Sequence[int] = ()) -> tuple[float, float]:
    """(fan_in, fan_out) of a weight of `shape`, as JAX computes them: the sizes of the input
    and output axes, each times the receptive field (the product of the axes that are
    neither input, output nor batch: a convolution's spatial window)."""
    shape = _shape(shape)
    if len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional weights tensor. "
                         "Must be at least 2D.")
    in_size = _axes_size(shape, in_axis)
    out_size = _axes_size(shape, out_axis)
    batch_size = _axes_size(shape, batch_axis)
    receptive_field_size = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field_size, out_size * receptive_field_size


def variance_scaling(scale: float, mode: str, distribution: str, in_axis: int | Sequence[int] = -2,
                     out_axis: int | Sequence[int] = -1, batch_axis: int | Sequence[int] = (),
                     dtype: Any = np.float32) -> Initializer:
    """Values of variance scale / n, n being fan_in, fan_out or their mean (`mode`: "fan_in",
    "fan_out", "fan_avg"), drawn from `distribution`: "truncated_normal" (within two standard
    deviations, rescaled to that variance), "normal", or "uniform" (in ±sqrt(3 variance))."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        shape = _shape(shape)
        dt = np.dtype(dtype)
        fan_in, fan_out = compute_fans(shape, in_axis, out_axis, batch_axis)
        denominator = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = _scalar(scale / denominator, dt)
        # Each factor rounded in dt, in JAX's order, so that the products match JAX's.
        if distribution == "truncated_normal":
            stddev = np.sqrt(variance) / _scalar(TRUNCATED_STDDEV, dt)
            return pnp.multiply(random.truncated_normal(key, -2, 2, shape, dt), stddev)
        if distribution == "normal":
            return pnp.multiply(random.normal(key, shape, dt), np.sqrt(variance))
        return pnp.multiply(random.uniform(key, shape, dt, -1), np.sqrt(_scalar(3, dt) * variance))
    return init


def _scaling(name: str, scale: float, mode: str, distribution: str, doc: str) -> Callable[..., Initializer]:
    def factory(in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                batch_axis: int | Sequence[int] = (), dtype: Any = np.float32) -> Initializer:
        return variance_scaling(scale, mode, distribution, in_axis=in_axis, out_axis=out_axis,
                                batch_axis=batch_axis, dtype=dtype)
    factory.__doc__ = f"{doc}: variance_scaling({scale}, {mode!r}, {distribution!r})."
    factory.__name__ = factory.__qualname__ = name
    return factory


glorot_uniform = _scaling("glorot_uniform", 1.0, "fan_avg", "uniform", "Glorot (Xavier) uniform")
glorot_normal = _scaling("glorot_normal", 1.0, "fan_avg", "truncated_normal", "Glorot (Xavier) normal")
lecun_uniform = _scaling("lecun_uniform", 1.0, "fan_in", "uniform", "LeCun uniform")
lecun_normal = _scaling("lecun_normal", 1.0, "fan_in", "truncated_normal", "LeCun normal")
he_uniform = _scaling("he_uniform", 2.0, "fan_in", "uniform", "He (Kaiming) uniform")
he_normal = _scaling("he_normal", 2.0, "fan_in", "truncated_normal", "He (Kaiming) normal")
xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype: Any = np.float32) -> Initializer:
    """A (scaled) matrix with orthonormal columns, or rows where there are fewer rows than
    columns, reshaped to `shape` with `column_axis` as the columns: JAX's construction (the
    Q of the QR decomposition of a normal matrix, its columns' signs fixed by R's diagonal so
    that it is uniformly distributed). The QR runs in NumPy: the key must be concrete."""
    def init(key: Any, shape: Sequence[int], dtype: Any = dtype) -> Any:
        shape = _shape(shape)
        dt = np.dtype(dtype)
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
        matrix_shape = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
        a = random.normal(key, matrix_shape, dt)
        if isinstance(a, Tracer):
            raise TypeError("orthogonal needs a concrete key (it computes a QR decomposition with NumPy); "
                            "initialise outside pyxla.jit")
        q, r = np.linalg.qr(np.asarray(a))
        q = q * np.sign(np.diag(r))[None, :]
        if n_rows < n_cols:
            q = q.T
        q = np.reshape(q, tuple(np.delete(shape, column_axis)) + (shape[column_axis],))
        q = np.moveaxis(q, -1, column_axis)
        return (_scalar(scale, dt) * q).astype(dt)
    return init
