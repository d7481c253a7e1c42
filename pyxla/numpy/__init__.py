"""pyxla.numpy: NumPy's API on pyxla arrays, eager or traced (`import pyxla.numpy as pnp`).

On concrete arrays each function runs at once on the reference evaluator and returns a
`pyxla.Array` (an ndarray with `.at`); inside `pyxla.jit` it records HLO. Dtypes,
promotion (NumPy 2, Python scalars weak), broadcasting and result shapes are NumPy's.

The functions live in one file per family, in the order of NumPy's reference:
  creation.py      zeros, arange, linspace, eye, asarray, ...
  elementwise.py   the ufuncs (math, comparison, logic, bits), round, clip, where
  manipulation.py  reshape, transpose, concatenate, split, flip, roll, tile, pad, ...
  indexing.py      x[...] and x.at[...], take, take_along_axis, nonzero
  reductions.py    sum, mean, max, argmax, var, cumsum, ...
  contraction.py   matmul, dot, tensordot, einsum, inner, outer
  sorting.py       sort, argsort, searchsorted
Each registers its public functions with `core.export`; this file gathers them.
array_methods.py makes them the operators and methods of traced arrays (and `.at` of `Array`).
"""
import math as _math

import ml_dtypes as _ml_dtypes
import numpy as _np

from ..frontend.array import Array
from . import array_methods, contraction, creation, elementwise, indexing, manipulation, reductions, sorting  # noqa: F401
from .core import PUBLIC as _PUBLIC

globals().update(_PUBLIC)
array_methods.install()   # Tracer's operators and ndarray methods, Array.at

ndarray = Array

# dtypes and constants, as NumPy spells them
dtype = _np.dtype
bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
bfloat16 = _ml_dtypes.bfloat16
finfo, iinfo = _np.finfo, _np.iinfo
issubdtype, can_cast = _np.issubdtype, _np.can_cast
integer, floating, signedinteger, unsignedinteger, number = (
    _np.integer, _np.floating, _np.signedinteger, _np.unsignedinteger, _np.number)
pi, e, inf, nan, euler_gamma = _math.pi, _math.e, _math.inf, _math.nan, _np.euler_gamma
newaxis = None


def promote_types(a, b):
    """NumPy's promote_types, with bfloat16 placed as JAX places it."""
    from .core import promote_types as _promote
    return _promote(_np.dtype(a), _np.dtype(b))


__all__ = sorted(set(_PUBLIC) | {
    "Array", "ndarray", "dtype", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "float16", "float32", "float64", "bfloat16", "finfo", "iinfo",
    "issubdtype", "can_cast", "pi", "e", "inf", "nan", "newaxis", "result_type", "promote_types"})
