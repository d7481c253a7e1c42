"""sort, topk and the TopK custom-call on the CPU backend against the evaluator, exactly:
ties (stability), NaN and -0 under plain and total-order comparators, several operands and
keys, descending orders, sort along every dimension, non-default layouts, rows long enough
for several merge levels and for heap scratch, zero-size arrays.

Comparators here are strict weak orders (a plain LT never meets a NaN), for which every
stable sort gives one answer; for other comparators the order is implementation-defined."""
import ml_dtypes
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter

LT = "LT"
TOTAL_ORDER = "TOTAL"


def comparator(name: str, dtype: str, direction: str = "LT", how: str = LT) -> str:
    """A comparator on one operand: a plain compare, or IEEE total order (NaN last, -0 < +0)."""
    kind = ", type=TOTALORDER" if how == TOTAL_ORDER else ""
    return f"""{name} {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction={direction}{kind}
}}
"""


def sort_module(dtype: str, dims: str, dimension: int, direction: str = "LT", how: str = LT,
                layout: str = "", stable: bool = True) -> str:
    return f"""HloModule s
{comparator("cmp", dtype, direction, how)}
ENTRY main {{
  x = {dtype}[{dims}]{layout} parameter(0)
  ROOT s = {dtype}[{dims}]{layout} sort(x), dimensions={{{dimension}}}, is_stable={str(stable).lower()}, to_apply=cmp
}}
"""


def total_order_key(x: np.ndarray) -> np.ndarray:
    """f32 -> int64 ordered as IEEE total order (-NaN < -inf < ... < -0 < +0 < ... < +NaN)."""
    bits = x.view(np.int32).astype(np.int64)
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def with_ties_and_specials(rng, shape, dtype) -> np.ndarray:
    """Few distinct values (many ties), and for floats NaN, +-0 and +-inf among them."""
    values = rng.integers(-4, 5, shape)
    if np.dtype(dtype).kind in "fV" or dtype is ml_dtypes.bfloat16:
        x = values.astype(np.float64) * 0.5
        specials = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf])
        mask = rng.random(shape) < 0.25
        x[mask] = rng.choice(specials, int(mask.sum()))
        return x.astype(dtype)
    if np.dtype(dtype).kind == "u":
        values = values + 4
    return values.astype(dtype)


