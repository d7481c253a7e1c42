"""while, conditional, call, opt-barrier and tuple values on the CPU backend against the
evaluator, on fresh random inputs. Every program runs twice: through the whole compiler
(passes, fusion) and with the optimisation passes off, so the loop state, swaps of state
elements, calls and tuple copies reach the backend as written."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.hlo import evaluate_module, flatten_result, parse_module

from .differential import random_inputs


def parse(text: str):
    """The module, its instructions renamed apart (the programs here reuse short names)."""
    module = parse_module(text)
    module.uniquify_names()
    return module


def run_cpu(text: str, inputs, optimize: bool) -> list[np.ndarray]:
    compiled = compile_module(parse(text), optimize=optimize)
    return get_backend("cpu").compile(parse(text), compiled=compiled).run_flat(inputs)


def assert_matches(text: str, inputs, rtol: float = 1e-6) -> list[np.ndarray]:
    """Both compilations equal the evaluator (integers exactly, floats to rtol); returns the
    evaluator's results."""
    want = flatten_result(evaluate_module(parse(text), inputs))
    for optimize in (True, False):
        got = run_cpu(text, inputs, optimize)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (optimize, g.shape, g.dtype, w.shape, w.dtype)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12, err_msg=f"optimize={optimize}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"optimize={optimize}")
    return want


REDUCERS = """
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
max_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT m = s32[] maximum(a, b)
}
"""

# --- while -----------------------------------------------------------------------------------------

COUNTED = """HloModule counted
""" + REDUCERS + """
body {
  p = (s32[], f32[3,4], f64[5], s16[2,3,2], pred[4], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  m = f32[3,4] get-tuple-element(p), index=1
  v = f64[5] get-tuple-element(p), index=2
  w = s16[2,3,2] get-tuple-element(p), index=3
  f = pred[4] get-tuple-element(p), index=4
  weights = f32[4,4] get-tuple-element(p), index=5
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  mixed = f32[3,4] dot(m, weights), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  half = f32[] constant(0.5)
  halves = f32[3,4] broadcast(half), dimensions={}
  iv = f32[] convert(i)
  ivs = f32[3,4] broadcast(iv), dimensions={}
  m1 = f32[3,4] multiply(mixed, halves)
  m2 = f32[3,4] add(m1, ivs)
  zero = f32[] constant(0)
  total = f32[] reduce(m2, zero), dimensions={0,1}, to_apply=add_f32
  total64 = f64[] convert(total)
  totals = f64[5] broadcast(total64), dimensions={}
  v1 = f64[5] add(v, totals)
  w1 = s16[2,3,2] add(w, w)
  f1 = pred[4] not(f)
  ROOT t = (s32[], f32[3,4], f64[5], s16[2,3,2], pred[4], f32[4,4]) tuple(i1, m2, v1, w1, f1, weights)
}
cond {
  p = (s32[], f32[3,4], f64[5], s16[2,3,2], pred[4], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(7)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  m0 = f32[3,4] parameter(0)
  v0 = f64[5] parameter(1)
  w0 = s16[2,3,2] parameter(2)
  f0 = pred[4] parameter(3)
  weights = f32[4,4] parameter(4)
  zero = s32[] constant(0)
  init = (s32[], f32[3,4], f64[5], s16[2,3,2], pred[4], f32[4,4]) tuple(zero, m0, v0, w0, f0, weights)
  loop = (s32[], f32[3,4], f64[5], s16[2,3,2], pred[4], f32[4,4]) while(init), condition=cond, body=body
  m = f32[3,4] get-tuple-element(loop), index=1
  v = f64[5] get-tuple-element(loop), index=2
  w = s16[2,3,2] get-tuple-element(loop), index=3
  f = pred[4] get-tuple-element(loop), index=4
  i = s32[] get-tuple-element(loop), index=0
  ROOT r = (pred[4], f32[3,4], f64[5], s16[2,3,2], s32[]) tuple(f, m, v, w, i)
}
"""


