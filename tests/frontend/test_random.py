"""pyxla.random: JAX's values, eagerly and inside jit, and the distributions' statistics.

The reference values are JAX's (jax.random 0.10.2, its default threefry2x32 with
jax_threefry_partitionable=True, on a CPU with FMA), stored in
data/random_jax_reference.npz by data/make_random_reference.py from the cases in
random_cases.py. Bits, keys, integers, booleans and uniform floats must match bit for
bit. Results that go through log1p, erf or log (normal, truncated_normal, gumbel) are
XLA's polynomials evaluated with pyxla's own log1p, erf and log: within ULP_BOUND of JAX's.
"""
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import pyxla
from pyxla import lax, random

from .random_cases import CASES, SEEDS

REF = np.load(Path(__file__).parent / "data" / "random_jax_reference.npz")
BY_NAME = {c.name: c for c in CASES}
# the most units in the last place a result through log1p/erf/log may be from JAX's, by
# byte width: XLA's float64 log1p is off by up to ~20 ulp of its own
ULP_BOUND = {2: 1, 4: 4, 8: 64}
JIT_CASES = ["split_2x3", "fold_in_max", "bits_u8", "bits_u64", "uniform_array_bounds", "uniform_bf16_range",
             "uniform_f64_range", "normal_2000", "normal_f16", "truncnorm_3x4", "randint_3x4",
             "bernoulli_array_p", "permutation_100", "categorical_rows"]


def expected(name):
    if name in REF:
        return REF[name]
    return REF[name + "__bfloat16_bits"].view(ml_dtypes.bfloat16)


def ulp_distance(a, b):
    """Units in the last place between two float arrays of one dtype (bit patterns made
    monotonic: negative floats counted down from zero)."""
    width = a.dtype.itemsize * 8
    as_int = {16: np.int16, 32: np.int32, 64: np.int64}[width]

    def ordered(x):
        i = np.atleast_1d(x).view(as_int).astype(object)
        return np.where(i < 0, -(2 ** (width - 1)) - i, i)
    return int(np.max(np.abs(ordered(a) - ordered(b)), initial=0))


def assert_matches_jax(case, got):
    want = expected(case.name)
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{case.name}: {got.dtype}{list(got.shape)}, JAX gives {want.dtype}{list(want.shape)}"
    if case.compare == "exact":
        assert np.array_equal(np.atleast_1d(got).view(np.uint8), np.atleast_1d(want).view(np.uint8)), \
            f"{case.name}:\n{got}\nJAX:\n{want}"
    else:
        assert not np.isnan(got.astype(np.float64)).any()
        d = ulp_distance(got, want)
        assert d <= ULP_BOUND[got.dtype.itemsize], f"{case.name}: {d} ulp from JAX's\n{got}\nJAX:\n{want}"


def test_reference_file_is_jax_0_10():
    assert str(REF["jax_version"]).startswith("0.10")


@pytest.mark.parametrize("seed", SEEDS)
def test_prngkey_matches_jax(seed):
    want = REF[f"key_seed{seed}"]
    key = random.PRNGKey(seed)
    assert key.dtype == np.uint32 and np.array_equal(key, want)
    assert np.array_equal(random.key(seed), want)
    traced = pyxla.jit(random.PRNGKey)(np.int64(seed))   # the seed traced: its low 32 bits
    assert traced.dtype == np.uint32 and np.array_equal(traced, want)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_eager_matches_jax(case):
    assert_matches_jax(case, case.fn(random, random.PRNGKey(case.seed)))


@pytest.mark.parametrize("name", JIT_CASES)
def test_jit_matches_jax(name):
    case = BY_NAME[name]
    f = pyxla.jit(lambda key: case.fn(random, key))
    assert_matches_jax(case, f(random.PRNGKey(case.seed)))


def test_interpreter_backend_matches_jax():
    case = BY_NAME["randint_3x4"]
    f = pyxla.jit(lambda key: case.fn(random, key), backend="interpreter")
    assert_matches_jax(case, f(random.PRNGKey(case.seed)))


def test_threefry_known_answer():
    """The Random123 known-answer vectors for Threefry-2x32 with 20 rounds."""
    u32 = np.uint32
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for key, count, out in cases:
        got = random.threefry2x32(u32(key[0]), u32(key[1]), u32(count[0]), u32(count[1]))
        assert [int(v) for v in got] == list(out)


