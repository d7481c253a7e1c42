from pyxla.passes.dce import dead_code_elimination

from .hlo_checks import assert_structure, entry_opcodes, run_pass

BEFORE = """
HloModule dce
unused_computation {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  dead1 = f32[4] exponential(x)
  dead2 = f32[4] add(dead1, y)
  live = f32[4] multiply(x, y)
  ROOT out = f32[4] tanh(live)
}
"""

AFTER = """
HloModule dce
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  live = f32[4] multiply(x, y)
  ROOT out = f32[4] tanh(live)
}
"""


def test_removes_dead_instructions_and_computations(rng):
    after = run_pass(dead_code_elimination, BEFORE, rng)
    assert_structure(after, AFTER)
    assert entry_opcodes(after) == {"multiply": 1, "tanh": 1}
    assert [c.name for c in after.computations] == ["main"]
    assert len(after.entry.instructions) == 4


def test_keeps_unused_parameters_and_is_idempotent(rng):
    after = run_pass(dead_code_elimination, BEFORE, rng)
    assert len(after.entry.parameters) == 2
    assert not dead_code_elimination(after)


def test_has_side_effects_is_the_registry_fact():
    from types import SimpleNamespace

    from pyxla.hlo import has_side_effects, parse_module
    module = parse_module("""
HloModule effects
ENTRY main {
  x = f32[4] parameter(0)
  quiet = f32[4] custom-call(x), custom_call_target="Sharding"
  loud = f32[4] custom-call(x), custom_call_target="Sharding", custom_call_has_side_effect=true
  ROOT n = f32[4] negate(x)
}
""")
    by_name = {i.name: i for i in module.entry.instructions}
    assert not has_side_effects(by_name["n"])
    assert not has_side_effects(by_name["quiet"])
    assert has_side_effects(by_name["loud"])
    # an opcode pyxla does not know is kept
    assert has_side_effects(SimpleNamespace(opcode="not-an-opcode", attrs={}))
    assert dead_code_elimination(module)
    assert {i.name for i in module.entry.instructions} == {"x", "loud", "n"}