def test_counted_loop_with_a_tuple_of_several_shapes(rng):
    module = parse(COUNTED)
    inputs = random_inputs(module, rng)
    inputs[4] = (rng.standard_normal((4, 4)) * 0.3).astype(np.float32)
    want = assert_matches(COUNTED, inputs, rtol=1e-5)
    assert want[4] == 7
    np.testing.assert_array_equal(want[0], ~inputs[3])   # seven negations


DATA_DEPENDENT = """HloModule data_dependent
""" + REDUCERS + """
body {
  p = (s32[], s32[6], f32[6], s32[]) parameter(0)
  count = s32[] get-tuple-element(p), index=0
  x = s32[6] get-tuple-element(p), index=1
  y = f32[6] get-tuple-element(p), index=2
  limit = s32[] get-tuple-element(p), index=3
  one = s32[] constant(1)
  three = s32[] constant(3)
  ones = s32[6] broadcast(one), dimensions={}
  threes = s32[6] broadcast(three), dimensions={}
  x3 = s32[6] multiply(x, threes)
  x1 = s32[6] add(x3, ones)
  xf = f32[6] convert(x)
  y1 = f32[6] add(y, xf)
  count1 = s32[] add(count, one)
  ROOT t = (s32[], s32[6], f32[6], s32[]) tuple(count1, x1, y1, limit)
}
cond {
  p = (s32[], s32[6], f32[6], s32[]) parameter(0)
  x = s32[6] get-tuple-element(p), index=1
  limit = s32[] get-tuple-element(p), index=3
  zero = s32[] constant(0)
  total = s32[] reduce(x, zero), dimensions={0}, to_apply=add_s32
  ROOT lt = pred[] compare(total, limit), direction=LT
}
ENTRY main {
  x0 = s32[6] parameter(0)
  y0 = f32[6] parameter(1)
  limit = s32[] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], s32[6], f32[6], s32[]) tuple(zero, x0, y0, limit)
  loop = (s32[], s32[6], f32[6], s32[]) while(init), condition=cond, body=body
  count = s32[] get-tuple-element(loop), index=0
  x = s32[6] get-tuple-element(loop), index=1
  y = f32[6] get-tuple-element(loop), index=2
  ROOT r = (s32[], s32[6], f32[6]) tuple(count, x, y)
}
"""


def test_data_dependent_trip_count(rng):
    x0 = rng.integers(1, 20, 6).astype(np.int32)
    y0 = rng.standard_normal(6).astype(np.float32)
    limit = np.int32(rng.integers(x0.sum() + 1, 1_000_000))
    want = assert_matches(DATA_DEPENDENT, [x0, y0, limit])
    assert want[0] >= 1 and want[1].sum() >= limit


def test_data_dependent_loop_with_zero_trips_returns_its_initial_state(rng):
    x0 = rng.integers(1, 20, 6).astype(np.int32)
    y0 = rng.standard_normal(6).astype(np.float32)
    limit = np.int32(rng.integers(-100, x0.sum() + 1))
    for optimize in (True, False):
        count, x, y = run_cpu(DATA_DEPENDENT, [x0, y0, limit], optimize)
        assert count == 0
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(y, y0)


FORI_N = """HloModule fori_n
body {
  p = (s32[], s32[], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  x = f32[2,3] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[2,3] add(x, x)
  ROOT t = (s32[], s32[], f32[2,3]) tuple(i1, n, x1)
}
cond {
  p = (s32[], s32[], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  n = s32[] parameter(0)
  x = f32[2,3] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[2,3]) tuple(zero, n, x)
  ROOT loop = (s32[], s32[], f32[2,3]) while(init), condition=cond, body=body
}
"""


@pytest.mark.parametrize("trips", ["none", "negative", "some"])
def test_loop_bound_from_an_input(trips, rng):
    n = {"none": 0, "negative": int(rng.integers(-50, 0)), "some": int(rng.integers(1, 9))}[trips]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    i, n_out, x_out = assert_matches(FORI_N, [np.int32(n), x])
    assert i == max(n, 0) and n_out == n
    np.testing.assert_array_equal(x_out, x * np.float32(2.0) ** max(n, 0))


