"""pyxla.nn.initializers: JAX's values for the same key where JAX is installed (bit for bit
for the uniform-based ones), and everywhere the fans, the moments of a large sample, the
bounds, and the same values under jit as eagerly."""
import math

import numpy as np
import pytest

import pyxla
from pyxla import random
from pyxla.nn import initializers as init

SCALING = [  # name, scale, fan mode, distribution
    ("glorot_uniform", 1.0, "fan_avg", "uniform"),
    ("glorot_normal", 1.0, "fan_avg", "truncated_normal"),
    ("lecun_uniform", 1.0, "fan_in", "uniform"),
    ("lecun_normal", 1.0, "fan_in", "truncated_normal"),
    ("he_uniform", 2.0, "fan_in", "uniform"),
    ("he_normal", 2.0, "fan_in", "truncated_normal"),
]
SHAPES = [((64, 48), {}), ((3, 3, 16, 8), {}), ((5, 7, 6), {"in_axis": 0, "out_axis": (1, 2)}),
          ((4, 10, 12), {"batch_axis": 0}), ((2, 9, 3, 5), {"in_axis": -1, "out_axis": -2, "batch_axis": (0,)})]


def _key(rng):
    return random.PRNGKey(int(rng.integers(0, 2**31)))


def test_names_and_aliases():
    assert init.xavier_uniform is init.glorot_uniform and init.xavier_normal is init.glorot_normal
    assert init.kaiming_uniform is init.he_uniform and init.kaiming_normal is init.he_normal
    assert init.glorot_uniform.__name__ == "glorot_uniform"
    import pyxla.nn
    assert pyxla.nn.initializers.glorot_uniform is init.glorot_uniform


def test_compute_fans():
    assert init.compute_fans((64, 48)) == (64, 48)
    assert init.compute_fans((3, 3, 16, 8)) == (16 * 9, 8 * 9)            # HWIO: the window is the receptive field
    assert init.compute_fans((8, 16, 3, 3), in_axis=1, out_axis=0) == (16 * 9, 8 * 9)   # OIHW
    assert init.compute_fans((5, 7, 6), in_axis=0, out_axis=(1, 2)) == (5, 42)
    assert init.compute_fans((4, 10, 12), batch_axis=0) == (10, 12)
    with pytest.raises(ValueError, match="at least 2D"):
        init.compute_fans((7,))


def test_zeros_ones_constant():
    key = random.PRNGKey(0)
    z = init.zeros(key, (2, 3))
    assert z.dtype == np.float32 and z.shape == (2, 3) and not np.any(z)
    o = init.ones(key, (4,), np.float64)
    assert o.dtype == np.float64 and np.all(np.asarray(o) == 1)
    c = init.constant(0.25, np.float16)(key, (3, 2))
    assert c.dtype == np.float16 and np.all(np.asarray(c) == np.float16(0.25))


@pytest.mark.parametrize("name, scale, mode, distribution", SCALING, ids=[s[0] for s in SCALING])
def test_variance_scaling_moments_and_bounds(name, scale, mode, distribution, rng):
    shape, axes = (3, 3, 400, 100), {}   # HWIO
    fan_in, fan_out = 400 * 9, 100 * 9
    n = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
    w = getattr(init, name)(**axes)(_key(rng), shape)
    assert w.shape == shape and w.dtype == np.float32
    w = np.asarray(w, np.float64)
    variance = scale / n
    std = math.sqrt(variance)
    # 360,000 draws: the mean's standard error is std/600, the variance's about 0.3%
    assert abs(w.mean()) < 5 * std / math.sqrt(w.size)
    assert abs(w.var() / variance - 1) < 0.02, (w.var(), variance)
    limit = math.sqrt(3 * variance) if distribution == "uniform" else 2 * std / init.TRUNCATED_STDDEV
    assert np.abs(w).max() <= limit * (1 + 1e-6)
    assert np.abs(w).max() > 0.98 * limit   # the tails are reached: not a narrower distribution


@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated_normal"])
def test_plain_distributions(kind, rng):
    factory = getattr(init, kind)(0.5)
    w = factory(_key(rng), (300, 400))
    assert w.dtype == np.float32 and w.shape == (300, 400)
    w = np.asarray(w, np.float64)
    mean, variance = {"uniform": (0.25, 0.5 ** 2 / 12), "normal": (0.0, 0.5 ** 2),
                      "truncated_normal": (0.0, (0.5 * init.TRUNCATED_STDDEV) ** 2)}[kind]
    assert abs(w.mean() - mean) < 5 * math.sqrt(variance / w.size)
    assert abs(w.var() / variance - 1) < 0.02, (w.var(), variance)
    if kind == "uniform":
        assert w.min() >= 0 and w.max() < 0.5
    if kind == "truncated_normal":
        assert np.abs(w).max() <= 1.0


