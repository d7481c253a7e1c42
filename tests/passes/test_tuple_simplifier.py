from pyxla.passes.tuple_simplifier import tuple_simplifier

from .hlo_checks import assert_structure, entry_opcodes, run_pass

BEFORE = """
HloModule tuples
ENTRY main {
  x = f32[4] parameter(0)
  y = s32[2] parameter(1)
  t = (f32[4], s32[2]) tuple(x, y)
  a = f32[4] get-tuple-element(t), index=0
  b = s32[2] get-tuple-element(t), index=1
  e = f32[4] exponential(a)
  t2 = (f32[4], s32[2]) tuple(e, b)
  g0 = f32[4] get-tuple-element(t2), index=0
  g1 = s32[2] get-tuple-element(t2), index=1
  ROOT again = (f32[4], s32[2]) tuple(g0, g1)
}
"""

AFTER = """
HloModule tuples
ENTRY main {
  x = f32[4] parameter(0)
  y = s32[2] parameter(1)
  e = f32[4] exponential(x)
  ROOT t2 = (f32[4], s32[2]) tuple(e, y)
}
"""


def test_get_tuple_element_of_tuple_and_tuple_of_elements(rng):
    after = run_pass(tuple_simplifier, BEFORE, rng)
    assert_structure(after, AFTER)
    assert entry_opcodes(after)["get-tuple-element"] == 0
