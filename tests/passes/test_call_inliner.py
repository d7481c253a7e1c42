from pyxla.passes.call_inliner import call_inliner

from .hlo_checks import assert_structure, entry_opcodes, run_pass

BEFORE = """
HloModule calls
inner {
  p = f32[3] parameter(0)
  ROOT n = f32[3] negate(p)
}
outer {
  q = f32[3] parameter(0)
  r = f32[3] parameter(1)
  c = f32[3] call(q), to_apply=inner
  ROOT m = f32[3] multiply(c, r)
}
passthrough {
  z = f32[3] parameter(0)
  ROOT zz = f32[3] parameter(1)
}
ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  a = f32[3] call(x, y), to_apply=outer
  b = f32[3] call(a, y), to_apply=passthrough
  ROOT out = f32[3] add(a, b)
}
"""

AFTER = """
HloModule calls
ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  n = f32[3] negate(x)
  m = f32[3] multiply(n, y)
  ROOT out = f32[3] add(m, y)
}
"""


def test_inlines_nested_calls(rng):
    after = run_pass(call_inliner, BEFORE, rng)
    assert_structure(after, AFTER)
    assert entry_opcodes(after)["call"] == 0
    assert [c.name for c in after.computations] == ["main"]
