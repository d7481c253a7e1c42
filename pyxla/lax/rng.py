"""Random bits: rng_bit_generator (HLO rng-bit-generator) with JAX's key conventions."""
from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..frontend.tracing import bind
from ..hlo.shape import ArrayShape, TupleShape
from ..hlo.types import U32, U64
from ._values import aval, element_type, op_error
from .elementwise import bitcast_convert_type
from .shapes import reshape


class RandomAlgorithm(enum.Enum):
    """XLA's bit generators (JAX's enum): the default is Philox4x32-10 on CPU."""
    RNG_DEFAULT = "rng_default"
    RNG_THREE_FRY = "rng_three_fry"
    RNG_PHILOX = "rng_philox"


def rng_bit_generator(key: Any, shape: Sequence[int], dtype: Any = np.uint32,
                      algorithm: RandomAlgorithm = RandomAlgorithm.RNG_DEFAULT) -> tuple[Any, Any]:
    """(new key, random bits of `shape` and `dtype`) from a counter-based generator.

    The key is XLA's u64 state (u64[2], or u64[3] for Philox) or, as in JAX, a u32[4]
    array read as u64[2]; the new key comes back in the key's own form.
    """
    k = aval(key)
    as_u32 = k.dtype == U32 and k.dims == (4,)
    if as_u32:   # little-endian pairs of u32 words are the u64 state words, as JAX does it
        state = bitcast_convert_type(reshape(key, (2, 2)), U64)
    elif k.dtype == U64 and k.rank == 1:
        state = key
    else:
        raise op_error("rng-bit-generator", [key], "the key must be u32[4] or a u64[2] / u64[3] state")
    bits_shape = ArrayShape(element_type(dtype), tuple(int(d) for d in shape))
    new_state, bits = bind("rng-bit-generator", state, shape=TupleShape((aval(state), bits_shape)),
                           algorithm=RandomAlgorithm(algorithm).value)
    if as_u32:
        new_state = reshape(bitcast_convert_type(new_state, U32), (4,))
    return new_state, bits
