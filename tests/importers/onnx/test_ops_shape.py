"""Shape and layout converters against onnx's reference evaluator."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from .single_node import check, make_model, refuses, run_pyxla, with_output_types


def floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


@pytest.mark.parametrize("attrs,opset", [({}, 13), ({"start": 1}, 15), ({"end": -1}, 15),
                                         ({"start": -2, "end": 10}, 19)])
def test_shape(rng, attrs, opset):
    check("Shape", {"x": floats(rng, 2, 3, 4)}, attrs, opset=opset)


def test_size(rng):
    check("Size", {"x": floats(rng, 2, 3, 4)}, opset=13)


@pytest.mark.parametrize("target", [(4, 6), (0, -1), (-1,), (2, 0, 2, 2), (0, 3, -1)])
def test_reshape(rng, target):
    check("Reshape", {"x": floats(rng, 2, 3, 4), "shape": i64(*target)}, opset=14, known=["shape"])


def test_reshape_allowzero(rng):
    check("Reshape", {"x": floats(rng, 0, 3, 4), "shape": i64(3, 4, 0)}, {"allowzero": 1}, opset=14,
          known=["shape"])


def test_reshape_target_computed_from_shape_chain(rng):
    """Shape -> Gather -> Concat -> Reshape: the target is known when the model is loaded."""
    x = floats(rng, 2, 3, 4)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 12))],
                              [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
                               helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (got,) = run_pyxla(model, {"x": x})
    np.testing.assert_array_equal(got, x.reshape(2, 12))


@pytest.mark.parametrize("axis,opset", [(0, 13), (1, 1), (2, 9), (-1, 13), (3, 13)])
def test_flatten(rng, axis, opset):
    check("Flatten", {"x": floats(rng, 2, 3, 4)}, {"axis": axis}, opset=opset)


def test_squeeze_unsqueeze_axes_attribute_then_input(rng):
    x = floats(rng, 3, 1, 4, 1)
    check("Squeeze", {"x": x}, {"axes": [1, -1]}, opset=11)
    check("Squeeze", {"x": x}, opset=11)
    check("Squeeze", {"x": x, "axes": i64(-1)}, opset=13, known=["axes"])
    check("Squeeze", {"x": x}, opset=13)
    check("Unsqueeze", {"x": floats(rng, 3, 4)}, {"axes": [0, 3]}, opset=11)
    check("Unsqueeze", {"x": floats(rng, 3, 4), "axes": i64(-1, 1)}, opset=13, known=["axes"])


@pytest.mark.parametrize("target", [(2, 3, 4), (3, 1), (1, 1, 4), (2, 1, 1, 1)])
def test_expand(rng, target):
    check("Expand", {"x": floats(rng, 3, 1), "shape": i64(*target)}, opset=13, known=["shape"])


def test_tile(rng):
    check("Tile", {"x": floats(rng, 2, 3), "repeats": i64(3, 2)}, opset=13, known=["repeats"])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(rng, axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for s in shapes[1:]:
        s[axis] = int(rng.integers(1, 4))
    check("Concat", {f"x{i}": floats(rng, *s) for i, s in enumerate(shapes)}, {"axis": axis}, opset=13)


def test_concat_known_and_traced_inputs(rng):
    check("Concat", {"a": floats(rng, 2, 3), "b": floats(rng, 1, 3)}, {"axis": 0}, opset=13, known=["b"])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_sizes(rng, opset):
    x = floats(rng, 7, 3)
    outs = ("a", "b", "c")
    if opset < 13:
        check("Split", {"x": x}, {"axis": 0, "split": [1, 4, 2]}, opset=opset, outputs=outs)
    else:
        check("Split", {"x": x, "split": i64(1, 4, 2)}, {"axis": 0}, opset=opset, outputs=outs, known=["split"])


def test_split_even_and_num_outputs(rng):
    check("Split", {"x": floats(rng, 4, 6)}, {"axis": 1}, opset=13, outputs=("a", "b", "c"))
    check("Split", {"x": floats(rng, 4, 7)}, {"axis": -1, "num_outputs": 3}, opset=18, outputs=("a", "b", "c"))


SLICES = [
    ([1], [3], [0], None), ([0, 1], [-1, 100], [0, 1], [1, 2]), ([4], [-100], [0], [-1]),
    ([-1, 3], [-6, 0], [0, 1], [-2, -1]), ([10], [20], [1], None), ([2], [0], [2], [-1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice_inputs(rng, starts, ends, axes, steps):
    inputs = {"x": floats(rng, 5, 6, 4), "starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes),
              "steps": None if steps is None else i64(*steps)}
    check("Slice", inputs, opset=13, known=["starts", "ends", "axes", "steps"])


def test_slice_attributes(rng):
    check("Slice", {"x": floats(rng, 5, 6)}, {"starts": [1, -3], "ends": [4, 1000], "axes": [0, 1]}, opset=9)


@pytest.mark.parametrize("perm", [None, [1, 2, 0], [2, 0, 1]])
def test_transpose(rng, perm):
    check("Transpose", {"x": floats(rng, 2, 3, 4)}, {} if perm is None else {"perm": perm}, opset=13)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(rng, mode):
    inputs = {"x": floats(rng, 3, 4), "pads": i64(1, 2, 2, 1)}
    if mode == "constant":
        inputs["value"] = np.float32(rng.standard_normal())
    check("Pad", inputs, {"mode": mode}, opset=19, known=list(inputs)[1:])


def test_pad_axes_input(rng):
    check("Pad", {"x": floats(rng, 2, 3, 4), "pads": i64(1, 2, 0, 3), "value": None, "axes": i64(2, 0)},
          opset=18, known=["pads", "axes"])


def test_pad_attributes(rng):
    check("Pad", {"x": floats(rng, 3, 4)}, {"pads": [0, 1, 2, 0], "value": 2.5}, opset=2)


def test_pad_negative_crops(rng):
    x = floats(rng, 4, 5)
    value = np.float32(rng.standard_normal())
    expected = np.pad(x[1:, :3], ((0, 2), (1, 0)), constant_values=value)   # pads -1/+2 and +1/-2
    model = make_model("Pad", {"x": x, "pads": i64(-1, 1, 2, -2), "value": value}, ["result"], {}, 13,
                       known=["pads", "value"])
    (got,) = run_pyxla(with_output_types(model, [expected]), {"x": x})
    np.testing.assert_array_equal(got, expected)


def test_pad_refuses_unknown_mode(rng):
    refuses("Pad", {"x": floats(rng, 3, 4), "pads": i64(1, 1, 1, 1)}, {"mode": "wrap"}, opset=13,
            known=["pads"], match="'mode'='wrap'")


def test_constant_of_shape(rng):
    check("ConstantOfShape", {"shape": i64(2, 3)}, opset=9, known=["shape"])
    value = helper.make_tensor("v", TensorProto.INT32, [1], [int(rng.integers(-9, 9))])
    check("ConstantOfShape", {"shape": i64(4, 1, 2)}, {"value": value}, opset=20, known=["shape"])


@pytest.mark.parametrize("start,limit,delta,dtype", [(0, 10, 3, np.int64), (10, 4, -2, np.int32),
                                                     (1.5, 7.25, 0.75, np.float32), (3, 3, 1, np.int64)])
def test_range(start, limit, delta, dtype):
    check("Range", {"start": np.array(start, dtype), "limit": np.array(limit, dtype),
                    "delta": np.array(delta, dtype)}, opset=11, known=["start", "limit", "delta"])


def test_range_of_graph_inputs_compiles_for_their_values(rng):
    limit = np.array(rng.integers(2, 9), np.int64)
    check("Range", {"start": np.array(0, np.int64), "limit": limit, "delta": np.array(2, np.int64)}, opset=11,
          known=["start"])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(rng, mode):
    check("DepthToSpace", {"x": floats(rng, 2, 8, 3, 2)}, {"blocksize": 2, "mode": mode}, opset=13)


def test_space_to_depth(rng):
    check("SpaceToDepth", {"x": floats(rng, 2, 3, 4, 6)}, {"blocksize": 2}, opset=13)


@pytest.mark.parametrize("k,dtype", [(0, None), (1, TensorProto.INT32), (-2, TensorProto.DOUBLE)])
def test_eye_like(rng, k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check("EyeLike", {"x": floats(rng, 4, 5)}, attrs, opset=9)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1])
def test_trilu(rng, upper, k):
    inputs = {"x": floats(rng, 2, 4, 5), "k": None if k is None else np.array(k, np.int64)}
    check("Trilu", inputs, {"upper": upper}, opset=14, known=["k"])


def test_center_crop_pad(rng):
    check("CenterCropPad", {"x": floats(rng, 5, 4, 3), "shape": i64(3, 7)}, {"axes": [0, 1]}, opset=18,
          known=["shape"])
