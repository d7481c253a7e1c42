"""dot and convolution against NumPy: matmul for dot, a direct loop-per-output reference for convolution."""
from itertools import product

import ml_dtypes
import numpy as np
import pytest

from pyxla.hlo import (
    BF16,
    F16,
    F32,
    F64,
    PRED,
    S8,
    S32,
    U8,
    ConvDimensionNumbers,
    HloBuilder,
    ShapeError,
    WindowDim,
    array,
    evaluate_module,
    verify_module,
)

TINY32 = np.finfo(np.float32).tiny


def _run(opcode, lhs, rhs, shape=None, **attrs):
    """Build `opcode(lhs, rhs)` on parameters of the arrays' types, verify it and evaluate it."""
    b = HloBuilder(opcode)
    types = {np.dtype(t.np_dtype): t for t in (BF16, F16, F32, F64, S8, S32, U8)}
    p = [b.parameter(array(types[a.dtype], *a.shape), f"p{i}") for i, a in enumerate((lhs, rhs))]
    module = b.module(b.op(opcode, *p, shape=shape, **attrs))
    verify_module(module)
    return evaluate_module(module, [lhs, rhs])


def _dot(lhs, rhs, shape=None, **dims):
    return _run("dot", lhs, rhs, shape=shape, **dims)


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --- dot ------------------------------------------------------------------------------

def test_dot_matmul(rng):
    a, b = _normal(rng, 5, 7), _normal(rng, 7, 3)
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert out.dtype == np.float32 and out.shape == (5, 3)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_dot_matvec_and_vecvec(rng):
    a, v, u = _normal(rng, 6, 4), _normal(rng, 4), _normal(rng, 4)
    np.testing.assert_allclose(_dot(a, v, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)),
                               a.astype(np.float64) @ v, rtol=1e-5, atol=1e-6)
    out = _dot(u, v, lhs_contracting_dims=(0,), rhs_contracting_dims=(0,))
    assert out.shape == ()
    np.testing.assert_allclose(out, u.astype(np.float64) @ v, rtol=1e-5, atol=1e-6)


def test_dot_transposed_contraction_and_outer_product(rng):
    a, b = _normal(rng, 7, 5), _normal(rng, 3, 7)
    np.testing.assert_allclose(_dot(a, b, lhs_contracting_dims=(0,), rhs_contracting_dims=(1,)),
                               a.T.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-6)
    u, v = _normal(rng, 4), _normal(rng, 5)
    np.testing.assert_allclose(_dot(u, v), np.outer(u.astype(np.float64), v), rtol=1e-6)


def test_dot_leading_batch_dims(rng):
    q, k = _normal(rng, 2, 3, 4, 6), _normal(rng, 2, 3, 5, 6)
    out = _dot(q, k, lhs_batch_dims=(0, 1), rhs_batch_dims=(0, 1),
               lhs_contracting_dims=(3,), rhs_contracting_dims=(3,))
    np.testing.assert_allclose(out, np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k),
                               rtol=1e-5, atol=1e-6)


def test_dot_non_leading_batch_and_several_contracting_dims(rng):
    p, q = _normal(rng, 4, 3, 2, 5), _normal(rng, 3, 2, 5, 7)
    out = _dot(p, q, lhs_batch_dims=(1,), rhs_batch_dims=(0,),
               lhs_contracting_dims=(2, 3), rhs_contracting_dims=(1, 2))
    assert out.shape == (3, 4, 7)   # batch, lhs free, rhs free
    np.testing.assert_allclose(out, np.einsum("ibcd,bcdj->bij", p.astype(np.float64), q),
                               rtol=1e-5, atol=1e-6)
    # contracting dimensions pair up in attribute order, not in dimension order
    r = _normal(rng, 5, 2, 6)
    out = _dot(p, r, lhs_contracting_dims=(2, 3), rhs_contracting_dims=(1, 0))
    np.testing.assert_allclose(out, np.einsum("abcd,dcj->abj", p.astype(np.float64), r),
                               rtol=1e-5, atol=1e-6)