# --- keys and streams -------------------------------------------------------------------------

def test_split_keys_give_different_streams(rng):
    key = random.PRNGKey(int(rng.integers(2**31)))
    keys = random.split(key, 4)
    assert keys.shape == (4, 2) and len({tuple(k) for k in keys.tolist()} | {tuple(key.tolist())}) == 5
    draws = [random.uniform(k, (2000,)) for k in keys]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(draws[i], draws[j])
            assert abs(np.corrcoef(draws[i], draws[j])[0, 1]) < 0.12   # 5 sigma for 2000 pairs
    assert not np.array_equal(random.uniform(key, (100,)), random.uniform(keys[0], (100,)))


def test_fold_in_gives_distinct_keys():
    key = random.PRNGKey(3)
    folded = {tuple(random.fold_in(key, i).tolist()) for i in range(20)}
    assert len(folded) == 20
    assert np.array_equal(random.fold_in(key, 5), random.fold_in(key, np.int32(5)))


def test_same_key_same_numbers_and_jit_agrees():
    key = random.PRNGKey(11)
    a = random.normal(key, (64,))
    assert np.array_equal(a, random.normal(key, (64,)))
    b = pyxla.jit(lambda k: random.normal(k, (64,)))(key)
    assert ulp_distance(a, b) <= ULP_BOUND[4]


def test_keys_in_a_traced_training_loop():
    """Split a key on every step of lax.scan inside jit, as a training loop does; the same
    steps in Python give the same numbers."""
    def step(key, _):
        key, sub = random.split(key)
        return key, random.uniform(sub, (3,))

    key = random.PRNGKey(0)
    final, draws = pyxla.jit(lambda k: lax.scan(step, k, None, length=4))(key)
    k = key
    for i in range(4):
        k, sub = random.split(k)
        assert np.array_equal(draws[i], random.uniform(sub, (3,)))
    assert np.array_equal(final, k)


def test_fold_in_with_a_traced_step():
    f = pyxla.jit(lambda key, step: random.normal(random.fold_in(key, step), (5,)))
    key = random.PRNGKey(1)
    for step in (0, 7):
        got = f(key, np.int32(step))
        assert ulp_distance(got, random.normal(random.fold_in(key, step), (5,))) <= ULP_BOUND[4]


def test_bad_keys_are_refused():
    with pytest.raises(TypeError, match="uint32"):
        random.uniform(np.array([0, 1], np.int64), (3,))
    with pytest.raises(ValueError, match="single key"):
        random.normal(random.split(random.PRNGKey(0), 3), (2,))
    with pytest.raises(TypeError):
        random.PRNGKey(1.5)
    with pytest.raises(ValueError, match="unsigned"):
        random.bits(random.PRNGKey(0), (2,), np.int32)
    with pytest.raises(ValueError, match="float"):
        random.uniform(random.PRNGKey(0), (2,), np.int32)
    with pytest.raises(ValueError, match="broadcast"):
        random.uniform(random.PRNGKey(0), (2, 3), minval=np.zeros(4, np.float32))


# --- statistics (fresh keys each run; bounds at about 5 sigma) ------------------------------

N = 100_000


@pytest.fixture
def key(rng):
    return random.PRNGKey(int(rng.integers(2**31)))


def test_uniform_statistics(key):
    u = random.uniform(key, (N,))
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    counts = np.bincount((u * 10).astype(int), minlength=10)
    assert np.all(np.abs(counts - N / 10) < 5 * math.sqrt(N * 0.1 * 0.9))
    v = random.uniform(key, (N,), minval=-3.0, maxval=5.0)
    assert v.min() >= -3 and v.max() < 5 and abs(v.mean() - 1) < 5 * 8 * math.sqrt(1 / 12 / N)


def test_normal_statistics(key):
    x = random.normal(key, (N,)).astype(np.float64)
    assert np.isfinite(x).all()
    assert abs(x.mean()) < 5 / math.sqrt(N)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / N)
    tail = np.mean(np.abs(x) > 1.959964)
    assert abs(tail - 0.05) < 5 * math.sqrt(0.05 * 0.95 / N)
    assert abs(np.mean(x ** 4) - 3) < 5 * math.sqrt(96 / N)


