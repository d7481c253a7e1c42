"""Every elementwise opcode, and fused chains of them, on the CPU backend against the evaluator:
several dtypes, odd sizes that leave vector tails, size-1 and zero-size dimensions."""
import re

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import parse_module

from ...fusion.programs import ARGMAX_REDUCER
from .differential import assert_cpu_matches_interpreter

SHAPES = ["37", "1", "0", "5,13", "3,1,9"]
FLOAT_UNARY = ["abs", "negate", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
               "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "logistic", "erf", "floor", "ceil",
               "round-nearest-afz", "round-nearest-even"]
INT_UNARY = ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum", "minimum"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
              "shift-left", "shift-right-arithmetic", "shift-right-logical"]


def unary(op, dtype, dims, out=None):
    out = out or dtype
    return f"""HloModule u
ENTRY main {{
  x = {dtype}[{dims}] parameter(0)
  ROOT r = {out}[{dims}] {op}(x)
}}
"""


def binary(op, dtype, dims, attrs="", out=None):
    out = out or dtype
    return f"""HloModule b
ENTRY main {{
  x = {dtype}[{dims}] parameter(0)
  y = {dtype}[{dims}] parameter(1)
  ROOT r = {out}[{dims}] {op}(x, y){attrs}
}}
"""


def positive_for(op, inputs):
    """Domains where the op is real-valued, so NaN placement is not the thing compared."""
    if op in ("log", "sqrt", "rsqrt", "log-plus-one"):
        return [np.abs(a) + np.asarray(0.5, a.dtype) for a in inputs]
    return inputs


