"""The cases test_random.py compares with JAX: each a function of a random module (jax.random
or pyxla.random) and a key. data/make_random_reference.py runs them on JAX and stores what
JAX gave in data/random_jax_reference.npz.

A case's tolerance says how it is compared: "exact" (bits, integers, booleans and uniform
floats, which are bit manipulation), or "ulp" for results that go through erf_inv, erf
and log, whose polynomials pyxla evaluates with its own log1p, erf and log.
"""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
SEEDS = (0, 1, 42, 2**31 - 1, -1, 2**32 + 5, 123456789)


class Case:
    def __init__(self, name, fn, compare="exact", x64=False, seed=0):
        self.name, self.fn, self.compare, self.x64, self.seed = name, fn, compare, x64, seed


def _cases():
    c = []
    for s in SEEDS:
        c.append(Case(f"split2_seed{s}", lambda r, k: r.split(k), seed=s))
    c += [
        Case("split3", lambda r, k: r.split(k, 3), seed=42),
        Case("split_2x3", lambda r, k: r.split(k, (2, 3)), seed=7),
        Case("split_of_split", lambda r, k: r.split(r.split(k)[1], 4), seed=3),
        Case("fold_in_0", lambda r, k: r.fold_in(k, 0), seed=0),
        Case("fold_in_7", lambda r, k: r.fold_in(k, 7), seed=42),
        Case("fold_in_max", lambda r, k: r.fold_in(k, 2**32 - 1), seed=1),
        Case("fold_in_twice", lambda r, k: r.fold_in(r.fold_in(k, 123456), 9), seed=5),
        # bits
        Case("bits_u32_5", lambda r, k: r.bits(k, (5,), np.uint32), seed=0),
        Case("bits_u32_2x3", lambda r, k: r.bits(k, (2, 3), np.uint32), seed=42),
        Case("bits_u32_scalar", lambda r, k: r.bits(k, (), np.uint32), seed=1),
        Case("bits_u32_1000", lambda r, k: r.bits(k, (10, 100), np.uint32), seed=11),
        Case("bits_u8", lambda r, k: r.bits(k, (7,), np.uint8), seed=42),
        Case("bits_u16", lambda r, k: r.bits(k, (7,), np.uint16), seed=42),
        Case("bits_u64", lambda r, k: r.bits(k, (4,), np.uint64), x64=True, seed=42),
        # uniform
        Case("uniform_scalar", lambda r, k: r.uniform(k), seed=0),
        Case("uniform_5", lambda r, k: r.uniform(k, (5,)), seed=0),
        Case("uniform_3x4", lambda r, k: r.uniform(k, (3, 4), np.float32), seed=42),
        Case("uniform_range", lambda r, k: r.uniform(k, (10,), minval=-2.0, maxval=3.0), seed=1),
        Case("uniform_array_bounds", lambda r, k: r.uniform(
            k, (2, 3), minval=np.array([0.0, 1.0, -5.0], np.float32), maxval=np.float32(10.0)), seed=2),
        Case("uniform_1000", lambda r, k: r.uniform(k, (1000,)), seed=3),
        Case("uniform_f16", lambda r, k: r.uniform(k, (64,), np.float16), seed=42),
        Case("uniform_bf16", lambda r, k: r.uniform(k, (64,), BF16), seed=42),
        Case("uniform_bf16_range", lambda r, k: r.uniform(k, (16,), BF16, -1.0, 1.0), seed=4),
        Case("uniform_f64", lambda r, k: r.uniform(k, (16,), np.float64), x64=True, seed=42),
        Case("uniform_f64_range", lambda r, k: r.uniform(k, (500,), np.float64, -2.0, 3.0), x64=True, seed=8),
        Case("uniform_f32_range_500", lambda r, k: r.uniform(k, (500,), np.float32, -0.1, 0.7), seed=9),
        # normal
        Case("normal_scalar", lambda r, k: r.normal(k), "ulp", seed=0),
        Case("normal_7", lambda r, k: r.normal(k, (7,)), "ulp", seed=1),
        Case("normal_2x3", lambda r, k: r.normal(k, (2, 3), np.float32), "ulp", seed=42),
        Case("normal_2000", lambda r, k: r.normal(k, (2000,)), "ulp", seed=5),
        Case("normal_f16", lambda r, k: r.normal(k, (64,), np.float16), "ulp", seed=42),
        Case("normal_bf16", lambda r, k: r.normal(k, (64,), BF16), "ulp", seed=42),
        Case("normal_f64", lambda r, k: r.normal(k, (64,), np.float64), "ulp", x64=True, seed=42),
        # truncated normal
        Case("truncnorm_sym", lambda r, k: r.truncated_normal(k, -1.0, 1.0, (6,)), "ulp", seed=0),
        Case("truncnorm_pos", lambda r, k: r.truncated_normal(k, 0.0, 2.0, (500,)), "ulp", seed=1),
        Case("truncnorm_3x4", lambda r, k: r.truncated_normal(k, -2.0, 0.5, (3, 4)), "ulp", seed=42),
        Case("truncnorm_bounds", lambda r, k: r.truncated_normal(
            k, np.array([-3.0, -1.0, 0.0], np.float32), 1.0), "ulp", seed=2),
        # randint
        Case("randint_10", lambda r, k: r.randint(k, (10,), 0, 10), seed=0),
        Case("randint_3x4", lambda r, k: r.randint(k, (3, 4), -5, 5), seed=42),
        Case("randint_1000", lambda r, k: r.randint(k, (1000,), 0, 1000), seed=1),
        Case("randint_full_range", lambda r, k: r.randint(k, (6,), -2**31, 2**31 - 1, np.int32), seed=2),
        Case("randint_empty_range", lambda r, k: r.randint(k, (4,), 5, 5), seed=3),
        Case("randint_array_bounds", lambda r, k: r.randint(
            k, (2, 3), np.array([0, 10, 100], np.int32), np.array([5, 20, 1000], np.int32)), seed=4),
        Case("randint_int8", lambda r, k: r.randint(k, (16,), -128, 128, np.int8), seed=42),
        Case("randint_uint8", lambda r, k: r.randint(k, (16,), 0, 256, np.uint8), seed=42),
        Case("randint_int64", lambda r, k: r.randint(k, (8,), 0, 10**12, np.int64), x64=True, seed=42),
        # bernoulli
        Case("bernoulli_half", lambda r, k: r.bernoulli(k, 0.5, (10,)), seed=0),
        Case("bernoulli_03", lambda r, k: r.bernoulli(k, 0.3, (200,)), seed=1),
        Case("bernoulli_array_p", lambda r, k: r.bernoulli(
            k, np.array([0.1, 0.5, 0.9, 1.0], np.float32), (3, 4)), seed=42),
        Case("bernoulli_shape_of_p", lambda r, k: r.bernoulli(k, np.full((5,), 0.7, np.float32)), seed=2),
        Case("bernoulli_f16_p", lambda r, k: r.bernoulli(k, np.full((8,), 0.25, np.float16)), seed=3),
        Case("bernoulli_high", lambda r, k: r.bernoulli(k, 0.3, (50,), mode="high"), seed=4),
        # permutation and choice
        Case("permutation_10", lambda r, k: r.permutation(k, 10), seed=0),
        Case("permutation_100", lambda r, k: r.permutation(k, 100), seed=42),
        Case("permutation_1", lambda r, k: r.permutation(k, 1), seed=1),
        Case("permutation_2000", lambda r, k: r.permutation(k, 2000), seed=2),
        Case("permutation_array", lambda r, k: r.permutation(
            k, np.arange(6, dtype=np.float32) * 1.5), seed=3),
        Case("permutation_rows", lambda r, k: r.permutation(
            k, np.arange(15, dtype=np.int32).reshape(5, 3)), seed=4),
        Case("permutation_axis1_independent", lambda r, k: r.permutation(
            k, np.arange(15, dtype=np.int32).reshape(3, 5), axis=1, independent=True), seed=5),
        Case("choice_replace", lambda r, k: r.choice(k, 5, (3,)), seed=0),
        Case("choice_no_replace", lambda r, k: r.choice(k, 10, (4,), replace=False), seed=1),
        Case("choice_array", lambda r, k: r.choice(
            k, np.arange(8, dtype=np.float32), (2, 2)), seed=2),
        Case("choice_p", lambda r, k: r.choice(
            k, 5, (20,), p=np.array([0.1, 0.2, 0.3, 0.2, 0.2], np.float32)), seed=3),
        # gumbel and categorical
        Case("gumbel_5", lambda r, k: r.gumbel(k, (5,)), "ulp", seed=0),
        Case("gumbel_high", lambda r, k: r.gumbel(k, (50,), mode="high"), "ulp", seed=1),
        Case("categorical_1d", lambda r, k: r.categorical(
            k, np.array([0.0, 1.0, 2.0, -1.0, 0.5], np.float32), shape=(8,)), seed=0),
        Case("categorical_rows", lambda r, k: r.categorical(
            k, np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25] * 4], np.float32))),
            seed=42),
        Case("categorical_axis0", lambda r, k: r.categorical(
            k, np.arange(12, dtype=np.float32).reshape(3, 4) / 4, axis=0), seed=1),
        Case("categorical_shape", lambda r, k: r.categorical(
            k, np.zeros((2, 3), np.float32), shape=(4, 2)), seed=2),
        Case("categorical_no_replace", lambda r, k: r.categorical(
            k, np.arange(6, dtype=np.float32), shape=(3,), replace=False), seed=3),
    ]
    return c


CASES = _cases()