ROTATE = """HloModule rotate
body {
  p = (f32[3], f32[3], f32[3], s32[], f32[2,2]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  b = f32[3] get-tuple-element(p), index=1
  c = f32[3] get-tuple-element(p), index=2
  i = s32[] get-tuple-element(p), index=3
  keep = f32[2,2] get-tuple-element(p), index=4
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ab = f32[3] add(a, b)
  ROOT t = (f32[3], f32[3], f32[3], s32[], f32[2,2]) tuple(c, a, ab, i1, keep)
}
cond {
  p = (f32[3], f32[3], f32[3], s32[], f32[2,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=3
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  c = f32[3] parameter(2)
  keep = f32[2,2] parameter(3)
  zero = s32[] constant(0)
  init = (f32[3], f32[3], f32[3], s32[], f32[2,2]) tuple(a, b, c, zero, keep)
  ROOT loop = (f32[3], f32[3], f32[3], s32[], f32[2,2]) while(init), condition=cond, body=body
}
"""

SWAP = """HloModule swap
body {
  p = (s32[4], s32[4], s32[]) parameter(0)
  a = s32[4] get-tuple-element(p), index=0
  b = s32[4] get-tuple-element(p), index=1
  i = s32[] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[4], s32[4], s32[]) tuple(b, a, i1)
}
cond {
  p = (s32[4], s32[4], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=2
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  a = s32[4] parameter(0)
  b = s32[4] parameter(1)
  zero = s32[] constant(0)
  init = (s32[4], s32[4], s32[]) tuple(a, b, zero)
  ROOT loop = (s32[4], s32[4], s32[]) while(init), condition=cond, body=body
}
"""


def test_state_elements_that_move_to_another_position(rng):
    """(a, b, c) -> (c, a, a + b): elements of the parameter become other elements of the
    result, so they must be read before the state is overwritten."""
    inputs = random_inputs(parse(ROTATE), rng)
    a, b, c, i, keep = assert_matches(ROTATE, inputs)
    x = [inputs[0], inputs[1], inputs[2]]
    for _ in range(5):
        x = [x[2], x[0], x[0] + x[1]]
    for got, expected in zip((a, b, c), x):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(keep, inputs[3])


def test_swapped_state_elements(rng):
    inputs = random_inputs(parse(SWAP), rng)
    a, b, i = assert_matches(SWAP, inputs)
    np.testing.assert_array_equal(a, inputs[1])   # three swaps
    np.testing.assert_array_equal(b, inputs[0])


NESTED = """HloModule nested
inner_body {
  p = (s32[], f32[4], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  acc = f32[4] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  jf = f32[] convert(j1)
  js = f32[4] broadcast(jf), dimensions={}
  xj = f32[4] multiply(x, js)
  acc1 = f32[4] add(acc, xj)
  ROOT t = (s32[], f32[4], f32[4]) tuple(j1, acc1, x)
}
inner_cond {
  p = (s32[], f32[4], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  m = s32[] constant(3)
  ROOT lt = pred[] compare(j, m), direction=LT
}
outer_body {
  p = (s32[], s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  acc = f32[4] get-tuple-element(p), index=2
  x = f32[4] get-tuple-element(p), index=3
  zero = s32[] constant(0)
  inner_init = (s32[], f32[4], f32[4]) tuple(zero, acc, x)
  inner = (s32[], f32[4], f32[4]) while(inner_init), condition=inner_cond, body=inner_body
  acc1 = f32[4] get-tuple-element(inner), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  onef = f32[] constant(1)
  ones = f32[4] broadcast(onef), dimensions={}
  x1 = f32[4] add(x, ones)
  ROOT t = (s32[], s32[], f32[4], f32[4]) tuple(i1, n, acc1, x1)
}
outer_cond {
  p = (s32[], s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  n = s32[] parameter(0)
  acc = f32[4] parameter(1)
  x = f32[4] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[4], f32[4]) tuple(zero, n, acc, x)
  outer = (s32[], s32[], f32[4], f32[4]) while(init), condition=outer_cond, body=outer_body
  ROOT acc_out = f32[4] get-tuple-element(outer), index=2
}
"""


