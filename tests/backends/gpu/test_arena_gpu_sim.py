"""The GPU executable's arena (arena.py) through gpu-sim: one block per executable laid out
from buffer assignment, values live at once never overlapping, in-place results sharing
their operand's bytes, aligned leaves, and calls that allocate only their parameters and
outputs; loop state and branch results that would leave their region are copied out."""
import numpy as np

from pyxla.backends import get_backend
from pyxla.backends.gpu import memory_for
from pyxla.backends.gpu.arena import ALIGNMENT
from pyxla.compiler import compile_module
from pyxla.hlo import evaluate_module, flatten_result, parse_module

CHAIN = """HloModule mlp
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[33,40] parameter(0)
  w1 = f32[40,50] parameter(1)
  w2 = f32[50,20] parameter(2)
  h = f32[33,50] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[33,50] tanh(h)
  g = f32[33,20] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  low = f32[] constant(-inf)
  r = f32[33] reduce(g, low), dimensions={1}, to_apply=max
  b = f32[33,20] broadcast(r), dimensions={0}
  q = f32[33,20] subtract(g, b)
  e = f32[33,20] exponential(q)
  s = f32[33] reduce(e, z), dimensions={1}, to_apply=add
  ROOT o = (f32[33], f32[33,50]) tuple(s, h)
}
"""


def compiled_sim(text):
    module = parse_module(text)
    compiled = compile_module(module.clone())
    return compiled, get_backend("gpu-sim").compile(module, compiled=compiled)


def matches_evaluator(executable, text, inputs, rtol=1e-5):
    got = executable.run_flat(inputs)
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol)


def test_temps_live_at_once_do_not_overlap_and_are_aligned():
    compiled, executable = compiled_sim(CHAIN)
    plan, assignment = executable.plan, compiled.buffers
    kernels = executable.program.kernels
    spans = []
    for b in assignment.temps:
        for v in b.values:
            if id(v) in kernels:
                (offset,) = plan.leaves[id(v)]
                assert offset % ALIGNMENT == 0
                assert offset + v.shape.byte_size <= plan.regions[id(executable.program)][1]
                spans.append((b, offset, v.shape.byte_size))
    assert spans, "the module has temps in the arena"
    for i, (b1, o1, n1) in enumerate(spans):
        for b2, o2, n2 in spans[i + 1:]:
            if b1 is not b2 and b1.overlaps_in_time(b2):
                assert o1 + n1 <= o2 or o2 + n2 <= o1, f"{b1.name} and {b2.name} overlap"
            if b1 is b2:
                assert o1 == o2   # an in-place result shares its operand's bytes


def test_in_place_results_share_the_arena(rng):
    # the dynamic-update-slice writes over the dot's result, which dies there
    text = """HloModule dus
ENTRY e {
  x = f32[33,40] parameter(0)
  w = f32[40,50] parameter(1)
  upd = f32[5,7] parameter(2)
  i = s32[] parameter(3)
  w2 = f32[50,20] parameter(4)
  t = f32[33,50] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  u = f32[33,50] dynamic-update-slice(t, upd, i, i)
  ROOT r = f32[33,20] dot(u, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    compiled, executable = compiled_sim(text)
    (shared,) = [b for b in compiled.buffers.temps if len(b.values) > 1]
    offsets = {tuple(executable.plan.leaves[id(v)]) for v in shared.values}
    assert len(offsets) == 1
    for start in (3, 30):
        inputs = [rng.standard_normal(s).astype(np.float32) for s in ((33, 40), (40, 50), (5, 7))]
        inputs += [np.int32(start), rng.standard_normal((50, 20)).astype(np.float32)]
        x, w, upd, _, w2 = (a.astype(np.float64) for a in inputs)
        t = x @ w
        i = min(start, 33 - 5), min(start, 50 - 7)
        t[i[0]:i[0] + 5, i[1]:i[1] + 7] = upd
        np.testing.assert_allclose(executable.run_flat(inputs)[0], t @ w2, rtol=1e-4, atol=1e-4)


def test_calls_reuse_the_arena_and_allocate_parameters_and_outputs_only(rng):
    _, executable = compiled_sim(CHAIN)
    memory = memory_for("gpu-sim")
    for _ in range(3):
        inputs = [rng.standard_normal(s).astype(np.float32) for s in ((33, 40), (40, 50), (50, 20))]
        before = memory.counts()
        matches_evaluator(executable, CHAIN, inputs)
        after = memory.counts()
        # three parameters copied in, two outputs: nothing per temp (the arena is made at the first call)
        assert after["uploads"] - before["uploads"] == 3
        assert after["downloads"] - before["downloads"] == 2
        allocated = after["allocations"] - before["allocations"]
        assert allocated in (5, 6), allocated


def test_multi_output_fusion_leaves_of_different_widths_are_aligned(rng):
    text = """HloModule multi
