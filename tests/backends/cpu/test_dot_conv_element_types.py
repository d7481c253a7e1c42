"""dot and convolution on the cpu backend equal the evaluator for every element type XLA
takes: pred (an OR of ANDs, not a sum modulo 2), the signed and unsigned integers (wrapping),
f16, bf16, f32 and f64. Several shapes, so that the GEMM (pooled and on one thread), GEMV kernels and the
elemental loops all take part where the type allows them."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module
from pyxla.hlo.types import element_type

TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"]
TOLERANCE = {"f16": 2e-2, "bf16": 5e-2, "f32": 1e-5, "f64": 1e-12}

DOTS = {
    "matrix-matrix": ("[6,9]", "[9,7]", "[6,7]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "matrix-vector": ("[5,33]", "[33]", "[5]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "vector-vector": ("[40]", "[40]", "[]", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    "batched": ("[3,4,5]", "[3,5,2]", "[3,4,2]", "lhs_batch_dims={0}, rhs_batch_dims={0}, "
                                                 "lhs_contracting_dims={2}, rhs_contracting_dims={1}"),
    "transposed": ("[8,6]", "[7,8]", "[6,7]", "lhs_contracting_dims={0}, rhs_contracting_dims={1}"),
}

CONVS = {
    "3x3 padded": ("[2,3,6,6]", "[3,3,3,4]", "[2,4,6,6]", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01", 1),
    "strided": ("[1,4,7,7]", "[2,2,4,5]", "[1,5,3,3]", "size=2x2 stride=2x2", "bf01_01io->bf01", 1),
    "1x1 features-last": ("[2,5,5,6]", "[1,1,6,3]", "[2,5,5,3]", "size=1x1", "b01f_01io->b01f", 1),
    "depthwise": ("[1,4,5,5]", "[3,3,1,4]", "[1,4,5,5]", "size=3x3 pad=1_1x1_1", "bf01_01io->bf01", 4),
    "dilated": ("[1,2,7,7]", "[2,2,2,3]", "[1,3,5,5]", "size=2x2 rhs_dilate=2x2", "bf01_01io->bf01", 1),
}


def _dims(text: str) -> tuple[int, ...]:
    inner = text.strip("[]")
    return tuple(int(d) for d in inner.split(",")) if inner else ()


def _values(t: str, dims, rng) -> np.ndarray:
    dtype = element_type(t).np_dtype
    if t == "pred":
        return rng.random(dims) < 0.3
    if t[0] in "su":
        info = np.iinfo(dtype)
        # the full range of the narrow types, so that sums wrap; modest values for the wide ones
        lo, hi = (info.min, info.max) if info.bits <= 16 else (max(info.min, -1000), 1000)
        return rng.integers(lo, hi, dims, endpoint=True).astype(dtype)
    return rng.standard_normal(dims).astype(dtype)


def _compare(text: str, inputs, t: str) -> None:
    want = flatten_result(evaluate_module(parse_module(text), inputs))[0]
    got = get_backend("cpu").compile(parse_module(text)).run_flat(inputs)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if t in TOLERANCE:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=TOLERANCE[t],
                                   atol=TOLERANCE[t] * 4)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("form", DOTS)
@pytest.mark.parametrize("t", TYPES)
def test_dot(t, form, rng):
    lhs, rhs, out, dims = DOTS[form]
    text = (f"HloModule dot\nENTRY e {{\n  a = {t}{lhs} parameter(0)\n  b = {t}{rhs} parameter(1)\n"
            f"  ROOT d = {t}{out} dot(a, b), {dims}\n}}\n")
    _compare(text, [_values(t, _dims(lhs), rng), _values(t, _dims(rhs), rng)], t)


@pytest.mark.parametrize("form", CONVS)
@pytest.mark.parametrize("t", TYPES)
def test_convolution(t, form, rng):
    lhs, rhs, out, window, labels, groups = CONVS[form]
    text = (f"HloModule conv\nENTRY e {{\n  x = {t}{lhs} parameter(0)\n  w = {t}{rhs} parameter(1)\n"
            f"  ROOT c = {t}{out} convolution(x, w), window={{{window}}}, dim_labels={labels}, "
            f"feature_group_count={groups}\n}}\n")
    _compare(text, [_values(t, _dims(lhs), rng), _values(t, _dims(rhs), rng)], t)


def test_pred_dot_is_or_of_ands():
    # two true products in one sum: XOR would give false
    text = ("HloModule pred_dot\nENTRY e {\n  a = pred[1,3] parameter(0)\n  b = pred[3,1] parameter(1)\n"
            "  ROOT d = pred[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    a = np.array([[True, True, False]])
    b = np.array([[True], [True], [True]])
    got = get_backend("cpu").compile(parse_module(text)).run_flat([a, b])[0]
    assert got.tolist() == [[True]]


HALF = {"f16": np.float16, "bf16": element_type("bf16").np_dtype}


@pytest.mark.parametrize("t", sorted(HALF))
@pytest.mark.parametrize("kind, form", [("dot", f) for f in DOTS] + [("convolution", f) for f in CONVS])
def test_half_precision_products_run_in_f32_and_round_once(t, kind, form, rng):
    """A f16/bf16 dot or convolution is the f32 product of the same values rounded once
    (hlo_lowering.py): the same bits as the f32 module's result converted, and no half-type
    product left in the compiled module (the GEMM and convolution kernels are f32/f64)."""
    if kind == "dot":
        lhs, rhs, out, dims = DOTS[form]
        body = lambda u, v: f"  ROOT d = {u}{out} dot(a, b), {dims}\n"   # noqa: E731
    else:
        lhs, rhs, out, window, labels, groups = CONVS[form]
        body = lambda u, v: (f"  ROOT d = {u}{out} convolution(a, b), window={{{window}}}, dim_labels={labels}, "   # noqa: E731
                             f"feature_group_count={groups}\n")

    def text(u):
        return f"HloModule m\nENTRY e {{\n  a = {u}{lhs} parameter(0)\n  b = {u}{rhs} parameter(1)\n{body(u, u)}}}\n"
    inputs = [_values(t, _dims(lhs), rng), _values(t, _dims(rhs), rng)]
    half = get_backend("cpu").compile(parse_module(text(t)))
    got = half.run_flat(inputs)[0]
    wide = get_backend("cpu").compile(parse_module(text("f32"))).run_flat([x.astype(np.float32) for x in inputs])[0]
    assert got.dtype == HALF[t]
    np.testing.assert_array_equal(got, wide.astype(HALF[t]))
    products = [i for c in half.module.computations for i in c.instructions if i.opcode == kind]
    assert products and all(i.shape.dtype.name == "f32" for i in products)


@pytest.mark.parametrize("t", ["s8", "u8", "s16", "u16"])
@pytest.mark.parametrize("kind, form", [("dot", f) for f in DOTS] + [("convolution", f) for f in CONVS])
def test_narrow_integer_products_run_in_f64_and_wrap(t, kind, form, rng):
    """An 8- or 16-bit integer dot or convolution (full-range values, so that the sums wrap
    in the narrow result) is computed as an f64 product, exact there, wrapped through s64
    (hlo_lowering.py): the integers of NumPy's int64 product wrapped to the result type, and
    no integer product left in the compiled module."""
    if kind == "dot":
        lhs, rhs, out, dims = DOTS[form]
        tail = dims
    else:
        lhs, rhs, out, window, labels, groups = CONVS[form]
        tail = f"window={{{window}}}, dim_labels={labels}, feature_group_count={groups}"
    text = (f"HloModule m\nENTRY e {{\n  a = {t}{lhs} parameter(0)\n  b = {t}{rhs} parameter(1)\n"
            f"  ROOT d = {t}{out} {kind}(a, b), {tail}\n}}\n")
    inputs = [_values(t, _dims(lhs), rng), _values(t, _dims(rhs), rng)]
    compiled = get_backend("cpu").compile(parse_module(text))
    got = compiled.run_flat(inputs)[0]
    want = flatten_result(evaluate_module(parse_module(text), inputs))[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    products = [i for c in compiled.module.computations for i in c.instructions if i.opcode == kind]
    assert products and all(i.shape.dtype.name == "f64" for i in products)
