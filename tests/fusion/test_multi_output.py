from pyxla.fusion.instruction_fusion import fusion_pass, kernels
from pyxla.fusion.multi_output import multi_output_fusion
from pyxla.hlo import parse_module, verify_module
from pyxla.passes.pipeline import run_pipeline

from ..passes.hlo_checks import assert_same_values
from .programs import REDUCERS

SIBLINGS = f"""
HloModule siblings
{REDUCERS}
ENTRY main {{
  x = f32[16,32] parameter(0)
  zero = f32[] constant(0)
  ninf = f32[] constant(-inf)
  s = f32[16] reduce(x, zero), dimensions={{1}}, to_apply=add
  sq = f32[16,32] multiply(x, x)
  ss = f32[16] reduce(sq, zero), dimensions={{1}}, to_apply=add
  m = f32[16] reduce(x, ninf), dimensions={{1}}, to_apply=max
  ROOT t = (f32[16], f32[16], f32[16]) tuple(s, ss, m)
}}
"""


def test_sibling_reductions_become_one_kernel(rng):
    module = parse_module(SIBLINGS)
    run_pipeline(module, [fusion_pass(), multi_output_fusion], verify=True)
    verify_module(module)
    ks = kernels(module.entry)
    assert len(ks) == 1 and ks[0].attrs["kind"] == "kInput" and ks[0].shape.is_tuple
    assert len(ks[0].shape.elements) == 3
    assert_same_values(parse_module(SIBLINGS), module, rng, rtol=1e-5)


def test_dependent_reductions_are_not_siblings(rng):
    text = f"""
HloModule dependent
{REDUCERS}
ENTRY main {{
  x = f32[16,32] parameter(0)
  zero = f32[] constant(0)
  s = f32[16] reduce(x, zero), dimensions={{1}}, to_apply=add
  sb = f32[16,32] broadcast(s), dimensions={{0}}
  d = f32[16,32] subtract(x, sb)
  t = f32[16] reduce(d, zero), dimensions={{1}}, to_apply=add
  ROOT out = (f32[16], f32[16]) tuple(s, t)
}}
"""
    module = parse_module(text)
    run_pipeline(module, [fusion_pass(), multi_output_fusion], verify=True)
    assert len(kernels(module.entry)) == 2
    assert_same_values(parse_module(text), module, rng, rtol=1e-5)
