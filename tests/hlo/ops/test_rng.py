"""rng-bit-generator: bit-exact with XLA (corpus case rng_bit_generator_rbg), state advance, ciphers."""
import numpy as np
import pytest

from pyxla.conformance import default_corpus, load_case
from pyxla.hlo import (
    F32,
    S32,
    S64,
    U8,
    U32,
    U64,
    HloBuilder,
    ShapeError,
    TupleShape,
    array,
    evaluate_module,
    verify_module,
)
from pyxla.hlo.ops.rng import philox4x32, threefry2x32


def _generate(state, bits_shape, algorithm="rng_default"):
    """Run one rng-bit-generator on `state`; returns (new state, bits)."""
    b = HloBuilder("rng")
    s = b.parameter(array(U64, *state.shape), "state")
    out = b.op("rng-bit-generator", s, shape=TupleShape((array(U64, *state.shape), bits_shape)),
               algorithm=algorithm)
    module = b.module(out)
    verify_module(module)
    return evaluate_module(module, [state])


def _random_state(rng, size=2):
    # Below 2^63, so that the counters of consecutive calls never wrap.
    return rng.integers(0, 2**63, size, dtype=np.uint64)


# --- the block ciphers against the Random123 known-answer vectors -------------------------

def test_philox4x32_known_answers():
    cases = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
             ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
             ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
              (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for counter, key, expected in cases:
        assert tuple(int(w) for w in philox4x32(counter, key)) == expected


def test_threefry2x32_known_answers():
    cases = [((0, 0), (0, 0), (0x6b200159, 0x99ba4efe)),
             ((0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff), (0x1cb996fc, 0xbb002be7)),
             ((0x243f6a88, 0x85a308d3), (0x13198a2e, 0x03707344), (0xc4923a9c, 0x483df7a0))]
    for counter, key, expected in cases:
        assert tuple(int(w) for w in threefry2x32(counter, key)) == expected


# --- Philox, bit-exact with XLA ---------------------------------------------------------------

def _rbg_states(key_data):
    """The two u64[2] states JAX's 'rbg' split derives from key data u32[4] (jax threefry_2x32 per half)."""
    states = []
    for count in (0, 1):
        words = [threefry2x32((np.uint32(0), np.uint32(count)), (int(key_data[2 * r]), int(key_data[2 * r + 1])))
                 for r in (0, 1)]
        states.append(np.array([int(lo) | int(hi) << 32 for lo, hi in words], np.uint64))
    return states


def test_philox_matches_xla_corpus_case():
    case = load_case(default_corpus() / "rng_bit_generator_rbg")
    bits_state, uniform_state = _rbg_states(case.inputs[0])
    new_state, bits = _generate(bits_state, array(U32, 3, 4))
    assert bits.dtype == np.uint32
    np.testing.assert_array_equal(bits, case.expected[0])
    assert new_state[0] == bits_state[0] and new_state[1] == bits_state[1] + np.uint64(3)  # 12 words = 3 blocks
    _, bits = _generate(uniform_state, array(U32, 5))
    uniform = np.maximum(np.float32(0), ((bits >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - 1)
    np.testing.assert_array_equal(uniform, case.expected[1])


def test_philox_state_advances_across_calls(rng):
    state = _random_state(rng)
    mid, first = _generate(state, array(U32, 2, 4))        # 8 words: blocks 0, 1
    end, second = _generate(mid, array(U32, 3, 5))         # 15 words: blocks 2..5
    _, whole = _generate(state, array(U32, 23))
    np.testing.assert_array_equal(np.concatenate([first.ravel(), second.ravel()]), whole)
    np.testing.assert_array_equal(mid, [state[0], state[1] + np.uint64(2)])
    np.testing.assert_array_equal(end, [state[0], state[1] + np.uint64(6)])
    assert not np.array_equal(first.ravel(), second.ravel()[:8])


def test_philox_partial_block_skips_unused_words(rng):
    state = _random_state(rng)
    mid, first = _generate(state, array(U32, 5))           # 2 blocks, 3 words unused
    _, second = _generate(mid, array(U32, 4))
    _, whole = _generate(state, array(U32, 12))
    np.testing.assert_array_equal(first, whole[:5])
    np.testing.assert_array_equal(second, whole[8:])


def test_philox_64_bit_words_join_word_pairs(rng):
    state = _random_state(rng)
    new64, bits64 = _generate(state, array(U64, 5))
    new32, bits32 = _generate(state, array(U32, 12))
    joined = bits32[0::2].astype(np.uint64) | (bits32[1::2].astype(np.uint64) << np.uint64(32))
    np.testing.assert_array_equal(bits64, joined[:5])
    np.testing.assert_array_equal(new64, new32)
    _, signed = _generate(state, array(S64, 5))
    np.testing.assert_array_equal(signed, bits64.view(np.int64))
    _, signed = _generate(state, array(S32, 3, 4))
    np.testing.assert_array_equal(signed.ravel(), bits32.view(np.int32))


def test_philox_u64x3_state_carries_into_the_high_counter(rng):
    key = int(rng.integers(0, 2**63))
    high = int(rng.integers(0, 2**63))
    state = np.array([key, 2**64 - 2, high], np.uint64)     # counter = high:2^64-2, three blocks wrap
    new_state, bits = _generate(state, array(U32, 12))
    np.testing.assert_array_equal(new_state, np.array([key, 1, high + 1], np.uint64))
    k = (key & 0xFFFFFFFF, key >> 32)
    for block, (lo, hi) in enumerate([(2**64 - 2, high), (2**64 - 1, high), (0, high + 1)]):
        counter = (lo & 0xFFFFFFFF, lo >> 32, hi & 0xFFFFFFFF, hi >> 32)
        assert tuple(bits[4 * block:4 * block + 4]) == tuple(philox4x32(counter, k))


# --- ThreeFry -------------------------------------------------------------------------------

def test_threefry_64_bit_state_advances(rng):
    state = _random_state(rng)
    mid, first = _generate(state, array(U64, 2, 3), "rng_three_fry")
    _, second = _generate(mid, array(U64, 4), "rng_three_fry")
    _, whole = _generate(state, array(U64, 10), "rng_three_fry")
    np.testing.assert_array_equal(np.concatenate([first.ravel(), second]), whole)
    np.testing.assert_array_equal(mid, [state[0], state[1] + np.uint64(6)])


def test_threefry_32_bit_words_pair_along_the_split_dimension(rng):
    state = _random_state(rng)
    new32, even = _generate(state, array(U32, 12), "rng_three_fry")
    new64, wide = _generate(state, array(U64, 6), "rng_three_fry")
    np.testing.assert_array_equal(even, wide.view(np.uint32))          # (low, high) word pairs
    np.testing.assert_array_equal(new32, new64)
    _, odd = _generate(state, array(U32, 11), "rng_three_fry")
    np.testing.assert_array_equal(odd, even[:11])
    _, matrix = _generate(state, array(U32, 3, 4), "rng_three_fry")    # dimension 1 is the first even one
    np.testing.assert_array_equal(matrix, even.reshape(3, 4))
    _, no_even = _generate(state, array(U32, 3, 5), "rng_three_fry")   # largest dimension is split
    _, padded = _generate(state, array(U32, 3, 6), "rng_three_fry")
    np.testing.assert_array_equal(no_even, padded[:, :5])


# --- shape rules ------------------------------------------------------------------------------

@pytest.mark.parametrize("state, result, algorithm, message", [
    (array(U32, 4), (array(U32, 4), array(U32, 3)), "rng_default", "u64"),
    (array(U64, 3), (array(U64, 3), array(U32, 3)), "rng_three_fry", r"u64\[2\]"),
    (array(U64, 2), (array(U64, 2), array(F32, 3)), "rng_default", "integer bits"),
    (array(U64, 2), (array(U64, 3), array(U32, 3)), "rng_default", "returns its state"),
    (array(U64, 2), (array(U64, 2), array(U32, 3)), "rng_mersenne", "unknown"),
])
def test_rng_shape_errors(state, result, algorithm, message):
    b = HloBuilder("bad")
    s = b.parameter(state, "s")
    with pytest.raises(ShapeError, match=message):
        b.op("rng-bit-generator", s, shape=TupleShape(result), algorithm=algorithm)


def test_rng_needs_declared_shape():
    b = HloBuilder("bad")
    s = b.parameter(array(U64, 2), "s")
    with pytest.raises(ShapeError, match="result shape"):
        b.op("rng-bit-generator", s, algorithm="rng_default")


def test_rng_narrow_words_not_implemented(rng):
    with pytest.raises(NotImplementedError, match="8-bit"):
        _generate(_random_state(rng), array(U8, 4))