@pytest.mark.parametrize("dims,dimension", [("37", 0), ("5,40", 1), ("40,5", 0), ("3,4,50", 1), ("2,130", 1)])
@pytest.mark.parametrize("how", [LT, TOTAL_ORDER])
def test_sort_floats_with_ties_nan_and_signed_zero(dims, dimension, how, rng):
    shape = tuple(int(d) for d in dims.split(","))
    x = with_ties_and_specials(rng, shape, np.float32)
    if how == LT:   # NaN is unordered under LT: keep its ties and zeros only
        x = np.where(np.isnan(x), np.float32(-0.0), x)
    got = assert_cpu_matches_interpreter(sort_module("f32", dims, dimension, how=how), rng, [x], rtol=0, atol=0)
    if how == TOTAL_ORDER:   # NaN last and -0 before +0: compare the bits, not just the values
        want = np.take_along_axis(x, np.argsort(total_order_key(x), axis=dimension, kind="stable"), dimension)
        np.testing.assert_array_equal(got[0].view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("dtype,np_dtype", [("s8", np.int8), ("u16", np.uint16), ("s64", np.int64),
                                            ("f64", np.float64), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_sort_dtypes_ascending_and_descending(dtype, np_dtype, direction, rng):
    x = with_ties_and_specials(rng, (4, 45), np_dtype)
    if np.dtype(np_dtype).kind == "f" or np_dtype is ml_dtypes.bfloat16:
        x = np.where(np.isnan(x.astype(np.float32)), np_dtype(1.5), x).astype(np_dtype)   # plain LT/GT: no NaN
    got = assert_cpu_matches_interpreter(sort_module(dtype, "4,45", 1, direction), rng, [x], rtol=0, atol=0)
    sign = 1 if direction == "LT" else -1
    np.testing.assert_array_equal(got[0].astype(np.float64), sign * np.sort(sign * x.astype(np.float64), axis=1))


def test_sort_non_default_layout_and_unstable_flag(rng):
    x = with_ties_and_specials(rng, (6, 41), np.float32)
    text = sort_module("f32", "6,41", 1, how=TOTAL_ORDER, layout="{0,1}", stable=False)
    assert_cpu_matches_interpreter(text, rng, [x], rtol=0, atol=0)


def test_sort_long_rows(rng):
    x = with_ties_and_specials(rng, (2, 9000), np.float32)
    got = assert_cpu_matches_interpreter(sort_module("f32", "2,9000", 1, how=TOTAL_ORDER), rng, [x], rtol=0, atol=0)
    assert np.all(np.diff(total_order_key(got[0]), axis=1) >= 0)


def test_sort_zero_size(rng):
    x = np.zeros((0, 7), np.float32)
    got = assert_cpu_matches_interpreter(sort_module("f32", "0,7", 1), rng, [x])
    assert got[0].shape == (0, 7)


ARGSORT = """HloModule argsort
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=GT, type=TOTALORDER
}
ENTRY main {
  x = f32[DIMS] parameter(0)
  iota = s32[DIMS] iota(), iota_dimension=DIM
  s = (f32[DIMS], s32[DIMS]) sort(x, iota), dimensions={DIM}, is_stable=true, to_apply=cmp
  ROOT indices = s32[DIMS] get-tuple-element(s), index=1
}
"""


@pytest.mark.parametrize("dims,dim", [("3,70", 1), ("70,3", 0)])
def test_argsort_descending_is_stable(dims, dim, rng):
    shape = tuple(int(d) for d in dims.split(","))
    x = with_ties_and_specials(rng, shape, np.float32)
    got = assert_cpu_matches_interpreter(ARGSORT.replace("DIMS", dims).replace("DIM", str(dim)), rng, [x])
    # ties keep ascending indices: NumPy's stable argsort of the negated total-order key agrees
    np.testing.assert_array_equal(got[0], np.argsort(-total_order_key(x), axis=dim, kind="stable"))


MULTI_KEY = """HloModule multi
cmp {
  k1a = s32[] parameter(0)
  k1b = s32[] parameter(1)
  k2a = f32[] parameter(2)
  k2b = f32[] parameter(3)
  va = u8[] parameter(4)
  vb = u8[] parameter(5)
  lt1 = pred[] compare(k1a, k1b), direction=LT
  eq1 = pred[] compare(k1a, k1b), direction=EQ
  lt2 = pred[] compare(k2a, k2b), direction=GT, type=TOTALORDER
  tie = pred[] and(eq1, lt2)
  ROOT less = pred[] or(lt1, tie)
}
ENTRY main {
  k1 = s32[4,33] parameter(0)
  k2 = f32[4,33] parameter(1)
  v = u8[4,33] parameter(2)
  ROOT s = (s32[4,33], f32[4,33], u8[4,33]) sort(k1, k2, v), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_sort_several_operands_two_keys(rng):
    k1 = rng.integers(0, 3, (4, 33)).astype(np.int32)
    k2 = with_ties_and_specials(rng, (4, 33), np.float32)
    v = rng.integers(0, 256, (4, 33)).astype(np.uint8)
    got = assert_cpu_matches_interpreter(MULTI_KEY, rng, [k1, k2, v], rtol=0, atol=0)
    assert np.all(np.diff(got[0], axis=1) >= 0)
    # the values travel with their keys: each row holds the same (k1, k2 bits, v) triples
    for r in range(4):
        before = sorted(zip(k1[r], k2[r].view(np.int32), v[r]))
        after = sorted(zip(got[0][r], got[1][r].view(np.int32), got[2][r]))
        assert before == after


def topk_module(dtype: str, dims: str, k: int, largest: bool) -> str:
    out = dims.rsplit(",", 1)[0] + f",{k}" if "," in dims else str(k)
    return f"""HloModule t
ENTRY main {{
  x = {dtype}[{dims}] parameter(0)
  ROOT t = ({dtype}[{out}], s32[{out}]) topk(x), k={k}, largest={str(largest).lower()}
}}
"""


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dims,k", [("3,50", 5), ("2,3,17", 17), ("40", 1), ("4,9", 0), ("2,2000", 20)])
def test_topk_with_nan_ties_and_signed_zero(dims, k, largest, rng):
    shape = tuple(int(d) for d in dims.split(","))
    x = with_ties_and_specials(rng, shape, np.float32)
    got = assert_cpu_matches_interpreter(topk_module("f32", dims, k, largest), rng, [x], rtol=0, atol=0)
    values, indices = got
    np.testing.assert_array_equal(np.take_along_axis(x, indices.astype(np.int64), -1).view(np.int32),
                                  values.view(np.int32))


def test_topk_integers(rng):
    x = with_ties_and_specials(rng, (5, 31), np.int32)
    got = assert_cpu_matches_interpreter(topk_module("s32", "5,31", 4, True), rng, [x])
    np.testing.assert_array_equal(got[0], -np.sort(-x, axis=1)[:, :4])


TOPK_CUSTOM_CALL = """HloModule tk
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  PARAMS
  ROOT gt = pred[] compare(a, b), direction=GT, type=TOTALORDER
}
ENTRY main {
  x = f32[6,23] parameter(0)
  ROOT t = (f32[6,4], s32[6,4]) custom-call(x), custom_call_target="TopK", called_computations={gt}
}
"""


@pytest.mark.parametrize("with_indices", [False, True])
def test_topk_custom_call(with_indices, rng):
    params = "i = s32[] parameter(2)\n  j = s32[] parameter(3)" if with_indices else ""
    x = with_ties_and_specials(rng, (6, 23), np.float32)
    got = assert_cpu_matches_interpreter(TOPK_CUSTOM_CALL.replace("PARAMS", params), rng, [x], rtol=0, atol=0)
    np.testing.assert_array_equal(np.take_along_axis(x, got[1].astype(np.int64), -1).view(np.int32),
                                  got[0].view(np.int32))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_selected_in_one_pass_equals_the_whole_sort(largest, rng, monkeypatch):
    """A few of a long row (sorting.selects) are selected in one pass: the same values and
    indices, bit for bit, as sorting the whole row, with many ties (small integers), NaN and
    signed zeros among them."""
    from pyxla.backends.cpu.ops import sorting
    assert sorting.selects(5000, 10) and not sorting.selects(4096, 512) and not sorting.selects(9, 9)
    x = rng.integers(-40, 40, (3, 5000)).astype(np.float32)
    x[0, rng.integers(0, 5000, 30)] = np.nan
    x[1, :2500] = -0.0
    x[2, ::7] = 0.0
    text = topk_module("f32", "3,5000", 10, largest)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")   # (the cache would give the first code twice)
    selected = get_backend("cpu").compile(parse_module(text)).run_flat([x])
    monkeypatch.setattr(sorting, "selects", lambda n, k: False)
    sorted_whole = get_backend("cpu").compile(parse_module(text)).run_flat([x])
    for got, want in zip(selected, sorted_whole):
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
