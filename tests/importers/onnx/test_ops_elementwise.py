"""Elementwise converters against onnx's reference evaluator, on fresh random inputs (Cast and
CastLike: test_ops_cast.py)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from .single_node import check, refuses


def floats(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def ints(rng, *shape, low=-50, high=50, dtype=np.int32):
    return rng.integers(low, high, shape).astype(dtype)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("opset", [7, 13, 14])
def test_arithmetic_broadcasts(rng, op, opset):
    check(op, {"a": floats(rng, 2, 3, 4), "b": floats(rng, 3, 1)}, opset=opset)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_arithmetic(rng, op, dtype):
    check(op, {"a": ints(rng, 3, 4, low=0, high=100, dtype=dtype), "b": ints(rng, 4, low=0, high=100, dtype=dtype)},
          opset=14)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_div_truncates_toward_zero(rng, dtype):
    b = ints(rng, 5, 6, low=1, high=9, dtype=dtype) * rng.choice([-1, 1], (5, 6)).astype(dtype)
    got = check("Div", {"a": ints(rng, 5, 6, dtype=dtype), "b": b}, opset=14)[0]
    assert got.dtype == dtype


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mod_signs(rng, fmod, dtype):
    b = rng.integers(1, 7, (4, 5)).astype(dtype) * rng.choice([-1, 1], (4, 5)).astype(dtype)
    a = (rng.integers(-40, 40, (4, 5)) + (rng.random((4, 5)) if dtype == np.float32 else 0)).astype(dtype)
    check("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13)


def test_mod_refuses_bad_fmod(rng):
    refuses("Mod", {"a": floats(rng, 3), "b": floats(rng, 3)}, {"fmod": 2}, opset=13, match="'fmod'=2")


@pytest.mark.parametrize("opset", [7, 13, 15])
def test_pow(rng, opset):
    check("Pow", {"a": np.abs(floats(rng, 3, 4)) + 0.1, "b": floats(rng, 4)}, opset=opset)


def test_pow_mixed_types_keeps_base_type(rng):
    check("Pow", {"a": floats(rng, 3, 4), "b": rng.integers(0, 4, (3, 4)).astype(np.int64)}, opset=15, rtol=1e-5)


UNARY = {
    "Neg": lambda r: floats(r, 3, 4), "Abs": lambda r: floats(r, 3, 4), "Sign": lambda r: floats(r, 3, 4),
    "Reciprocal": lambda r: floats(r, 3, 4) + 3, "Sqrt": lambda r: np.abs(floats(r, 3, 4)),
    "Exp": lambda r: floats(r, 3, 4), "Log": lambda r: np.abs(floats(r, 3, 4)) + 0.01,
    "Ceil": lambda r: floats(r, 3, 4) * 3, "Floor": lambda r: floats(r, 3, 4) * 3,
    "Round": lambda r: np.round(floats(r, 3, 4) * 4) / 2, "Sin": lambda r: floats(r, 3, 4),
    "Cos": lambda r: floats(r, 3, 4), "Tan": lambda r: floats(r, 3, 4),
    "Asin": lambda r: np.tanh(floats(r, 3, 4)), "Acos": lambda r: np.tanh(floats(r, 3, 4)),
    "Atan": lambda r: floats(r, 3, 4), "Sinh": lambda r: floats(r, 3, 4), "Cosh": lambda r: floats(r, 3, 4),
    "Asinh": lambda r: floats(r, 3, 4), "Acosh": lambda r: np.abs(floats(r, 3, 4)) + 1,
    "Atanh": lambda r: np.tanh(floats(r, 3, 4)), "Erf": lambda r: floats(r, 3, 4),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_math(rng, op):
    check(op, {"x": UNARY[op](rng)}, opset=13, rtol=2e-5, atol=2e-6)


def test_integer_abs_neg_sign(rng):
    x = ints(rng, 3, 5)
    for op in ("Abs", "Neg", "Sign"):
        check(op, {"x": x}, opset=13)


def test_isnan_isinf(rng):
    x = floats(rng, 4, 5)
    x[0, 1], x[2, 3], x[3, 0] = np.nan, np.inf, -np.inf
    check("IsNaN", {"x": x}, opset=13)
    for neg, pos in [(1, 1), (0, 1), (1, 0)]:
        check("IsInf", {"x": x}, {"detect_negative": neg, "detect_positive": pos}, opset=20)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("opset", [8, 13])
def test_variadic(rng, op, opset):
    check(op, {"a": floats(rng, 2, 3, 4), "b": floats(rng, 3, 1), "c": floats(rng, 4)}, opset=opset)
    check(op, {"a": floats(rng, 3)}, opset=opset)


def test_clip_attributes_and_inputs(rng):
    x = floats(rng, 4, 5) * 3
    check("Clip", {"x": x}, {"min": -0.5, "max": 1.25}, opset=6)
    lo, hi = np.float32(-rng.random()), np.float32(rng.random())
    check("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13)
    check("Clip", {"x": x, "lo": None, "hi": hi}, opset=13)
    check("Clip", {"x": x, "lo": lo}, opset=11)
    check("Clip", {"x": ints(rng, 4, 5), "lo": np.int32(-10), "hi": np.int32(20)}, opset=13)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(rng, op):
    a, b = ints(rng, 3, 4, low=-3, high=3), ints(rng, 4, low=-3, high=3)
    check(op, {"a": a, "b": b}, opset=16)
    check(op, {"a": a.astype(np.float32), "b": b.astype(np.float32)}, opset=16)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(rng, op):
    check(op, {"a": rng.random((3, 4)) < 0.5, "b": rng.random((4,)) < 0.5}, opset=7)


def test_not(rng):
    check("Not", {"x": rng.random((3, 4)) < 0.5}, opset=1)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_bitwise(rng, op, dtype):
    check(op, {"a": ints(rng, 3, 4, low=0, high=120, dtype=dtype), "b": ints(rng, 4, low=0, high=120, dtype=dtype)},
          opset=18)


def test_bitwise_not(rng):
    check("BitwiseNot", {"x": ints(rng, 3, 4, dtype=np.int16)}, opset=18)
    check("BitwiseNot", {"x": ints(rng, 3, 4, low=0, high=255, dtype=np.uint8)}, opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift_unsigned(rng, direction, dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = rng.integers(0, np.iinfo(dtype).max // 2, (3, 4), dtype=np.uint64).astype(dtype)
    y = rng.integers(0, bits, (4,)).astype(dtype)
    check("BitShift", {"x": x, "y": y}, {"direction": direction}, opset=11)


def test_bitshift_signed_past_width(rng):
    x = ints(rng, 3, 8, low=-1000, high=1000)
    y = np.array([0, 1, 5, 31, 32, 40, -1, 3], np.int32)
    for direction in ("LEFT", "RIGHT"):
        got = check("BitShift", {"x": x, "y": y}, {"direction": direction}, opset=28)[0]
        if direction == "RIGHT":   # shifting by the width or more leaves only the sign
            np.testing.assert_array_equal(got[:, 4], np.where(x[:, 4] < 0, -1, 0))


def test_where(rng):
    check("Where", {"c": rng.random((3, 1)) < 0.5, "x": floats(rng, 3, 4), "y": floats(rng, 4)}, opset=16)
    check("Where", {"c": rng.random((4,)) < 0.5, "x": ints(rng, 2, 4), "y": ints(rng, 2, 1)}, opset=9)


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.int64, np.float64), (np.uint16, np.int16),
                                     (np.int8, np.uint8), (np.bool_, np.uint8), (np.float16, np.uint16)])
def test_bitcast(rng, src, dst):
    x = (rng.standard_normal((3, 4)) * 100).astype(src) if np.dtype(src).kind != "b" else rng.random((3, 4)) < 0.5
    check("BitCast", {"x": x}, {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=26)


def test_bitcast_refuses_other_widths(rng):
    refuses("BitCast", {"x": floats(rng, 3)}, {"to": TensorProto.INT64}, opset=26, match="widths differ",
            check_model=False)   # onnx's checker refuses it too


def test_identity(rng):
    check("Identity", {"x": floats(rng, 3, 4)}, opset=13)


@pytest.mark.parametrize("attr,value", [
    ("value_float", 1.5), ("value_floats", [1.0, -2.5, 3.25]), ("value_int", 7), ("value_ints", [3, -1, 4])])
def test_constant_value_attributes(attr, value):
    check("Constant", {}, {attr: value}, opset=13)


def test_constant_tensor(rng):
    t = helper.make_tensor("t", TensorProto.FLOAT, [2, 3], floats(rng, 6).tolist())
    check("Constant", {}, {"value": t}, opset=13)


def test_constant_refuses_strings():
    refuses("Constant", {}, {"value_string": "abc"}, opset=13, match="'value_string'")