def test_truncated_normal_statistics(key):
    x = random.truncated_normal(key, -1.0, 2.0, (N,)).astype(np.float64)
    assert x.min() > -1 and x.max() < 2
    # mean of N(0, 1) truncated to (a, b): (phi(a) - phi(b)) / (Phi(b) - Phi(a))
    phi = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)   # noqa: E731
    Phi = lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2)))   # noqa: E731
    mean = (phi(-1) - phi(2)) / (Phi(2) - Phi(-1))
    assert abs(x.mean() - mean) < 5 * x.std() / math.sqrt(N)


def test_bernoulli_statistics(key):
    b = random.bernoulli(key, 0.3, (N,))
    assert b.dtype == np.bool_
    assert abs(b.mean() - 0.3) < 5 * math.sqrt(0.21 / N)
    p = np.array([0.0, 0.25, 1.0], np.float32)
    m = random.bernoulli(key, p, (N // 10, 3))
    assert not m[:, 0].any() and m[:, 2].all()
    assert abs(m[:, 1].mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / (N // 10))


def test_dropout_keeps_the_expected_value(key):
    """The dropout recipe in docs/frontend.md: keep with probability 1 - rate, rescale."""
    rate = 0.2
    x = np.ones((N,), np.float32)

    @pyxla.jit
    def dropout(key, x):
        keep = random.bernoulli(key, 1.0 - rate, x.shape)
        return pyxla.numpy.where(keep, x / (1.0 - rate), 0.0)

    y = dropout(key, x)
    assert y.dtype == np.float32 and set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.8)}
    assert abs(np.mean(y == 0) - rate) < 5 * math.sqrt(rate * (1 - rate) / N)
    assert abs(y.mean() - 1) < 5 * math.sqrt(rate / (1 - rate) / N)


def test_randint_covers_its_range(key):
    r = random.randint(key, (N,), -3, 7)
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 6
    counts = np.bincount(r + 3, minlength=10)
    assert np.all(np.abs(counts - N / 10) < 5 * math.sqrt(N * 0.1 * 0.9))
    b = random.randint(key, (N,), 0, 256, np.uint8)
    assert b.dtype == np.uint8 and len(np.unique(b)) == 256
    assert np.all(random.randint(key, (100,), 5, 5) == 5)   # an empty range gives minval


def test_permutation_is_a_permutation(key):
    p = random.permutation(key, 1000)
    assert p.dtype == np.int32 and np.array_equal(np.sort(p), np.arange(1000))
    assert not np.array_equal(p, np.arange(1000))
    rows = np.arange(20, dtype=np.float32).reshape(5, 4)
    q = random.permutation(key, rows)
    assert sorted(map(tuple, q.tolist())) == sorted(map(tuple, rows.tolist()))
    ind = random.permutation(key, rows, axis=1, independent=True)
    assert np.array_equal(np.sort(ind, axis=1), rows)


def test_categorical_frequencies(key):
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    s = random.categorical(key, logits, shape=(N,))
    assert s.dtype == np.int32
    freq = np.bincount(s, minlength=4) / N
    assert np.all(np.abs(freq - [0.1, 0.2, 0.3, 0.4]) < 5 * math.sqrt(0.25 / N))
    distinct = random.categorical(key, np.zeros(6, np.float32), shape=(6,), replace=False)
    assert sorted(distinct.tolist()) == list(range(6))


def test_gumbel_and_choice_statistics(key):
    g = random.gumbel(key, (N,)).astype(np.float64)
    assert abs(g.mean() - 0.5772156649) < 5 * (math.pi / math.sqrt(6)) / math.sqrt(N)
    c = random.choice(key, 5, (N,), p=np.array([0.5, 0.0, 0.25, 0.25, 0.0], np.float32))
    freq = np.bincount(c, minlength=5) / N
    assert freq[1] == 0 and freq[4] == 0 and abs(freq[0] - 0.5) < 5 * math.sqrt(0.25 / N)
    assert sorted(random.choice(key, 8, (8,), replace=False).tolist()) == list(range(8))