def test_nested_loops(rng):
    n = int(rng.integers(1, 6))
    acc = rng.standard_normal(4).astype(np.float32)
    x = rng.standard_normal(4).astype(np.float32)
    (got,) = assert_matches(NESTED, [np.int32(n), acc, x], rtol=1e-5)
    expected, terms = acc.astype(np.float64), np.abs(acc.astype(np.float64))
    for i in range(n):
        expected = expected + (x + i) * (1 + 2 + 3)
        terms = terms + np.abs(x + i) * (1 + 2 + 3)
    # f32 sums that cancel near zero: an error relative to their terms, not to the result
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6 * terms.max())


ARRAY_STATE = """HloModule array_state
""" + REDUCERS + """
body {
  x = s32[5] parameter(0)
  two = s32[] constant(2)
  twos = s32[5] broadcast(two), dimensions={}
  ROOT y = s32[5] add(x, twos)
}
cond {
  x = s32[5] parameter(0)
  zero = s32[] constant(-2147483648)
  biggest = s32[] reduce(x, zero), dimensions={0}, to_apply=max_s32
  limit = s32[] constant(1000)
  ROOT lt = pred[] compare(biggest, limit), direction=LT
}
ENTRY main {
  x = s32[5] parameter(0)
  once = s32[5] while(x), condition=cond, body=body
  ROOT twice = s32[5] while(once), condition=cond, body=body
}
"""


def test_array_state_and_two_loops_sharing_their_computations(rng):
    x = rng.integers(-500, 900, 5).astype(np.int32)
    (got,) = assert_matches(ARRAY_STATE, [x])
    assert got.max() >= 1000 and np.all((got - x) % 2 == 0)


# --- conditional ---------------------------------------------------------------------------------

PRED_CONDITIONAL = """HloModule pred_conditional
on_true {
  p = (f32[3], s32[2]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  b = s32[2] get-tuple-element(p), index=1
  aa = f32[3] multiply(a, a)
  one = s32[] constant(1)
  ones = s32[2] broadcast(one), dimensions={}
  b1 = s32[2] add(b, ones)
  ROOT t = (f32[3], s32[2]) tuple(aa, b1)
}
on_false {
  p = f32[3] parameter(0)
  c = s32[2] constant({7, -8})
  ROOT t = (f32[3], s32[2]) tuple(p, c)
}
ENTRY main {
  which = pred[] parameter(0)
  x = f32[3] parameter(1)
  y = s32[2] parameter(2)
  both = (f32[3], s32[2]) tuple(x, y)
  c = (f32[3], s32[2]) conditional(which, both, x), true_computation=on_true, false_computation=on_false
  first = f32[3] get-tuple-element(c), index=0
  ROOT r = (f32[3], (f32[3], s32[2])) tuple(first, c)
}
"""


@pytest.mark.parametrize("which", [True, False])
def test_conditional_on_a_predicate(which, rng):
    x = rng.standard_normal(3).astype(np.float32)
    y = rng.integers(-100, 100, 2).astype(np.int32)
    first, a, b = assert_matches(PRED_CONDITIONAL, [np.bool_(which), x, y])
    np.testing.assert_array_equal(b, y + 1 if which else [7, -8])
    np.testing.assert_array_equal(first, a)


INDEX_CONDITIONAL = """HloModule index_conditional
branch0 {
  p = f32[2,3] parameter(0)
  ROOT n = f32[2,3] negate(p)
}
branch1 {
  p = (f32[2,3], f32[]) parameter(0)
  a = f32[2,3] get-tuple-element(p), index=0
  s = f32[] get-tuple-element(p), index=1
  ss = f32[2,3] broadcast(s), dimensions={}
  ROOT m = f32[2,3] multiply(a, ss)
}
branch2 {
  p = f32[2,3] parameter(0)
  ROOT q = f32[2,3] copy(p)
}
ENTRY main {
  index = s32[] parameter(0)
  x = f32[2,3] parameter(1)
  s = f32[] parameter(2)
  xs = (f32[2,3], f32[]) tuple(x, s)
  ROOT c = f32[2,3] conditional(index, x, xs, x), branch_computations={branch0, branch1, branch2}
}
"""


