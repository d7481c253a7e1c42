"""jit(fn, polymorphic_shapes=...): one trace with symbolic sizes, one compile per bucket.

Each program runs at seven or more sizes (1 and sizes never seen before among them) and is
compared with NumPy in float64; the compile log (PYXLA_LOG_COMPILES) and the function's
counters must show one trace and one compile per bucket touched."""
import re

import numpy as np
import pytest

import pyxla
import pyxla.lax as lax
import pyxla.numpy as pnp
from pyxla.errors import ArgumentError
from pyxla.hlo.dims import InconclusiveDimensionOperation

SIZES = (1, 5, 3, 8, 13, 2, 31, 7, 17)
RTOL, ATOL = 2e-5, 2e-5


def pow2_bucket(n: int, cap: int | None = None) -> int:
    """The default bucket: the next power of two, at least 16, capped by the declared bound."""
    b = max(16, 1 << max(0, n - 1).bit_length())
    return b if cap is None else min(b, cap)


def run_sizes(f, make_args, reference, sizes, capsys, monkeypatch, buckets=None):
    """Call f at each size, compare with the float64 reference, and check the compile log:
    one trace, one compile per bucket touched (`buckets`: expected bucket of each size)."""
    monkeypatch.setenv("PYXLA_LOG_COMPILES", "1")
    rng = np.random.default_rng(sum(sizes))
    capsys.readouterr()
    for n in sizes:
        args = make_args(rng, n)
        got = f(*args)
        want = reference(*[np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in args])
        got_leaves = got if isinstance(got, tuple) else (got,)
        want_leaves = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got_leaves, want_leaves):
            assert np.shape(g) == np.shape(w), (n, np.shape(g), np.shape(w))
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"size {n}")
    log = capsys.readouterr().err
    traces = re.findall(r"pyxla: tracing \S+", log)
    compiles = re.findall(r"pyxla: compiling \S+ for bucket (.*) \(size", log)
    expected = buckets if buckets is not None else [pow2_bucket(n) for n in sizes]
    assert len(traces) == 1, log
    assert f.trace_count == 1
    assert len(compiles) == len(set(expected)) == f.compile_count, log
    return log


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_mlp_dynamic_batch(capsys, monkeypatch):
    rng = np.random.default_rng(1)
    w1, b1, w2 = f32(rng, 12, 32), f32(rng, 32), f32(rng, 32, 5)

    def mlp(x, w1, b1, w2):
        return pnp.tanh(x @ w1 + b1) @ w2

    f = pyxla.jit(mlp, polymorphic_shapes=("b, 12", None, None, None))
    log = run_sizes(f, lambda r, n: (f32(r, n, 12), w1, b1, w2),
                    lambda x, w1, b1, w2: np.tanh(x @ w1 + b1) @ w2, SIZES, capsys, monkeypatch)
    assert "bucket b<=32 (size b=31)" in log


def test_reductions_over_the_dynamic_dimension(capsys, monkeypatch):
    def stats(x):
        mean = x.sum(0) / x.shape[0]          # the size as a value: get-dimension-size
        return mean, x.max(0), pnp.mean(x * x, axis=0), pnp.min(x, axis=(0, 1))

    f = pyxla.jit(stats, polymorphic_shapes=("n, 6",))
    run_sizes(f, lambda r, n: (f32(r, n, 6) + 3.0,),
              lambda x: (x.sum(0) / x.shape[0], x.max(0), np.mean(x * x, axis=0), x.min()), SIZES, capsys,
              monkeypatch)