def float_inputs(rng, dims, n, dtype):
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return [(rng.standard_normal(shape) * 2).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("dtype,np_dtype", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("op", FLOAT_UNARY)
def test_float_unary(op, dtype, np_dtype, dims, rng):
    inputs = positive_for(op, float_inputs(rng, dims, 1, np_dtype))
    assert_cpu_matches_interpreter(unary(op, dtype, dims), rng, inputs, rtol=2e-6 if dtype == "f32" else 1e-13,
                                   atol=1e-30)


# abs and sign take signed integers only (their shape rule refuses unsigned ones)
@pytest.mark.parametrize("op,dtype", [(op, t) for op in INT_UNARY for t in ["s8", "s32", "u8", "u32", "s64"]
                                      if t.startswith("s") or op not in ("abs", "sign")])
def test_integer_unary(op, dtype, rng):
    assert_cpu_matches_interpreter(unary(op, dtype, "41"), rng)


@pytest.mark.parametrize("dims", ["37", "4,9"])
@pytest.mark.parametrize("dtype,np_dtype", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("op", FLOAT_BINARY)
def test_float_binary(op, dtype, np_dtype, dims, rng):
    inputs = float_inputs(rng, dims, 2, np_dtype)
    if op == "power":
        inputs[0] = np.abs(inputs[0]) + np_dtype(0.1)
    inputs[0].reshape(-1)[:1] = np.nan   # NaN propagation through maximum/minimum and arithmetic
    assert_cpu_matches_interpreter(binary(op, dtype, dims), rng, inputs, rtol=2e-6 if dtype == "f32" else 1e-13,
                                   atol=1e-30)


@pytest.mark.parametrize("dtype", ["s8", "s32", "u16", "u32", "s64"])
@pytest.mark.parametrize("op", INT_BINARY)
def test_integer_binary_edges(op, dtype, rng):
    info = np.iinfo(np.dtype({"s8": np.int8, "s32": np.int32, "u16": np.uint16, "u32": np.uint32,
                              "s64": np.int64}[dtype]))
    x = rng.integers(info.min, info.max, 64, endpoint=True).astype(info.dtype)
    y = rng.integers(info.min, info.max, 64, endpoint=True).astype(info.dtype)
    x[:4] = [info.min, info.max, 0, 1]
    y[:4] = [info.max if info.min == 0 else -1, 0, 0, info.bits]   # INT_MIN / -1, x / 0, shift by the width
    y[4:8] = [info.bits + 3, 1, 2, info.bits - 1] if op.startswith("shift") else y[4:8]
    assert_cpu_matches_interpreter(binary(op, dtype, "64"), rng, [x, y])


@pytest.mark.parametrize("dtype,np_dtype", [("s8", np.int8), ("s32", np.int32), ("u16", np.uint16),
                                            ("s64", np.int64)])
def test_integer_power(dtype, np_dtype, rng):
    """Square-and-multiply with wrapping products; negative exponents give 0 (1 for base 1)."""
    x = rng.integers(-4 if dtype[0] == "s" else 0, 5, 80).astype(np_dtype)
    y = rng.integers(-3 if dtype[0] == "s" else 0, 70, 80).astype(np_dtype)
    x[:4], y[:4] = [1, 2, 3, 0], [np_dtype(-1) if dtype[0] == "s" else 0, 63, 64, 0]
    assert_cpu_matches_interpreter(binary("power", dtype, "80"), rng, [x, y], rtol=0, atol=0)


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("dtype,kind", [("f32", None), ("f32", "TOTALORDER"), ("s32", None), ("u8", None)])
def test_compare(direction, dtype, kind, rng):
    attrs = f", direction={direction}" + (f", type={kind}" if kind else "")
    text = binary("compare", dtype, "50", attrs, out="pred")
    inputs = None
    if dtype == "f32":
        x = rng.standard_normal(50).astype(np.float32)
        y = x.copy()
        y[::3] = rng.standard_normal(17).astype(np.float32)
        x[:4] = [np.nan, -0.0, np.inf, 0.0]
        y[:4] = [np.nan, 0.0, np.inf, -0.0]
        inputs = [x, y]
    assert_cpu_matches_interpreter(text, rng, inputs)


CONVERSIONS = [("f32", "s32"), ("f32", "u8"), ("f32", "s8"), ("f32", "f16"), ("f32", "bf16"), ("f32", "f64"),
               ("f64", "f32"), ("s32", "f32"), ("u32", "f32"), ("s32", "s8"), ("s8", "s32"), ("u8", "s32"),
               ("f16", "f32"), ("bf16", "f32"), ("pred", "f32"), ("f32", "pred"), ("s32", "pred")]


@pytest.mark.parametrize("src,dst", CONVERSIONS)
def test_convert(src, dst, rng):
    text = unary("convert", src, "64", out=dst)
    inputs = None
    if src == "f32":
        x = (rng.standard_normal(64) * 300).astype(np.float32)
        x[:6] = [np.nan, np.inf, -np.inf, 3e9, -3e9, -0.0]
        inputs = [x]
    assert_cpu_matches_interpreter(text, rng, inputs, rtol=0, atol=0)


def test_fused_chain_with_broadcast_transpose_slice(rng):
    text = """
HloModule chain
ENTRY main {
  x = f32[7,9] parameter(0)
  v = f32[9] parameter(1)
  vb = f32[7,9] broadcast(v), dimensions={1}
  s = f32[7,9] add(x, vb)
  t = f32[9,7] transpose(s), dimensions={1,0}
  e = f32[9,7] exponential(t)
  sl = f32[4,7] slice(e), slice={[1:9:2], [0:7]}
  r = f32[7,4] transpose(sl), dimensions={1,0}
  io = f32[7,4] iota(), iota_dimension=1
  p = f32[7,4] multiply(r, io)
  z = f32[] constant(0)
  pd = f32[9,6] pad(p, z), padding=1_1x0_2
  ROOT rev = f32[9,6] reverse(pd), dimensions={0}
}
"""
    assert_cpu_matches_interpreter(text, rng)
    module = parse_module(text)
    executable = get_backend("cpu").compile(module)
    assert executable.module.entry.root.opcode == "fusion"


def test_reductions_rows_columns_and_argmax(rng):
    text = f"""
HloModule reductions
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
{ARGMAX_REDUCER}
ENTRY main {{
  x = f32[13,31] parameter(0)
  z = f32[] constant(0)
  rows = f32[13] reduce(x, z), dimensions={{1}}, to_apply=add
  cols = f32[31] reduce(x, z), dimensions={{0}}, to_apply=add
  all = f32[] reduce(x, z), dimensions={{0,1}}, to_apply=add
  idx = s32[13,31] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zi = s32[] constant(0)
  am = (f32[13], s32[13]) reduce(x, idx, ninf, zi), dimensions={{1}}, to_apply=argmax
  ai = s32[13] get-tuple-element(am), index=1
  ROOT out = (f32[13], f32[31], f32[], s32[13]) tuple(rows, cols, all, ai)
}}
"""
    x = rng.standard_normal((13, 31)).astype(np.float32)
    x[2, 5] = x[2, 9] = 100.0   # a tie goes to the lower index
    assert_cpu_matches_interpreter(text, rng, [x], rtol=1e-5)


def test_unsupported_opcode_is_refused_by_name():
    text = """
HloModule refuse
ENTRY main {
  x = f32[4] parameter(0)
  ROOT s = f32[4] custom-call(x), custom_call_target="my_kernel"
}
"""
    with pytest.raises(NotImplementedError, match="custom-call"):
        get_backend("cpu").compile(parse_module(text))


def test_arguments_checked_before_native_code(rng):
    executable = get_backend("cpu").compile(parse_module(unary("exponential", "f32", "8")))
    with pytest.raises(ValueError, match=r"parameter x: expected shape f32\[8\]"):
        executable(np.ones(7, np.float32))


def test_concurrent_calls_from_threads(rng):
    from concurrent.futures import ThreadPoolExecutor
    executable = get_backend("cpu").compile(parse_module(unary("tanh", "f32", "1000")))
    inputs = [rng.standard_normal(1000).astype(np.float32) for _ in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(executable, inputs))
    for x, r in zip(inputs, results):
        np.testing.assert_allclose(r, np.tanh(x.astype(np.float64)), rtol=2e-6)


def test_dump_writes_llvm_ir_and_assembly(tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    get_backend("cpu").compile(parse_module(unary("exponential", "f32", "8")))
    folder = tmp_path / "u"
    assert re.search(r"define void @\"entry_\d+\"", (folder / "llvm-ir.ll").read_text())
    assert "entry" in (folder / "llvm-ir.optimized.ll").read_text()
    assert (folder / "assembly.s").read_text().strip()