@pytest.mark.parametrize("index", [0, 1, 2, 3, -1, 2**31 - 1, -2**31])
def test_conditional_on_an_index_runs_the_last_branch_out_of_range(index, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    s = np.float32(rng.standard_normal())
    (got,) = assert_matches(INDEX_CONDITIONAL, [np.int32(index), x, s])
    np.testing.assert_array_equal(got, {0: -x, 1: x * s}.get(index, x))


LOOP_OF_CONDITIONALS = """HloModule loop_of_conditionals
even {
  p = (s32[], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=1
  two = f32[] constant(2)
  twos = f32[4] broadcast(two), dimensions={}
  ROOT y = f32[4] multiply(x, twos)
}
odd {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  f = f32[] convert(i)
  fs = f32[4] broadcast(f), dimensions={}
  ROOT y = f32[4] subtract(x, fs)
}
body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  bit = s32[] and(i, one)
  zero = s32[] constant(0)
  is_even = pred[] compare(bit, zero), direction=EQ
  x1 = f32[4] conditional(is_even, p, p), true_computation=even, false_computation=odd
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(i1, x1)
}
cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[4] parameter(0)
  start = s32[] parameter(1)
  init = (s32[], f32[4]) tuple(start, x)
  ROOT loop = (s32[], f32[4]) while(init), condition=cond, body=body
}
"""


def test_conditional_inside_a_loop(rng):
    x = rng.standard_normal(4).astype(np.float32)
    start = np.int32(rng.integers(-3, 3))
    i, got = assert_matches(LOOP_OF_CONDITIONALS, [x, start])
    expected = x.copy()
    for k in range(int(start), 6):
        expected = expected * 2 if k % 2 == 0 else expected - k
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# --- call, opt-barrier, tuple values ---------------------------------------------------------------

CALLS = """HloModule calls
scale {
  x = f32[3,2] parameter(0)
  s = f32[] parameter(1)
  ss = f32[3,2] broadcast(s), dimensions={}
  ROOT y = f32[3,2] multiply(x, ss)
}
both {
  x = f32[3,2] parameter(0)
  s = f32[] parameter(1)
  scaled = f32[3,2] call(x, s), to_apply=scale
  sum = f32[3,2] add(scaled, x)
  ROOT t = (f32[3,2], f32[3,2], f32[]) tuple(sum, x, s)
}
ENTRY main {
  x = f32[3,2] parameter(0)
  s = f32[] parameter(1)
  c = (f32[3,2], f32[3,2], f32[]) call(x, s), to_apply=both
  again = (f32[3,2], f32[3,2], f32[]) call(x, s), to_apply=both
  sum = f32[3,2] get-tuple-element(c), index=0
  other = f32[3,2] get-tuple-element(again), index=0
  total = f32[3,2] add(sum, other)
  ROOT r = (f32[3,2], (f32[3,2], f32[3,2], f32[])) tuple(total, c)
}
"""


def test_calls_nested_and_called_twice(rng):
    inputs = random_inputs(parse(CALLS), rng)
    total, sum_, x, s = assert_matches(CALLS, inputs)
    np.testing.assert_allclose(total, 2 * (inputs[0] * inputs[1] + inputs[0]), rtol=1e-6)
    np.testing.assert_array_equal(x, inputs[0])


def test_a_call_reaches_the_backend_unless_inlined():
    compiled = compile_module(parse(CALLS), optimize=False)
    assert any(i.opcode == "call" for i in compiled.module.entry.instructions)


OPT_BARRIER = """HloModule opt_barrier
ENTRY main {
  x = f32[3,4] parameter(0)
  w = f32[4,4] parameter(1)
  e = f32[3,4] exponential(x)
  t = (f32[3,4], f32[4,4], f32[3,4]) tuple(x, w, e)
  b = (f32[3,4], f32[4,4], f32[3,4]) opt-barrier(t)
  x1 = f32[3,4] get-tuple-element(b), index=0
  w1 = f32[4,4] get-tuple-element(b), index=1
  e1 = f32[3,4] get-tuple-element(b), index=2
  d = f32[3,4] dot(x1, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y = f32[3,4] add(d, e1)
  ROOT r = (f32[3,4], (f32[3,4], f32[4,4], f32[3,4])) tuple(y, b)
}
"""


def test_opt_barrier_of_a_tuple(rng):
    inputs = random_inputs(parse(OPT_BARRIER), rng)
    y, x, w, e = assert_matches(OPT_BARRIER, inputs, rtol=1e-5)
    np.testing.assert_array_equal(w, inputs[1])


TUPLE_OUTPUTS = """HloModule tuple_outputs
body {
  p = (s32[], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[2,3] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[2,3] sine(x)
  ROOT t = (s32[], f32[2,3]) tuple(i1, x1)
}
cond {
  p = (s32[], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[6] parameter(1)
  k = u8[2] constant({3, 250})
  zero = s32[] constant(0)
  init = (s32[], f32[2,3]) tuple(zero, x)
  loop = (s32[], f32[2,3]) while(init), condition=cond, body=body
  lx = f32[2,3] get-tuple-element(loop), index=1
  yx = f32[2,3] bitcast(y)
  inner = (f32[2,3], f32[2,3]) tuple(lx, yx)
  middle = (u8[2], (f32[2,3], f32[2,3])) tuple(k, inner)
  ROOT r = (f32[2,3], (u8[2], (f32[2,3], f32[2,3])), (s32[], f32[2,3]), f32[6], f32[2,3]) tuple(x, middle, loop, y, lx)
}
"""


def test_nested_tuple_outputs_of_parameters_constants_views_and_loops(rng):
    inputs = random_inputs(parse(TUPLE_OUTPUTS), rng)
    got = assert_matches(TUPLE_OUTPUTS, inputs, rtol=1e-6)
    assert len(got) == 8
    np.testing.assert_array_equal(got[3], inputs[1].reshape(2, 3))   # a bitcast of a parameter
    np.testing.assert_array_equal(got[1], [3, 250])


LOOP_IN_A_BRANCH = """HloModule loop_in_a_branch
body {
  p = (s32[], f32[3,2]{0,1}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[3,2]{0,1} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  c = f32[] constant(1.5)
  cs = f32[3,2]{0,1} broadcast(c), dimensions={}
  x1 = f32[3,2]{0,1} multiply(x, cs)
  ROOT t = (s32[], f32[3,2]{0,1}) tuple(i1, x1)
}
cond {
  p = (s32[], f32[3,2]{0,1}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
looping {
  x = f32[3,2]{1,0} parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[3,2]{1,0}) tuple(zero, x)
  loop = (s32[], f32[3,2]{0,1}) while(init), condition=cond, body=body
  ROOT y = f32[3,2]{0,1} get-tuple-element(loop), index=1
}
straight {
  x = f32[3,2]{1,0} parameter(0)
  ROOT y = f32[3,2]{0,1} negate(x)
}
ENTRY main {
  which = pred[] parameter(0)
  x = f32[3,2]{1,0} parameter(1)
  ROOT c = f32[3,2]{0,1} conditional(which, x, x), true_computation=looping, false_computation=straight
}
"""


@pytest.mark.parametrize("which", [True, False])
def test_loop_inside_a_branch_with_a_state_layout_unlike_its_initial_value(which, rng):
    """The loop state is column-major, its initial value row-major: the copy into the state
    reorders the elements."""
    x = rng.standard_normal((3, 2)).astype(np.float32)
    (got,) = assert_matches(LOOP_IN_A_BRANCH, [np.bool_(which), x])
    np.testing.assert_allclose(got, x * np.float32(1.5) ** 4 if which else -x, rtol=1e-6)
