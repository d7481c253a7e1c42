"""StableHLO MLIR text in: each syntax form from small hand-written modules, run on the
evaluator against NumPy; errors with line, column and caret; the command line."""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pyxla import ParseError
from pyxla.hlo import evaluate_module, flatten_result, parse_stablehlo, print_module, verify_module


def run(text, *args):
    module = parse_stablehlo(text)
    verify_module(module)
    return flatten_result(evaluate_module(module, list(args)))


def main(sig, results, body):
    return f"module @m {{\n  func.func public @main({sig}) -> ({results}) {{\n{body}\n  }}\n}}\n"


def test_elementwise_pretty_and_generic(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    text = main("%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>", "tensor<2x3xf32>, tensor<2x3xf32>", """
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x3xf32>
    %1 = "stablehlo.multiply"(%0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("f.py":3:1)
    %2 = stablehlo.tanh %1 : tensor<2x3xf32>
    return %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>""")
    a, b = run(text, x, y)
    np.testing.assert_allclose(a, (x + y) * y, rtol=1e-6)
    np.testing.assert_allclose(b, np.tanh((x + y) * y), rtol=1e-5)


def test_integer_ops_are_exact(rng):
    x = rng.integers(-1000, 1000, 16, dtype=np.int32)
    y = rng.integers(1, 31, 16, dtype=np.int32)
    u = rng.integers(0, 2**32, 16, dtype=np.uint32)
    text = main("%arg0: tensor<16xi32>, %arg1: tensor<16xi32>, %arg2: tensor<16xui32>",
                "tensor<16xi32>, tensor<16xi32>, tensor<16xui32>, tensor<16xi1>", """
    %0 = stablehlo.shift_left %arg0, %arg1 : tensor<16xi32>
    %1 = stablehlo.remainder %arg0, %arg1 : tensor<16xi32>
    %c = stablehlo.constant dense<4294967295> : tensor<ui32>
    %2 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<ui32>) -> tensor<16xui32>
    %3 = stablehlo.xor %arg2, %2 : tensor<16xui32>
    %4 = stablehlo.compare LT, %arg0, %arg1, SIGNED : (tensor<16xi32>, tensor<16xi32>) -> tensor<16xi1>
    return %0, %1, %3, %4 : tensor<16xi32>, tensor<16xi32>, tensor<16xui32>, tensor<16xi1>""")
    a, b, c, d = run(text, x, y, u)
    np.testing.assert_array_equal(a, x << y)
    np.testing.assert_array_equal(b, np.fmod(x, y))
    np.testing.assert_array_equal(c, ~u)
    np.testing.assert_array_equal(d, x < y)


@pytest.mark.parametrize("literal,mlir_type,expected", [
    ("dense<1.500000e+00>", "tensor<2xf32>", np.array([1.5, 1.5], np.float32)),
    ("dense<0x7FC00000>", "tensor<f32>", np.array(np.nan, np.float32)),
    ("dense<[0xFF800000, 2.0]>", "tensor<2xf32>", np.array([-np.inf, 2], np.float32)),
    ('dense<"0x0000803F00000040">', "tensor<2xf32>", np.array([1, 2], np.float32)),
    ('dense<"0x0000803F">', "tensor<3xf32>", np.array([1, 1, 1], np.float32)),
    ("dense<[[1, -2], [3, 4]]>", "tensor<2x2xi8>", np.array([[1, -2], [3, 4]], np.int8)),
    ("dense<[true, false]>", "tensor<2xi1>", np.array([True, False])),
    ("dense<[255, 0]>", "tensor<2xui8>", np.array([255, 0], np.uint8)),
    ("dense<0xFF80>", "tensor<bf16>", np.array(-np.inf, ml_dtypes.bfloat16)),
    ("dense<[1.500000e+00, 2.5]>", "tensor<2xf16>", np.array([1.5, 2.5], np.float16)),
    ("dense<[1.0, 0.5]>", "tensor<2xf8E4M3FN>", np.array([1, 0.5], ml_dtypes.float8_e4m3fn)),
    ("dense<-1>", "tensor<i64>", np.array(-1, np.int64)),
    ("dense<1.0e+300>", "tensor<f64>", np.array(1e300, np.float64)),
])
def test_dense_constants(literal, mlir_type, expected):
    text = main("", mlir_type, f"""
    %c = stablehlo.constant {literal} : {mlir_type}
    return %c : {mlir_type}""")
    (out,) = run(text)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out.astype(np.float64) if out.dtype.kind == "V" or "float8" in str(out.dtype)
                                  else out, expected.astype(np.float64) if "float8" in str(expected.dtype)
                                  else expected)