def test_attention_with_dynamic_sequence_length(capsys, monkeypatch):
    rng = np.random.default_rng(2)
    wq, wk, wv = f32(rng, 16, 16), f32(rng, 16, 16), f32(rng, 16, 16)

    def attention(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = q @ k.T / np.sqrt(16.0)               # s x s, both symbolic
        p = pyxla.nn.softmax(scores, axis=-1)           # softmax over the dynamic axis
        return p @ v                                    # contracts over the dynamic axis

    def reference(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        s = q @ k.T / 4.0
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    f = pyxla.jit(attention, polymorphic_shapes=("s, 16", None, None, None))
    run_sizes(f, lambda r, n: (f32(r, n, 16) * 0.5, wq, wk, wv), reference, SIZES, capsys, monkeypatch)


def _conv_reference(x, w):
    """NCHW x OIHW, stride 1, 'SAME' padding for a 3x3 kernel, in float64."""
    n, c, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out


def test_convolution_net_with_dynamic_batch(capsys, monkeypatch):
    rng = np.random.default_rng(3)
    w1, w2, dense = f32(rng, 4, 3, 3, 3) * 0.3, f32(rng, 4, 4, 3, 3) * 0.3, f32(rng, 4, 2)

    def net(x, w1, w2, dense):
        h = pnp.maximum(lax.conv_general_dilated(x, w1, (1, 1), "SAME"), 0.0)
        h = lax.conv_general_dilated(h, w2, (1, 1), "SAME")
        return h.mean(axis=(2, 3)) @ dense

    def reference(x, w1, w2, dense):
        h = np.maximum(_conv_reference(x, w1), 0.0)
        return _conv_reference(h, w2).mean(axis=(2, 3)) @ dense

    f = pyxla.jit(net, polymorphic_shapes=("b, 3, 6, 6", None, None, None))
    run_sizes(f, lambda r, n: (f32(r, n, 3, 6, 6), w1, w2, dense), reference, (1, 2, 5, 3, 9, 4, 6), capsys,
              monkeypatch)


def test_concatenate_and_cumsum_along_the_dynamic_dimension(capsys, monkeypatch):
    def fn(x, y):
        joined = pnp.concatenate([x, 2.0 * y, x[:1]], axis=0)     # 2*n + 1 rows
        return pnp.cumsum(joined, axis=0), pnp.cumsum(x, axis=0)[-1]

    def reference(x, y):
        joined = np.concatenate([x, 2.0 * y, x[:1]], axis=0)
        return np.cumsum(joined, axis=0), np.cumsum(x, axis=0)[-1]

    f = pyxla.jit(fn, polymorphic_shapes=("n, 3", "n, 3"))
    run_sizes(f, lambda r, n: (f32(r, n, 3), f32(r, n, 3)), reference, SIZES, capsys, monkeypatch)


def test_shape_arithmetic_on_symbols(capsys, monkeypatch):
    def fn(x):
        pairs = x.reshape(x.shape[0] * 2, -1)            # (2b, 4)
        back = pnp.reshape(pairs, (x.shape[0], -1))      # (b, 8)
        scale = x.shape[0] * 2                           # a size used as a value
        return back / scale, pnp.zeros((x.shape[0], 2)) + 1.0

    f = pyxla.jit(fn, polymorphic_shapes=("b, 8",))
    run_sizes(f, lambda r, n: (f32(r, n, 8),), lambda x: (x / (2 * x.shape[0]), np.ones((x.shape[0], 2))),
              (1, 4, 3, 6, 2, 11, 5), capsys, monkeypatch)


def test_a_single_declared_bucket_compiles_once(capsys, monkeypatch):
    f = pyxla.jit(lambda x, w: pnp.tanh(x @ w).sum(axis=0), polymorphic_shapes=("b, 4", None),
                  shape_constraints=("b <= 256",), size_buckets={"b": (256,)})
    rng = np.random.default_rng(4)
    w = f32(rng, 4, 3)
    sizes = (1, 256, 7, 100, 33, 2, 255, 64)
    run_sizes(f, lambda r, n: (f32(r, n, 4), w), lambda x, w: np.tanh(x @ w).sum(0), sizes, capsys, monkeypatch,
              buckets=[256] * len(sizes))
    assert f.buckets() == [{"b": 256}]


def test_declared_upper_bound_caps_the_power_of_two_buckets():
    f = pyxla.jit(lambda x: x * 2.0, polymorphic_shapes=("b, 2",), shape_constraints=("b <= 40",))
    rng = np.random.default_rng(5)
    for n in (33, 40, 3, 17):
        x = f32(rng, n, 2)
        np.testing.assert_array_equal(f(x), x * 2.0)
    assert f.buckets() == [{"b": 40}, {"b": 16}, {"b": 32}]   # the smallest default bucket is 16


def test_small_sizes_share_the_smallest_bucket_and_a_bound_below_it_caps_it():
    f = pyxla.jit(lambda x: x - 1.0, polymorphic_shapes=("b, 3",))
    rng = np.random.default_rng(8)
    for n in (1, 2, 5, 16):
        x = f32(rng, n, 3)
        np.testing.assert_array_equal(f(x), x - 1.0)
    assert f.buckets() == [{"b": 16}] and f.compile_count == 1
    g = pyxla.jit(lambda x: x - 1.0, polymorphic_shapes=("b, 3",), shape_constraints=("b <= 6",))
    x = f32(rng, 2, 3)
    np.testing.assert_array_equal(g(x), x - 1.0)
    assert g.buckets() == [{"b": 6}]


def test_named_size_buckets_pick_the_smallest_that_fits():
    f = pyxla.jit(lambda x: x + 1.0, polymorphic_shapes=("b,",), size_buckets={"b": (16, 128)})
    rng = np.random.default_rng(6)
    for n in (3, 16, 17, 100, 1):
        x = f32(rng, n)
        np.testing.assert_array_equal(f(x), x + 1.0)
    assert f.buckets() == [{"b": 16}, {"b": 128}]
    with pytest.raises(ArgumentError, match="largest bucket 128"):
        f(f32(rng, 129))


def test_shared_dimensions_across_arguments(capsys, monkeypatch):
    def fn(x, mask):
        return (x * mask[:, :, None]).sum(axis=1)

    f = pyxla.jit(fn, polymorphic_shapes=("b, s, 4", "b, s"))
    run_sizes(f, lambda r, n: (f32(r, 2, n, 4), (r.random((2, n)) > 0.5).astype(np.float32)),
              lambda x, m: (x * m[:, :, None]).sum(1), SIZES, capsys, monkeypatch)


def test_grad_inside_a_polymorphic_function():
    def loss(w, x):
        return pnp.sum(pnp.tanh(x @ w) ** 2) / x.shape[0]

    f = pyxla.jit(pyxla.grad(loss), polymorphic_shapes=(None, "b, 5"))
    rng = np.random.default_rng(7)
    w = f32(rng, 5, 3)
    for n in (1, 6, 3, 9, 2, 12, 5):
        x = f32(rng, n, 5)
        xd, wd = x.astype(np.float64), w.astype(np.float64)
        t = np.tanh(xd @ wd)
        want = xd.T @ (2 * t * (1 - t * t)) / n
        np.testing.assert_allclose(f(w, x), want, rtol=1e-4, atol=1e-5)
    assert f.trace_count == 1


# --- errors --------------------------------------------------------------------------------

def test_disagreeing_shared_dimensions_name_the_argument_axis_and_dimension():
    f = pyxla.jit(lambda x, y: x + y, polymorphic_shapes=("b, 3", "b, 3"))
    with pytest.raises(ArgumentError, match=r"argument 1 axis 0 has size 5.*disagree on the dimension 'b'"):
        f(np.ones((4, 3), np.float32), np.ones((5, 3), np.float32))
    assert f.compile_count == 0 and f.trace_count == 0


def test_static_entry_of_a_spec_must_match():
    f = pyxla.jit(lambda x: x, polymorphic_shapes=("b, 3",))
    with pytest.raises(ArgumentError, match=r"argument 0 axis 1 has size 4.*fixes it to 3"):
        f(np.ones((2, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"rank"):
        f(np.ones((2, 3, 1), np.float32))


def test_violated_constraint_is_an_argument_error():
    f = pyxla.jit(lambda x: x * 2.0, polymorphic_shapes=("b, 2",), shape_constraints=("b <= 8",))
    with pytest.raises(ArgumentError, match=r"argument 0 axis 0 gives the dimension 'b' the size 9, which violates b <= 8"):
        f(np.ones((9, 2), np.float32))
    g = pyxla.jit(lambda x, y: x[:, :1] * y, polymorphic_shapes=("b, s", "b, 1"), shape_constraints=("s >= b",))
    with pytest.raises(ArgumentError, match=r"constraint 's >= b' does not hold for b = 3.*s = 2"):
        g(np.ones((3, 2), np.float32), np.ones((3, 1), np.float32))
    assert f.compile_count == 0 and g.compile_count == 0


def test_non_divisible_multiple_is_an_argument_error():
    f = pyxla.jit(lambda x: x.reshape(-1, 2), polymorphic_shapes=("2*b",))
    with pytest.raises(ArgumentError, match=r"argument 0 axis 0 has size 5, which is not of the form 2\*b"):
        f(np.ones(5, np.float32))
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(f(x), x.reshape(3, 2))


def test_inconclusive_comparison_names_the_dimension_the_operation_and_the_line():
    def fn(x):
        if x.shape[0] > 4:
            return x * 2.0
        return x

    f = pyxla.jit(fn, polymorphic_shapes=("b, 3",))
    with pytest.raises(InconclusiveDimensionOperation) as info:
        f(np.ones((5, 3), np.float32))
    message = str(info.value)
    assert "b > 4" in message and "comparison" in message
    assert "test_polymorphic_shapes.py" in message and "if x.shape[0] > 4" in message


def test_inconclusive_reshape_names_the_operation():
    f = pyxla.jit(lambda x: x.reshape(3, -1), polymorphic_shapes=("b, 2",))
    with pytest.raises(InconclusiveDimensionOperation, match=r"reshape.*2\*b.*not divisible by 3.*dimension b"):
        f(np.ones((3, 2), np.float32))


def test_symbolic_module_text_shows_dynamic_dimensions():
    f = pyxla.jit(lambda x: x.sum(0) / x.shape[0], polymorphic_shapes=("b, 4",), shape_constraints=("b <= 64",))
    lowered = f.lower(np.ones((3, 4), np.float32))
    text = lowered.as_text()
    assert "f32[<=64,4]" in text and "get-dimension-size" in text
    assert f.compile_count == 0
    with pytest.raises(NotImplementedError, match="bucket_executable"):
        lowered.compile()
    bucket = f.bucket_executable(np.ones((3, 4), np.float32))
    assert bucket.bounds == {"b": 16} and "f32[16,4]" in bucket.compiled.as_text()


def test_polymorphic_jit_as_a_decorator():
    @pyxla.jit(polymorphic_shapes=("n",))
    def total(x):
        return x.sum()

    rng = np.random.default_rng(10)
    for n in (1, 3, 8, 5, 2, 17, 30):
        x = f32(rng, n)
        np.testing.assert_allclose(total(x), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
    assert total.trace_count == 1 and total.compile_count == 2   # buckets 16 and 32


def test_unsupported_op_on_a_dynamic_dimension_raises_not_implemented():
    # (3, b) flattened interleaves each row's padding with the next row's elements
    f = pyxla.jit(lambda x: x.T.reshape(-1), polymorphic_shapes=("b, 3",))
    with pytest.raises(NotImplementedError, match=r"reshape f32\[3,b\] -> f32\[3\*b\]"):
        f(np.ones((4, 3), np.float32))


def test_spec_errors():
    with pytest.raises(ArgumentError, match="3 entries for 1 positional"):
        pyxla.jit(lambda x: x, polymorphic_shapes=("b", None, None))(np.ones(2, np.float32))
    with pytest.raises(ArgumentError, match="size_buckets names 'c'"):
        pyxla.jit(lambda x: x, polymorphic_shapes=("b",), size_buckets={"c": (4,)})
    with pytest.raises(ValueError, match="polymorphic_shapes"):
        pyxla.jit(lambda x: x, polymorphic_shapes=("b, *",))


def test_static_arguments_keep_their_positions_in_the_specs():
    f = pyxla.jit(lambda x, k, w: (x @ w) * k, polymorphic_shapes=("b, 4", None, None), static_argnums=1)
    rng = np.random.default_rng(8)
    w = f32(rng, 4, 2)
    for n in (3, 1, 6, 2, 9, 4, 12):
        x = f32(rng, n, 4)
        np.testing.assert_allclose(f(x, 3, w), (x.astype(np.float64) @ w) * 3, rtol=RTOL, atol=ATOL)
    assert f.trace_count == 1


def test_vmap_over_the_dynamic_axis():
    f = pyxla.jit(lambda x, w: pyxla.vmap(lambda row: pnp.tanh(row @ w))(x), polymorphic_shapes=("b, 4", None))
    rng = np.random.default_rng(9)
    w = f32(rng, 4, 2)
    for n in (1, 6, 3, 9, 2, 5, 17):
        x = f32(rng, n, 4)
        np.testing.assert_allclose(f(x, w), np.tanh(x.astype(np.float64) @ w), rtol=RTOL, atol=ATOL)
    assert f.trace_count == 1


def test_vmap_over_a_static_axis_of_an_array_with_a_dynamic_one():
    mapped = lambda x, w: pyxla.vmap(lambda xi: pnp.tanh(xi @ w), in_axes=1, out_axes=1)(x)   # noqa: E731
    f = pyxla.jit(mapped, polymorphic_shapes=("b, 3, 4", None))
    rng = np.random.default_rng(10)
    w = f32(rng, 4, 5)
    for n in (1, 6, 3, 9, 2, 5, 17):
        x = f32(rng, n, 3, 4)
        want = np.tanh(np.einsum("bck,kn->bcn", x.astype(np.float64), w))
        np.testing.assert_allclose(f(x, w), want, rtol=RTOL, atol=ATOL)
    assert f.trace_count == 1


def test_causal_attention_mask_from_arange_of_the_dynamic_size(capsys, monkeypatch):
    def causal_mean(x):
        i = pnp.arange(x.shape[0])
        mask = i[:, None] >= i[None, :]                        # s x s, both symbolic
        weights = pnp.where(mask, 1.0, 0.0)
        return (weights @ x) / weights.sum(-1, keepdims=True), x[-2:]

    def reference(x):
        w = np.tril(np.ones((x.shape[0], x.shape[0])))
        return (w @ x) / w.sum(-1, keepdims=True), x[-2:]

    f = pyxla.jit(causal_mean, polymorphic_shapes=("s, 3",), shape_constraints=("s >= 2",))
    sizes = (2, 5, 3, 8, 13, 31, 7)
    run_sizes(f, lambda r, n: (f32(r, n, 3),), reference, sizes, capsys, monkeypatch)


def test_inconclusive_error_names_the_function_called():
    f = pyxla.jit(lambda x: pnp.arange(1, x.shape[0]), polymorphic_shapes=("b",))
    with pytest.raises(InconclusiveDimensionOperation, match=r"arange.*only arange\(n\).*test_polymorphic_shapes"):
        f(np.ones(4, np.float32))
