"""rng-bit-generator through gpu-sim, bit-exact with the evaluator, on odd sizes."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module


@pytest.mark.parametrize("algorithm", ["rng_philox", "rng_three_fry"])
@pytest.mark.parametrize("dims,t", [((1,), "u32"), ((31,), "u32"), ((33, 3), "u64"), ((1025,), "u32"), ((5, 7), "u32")])
def test_rng_bit_generator_matches_the_evaluator(algorithm, dims, t):
    shape = ",".join(map(str, dims))
    text = f"""HloModule m
ENTRY e {{
  s = u64[2] parameter(0)
  ROOT r = (u64[2], {t}[{shape}]) rng-bit-generator(s), algorithm={algorithm}
}}
"""
    state = np.array([0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], np.uint64)
    got = get_backend("gpu-sim").compile(parse_module(text)).run_flat([state])
    want = flatten_result(evaluate_module(parse_module(text), [state]))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))
