"""pyxla.random: JAX's key-based random numbers, with JAX's names, arguments and values.

    from pyxla import random

    key = random.PRNGKey(0)                  # uint32[2]
    key, sub = random.split(key)
    x = random.normal(sub, (3, 4))            # float32[3, 4], the values jax.random gives

There is no hidden state: every function takes a key, and the same key gives the same
numbers. Split a key (or fold_in a step number) to get independent streams. Every
function works eagerly on concrete keys and inside `pyxla.jit` on keys passed in as
arguments; it is written on pyxla.lax and pyxla.numpy, so it compiles with the rest of
the program.

The bits are JAX's threefry2x32 with `jax_threefry_partitionable=True` (JAX's default
since 0.5): the same key, shape and dtype give JAX's bits and JAX's floats. Defaults are
JAX's without `jax_enable_x64`: float32 and int32.

Files:
  keys.py           threefry2x32, PRNGKey/key, split, fold_in, bits
  distributions.py  uniform, normal, truncated_normal, bernoulli, randint, permutation,
                    choice, gumbel, categorical
"""
from .distributions import (
    bernoulli,
    categorical,
    choice,
    gumbel,
    normal,
    permutation,
    randint,
    truncated_normal,
    uniform,
)
from .keys import PRNGKey, bits, fold_in, key, key_data, split, threefry2x32, wrap_key_data

__all__ = [
    "PRNGKey", "key", "key_data", "wrap_key_data", "split", "fold_in", "bits", "threefry2x32",
    "uniform", "normal", "truncated_normal", "bernoulli", "randint", "permutation", "choice",
    "gumbel", "categorical",
]