ENTRY e {
  x = f16[37] parameter(0)
  y = f32[37] parameter(1)
  a = f16[37] multiply(x, x)
  c = f32[37] convert(a)
  b = f32[37] add(c, y)
  n = f32[37] negate(b)
  m = f16[37] negate(a)
  cm = f32[37] convert(m)
  ROOT o = f32[37] add(n, cm)
}
"""
    compiled, executable = compiled_sim(text)
    for offsets in executable.plan.leaves.values():
        assert all(o % ALIGNMENT == 0 for o in offsets)
    inputs = [rng.standard_normal(37).astype(np.float16), rng.standard_normal(37).astype(np.float32)]
    matches_evaluator(executable, text, inputs, rtol=1e-2)


LOOP_PASSES_A_TEMP_THROUGH = """HloModule loop
cond {
  s = (f32[300], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=1
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (f32[300], s32[]) parameter(0)
  v = f32[300] get-tuple-element(s), index=0
  i = s32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (f32[300], s32[]) tuple(v, j)
}
ENTRY e {
  x = f32[300] parameter(0)
  y = f32[300] parameter(1)
  t = f32[300] exponential(x)
  zero = s32[] constant(0)
  init = (f32[300], s32[]) tuple(t, zero)
  w = (f32[300], s32[]) while(init), condition=cond, body=body
  v = f32[300] get-tuple-element(w), index=0
  a = f32[300] tanh(y)
  b = f32[300] multiply(a, y)
  c = f32[300] add(b, v)
  d = f32[300] sine(c)
  ROOT r = f32[300] add(d, v)
}
"""


def test_loop_state_that_is_a_caller_temp_is_copied_out_of_the_arena(rng):
    # the loop passes `t` (an ENTRY temp) through unchanged; buffer assignment sees it die at
    # the while, so later temps may take its bytes: the loop's result must not be them
    module = parse_module(LOOP_PASSES_A_TEMP_THROUGH)
    compiled = compile_module(module.clone(), optimize=False)
    executable = get_backend("gpu-sim").compile(module, compiled=compiled)
    for _ in range(2):
        inputs = [rng.standard_normal(300).astype(np.float32) for _ in range(2)]
        matches_evaluator(executable, LOOP_PASSES_A_TEMP_THROUGH, inputs)


def test_conditional_returning_its_operand(rng):
    text = """HloModule cond
yes {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
no {
  ROOT p = f32[64] parameter(0)
}
ENTRY e {
  k = pred[] parameter(0)
  x = f32[64] parameter(1)
  t = f32[64] exponential(x)
  c = f32[64] conditional(k, t, t), true_computation=yes, false_computation=no
  a = f32[64] tanh(x)
  b = f32[64] multiply(a, x)
  ROOT r = f32[64] add(b, c)
}
"""
    module = parse_module(text)
    compiled = compile_module(module.clone(), optimize=False)
    executable = get_backend("gpu-sim").compile(module, compiled=compiled)
    for k in (True, False, True):
        x = rng.standard_normal(64).astype(np.float32)
        matches_evaluator(executable, text, [np.array(k), x])