def test_dot_bf16_operands_f32_result(rng):
    a = _normal(rng, 4, 9).astype(ml_dtypes.bfloat16)
    b = _normal(rng, 9, 3).astype(ml_dtypes.bfloat16)
    out = _dot(a, b, shape=array(F32, 4, 3), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert out.dtype == np.float32
    # bf16 products are exact in f32, so only the sum's rounding separates us from float64
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_dot_f16(rng):
    a, b = _normal(rng, 4, 8, dtype=np.float16), _normal(rng, 8, 3, dtype=np.float16)
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert out.dtype == np.float16
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_dot_s8_to_s32(rng):
    a = rng.integers(-128, 128, (5, 16)).astype(np.int8)
    b = rng.integers(-128, 128, (16, 4)).astype(np.int8)
    out = _dot(a, b, shape=array(S32, 5, 4), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def test_dot_integer_sums_wrap(rng):
    a = rng.integers(2**28, 2**31 - 1, (3, 6)).astype(np.int32)
    b = rng.integers(-2**31, -2**28, (6, 2)).astype(np.int32)
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    exact = a.astype(object) @ b.astype(object)          # Python integers: no overflow
    wrapped = np.array([[(v + 2**31) % 2**32 - 2**31 for v in row] for row in exact], np.int64)
    np.testing.assert_array_equal(out, wrapped)
    u = rng.integers(100, 256, (2, 5)).astype(np.uint8)
    out = _dot(u, u.T.copy(), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    np.testing.assert_array_equal(out, (u.astype(np.int64) @ u.T.astype(np.int64)) % 256)


def test_dot_nan_inf_propagate(rng):
    a, b = _normal(rng, 3, 4), _normal(rng, 4, 5)
    a[1, 2] = np.nan
    b[0, 3] = np.inf
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    with np.errstate(invalid="ignore"):
        expected = a.astype(np.float64) @ b
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out[1]).all()
    np.testing.assert_array_equal(np.isinf(out), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(out[finite], expected[finite], rtol=1e-5, atol=1e-6)


def test_dot_flushes_subnormal_operands_and_results(rng):
    a = rng.uniform(0.1, 1.0, (3, 4)).astype(np.float32) * np.float32(TINY32 / 4)   # subnormal
    b = rng.uniform(1e10, 1e12, (4, 2)).astype(np.float32)
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert (out == 0).all()            # DAZ: without it the result would be ~1e-28
    c = rng.uniform(1e-21, 2e-21, (3, 4)).astype(np.float32)
    d = rng.uniform(1e-21, 2e-21, (4, 2)).astype(np.float32)
    out = _dot(c, -d, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert (out == 0).all() and np.signbit(out).all()   # FTZ keeps the sign
    assert (c.astype(np.float64) @ d != 0).all()


def test_dot_empty_contraction_is_zero(rng):
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    out = _dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert out.shape == (3, 4) and (out == 0).all()


@pytest.mark.parametrize("lhs, rhs, attrs, message", [
    ((3, 4), (5, 2), dict(lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)), "differ in size"),
    ((3, 4), (4, 2), dict(lhs_contracting_dims=(1,), rhs_contracting_dims=()), "contracting dimensions"),
    ((3, 4), (4, 2), dict(lhs_contracting_dims=(2,), rhs_contracting_dims=(0,)), "out of range"),
    ((2, 3, 4), (2, 4, 5), dict(lhs_batch_dims=(0,), lhs_contracting_dims=(2,), rhs_contracting_dims=(1,)),
     "batch dimensions"),
    ((2, 3, 4), (2, 4, 5), dict(lhs_batch_dims=(2,), rhs_batch_dims=(0,), lhs_contracting_dims=(2,),
                                rhs_contracting_dims=(1,)), "repeats"),
])
def test_dot_shape_errors(lhs, rhs, attrs, message):
    b = HloBuilder("bad")
    x, y = b.parameter(array(F32, *lhs), "x"), b.parameter(array(F32, *rhs), "y")
    with pytest.raises(ShapeError, match=message):
        b.op("dot", x, y, **attrs)


def test_dot_type_errors():
    b = HloBuilder("bad")
    x, y = b.parameter(array(F32, 2, 3), "x"), b.parameter(array(F16, 3, 2), "y")
    # Mixed operand types are XLA's (f16 x f32 -> f32, the wider), but not pred with numbers.
    assert b.op("dot", x, y, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)).shape.dtype == F32
    p = b.parameter(array(PRED, 3, 2), "p")
    with pytest.raises(ShapeError, match="cannot mix pred"):
        b.op("dot", x, p, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    z = b.parameter(array(F32, 3, 2), "z")
    with pytest.raises(ShapeError, match="cannot produce s32"):
        b.op("dot", x, z, shape=array(S32, 2, 2), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))


# --- convolution: an independent direct reference ----------------------------------------

def reference_conv(lhs, rhs, window, labels, feature_groups=1, batch_groups=1, dtype=np.float64):
    """XLA's convolution, one output element at a time, indexing the operands through dim_labels."""
    dn = ConvDimensionNumbers.from_labels(labels)
    rank = lhs.ndim
    lhs, rhs = lhs.astype(dtype), rhs.astype(dtype)
    n_in, feats = lhs.shape[dn.input_batch], lhs.shape[dn.input_feature]
    out_feats, in_per_group = rhs.shape[dn.kernel_output_feature], rhs.shape[dn.kernel_input_feature]
    sizes = [lhs.shape[d] for d in dn.input_spatial]
    out_sizes = []
    for s, w in zip(sizes, window):
        padded = (s - 1) * w.lhs_dilate + 1 + w.pad_low + w.pad_high
        extent = (w.size - 1) * w.rhs_dilate + 1
        out_sizes.append((padded - extent) // w.stride + 1 if padded >= extent else 0)
    batch = n_in // batch_groups
    out_shape = [0] * rank
    out_shape[dn.output_batch], out_shape[dn.output_feature] = batch, out_feats
    for d, n in zip(dn.output_spatial, out_sizes):
        out_shape[d] = n
    out = np.zeros(out_shape, dtype)
    feature_group_size = out_feats // feature_groups
    batch_group_size = out_feats // batch_groups
    for b, o, *pos in product(range(batch), range(out_feats), *map(range, out_sizes)):
        fg, bg = o // feature_group_size, o // batch_group_size
        n = bg * batch + b
        total = dtype(0)
        for kpos in product(*(range(w.size) for w in window)):
            spatial = []
            for p, k, w, s in zip(pos, kpos, window, sizes):
                u = p * w.stride + k * w.rhs_dilate - w.pad_low
                if u % w.lhs_dilate or not 0 <= u // w.lhs_dilate < s:
                    break
                spatial.append(u // w.lhs_dilate)
            else:
                kidx = [w.size - 1 - k if w.reversal else k for k, w in zip(kpos, window)]
                for ci in range(in_per_group):
                    li = [0] * rank
                    li[dn.input_batch], li[dn.input_feature] = n, fg * in_per_group + ci
                    for d, v in zip(dn.input_spatial, spatial):
                        li[d] = v
                    ri = [0] * rank
                    ri[dn.kernel_output_feature], ri[dn.kernel_input_feature] = o, ci
                    for d, v in zip(dn.kernel_spatial, kidx):
                        ri[d] = v
                    total += lhs[tuple(li)] * rhs[tuple(ri)]
        oi = [0] * rank
        oi[dn.output_batch], oi[dn.output_feature] = b, o
        for d, v in zip(dn.output_spatial, pos):
            oi[d] = v
        out[tuple(oi)] = total
    assert feats == in_per_group * feature_groups
    return out


def _operand_shape(labels_part, sizes):
    return tuple(sizes[ch] for ch in labels_part)


def _check_conv(rng, labels, lhs_sizes, rhs_sizes, window, feature_groups=1, batch_groups=1):
    """Random operands laid out by `labels` (sizes keyed by label letter), compared with the reference."""
    lhs_part, rest = labels.split("_")
    rhs_part = rest.split("->")[0]
    lhs = _normal(rng, *_operand_shape(lhs_part, lhs_sizes))
    rhs = _normal(rng, *_operand_shape(rhs_part, rhs_sizes))
    attrs = dict(window=tuple(window), dim_labels=ConvDimensionNumbers.from_labels(labels))
    if feature_groups != 1:
        attrs["feature_group_count"] = feature_groups
    if batch_groups != 1:
        attrs["batch_group_count"] = batch_groups
    out = _run("convolution", lhs, rhs, **attrs)
    expected = reference_conv(lhs, rhs, window, labels, feature_groups, batch_groups)
    assert out.dtype == np.float32 and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    return out


def test_conv_1d_stride_and_padding(rng):
    _check_conv(rng, "b0f_0io->b0f", dict(b=2, f=3, **{"0": 11}), dict(i=3, o=4, **{"0": 3}),
                [WindowDim(3, stride=2, pad_low=1, pad_high=2)])


def test_conv_2d_nhwc_stride_same(rng):
    _check_conv(rng, "b01f_01io->b01f", dict(b=2, f=3, **{"0": 7, "1": 6}),
                dict(i=3, o=4, **{"0": 3, "1": 3}),
                [WindowDim(3, 2, 1, 1), WindowDim(3, 2, 1, 1)])


def test_conv_2d_nchw_window_dilation_asymmetric_padding(rng):
    _check_conv(rng, "bf01_oi01->bf01", dict(b=1, f=2, **{"0": 7, "1": 6}),
                dict(i=2, o=3, **{"0": 3, "1": 2}),
                [WindowDim(3, pad_low=1, pad_high=2, rhs_dilate=2), WindowDim(2, pad_high=1, rhs_dilate=2)])


def test_conv_3d_base_dilation_and_negative_padding(rng):
    _check_conv(rng, "b012f_012io->b012f", dict(b=2, f=2, **{"0": 4, "1": 5, "2": 3}),
                dict(i=2, o=3, **{"0": 2, "1": 3, "2": 2}),
                [WindowDim(2, lhs_dilate=2, pad_low=-1, pad_high=1),
                 WindowDim(3, stride=2, pad_low=2, pad_high=-2),
                 WindowDim(2, lhs_dilate=3, rhs_dilate=2)])


def test_conv_transposed_backprop_style(rng):
    """lax.conv_transpose: base dilation, padding and a reversed window (input gradient)."""
    _check_conv(rng, "b01f_01oi->b01f", dict(b=2, f=2, **{"0": 4, "1": 4}),
                dict(i=2, o=3, **{"0": 3, "1": 3}),
                [WindowDim(3, pad_low=1, pad_high=1, lhs_dilate=2, reversal=True),
                 WindowDim(3, pad_low=2, pad_high=1, lhs_dilate=2, reversal=True)])


def test_conv_window_reversal_flips_the_kernel(rng):
    x = _normal(rng, 1, 2, 9)
    k = _normal(rng, 3, 2, 4)
    labels = ConvDimensionNumbers.from_labels("bf0_oi0->bf0")
    flipped = _run("convolution", x, k, window=(WindowDim(4, reversal=True),), dim_labels=labels)
    plain = _run("convolution", x, np.ascontiguousarray(k[:, :, ::-1]), window=(WindowDim(4),), dim_labels=labels)
    np.testing.assert_array_equal(flipped, plain)
    assert not np.allclose(flipped, _run("convolution", x, k, window=(WindowDim(4),), dim_labels=labels))


def test_conv_permuted_layouts(rng):
    _check_conv(rng, "0bf1_i1o0->f10b", dict(b=2, f=3, **{"0": 5, "1": 4}),
                dict(i=3, o=2, **{"0": 2, "1": 3}),
                [WindowDim(2, stride=2, pad_high=1), WindowDim(3, pad_low=1, pad_high=1)])


def test_conv_feature_groups(rng):
    _check_conv(rng, "b01f_01io->b01f", dict(b=2, f=4, **{"0": 6, "1": 5}),
                dict(i=2, o=6, **{"0": 3, "1": 3}),
                [WindowDim(3, stride=2), WindowDim(3)], feature_groups=2)


def test_conv_depthwise(rng):
    _check_conv(rng, "b01f_01io->b01f", dict(b=2, f=4, **{"0": 5, "1": 5}),
                dict(i=1, o=8, **{"0": 3, "1": 3}),
                [WindowDim(3, pad_low=1, pad_high=1), WindowDim(3, pad_low=1, pad_high=1)], feature_groups=4)


def test_conv_batch_groups_kernel_gradient(rng):
    """The grouped conv's kernel gradient: features play batch, batch_group_count splits the input batch."""
    _check_conv(rng, "f01b_i01o->01bf", dict(b=4, f=3, **{"0": 6, "1": 5}),
                dict(i=3, o=6, **{"0": 4, "1": 3}),
                [WindowDim(4, pad_high=-1, rhs_dilate=2), WindowDim(3, pad_low=1)], batch_groups=2)
    _check_conv(rng, "bf0_oi0->bf0", dict(b=6, f=2, **{"0": 7}), dict(i=2, o=9, **{"0": 2}),
                [WindowDim(2, stride=2)], batch_groups=3)


def test_conv_empty_output(rng):
    out = _check_conv(rng, "b0f_0io->b0f", dict(b=2, f=3, **{"0": 4}), dict(i=3, o=2, **{"0": 3}),
                      [WindowDim(3, pad_low=-1, pad_high=-1)])
    assert out.shape == (2, 0, 2)


def test_conv_integer_and_mixed_types(rng):
    x = rng.integers(-128, 128, (2, 6, 3)).astype(np.int8)
    k = rng.integers(-128, 128, (3, 3, 4)).astype(np.int8)
    labels = "b0f_0io->b0f"
    window = (WindowDim(3, pad_low=1, pad_high=1),)
    out = _run("convolution", x, k, shape=array(S32, 2, 6, 4), window=window,
               dim_labels=ConvDimensionNumbers.from_labels(labels))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, reference_conv(x, k, window, labels, dtype=np.int64))
    xb, kb = x.astype(ml_dtypes.bfloat16), k.astype(ml_dtypes.bfloat16)
    out = _run("convolution", xb, kb, shape=array(F32, 2, 6, 4), window=window,
               dim_labels=ConvDimensionNumbers.from_labels(labels))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, reference_conv(x, k, window, labels))   # small integers: exact


def test_conv_flushes_subnormal_results(rng):
    x = rng.uniform(1e-21, 2e-21, (1, 5, 2)).astype(np.float32)
    k = rng.uniform(1e-21, 2e-21, (2, 2, 3)).astype(np.float32)
    out = _run("convolution", x, k, window=(WindowDim(2),),
               dim_labels=ConvDimensionNumbers.from_labels("b0f_0io->b0f"))
    assert out.shape == (1, 4, 3) and (out == 0).all()


def _conv_error(lhs, rhs, labels, window, **attrs):
    b = HloBuilder("bad")
    x, y = b.parameter(array(F32, *lhs), "x"), b.parameter(array(F32, *rhs), "y")
    return b.op("convolution", x, y, window=tuple(window), dim_labels=ConvDimensionNumbers.from_labels(labels),
                **attrs)


@pytest.mark.parametrize("lhs, rhs, window, attrs, message", [
    ((2, 5, 3), (3, 4, 2), [WindowDim(3)], {}, "input feature dimension must be 3"),
    ((2, 5, 3), (2, 3, 2), [WindowDim(3)], {}, "window size 3"),
    ((2, 5, 3), (3, 3, 2), [WindowDim(3), WindowDim(1)], {}, "window has 2 dimensions"),
    ((2, 5, 3), (3, 3, 2), [WindowDim(3, stride=0)], {}, "stride must be positive"),
    ((2, 4, 3), (3, 3, 2), [WindowDim(3, pad_low=-3, pad_high=-2)], {}, "padding -3_-2"),
    ((2, 5, 4), (3, 2, 3), [WindowDim(3)], dict(feature_group_count=2), "not divisible by feature_group_count"),
    ((3, 5, 3), (3, 3, 2), [WindowDim(3)], dict(batch_group_count=2), "batch_group_count"),
    ((4, 5, 4), (3, 2, 4), [WindowDim(3)], dict(feature_group_count=2, batch_group_count=2), "both"),
])
def test_conv_shape_errors(lhs, rhs, window, attrs, message):
    with pytest.raises(ShapeError, match=message):
        _conv_error(lhs, rhs, "b0f_0io->b0f", window, **attrs)


def test_conv_needs_matching_ranks_and_labels():
    b = HloBuilder("bad")
    x, y = b.parameter(array(F32, 2, 5, 3), "x"), b.parameter(array(F32, 3, 3, 2, 1), "y")
    with pytest.raises(ShapeError, match="rank"):
        b.op("convolution", x, y, window=(WindowDim(3),), dim_labels=ConvDimensionNumbers.from_labels("b0f_0io->b0f"))
    z = b.parameter(array(F32, 2, 5, 6, 3), "z")
    with pytest.raises(ShapeError, match="not a permutation"):
        b.op("convolution", z, y, window=(WindowDim(3),),
             dim_labels=ConvDimensionNumbers.from_labels("b0f_0io->b0f"))