def test_reduce_both_forms(rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    text = main("%arg0: tensor<5x6xf32>", "tensor<5xf32>, tensor<6xf32>, tensor<6xi32>", """
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<5x6xf32>, tensor<f32>) -> tensor<5xf32>
    %1 = stablehlo.iota dim = 0 : tensor<5x6xi32>
    %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %2:2 = stablehlo.reduce(%arg0 init: %m), (%1 init: %c) across dimensions = [0] : (tensor<5x6xf32>, tensor<5x6xi32>, tensor<f32>, tensor<i32>) -> (tensor<6xf32>, tensor<6xi32>)
     reducer(%a: tensor<f32>, %b: tensor<f32>) (%i: tensor<i32>, %j: tensor<i32>)  {
      %3 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %4 = stablehlo.select %3, %a, %b : tensor<i1>, tensor<f32>
      %5 = stablehlo.select %3, %i, %j : tensor<i1>, tensor<i32>
      stablehlo.return %4, %5 : tensor<f32>, tensor<i32>
    }
    return %0, %2#0, %2#1 : tensor<5xf32>, tensor<6xf32>, tensor<6xi32>""")
    s, m, i = run(text, x)
    # a float32 sum of six values may cancel to near zero: its error is relative to the terms
    np.testing.assert_allclose(s, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-6 * np.abs(x).sum(1).max())
    np.testing.assert_array_equal(m, x.max(0))
    np.testing.assert_array_equal(i, x.argmax(0))


def test_while_with_captured_value_and_call(rng):
    x = rng.standard_normal(4).astype(np.float32)
    text = """module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %k = stablehlo.constant dense<2.000000e+00> : tensor<4xf32>
    %0:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %c_1 = stablehlo.constant dense<3> : tensor<i32>
      %1 = stablehlo.compare LT, %iterArg, %c_1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %c_1 = stablehlo.constant dense<1> : tensor<i32>
      %1 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      %2 = func.call @scale(%iterArg_0, %k) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      stablehlo.return %1, %2 : tensor<i32>, tensor<4xf32>
    }
    return %0#1 : tensor<4xf32>
  }
  func.func private @scale(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""
    (out,) = run(text, x)
    np.testing.assert_array_equal(out, x * 8)


def test_case_and_if_capture_outer_values(rng):
    x = rng.standard_normal(3).astype(np.float32)
    text = main("%arg0: tensor<i32>, %arg1: tensor<3xf32>, %arg2: tensor<i1>", "tensor<3xf32>, tensor<3xf32>", """
    %0 = "stablehlo.case"(%arg0) ({
      %1 = stablehlo.negate %arg1 : tensor<3xf32>
      stablehlo.return %1 : tensor<3xf32>
    }, {
      stablehlo.return %arg1 : tensor<3xf32>
    }) : (tensor<i32>) -> tensor<3xf32>
    %2 = "stablehlo.if"(%arg2) ({
      %3 = stablehlo.exponential %arg1 : tensor<3xf32>
      stablehlo.return %3 : tensor<3xf32>
    }, {
      stablehlo.return %0 : tensor<3xf32>
    }) : (tensor<i1>) -> tensor<3xf32>
    return %0, %2 : tensor<3xf32>, tensor<3xf32>""")
    a, b = run(text, np.array(0, np.int32), x, np.array(False))
    np.testing.assert_array_equal(a, -x)
    np.testing.assert_array_equal(b, -x)
    a, b = run(text, np.array(1, np.int32), x, np.array(True))
    np.testing.assert_array_equal(a, x)
    np.testing.assert_allclose(b, np.exp(x), rtol=1e-6)


def test_sort_comparator_and_top_k(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    text = main("%arg0: tensor<3x8xf32>", "tensor<3x8xf32>, tensor<3x2xf32>, tensor<3x2xi32>", """
    %0 = "stablehlo.sort"(%arg0) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %1 = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }) : (tensor<3x8xf32>) -> tensor<3x8xf32>
    %values, %indices = chlo.top_k(%arg0, k = 2) : tensor<3x8xf32> -> (tensor<3x2xf32>, tensor<3x2xi32>)
    return %0, %values, %indices : tensor<3x8xf32>, tensor<3x2xf32>, tensor<3x2xi32>""")
    s, v, i = run(text, x)
    np.testing.assert_array_equal(s, np.sort(x, 1))
    np.testing.assert_array_equal(i, np.argsort(-x, 1, kind="stable")[:, :2])
    np.testing.assert_array_equal(v, np.take_along_axis(x, i, 1))


def test_dot_general_and_convolution(rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 6)).astype(np.float32)
    img = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    ker = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    text = main("%a: tensor<3x4x5xf32>, %b: tensor<3x5x6xf32>, %x: tensor<1x6x6x2xf32>, %w: tensor<3x3x2x4xf32>",
                "tensor<3x4x6xf32>, tensor<1x6x6x4xf32>", """
    %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<3x4x5xf32>, tensor<3x5x6xf32>) -> tensor<3x4x6xf32>
    %1 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<1x6x6x2xf32>, tensor<3x3x2x4xf32>) -> tensor<1x6x6x4xf32>
    return %0, %1 : tensor<3x4x6xf32>, tensor<1x6x6x4xf32>""")
    d, c = run(text, a, b, img, ker)
    np.testing.assert_allclose(d, a @ b, rtol=1e-4, atol=1e-5)
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((1, 6, 6, 4), np.float64)
    for i in range(6):
        for j in range(6):
            ref[0, i, j] = np.tensordot(padded[0, i:i + 3, j:j + 3], ker, axes=([0, 1, 2], [0, 1, 2]))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_gather_and_scatter_dimension_numbers(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = rng.integers(0, 5, (4, 1)).astype(np.int32)
    upd = rng.standard_normal((4, 3)).astype(np.float32)
    text = main("%x: tensor<5x3xf32>, %i: tensor<4x1xi32>, %u: tensor<4x3xf32>", "tensor<4x3xf32>, tensor<5x3xf32>", """
    %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 3>}> : (tensor<5x3xf32>, tensor<4x1xi32>) -> tensor<4x3xf32>
    %1 = "stablehlo.scatter"(%x, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %2 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %2 : tensor<f32>
    }) : (tensor<5x3xf32>, tensor<4x1xi32>, tensor<4x3xf32>) -> tensor<5x3xf32>
    return %0, %1 : tensor<4x3xf32>, tensor<5x3xf32>""")
    g, s = run(text, x, idx, upd)
    np.testing.assert_array_equal(g, x[idx[:, 0]])
    ref = x.astype(np.float64).copy()
    np.add.at(ref, idx[:, 0], upd)
    np.testing.assert_allclose(s, ref, rtol=1e-6, atol=1e-6)


def test_shape_ops_and_composite(rng):
    x = rng.standard_normal((2, 6)).astype(np.float32)
    text = """module @m attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<2x6xf32> {mhlo.sharding = "{replicated}"}) -> (tensor<3x2xf32> {jax.result_info = "result[0]"}, tensor<2x8xf32>, tensor<2x6xf32>) {
    %0 = stablehlo.slice %arg0 [0:2, 1:6:2] : (tensor<2x6xf32>) -> tensor<2x3xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.pad %arg0, %cst, low = [0, 1], high = [0, 1], interior = [0, 0] : (tensor<2x6xf32>, tensor<f32>) -> tensor<2x8xf32>
    %3 = stablehlo.composite "my.double" %arg0 {composite_attributes = {k = 2 : i64}, decomposition = @my.double} : (tensor<2x6xf32>) -> tensor<2x6xf32>
    return %1, %2, %3 : tensor<3x2xf32>, tensor<2x8xf32>, tensor<2x6xf32>
  }
  func.func private @my.double(%arg0: tensor<2x6xf32>) -> tensor<2x6xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2x6xf32>
    return %0 : tensor<2x6xf32>
  }
}"""
    t, p, d = run(text, x)
    np.testing.assert_array_equal(t, x[:, 1:6:2].T)
    np.testing.assert_array_equal(p, np.pad(x, ((0, 0), (1, 1))))
    np.testing.assert_array_equal(d, x + x)
    assert "call" not in print_module(parse_stablehlo(text))   # the composite is inlined


def test_chlo_lowerings_match_scipy(rng):
    special = pytest.importorskip("scipy.special")
    x = rng.uniform(-0.99, 0.99, 64).astype(np.float32)
    g = rng.uniform(0.1, 6.0, 64).astype(np.float32)
    text = main("%x: tensor<64xf32>, %g: tensor<64xf32>", ", ".join(["tensor<64xf32>"] * 5), """
    %0 = chlo.erf_inv %x : tensor<64xf32> -> tensor<64xf32>
    %1 = chlo.erfc %x : tensor<64xf32> -> tensor<64xf32>
    %2 = chlo.lgamma %g : tensor<64xf32> -> tensor<64xf32>
    %3 = chlo.digamma %g : tensor<64xf32> -> tensor<64xf32>
    %4 = chlo.square %x : tensor<64xf32> -> tensor<64xf32>
    return %0, %1, %2, %3, %4 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>""")
    a, b, c, d, e = run(text, x, g)
    np.testing.assert_allclose(a, special.erfinv(x.astype(np.float64)), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(b, special.erfc(x.astype(np.float64)), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(c, special.gammaln(g.astype(np.float64)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d, special.digamma(g.astype(np.float64)), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(e, x * x)


def test_source_lines_kept_as_metadata():
    text = main("%arg0: tensor<2xf32>", "tensor<2xf32>", """
    %0 = stablehlo.negate %arg0 : tensor<2xf32>
    return %0 : tensor<2xf32>""")
    module = parse_stablehlo(text)
    neg = next(i for i in module.entry.instructions if i.opcode == "negate")
    assert neg.attrs["metadata"]["source_line"] == 4


# --- errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("body,line,col,message", [
    ("    %0 = stablehlo.add %arg0, %nope : tensor<2xf32>\n    return %0 : tensor<2xf32>", 3, 31, "undefined value '%nope'"),
    ("    %0 = stablehlo.fft %arg0 : tensor<2xf32>\n    return %0 : tensor<2xf32>", 3, 10, "unsupported op 'stablehlo.fft'"),
    ("    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32\n    return %0 : tensor<2xf32>", 4, 5, "expected '>' to close the tensor type"),
    ("    %0 = stablehlo.add %arg0, %arg0 : tensor<2xc64>\n    return %0 : tensor<2xf32>", 3, 48, "'c64'"),
    ("    %c = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<2xf32>\n    return %c : tensor<2xf32>", 3, 35,
     "3 elements"),
])
def test_errors_point_at_line_and_column(body, line, col, message):
    text = main("%arg0: tensor<2xf32>", "tensor<2xf32>", body)
    with pytest.raises(ParseError) as info:
        parse_stablehlo(text)
    e = info.value
    assert message in e.message
    assert (e.line, e.column) == (line, col), str(e)
    assert "^" in str(e) and e.line_text in str(e)


def test_unclosed_module_and_garbage():
    with pytest.raises(ParseError, match="expected 'module' or 'func.func'"):
        parse_stablehlo("HloModule x")
    with pytest.raises(ParseError) as info:
        parse_stablehlo("module @m {\n  func.func public @main() -> () {\n    return\n  }\n")
    assert info.value.line == 4


# --- command line -----------------------------------------------------------------------

def test_cli_fmt_and_run(tmp_path, rng):
    x = rng.standard_normal(3).astype(np.float32)
    path = tmp_path / "prog.mlir"
    path.write_text(main("%arg0: tensor<3xf32>", "tensor<3xf32>", """
    %0 = stablehlo.exponential %arg0 : tensor<3xf32>
    return %0 : tensor<3xf32>"""))
    out = subprocess.run([sys.executable, "-m", "pyxla", "fmt", "--to", "hlo", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("HloModule m") and "exponential(" in out
    np.savez(tmp_path / "in.npz", arg0=x)
    no_ext = tmp_path / "prog.txt"   # told apart by content
    no_ext.write_text(path.read_text())
    subprocess.run([sys.executable, "-m", "pyxla", "run", str(no_ext), "--inputs", str(tmp_path / "in.npz"),
                    "--out", str(tmp_path / "out.npz"), "--backend", "interpreter", "--quiet"], check=True)
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["out0"], np.exp(x), rtol=1e-6)


def test_cli_reports_parse_errors(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("module @m {\n  func.func public @main() -> () {\n    %0 = stablehlo.bogus : tensor<f32>\n"
                    "    return\n  }\n}\n")
    proc = subprocess.run([sys.executable, "-m", "pyxla", "check", "--help"], capture_output=True, text=True)
    assert "stablehlo" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pyxla", "fmt", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{path}:3:10: unsupported op 'stablehlo.bogus'" in proc.stderr
