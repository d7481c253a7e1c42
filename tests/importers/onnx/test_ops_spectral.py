"""DFT and STFT converters against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check


def signal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("axis", [1, -2, 0])
@pytest.mark.parametrize("length", [None, 6, 11])
def test_dft_forward(rng, parts, axis, length):
    inputs = {"x": signal(rng, 3, 8, parts), "n": None if length is None else np.array(length, np.int64),
              "axis": np.array(axis, np.int64)}
    check("DFT", inputs, {}, opset=20, known=["n", "axis"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_onesided_and_opset_17(rng, onesided):
    check("DFT", {"x": signal(rng, 2, 9, 1)}, {"onesided": onesided, "axis": 1}, opset=17, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [None, 8, 9])
def test_dft_inverse(rng, length):
    inputs = {"x": signal(rng, 2, 7, 2), "n": None if length is None else np.array(length, np.int64)}
    check("DFT", inputs, {"inverse": 1}, opset=20, known=["n"], rtol=1e-4, atol=1e-5)
    check("DFT", inputs, {"inverse": 1, "onesided": 1}, opset=20, known=["n"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_window", [True, False])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(rng, with_window, onesided):
    inputs = {"x": signal(rng, 2, 40, 1), "step": np.array(6, np.int64),
              "window": np.hanning(10).astype(np.float32) if with_window else None,
              "length": None if with_window else np.array(10, np.int64)}
    check("STFT", inputs, {"onesided": onesided}, opset=17, known=["step", "length"], rtol=1e-4, atol=1e-4)
