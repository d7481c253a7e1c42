"""The array type users hold for eager results: `Array`.

`Array` is a NumPy ndarray that adds one thing, `.at`, so that the functional updates
written for traced code (`x = x.at[i].add(1)`) also run eagerly. Everything else about it
is NumPy's; `np.asarray(array)` gives the same buffer without a copy.

`.at` is implemented by pyxla.numpy, which installs it here and installs Tracer's operators
and ndarray methods (pyxla/numpy/array_methods.py); `import pyxla` does so. The front end
itself does not depend on pyxla.numpy.
"""
from __future__ import annotations

import numpy as np


class Array(np.ndarray):
    """A NumPy array with `.at[index]` functional updates (what pyxla.numpy returns eagerly)."""


__all__ = ["Array"]
