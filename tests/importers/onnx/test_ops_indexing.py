"""Gather/Scatter, OneHot, NonZero, Compress, ReverseSequence, TopK, CumSum converters
against onnx's reference evaluator."""
import numpy as np
import pytest

from .single_node import check, refuses


def floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_negative_indices(rng, axis):
    x = floats(rng, 4, 5, 3)
    n = x.shape[axis]
    check("Gather", {"x": x, "i": rng.integers(-n, n, (2, 3)).astype(np.int64)}, {"axis": axis}, opset=13)


def test_gather_scalar_index_and_known_indices(rng):
    check("Gather", {"x": floats(rng, 4, 5), "i": np.array(-2, np.int64)}, {"axis": 1}, opset=13)
    check("Gather", {"x": floats(rng, 4, 5), "i": np.array([3, 0], np.int32)}, opset=11, known=["i"])


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(rng, axis):
    x = floats(rng, 3, 4)
    idx = rng.integers(-x.shape[axis], x.shape[axis], (3, 4) if axis else (2, 4)).astype(np.int64)
    check("GatherElements", {"x": x, "i": idx}, {"axis": axis}, opset=13)


@pytest.mark.parametrize("batch_dims,ishape", [(0, (2, 2)), (0, (3, 1)), (1, (2, 2, 1)), (0, (2, 3))])
def test_gather_nd(rng, batch_dims, ishape):
    x = floats(rng, 2, 3, 4)
    dims = x.shape[batch_dims:]
    k = ishape[-1]
    idx = np.stack([rng.integers(0, dims[j], ishape[:-1]) for j in range(k)], -1).astype(np.int64)
    check("GatherND", {"x": x, "i": idx}, {"batch_dims": batch_dims}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements(rng, reduction, axis):
    x = floats(rng, 4, 5)
    if reduction == "none":   # distinct targets: with repeats the result is unspecified
        idx = np.argsort(rng.random((4, 5)), axis=axis)[:3] if axis == 0 else np.argsort(rng.random((4, 5)), axis)[:, :3]
    else:
        idx = rng.integers(-x.shape[axis], x.shape[axis], (3, 3) if axis == 0 else (4, 3))
    check("ScatterElements", {"x": x, "i": idx.astype(np.int64), "u": floats(rng, *idx.shape)},
          {"axis": axis, "reduction": reduction}, opset=18)


def test_scatter_deprecated(rng):
    # onnx's reference evaluator has no Scatter (ScatterElements before opset 11): NumPy is the oracle.
    from .single_node import make_model, run_pyxla, with_output_types
    x, u = floats(rng, 3, 3), floats(rng, 2, 3)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    expected = x.copy()
    np.put_along_axis(expected, idx, u, axis=0)
    model = with_output_types(make_model("Scatter", {"x": x, "i": idx, "u": u}, ["result"], {"axis": 0}, 9),
                              [expected])
    np.testing.assert_array_equal(run_pyxla(model, {"x": x, "i": idx, "u": u})[0], expected)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(rng, reduction):
    x = floats(rng, 4, 3, 2)
    idx = np.array([[1, 2], [3, 0]] if reduction == "none" else [[1, 2], [3, 0], [1, 2]], np.int64)
    check("ScatterND", {"x": x, "i": idx, "u": floats(rng, len(idx), 2)}, {"reduction": reduction}, opset=18)
    check("ScatterND", {"x": x, "i": np.array([[2], [0]], np.int64), "u": floats(rng, 2, 3, 2)}, opset=11)


def test_scatter_refuses_unknown_reduction(rng):
    refuses("ScatterND", {"x": floats(rng, 3), "i": np.array([[1]]), "u": floats(rng, 1)}, {"reduction": "avg"},
            opset=18, match="'reduction'='avg'")


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(rng, axis):
    idx = rng.integers(-4, 4, (2, 3)).astype(np.int64)
    values = np.array([rng.standard_normal(), 5.0], np.float32)
    check("OneHot", {"i": idx, "depth": np.array(4, np.int64), "v": values}, {"axis": axis}, opset=11,
          known=["depth"])


def test_one_hot_float_indices(rng):
    idx = rng.integers(0, 5, (4,)).astype(np.float32)
    check("OneHot", {"i": idx, "depth": np.array(5, np.int64), "v": np.array([0, 1], np.int32)},
          opset=11, known=["depth"])


def test_nonzero_of_a_known_value(rng):
    check("NonZero", {"x": rng.random((3, 4)) < 0.5}, opset=13, known=["x"])


def test_nonzero_of_a_graph_input_compiles_for_its_value(rng):
    check("NonZero", {"x": rng.random((3, 4)) < 0.5}, opset=13)
    check("NonZero", {"x": rng.integers(0, 3, (2, 3, 2)).astype(np.int32)}, opset=13)


@pytest.mark.parametrize("attrs", [{}, {"axis": 0}, {"axis": -1, "sorted": 1}])
def test_unique(rng, attrs):
    x = rng.integers(0, 3, (4, 3)).astype(np.float32)
    check("Unique", {"x": x}, attrs, opset=11, outputs=("y", "indices", "inverse", "counts"))


def test_unique_in_order_of_first_occurrence(rng):
    # (onnx's reference mishandles sorted=0 on arrays of rank > 1; a vector is the same in both.)
    x = rng.integers(0, 6, (10,)).astype(np.int64)
    check("Unique", {"x": x}, {"sorted": 0}, opset=11, outputs=("y", "indices", "inverse", "counts"))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress(rng, axis):
    x = floats(rng, 3, 4)
    cond = rng.random(x.size if axis is None else x.shape[axis]) < 0.6
    check("Compress", {"x": x, "c": cond}, {} if axis is None else {"axis": axis}, opset=11, known=["c"])


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(rng, batch_axis, time_axis):
    x = floats(rng, 4, 4, 2) if time_axis == 0 else floats(rng, 3, 5, 2)
    lengths = rng.integers(1, x.shape[time_axis] + 1, x.shape[batch_axis]).astype(np.int64)
    check("ReverseSequence", {"x": x, "lens": lengths}, {"batch_axis": batch_axis, "time_axis": time_axis},
          opset=10)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_top_k(rng, largest, axis):
    x = rng.permutation(24).reshape(4, 6).astype(np.float32) + floats(rng, 4, 6) * 0.1
    check("TopK", {"x": x, "k": np.array([3], np.int64)}, {"axis": axis, "largest": largest}, opset=11,
          outputs=("values", "indices"), known=["k"])


def test_top_k_integers_and_ties(rng):
    x = rng.integers(-3, 3, (3, 8)).astype(np.int32)
    for largest in (0, 1):
        check("TopK", {"x": x, "k": np.array([4], np.int64)}, {"largest": largest}, opset=11,
              outputs=("values", "indices"), known=["k"])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(rng, exclusive, reverse, axis):
    check("CumSum", {"x": floats(rng, 3, 5), "axis": np.array(axis, np.int64)},
          {"exclusive": exclusive, "reverse": reverse}, opset=14, known=["axis"])


def test_cumsum_integers(rng):
    check("CumSum", {"x": rng.integers(-9, 9, (6,)).astype(np.int32), "axis": np.array(0, np.int32)},
          {"exclusive": 1}, opset=11, known=["axis"])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(rng, exclusive, reverse):
    check("CumProd", {"x": floats(rng, 3, 5), "axis": np.array(1, np.int64)},
          {"exclusive": exclusive, "reverse": reverse}, opset=26, known=["axis"])
