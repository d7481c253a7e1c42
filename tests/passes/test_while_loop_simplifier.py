from pyxla.passes.tuple_simplifier import tuple_simplifier
from pyxla.passes.while_loop_simplifier import known_trip_count, while_loop_simplifier

from .hlo_checks import entry_opcodes, run_pass


def loop_module(start: int, limit: int, step: int = 1, direction: str = "LT") -> str:
    """A counted loop over state (i, acc, w, unused): acc = acc * tanh(w) + 1; unused = unused * 3."""
    return f"""
HloModule loop
cond {{
  cs = (s32[], f32[4], f32[4], f32[4]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  lim = s32[] constant({limit})
  ROOT lt = pred[] compare(ci, lim), direction={direction}
}}
body {{
  bs = (s32[], f32[4], f32[4], f32[4]) parameter(0)
  bi = s32[] get-tuple-element(bs), index=0
  acc = f32[4] get-tuple-element(bs), index=1
  w = f32[4] get-tuple-element(bs), index=2
  unused = f32[4] get-tuple-element(bs), index=3
  step = s32[] constant({step})
  next = s32[] add(bi, step)
  tw = f32[4] tanh(w)
  prod = f32[4] multiply(acc, tw)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={{}}
  acc2 = f32[4] add(prod, ones)
  three = f32[] constant(3)
  threes = f32[4] broadcast(three), dimensions={{}}
  unused2 = f32[4] multiply(unused, threes)
  ROOT t = (s32[], f32[4], f32[4], f32[4]) tuple(next, acc2, w, unused2)
}}
ENTRY main {{
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  i0 = s32[] constant({start})
  init = (s32[], f32[4], f32[4], f32[4]) tuple(i0, x, y, x)
  loop = (s32[], f32[4], f32[4], f32[4]) while(init), condition=cond, body=body
  ROOT result = f32[4] get-tuple-element(loop), index=1
}}
"""


def _loop(module):
    return next(i for i in module.entry.instructions if i.opcode == "while")


def test_trip_counts_recognised():
    from pyxla.hlo import parse_module
    assert known_trip_count(_loop(parse_module(loop_module(0, 10)))) == 10
    assert known_trip_count(_loop(parse_module(loop_module(2, 11, step=3)))) == 3
    assert known_trip_count(_loop(parse_module(loop_module(0, 10, direction="LE")))) == 11
    assert known_trip_count(_loop(parse_module(loop_module(5, 1)))) == 0


def test_zero_trip_loop_is_its_initial_state(rng):
    after = run_pass([while_loop_simplifier, tuple_simplifier], loop_module(5, 1), rng)
    assert "while" not in entry_opcodes(after)
    assert after.entry.root.opcode == "parameter"


def test_one_trip_loop_is_inlined(rng):
    after = run_pass(while_loop_simplifier, loop_module(0, 1), rng)
    ops = entry_opcodes(after)
    assert ops["while"] == 0 and ops["tanh"] == 1
    assert [c.name for c in after.computations] == ["main"]


def test_dead_state_removed_and_invariant_hoisted(rng):
    after = run_pass(while_loop_simplifier, loop_module(0, 6), rng, rtol=1e-5)
    loop = _loop(after)
    body = loop.attrs["body"]
    # `unused` is gone from the state; tanh(w) moved out of the body and is carried instead of w.
    assert len(loop.shape.elements) == 3
    assert all(i.opcode != "tanh" for i in body.instructions)
    assert entry_opcodes(after)["tanh"] == 1
    assert not any(i.opcode == "constant" and i.literal == 3 for i in body.instructions)


def test_second_run_changes_nothing(rng):
    after = run_pass(while_loop_simplifier, loop_module(0, 6), rng, rtol=1e-5)
    assert not while_loop_simplifier(after)


ARRAY_STATE = """HloModule w
cond {
  c = f32[4] parameter(0)
  s = f32[] constant(0)
  r = f32[] reduce(c, s), dimensions={0}, to_apply=add
  k = f32[] constant(100)
  ROOT lt = pred[] compare(r, k), direction=LT
}
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT sum = f32[] add(x, y)
}
body {
  b = f32[4] parameter(0)
  a = f32[4] abs(b)
  one = f32[4] constant({1, 1, 1, 1})
  ROOT n = f32[4] add(a, one)
}
ENTRY main {
  p = f32[4] parameter(0)
  ROOT w = f32[4] while(p), condition=cond, body=body
}
"""


def test_loop_with_an_array_state_is_kept(rng):
    """A while whose state is one array (no tuple) has no dead state to remove; the pass
    leaves it and the values are the evaluator's."""
    after = run_pass(while_loop_simplifier, ARRAY_STATE, rng)
    assert entry_opcodes(after)["while"] == 1
