"""JAX's own printed StableHLO: each function runs in JAX and in pyxla (from
`jax.jit(f).lower(...).as_text()`), on fresh random inputs; integer results compare exactly."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
lax = jax.lax

from pyxla.backends import get_backend  # noqa: E402
from pyxla.hlo import parse_stablehlo  # noqa: E402


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _cases(rng):
    x, y = _f32(rng, 4, 6), _f32(rng, 4, 6)
    i, j = rng.integers(-100, 100, (16,), dtype=np.int32), rng.integers(1, 9, (16,), dtype=np.int32)
    idx = rng.integers(0, 4, (5,), dtype=np.int32)
    img, ker = _f32(rng, 2, 8, 8, 3), _f32(rng, 3, 3, 3, 4)
    return {
        "elementwise": (lambda a, b: (jnp.sin(a) * b + jnp.exp(-a * a), jnp.maximum(a, b)), (x, y)),
        "integers": (lambda a, b: (a // b, a % b, a << (b % 8), a ^ b, jnp.clip(a, -5, 5)), (i, j)),
        "reductions": (lambda a: (a.sum(0), a.max(1), jnp.argmax(a, 1), jnp.cumsum(a, 1)), (x,)),
        "softmax": (lambda a: jax.nn.log_softmax(a, axis=-1), (x,)),
        "cond_while": (lambda a: (lax.cond(a[0, 0] > 0, jnp.sin, jnp.cos, a),
                                  lax.fori_loop(0, 3, lambda k, c: c * 2 + k, a)), (x,)),
        "scan": (lambda a: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(6, jnp.float32), a), (x,)),
        "sort_topk": (lambda a: (jnp.sort(a, 1), jnp.argsort(a, 0), lax.top_k(a, 3)), (x,)),
        "gather_scatter": (lambda a, k: (a[k], a.at[k].add(1.0), jnp.take_along_axis(a, k[:4, None] % 6, 1)),
                           (x, idx)),
        "dot_conv": (lambda a, b, c, d: (a @ b.T, lax.conv_general_dilated(c, d, (2, 2), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))), (x, y, img, ker)),
        "special": (lambda a: (jax.scipy.special.erf(a), lax.erf_inv(jnp.tanh(a)), jax.scipy.special.gammaln(
            jnp.abs(a) + 0.5), jax.scipy.special.digamma(jnp.abs(a) + 0.5), jax.nn.gelu(a, approximate=False)),
            (x,)),
        "bf16_f16": (lambda a: ((a.astype(jnp.bfloat16) * 3).astype(jnp.float32),
                                jnp.tanh(a.astype(jnp.float16))), (x,)),
        "composite": (lambda a: lax.composite(lambda t: t * 2.0 + 1.0, name="my.affine")(a), (x,)),
        "reshape_transpose_pad": (lambda a: (a.reshape(2, 12).T, jnp.pad(a, ((1, 0), (0, 2))),
                                             jnp.concatenate([a, a[::-1]], 0), a[1:3, ::2]), (x,)),
    }


def _close(got, want, rtol=2e-3):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=2e-4)


NAMES = ["elementwise", "integers", "reductions", "softmax", "cond_while", "scan", "sort_topk",
         "gather_scatter", "dot_conv", "special", "bf16_f16", "composite", "reshape_transpose_pad"]


@pytest.mark.parametrize("name", NAMES)
def test_jax_stablehlo_matches_jax(name, rng):
    fn, args = _cases(rng)[name]
    text = jax.jit(fn).lower(*args).as_text()
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    module = parse_stablehlo(text, f"<{name}>")
    got = get_backend("interpreter").compile(module).run_flat(list(args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _close(g, w, rtol=1e-2 if name == "bf16_f16" else 2e-3)   # bf16: XLA may skip a rounding


def test_debug_info_locations_and_cpu_backend(rng):
    """`as_text(debug_info=True)` adds `loc(...)` and `#loc` aliases; the CPU backend runs it."""
    fn, args = _cases(rng)["softmax"]
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    assert "loc(" in text
    got = get_backend("cpu").compile(parse_stablehlo(text)).run_flat(list(args))
    _close(got[0], jax.jit(fn)(*args))


def test_jax_export_mlir_module(rng):
    from jax import export
    x = _f32(rng, 3, 5)
    exported = export.export(jax.jit(lambda a: jnp.tanh(a) @ a.T))(x)
    module = parse_stablehlo(exported.mlir_module())
    (got,) = get_backend("interpreter").compile(module).run_flat([x])
    _close(got, np.tanh(x) @ x.T)
