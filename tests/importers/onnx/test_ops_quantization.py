"""QuantizeLinear, DequantizeLinear and QLinearMatMul against onnx's reference evaluator."""
import numpy as np
import pytest
from onnx import TensorProto

from .single_node import check


def floats(rng, *shape):
    return (rng.standard_normal(shape) * 50).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_quantize_per_tensor(rng, dtype):
    zp = np.array(rng.integers(0, 10), dtype)
    check("QuantizeLinear", {"x": floats(rng, 3, 4), "s": np.float32(rng.random() + 0.1), "zp": zp}, opset=21)


def test_quantize_default_uint8_and_output_dtype(rng):
    check("QuantizeLinear", {"x": floats(rng, 3, 4), "s": np.float32(0.7)}, opset=13)
    check("QuantizeLinear", {"x": floats(rng, 3, 4), "s": np.float32(0.7)}, {"output_dtype": TensorProto.INT16},
          opset=21)


def test_quantize_per_axis_and_blocked(rng):
    x = floats(rng, 2, 6, 3)
    check("QuantizeLinear", {"x": x, "s": (rng.random(6) + 0.1).astype(np.float32),
                             "zp": rng.integers(-5, 5, 6).astype(np.int8)}, {"axis": 1}, opset=13)
    check("QuantizeLinear", {"x": x, "s": (rng.random((2, 2, 3)) + 0.1).astype(np.float32),
                             "zp": rng.integers(0, 9, (2, 2, 3)).astype(np.uint8)}, {"axis": 1, "block_size": 3},
          opset=21)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.uint16])
def test_dequantize(rng, dtype):
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000), (3, 4)).astype(dtype)
    check("DequantizeLinear", {"x": x, "s": np.float32(rng.random() + 0.1), "zp": np.array(3, dtype)}, opset=21,
          rtol=1e-6)


def test_dequantize_per_axis_and_blocked(rng):
    x = rng.integers(-100, 100, (2, 6, 3)).astype(np.int8)
    check("DequantizeLinear", {"x": x, "s": (rng.random(6) + 0.1).astype(np.float32),
                               "zp": rng.integers(-5, 5, 6).astype(np.int8)}, {"axis": 1}, opset=21)
    check("DequantizeLinear", {"x": x, "s": (rng.random((2, 6, 2)) + 0.1).astype(np.float32)},
          {"axis": -1, "block_size": 2}, opset=21)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.INT4,
                                   TensorProto.UINT4])
def test_quantize_to_narrow_types_and_back(rng, dtype):
    q = check("QuantizeLinear", {"x": floats(rng, 4, 6) * 3, "s": np.float32(0.37)}, {"output_dtype": dtype},
              opset=21)[0]
    check("DequantizeLinear", {"q": q, "s": np.float32(0.37)}, opset=21)


def test_qlinear_matmul(rng):
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (4, 5)).astype(np.uint8)
    inputs = {"a": a, "as": np.float32(0.02), "az": np.uint8(110), "b": b, "bs": np.float32(0.03),
              "bz": np.uint8(130), "ys": np.float32(0.5), "yz": np.uint8(120)}
    check("QLinearMatMul", inputs, opset=10)
    inputs |= {"a": a.astype(np.int8) // 2, "az": np.int8(-3), "yz": np.int8(4)}
    check("QLinearMatMul", inputs, opset=21)
