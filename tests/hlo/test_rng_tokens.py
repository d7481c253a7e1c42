"""rng (distribution=rng_uniform / rng_normal, ops/rng.py) and after-all's tokens on both
backends: moments and bounds, determinism, text XLA's parser accepts."""
import ml_dtypes
import numpy as np
import pytest

from pyxla import VerifierError
from pyxla.backends import get_backend
from pyxla.hlo import parse_module, print_module, verify_module
from tests.xla_reference import parse_on_xla

BACKENDS = ["interpreter", "cpu"]
NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
      "s32": np.int32, "u32": np.uint32, "s64": np.int64}


def _run(text, args, backend):
    return get_backend(backend).compile(parse_module(text)).run_flat(args)


def _rng_text(dtype, distribution, dims=(200, 100)):
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    return (f"HloModule m\nENTRY e {{\n  a = {dtype}[] parameter(0)\n  b = {dtype}[] parameter(1)\n"
            f"  ROOT r = {shape} rng(a, b), distribution={distribution}\n}}\n")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,lo,hi", [("f32", 2.0, 5.0), ("f64", -1.0, 3.0), ("f16", -1.0, 1.0),
                                         ("bf16", 0.0, 8.0), ("s32", -5, 7), ("u32", 3, 100), ("s64", -1000, 1000)])
def test_uniform_bounds_and_moments(backend, dtype, lo, hi):
    (x,) = _run(_rng_text(dtype, "rng_uniform"), [np.array(lo, NP[dtype]), np.array(hi, NP[dtype])], backend)
    assert x.dtype == NP[dtype] and x.shape == (200, 100)
    x = x.astype(np.float64)
    assert x.min() >= lo and x.max() < hi
    if NP[dtype] in (np.int32, np.uint32, np.int64):
        hi = hi - 1
        assert set(np.unique(x)) == set(range(int(lo), int(hi) + 1))
        var = ((hi - lo + 1) ** 2 - 1) / 12
    else:
        var = (hi - lo) ** 2 / 12
    assert abs(x.mean() - (lo + hi) / 2) < 5 * np.sqrt(var / x.size) + 1e-2 * (hi - lo)
    assert abs(x.var() / var - 1) < 0.03


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_normal_moments(backend, dtype):
    mu, sigma = 1.5, 3.0
    (x,) = _run(_rng_text(dtype, "rng_normal"), [np.array(mu, NP[dtype]), np.array(sigma, NP[dtype])], backend)
    z = (x.astype(np.float64) - mu) / sigma
    assert np.isfinite(z).all()
    n = z.size
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.std() - 1) < 0.02
    assert abs(np.mean(z ** 3)) < 0.05 and abs(np.mean(z ** 4) - 3) < 0.15
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01


def test_values_are_deterministic_and_the_same_on_both_backends():
    text = _rng_text("f32", "rng_uniform", (64,))
    args = [np.float32(0), np.float32(1)]
    first = _run(text, args, "interpreter")[0]
    np.testing.assert_array_equal(_run(text, args, "interpreter")[0], first)
    np.testing.assert_array_equal(_run(text, args, "cpu")[0], first)
    normal = _rng_text("f64", "rng_normal", (64,))
    np.testing.assert_allclose(_run(normal, [0.0, 1.0], "cpu")[0], _run(normal, [0.0, 1.0], "interpreter")[0],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_rng_instructions_draw_different_values(backend):
    text = """HloModule m
ENTRY e {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  r1 = f32[32] rng(a, b), distribution=rng_uniform
  r2 = f32[32] rng(a, b), distribution=rng_uniform
  ROOT t = (f32[32], f32[32]) tuple(r1, r2)
}
"""
    x, y = _run(text, [np.float32(0), np.float32(1)], backend)
    assert not np.array_equal(x, y)


def test_rng_text_parses_on_xla():
    for distribution in ("rng_uniform", "rng_normal"):
        text = print_module(parse_module(_rng_text("f32", distribution)))
        assert f"distribution={distribution}" in text
        parse_on_xla(text)


@pytest.mark.parametrize("text,message", [
    ("a = f32[2] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[4] rng(a, b), distribution=rng_uniform",
     "scalar"),
    ("a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[4] rng(a, b), distribution=rng_normal",
     "floating-point"),
    ("a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[4] rng(a, b)", "distribution"),
    ("a = f32[] parameter(0)\n  b = f64[] parameter(1)\n  ROOT r = f32[4] rng(a, b), distribution=rng_uniform",
     "f32\\[\\] scalar"),
])
def test_rng_verifier_refuses(text, message):
    with pytest.raises(VerifierError, match=message):
        verify_module(parse_module(f"HloModule m\nENTRY e {{\n  {text}\n}}\n"))


# --- after-all: tokens on the cpu backend --------------------------------------------------------

TOKEN_PROGRAMS = {
    "root token": ("ROOT t = token[] after-all()", []),
    "token in a tuple": ("t0 = token[] after-all()\n  t1 = token[] after-all()\n  t = token[] after-all(t0, t1)\n"
                         "  ROOT r = (f32[2], token[]) tuple(p, t)", [np.ones(2, np.float32)]),
    "ordered by a token": ("t = token[] after-all()\n  ROOT r = f32[2] add-dependency(p, t)", [np.ones(2, np.float32)]),
}


@pytest.mark.parametrize("name", TOKEN_PROGRAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_after_all(name, backend):
    body, want = TOKEN_PROGRAMS[name]
    text = f"HloModule m\nENTRY e {{\n  p = f32[2] parameter(0)\n  {body}\n}}\n"
    got = _run(text, [np.ones(2, np.float32)], backend)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_carried_through_a_loop(backend):
    text = """HloModule m
body {
  s = (s32[], token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  t = token[] get-tuple-element(s), index=1
  j = s32[] add(i, i)
  u = token[] after-all(t)
  ROOT r = (s32[], token[]) tuple(j, u)
}
cond {
  s = (s32[], token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  limit = s32[] constant(100)
  ROOT lt = pred[] compare(i, limit), direction=LT
}
ENTRY e {
  p = s32[] parameter(0)
  t = token[] after-all()
  w = (s32[], token[]) while((s32[], token[]) tuple(p, t)), condition=cond, body=body
  i = s32[] get-tuple-element(w), index=0
  u = token[] get-tuple-element(w), index=1
  ROOT r = (s32[], token[]) tuple(i, u)
}
"""
    got = _run(text, [np.int32(3)], backend)
    assert [int(g) for g in got] == [192]
