"""Writes random_jax_reference.npz: JAX's PRNGKey for each seed of random_cases.SEEDS and
each case's result under JAX's default threefry2x32 (jax_threefry_partitionable=True);
bfloat16 results are stored as their uint16 bits under NAME__bfloat16_bits.

JAX is not a dependency of pyxla; run this with JAX installed elsewhere, from the
checkout's root:

    python3 -m venv /tmp/jaxref && /tmp/jaxref/bin/pip install jax
    PYTHONPATH=tests/frontend /tmp/jaxref/bin/python tests/frontend/data/make_random_reference.py

The stored file was made with JAX 0.10.2 (jaxlib 0.10.2, CPU).
"""
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
from jax import random
from random_cases import CASES, SEEDS


def main():
    out = {"jax_version": np.array(jax.__version__)}
    for s in SEEDS:
        out[f"key_seed{s}"] = np.asarray(random.PRNGKey(s))
    for case in CASES:
        jax.config.update("jax_enable_x64", case.x64)
        assert jax.config.jax_threefry_partitionable
        value = np.asarray(case.fn(random, random.PRNGKey(case.seed)))
        if value.dtype == ml_dtypes.bfloat16:   # .npy has no bfloat16: store the bits
            out[case.name + "__bfloat16_bits"] = value.view(np.uint16)
        else:
            out[case.name] = value
    np.savez_compressed(Path(__file__).with_name("random_jax_reference.npz"), **out)


if __name__ == "__main__":
    main()
