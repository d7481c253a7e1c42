from pyxla.passes.algebraic_simplifier import algebraic_simplifier
from pyxla.passes.dce import dead_code_elimination
from pyxla.passes.reshape_mover import reshape_mover

from .hlo_checks import assert_structure, entry_opcodes, run_pass

BEFORE = """
HloModule mover
ENTRY main {
  x = f32[6,4] parameter(0)
  y = f32[6,4] parameter(1)
  rx = f32[24] reshape(x)
  ry = f32[24] reshape(y)
  two = f32[] constant(2)
  twos = f32[24] broadcast(two), dimensions={}
  s = f32[24] add(rx, ry)
  m = f32[24] multiply(s, twos)
  e = f32[24] exponential(m)
  ROOT back = f32[6,4] reshape(e)
}
"""

AFTER = """
HloModule mover
ENTRY main {
  x = f32[6,4] parameter(0)
  y = f32[6,4] parameter(1)
  two = f32[] constant(2)
  twos = f32[6,4] broadcast(two), dimensions={}
  s = f32[6,4] add(x, y)
  m = f32[6,4] multiply(s, twos)
  ROOT e = f32[6,4] exponential(m)
}
"""


def test_reshapes_sink_and_cancel(rng):
    after = run_pass([reshape_mover, algebraic_simplifier, dead_code_elimination], BEFORE, rng)
    assert_structure(after, AFTER)
    assert entry_opcodes(after)["reshape"] == 0


TRANSPOSES = """
HloModule transposes
ENTRY main {
  x = f32[3,5] parameter(0)
  y = f32[3,5] parameter(1)
  tx = f32[5,3] transpose(x), dimensions={1,0}
  ty = f32[5,3] transpose(y), dimensions={1,0}
  mx = f32[5,3] maximum(tx, ty)
  ROOT back = f32[3,5] transpose(mx), dimensions={1,0}
}
"""


def test_transposes_sink_and_cancel(rng):
    after = run_pass([reshape_mover, algebraic_simplifier, dead_code_elimination], TRANSPOSES, rng)
    assert entry_opcodes(after) == {"maximum": 1}


def test_shared_reshape_is_not_moved(rng):
    text = """
HloModule shared
ENTRY main {
  x = f32[6,4] parameter(0)
  rx = f32[24] reshape(x)
  e = f32[24] exponential(rx)
  ROOT t = (f32[24], f32[24]) tuple(rx, e)
}
"""
    after = run_pass(reshape_mover, text, rng)
    assert_structure(after, text)


def test_scalar_operand_is_not_a_splat(rng):
    text = """
HloModule scalar
ENTRY main {
  v = f32[1] parameter(0)
  c = f32[] parameter(1)
  r = f32[] reshape(v)
  ROOT s = f32[] add(r, c)
}
"""
    after = run_pass(reshape_mover, text, rng)
    assert_structure(after, text)