def test_same_key_same_values_and_split_keys_differ(rng):
    key = _key(rng)
    a = np.asarray(init.he_normal()(key, (20, 30)))
    np.testing.assert_array_equal(a, init.he_normal()(key, (20, 30)))
    k1, k2 = random.split(key)
    assert not np.array_equal(init.he_normal()(k1, (20, 30)), init.he_normal()(k2, (20, 30)))


@pytest.mark.parametrize("name", ["glorot_uniform", "he_normal", "lecun_uniform"])
def test_under_jit_as_eagerly(name, rng):
    key = _key(rng)
    make = getattr(init, name)()
    eager = np.asarray(make(key, (3, 3, 8, 16)))
    jitted = pyxla.jit(lambda k: make(k, (3, 3, 8, 16)))(key)
    np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-7)


def test_float64_and_float16(rng):
    key = _key(rng)
    w64 = init.glorot_uniform(dtype=np.float64)(key, (10, 10))
    assert w64.dtype == np.float64
    w16 = init.he_uniform()(key, (10, 10), np.float16)
    assert w16.dtype == np.float16 and np.abs(np.asarray(w16, np.float64)).max() <= math.sqrt(6 / 10) * 1.001


@pytest.mark.parametrize("shape, column_axis", [((30, 20), -1), ((20, 30), -1), ((4, 5, 12), -1), ((6, 3, 5), 0)])
def test_orthogonal(shape, column_axis, rng):
    q = np.asarray(init.orthogonal(scale=2.0, column_axis=column_axis)(_key(rng), shape), np.float64)
    assert q.shape == shape
    cols = shape[column_axis]
    m = np.moveaxis(q, column_axis, -1).reshape(-1, cols)
    gram = m.T @ m if m.shape[0] >= cols else m @ m.T
    np.testing.assert_allclose(gram, 4 * np.eye(gram.shape[0]), atol=1e-5)
    with pytest.raises(TypeError, match="concrete key"):
        pyxla.jit(lambda k: init.orthogonal()(k, (4, 4)))(random.PRNGKey(0))


# --- against JAX ---------------------------------------------------------------------------

def _jax():
    return pytest.importorskip("jax")


@pytest.mark.parametrize("name, scale, mode, distribution", SCALING, ids=[s[0] for s in SCALING])
def test_variance_scaling_matches_jax(name, scale, mode, distribution, rng):
    jax = _jax()
    # two of the shapes and axis choices for each (JAX compiles every new shape: all would be slow)
    for k in rng.choice(len(SHAPES), 2, replace=False):
        shape, axes = SHAPES[k]
        seed = int(rng.integers(0, 2**31))
        got = np.asarray(getattr(init, name)(**axes)(random.PRNGKey(seed), shape))
        want = np.asarray(getattr(jax.nn.initializers, name)(**axes)(jax.random.PRNGKey(seed), shape))
        assert got.dtype == want.dtype == np.float32
        if distribution == "uniform":
            np.testing.assert_array_equal(got, want, err_msg=f"{shape} {axes}")   # JAX's bits, scaled in JAX's order
        else:   # erf_inv computed another way: a few ulp
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7 * np.abs(want).max(), err_msg=f"{shape} {axes}")


@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "fan_avg"])
@pytest.mark.parametrize("distribution", ["uniform", "normal", "truncated_normal"])
def test_variance_scaling_arguments_match_jax(mode, distribution, rng):
    jax = _jax()
    seed = int(rng.integers(0, 2**31))
    args = (0.7, mode, distribution)
    got = np.asarray(init.variance_scaling(*args, in_axis=1, out_axis=0)(random.PRNGKey(seed), (6, 11, 3)))
    want = np.asarray(jax.nn.initializers.variance_scaling(*args, in_axis=1, out_axis=0)(jax.random.PRNGKey(seed),
                                                                                         (6, 11, 3)))
    if distribution == "uniform":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7 * np.abs(want).max())


@pytest.mark.parametrize("name, args", [("uniform", (0.3,)), ("normal", (0.5,)), ("truncated_normal", (0.2,)),
                                        ("orthogonal", ()), ("orthogonal", (1.5, 0))])
@pytest.mark.parametrize("shape", [(40, 24), (8, 3, 30)])
def test_plain_initializers_match_jax(name, args, shape, rng):
    jax = _jax()
    seed = int(rng.integers(0, 2**31))
    got = np.asarray(getattr(init, name)(*args)(random.PRNGKey(seed), shape))
    want = np.asarray(getattr(jax.nn.initializers, name)(*args)(jax.random.PRNGKey(seed), shape))
    if name == "uniform":
        np.testing.assert_array_equal(got, want)
    else:   # normal draws a few ulp apart; orthogonal: NumPy's QR against XLA's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * np.abs(want).max())
    for fixed in ("zeros", "ones"):
        np.testing.assert_array_equal(getattr(init, fixed)(None, shape),
                                      getattr(jax.nn.initializers, fixed)(jax.random.PRNGKey(0), shape))
