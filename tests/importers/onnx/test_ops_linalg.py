"""Einsum and MatMulInteger converters against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]), ("...ij,...jk", [(2, 3, 4), (1, 4, 2)]), ("i,i", [(5,), (5,)]), ("ij->ji", [(3, 4)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("i,j->ij", [(3,), (4,)]),
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum(rng, equation, shapes):
    inputs = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    check("Einsum", inputs, {"equation": equation}, opset=12, rtol=1e-4, atol=1e-5)


def test_matmul_integer(rng):
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (4, 5)).astype(np.uint8)
    check("MatMulInteger", {"a": a, "b": b}, opset=10)
    check("MatMulInteger", {"a": a, "b": b, "az": np.array(12, np.uint8), "bz": np.array(200, np.uint8)}, opset=10)
    check("MatMulInteger", {"a": (a // 2).astype(np.int8), "b": b, "az": np.array(-3, np.int8),
                            "bz": rng.integers(0, 255, (5,)).astype(np.uint8)}, opset=10)
    # a quantized layer's size, batched: the float GEMM's sums, exact, equal the integer ones
    big_a = rng.integers(0, 256, (2, 64, 768)).astype(np.uint8)
    big_b = rng.integers(-128, 128, (768, 96)).astype(np.int8)
    check("MatMulInteger", {"a": big_a, "b": big_b, "az": np.array(131, np.uint8), "bz": np.array(-7, np.int8)},
          opset=10)


def test_matmul_integer_zero_point_per_row_of_a(rng):
    # onnx's reference does not broadcast a per-row zero point of A: NumPy is the oracle.
    from .single_node import make_model, run_pyxla, with_output_types
    a = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    b = rng.integers(0, 255, (4, 5)).astype(np.uint8)
    az = rng.integers(-5, 5, (3,)).astype(np.int8)
    expected = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ b.astype(np.int32)
    inputs = {"a": a, "b": b, "az": az}
    model = with_output_types(make_model("MatMulInteger", inputs, ["y"], {}, 10), [expected])
    np.testing.assert_array_equal(run_pyxla(model, inputs)[0], expected)
