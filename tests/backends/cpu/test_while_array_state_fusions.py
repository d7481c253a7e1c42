"""While loops whose state is one array (not a tuple) and whose computations already hold
fusion instructions, as XLA's optimised dumps have them: the cpu backend runs them and
agrees with the evaluator, with the module's own passes run or not."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.hlo import evaluate_module, flatten_result, parse_module

INC = """
{name} {{
  q = f32[4] parameter(0)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={{}}
  ROOT a = f32[4] add(q, ones)
}}
"""

COMMON = """
fused_sum {
  s = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(s, z), dimensions={0}, to_apply=add
}
fused_scaled {
  p = f32[4] parameter(0)
  t = f32[] parameter(1)
  tenth = f32[] constant(0.1)
  st = f32[] multiply(t, tenth)
  b = f32[4] broadcast(st), dimensions={}
  ROOT r = f32[4] add(p, b)
}
fused_dus {
  d0 = f32[4] parameter(0)
  at = s32[] constant(1)
  old = f32[1] slice(d0), slice={[1:2]}
  two = f32[1] constant({2})
  new = f32[1] add(old, two)
  ROOT d = f32[4] dynamic-update-slice(d0, new, at)
}
fused_test {
  y = f32[4] parameter(0)
  second = f32[1] slice(y), slice={[1:2]}
  r = f32[] reshape(second)
  limit = f32[] constant(40)
  ROOT c = pred[] compare(r, limit), direction=LT
}
add {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT a = f32[] add(l, r)
}
cond {
  y = f32[4] parameter(0)
  ROOT c = pred[] fusion(y), kind=kLoop, calls=fused_test
}
"""

BODIES = {
    "root fusion": """
body {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=fused_inc
}""",
    "fusion chain": """
body {
  x = f32[4] parameter(0)
  f = f32[4] fusion(x), kind=kLoop, calls=fused_inc
  ROOT g = f32[4] fusion(f), kind=kLoop, calls=fused_inc_again
}""",
    "reduction fusion beside": """
body {
  x = f32[4] parameter(0)
  t = f32[] fusion(x), kind=kInput, calls=fused_sum
  f = f32[4] fusion(x), kind=kLoop, calls=fused_inc
  ROOT r = f32[4] fusion(f, t), kind=kLoop, calls=fused_scaled
}""",
    "in-place update fusion": """
body {
  x = f32[4] parameter(0)
  ROOT d = f32[4] fusion(x), kind=kLoop, calls=fused_dus
}""",
    "fusion then unfused ops": """
body {
  x = f32[4] parameter(0)
  f = f32[4] fusion(x), kind=kLoop, calls=fused_inc
  r = f32[4] reverse(f), dimensions={0}
  ROOT m = f32[4] maximum(r, f)
}""",
}

ENTRY = """
ENTRY e {
  a = f32[4] parameter(0)
  i = f32[4] fusion(a), kind=kLoop, calls=fused_inc_before
  w = f32[4] while(i), condition=cond, body=body
  ROOT o = f32[4] fusion(w), kind=kLoop, calls=fused_inc_after
}
"""


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as-given"])
@pytest.mark.parametrize("body", BODIES)
def test_array_state_with_fusions(body, optimize):
    incs = "".join(INC.format(name=n) for n in ("fused_inc", "fused_inc_again", "fused_inc_before",
                                                   "fused_inc_after"))
    text = "HloModule loop\n" + incs + COMMON + BODIES[body] + ENTRY
    a = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
    want = flatten_result(evaluate_module(parse_module(text), [a]))[0]
    module = parse_module(text)
    compiled = compile_module(module, optimize=optimize)
    got = get_backend("cpu").compile(module, compiled=compiled).run_flat([a])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
