import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.fusion.instruction_fusion import fusion_pass, kernels
from pyxla.fusion.multi_output import multi_output_fusion
from pyxla.hlo import evaluate_module, flatten_result, parse_module, verify_module
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


def _arrived(second: str, second_shape: str) -> str:
    """A multi-output reduction the module arrives with (as XLA's sibling fusion writes one),
    reading a row maximum that it uses only per row: the sum of exp(x - max) per row, and
    `second` of the same rows."""
    return f"""
HloModule arrived
{REDUCERS}
fused_rows {{
  p0 = f32[16,32] parameter(0)
  p1 = f32[16] parameter(1)
  bc = f32[16,32] broadcast(p1), dimensions={{0}}
  d = f32[16,32] subtract(p0, bc)
  e = f32[16,32] exponential(d)
  sq = f32[16,32] multiply(d, d)
  z = f32[] constant(0)
  r = f32[16] reduce(e, z), dimensions={{1}}, to_apply=add
  {second}
  ROOT t = (f32[16], {second_shape}) tuple(r, second)
}}

ENTRY main {{
  x = f32[16,32] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[16] reduce(x, ninf), dimensions={{1}}, to_apply=max
  fusion = (f32[16], {second_shape}) fusion(x, m), kind=kInput, calls=fused_rows
  g0 = f32[16] get-tuple-element(fusion), index=0
  g1 = {second_shape} get-tuple-element(fusion), index=1
  ROOT out = (f32[16], {second_shape}) tuple(g0, g1)
}}
"""


@pytest.mark.parametrize("second,second_shape", [
    ("second = f32[16] reduce(sq, z), dimensions={1}, to_apply=add", "f32[16]"),
    ("second = f32[16,32] negate(e)", "f32[16,32]"),
], ids=["two_reductions", "reduction_and_rows"])
def test_a_row_reduction_joins_the_multi_output_reduction_it_feeds(second, second_shape, rng):
    text = _arrived(second, second_shape)
    module = parse_module(text)
    run_pipeline(module, [fusion_pass(), multi_output_fusion], verify=True)
    ks = kernels(module.entry)
    # the maximum is computed in the kernel, per row
    assert len(ks) == 1 and ks[0].attrs["kind"] == "kInput" and ks[0].shape.is_tuple
    assert not any(i.opcode == "reduce" for i in module.entry.instructions)
    assert_same_values(parse_module(text), module, rng, rtol=1e-5)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    want = flatten_result(evaluate_module(parse_module(text), [x]))
    got = get_backend("cpu").compile(parse_module(text)).run_flat([x])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
