"""Fusions a module arrives with, as XLA never emits them but hand-written HLO may hold:
two fusion instructions calling one fused computation, and a loop fusion whose root is a
tuple (multi-output loop fusion). Both parse on XLA, and run on the interpreter and the
CPU backend as NumPy computes them."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.fusion.fusion_builder import prepare_fusions
from pyxla.hlo import parse_module, verify_module

from ..xla_reference import parse_on_xla

FUSED = """
%fused_computation (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4] parameter(0)
  %p1 = f32[4] parameter(1)
  %m = f32[4] multiply(f32[4] %p0, f32[4] %p1)
  ROOT %a = f32[4] add(f32[4] %m, f32[4] %p0)
}
"""


def _f(a, b):
    return a * b + a


def _shared(name, params, body):
    return f"HloModule {name}\n{FUSED}\nENTRY %main ({params}) -> f32[4] {{\n{body}\n}}\n"


# (module, what NumPy computes from x, y, z)
SHARED = {
    "chain": (_shared("chain", "x: f32[4], y: f32[4]", """
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %fusion = f32[4] fusion(f32[4] %x, f32[4] %y), kind=kLoop, calls=%fused_computation
  %fusion.1 = f32[4] fusion(f32[4] %y, f32[4] %fusion), kind=kLoop, calls=%fused_computation
  ROOT %s = f32[4] subtract(f32[4] %fusion.1, f32[4] %x)"""),
              lambda x, y, z: _f(y, _f(x, y)) - x),
    "siblings": (_shared("siblings", "x: f32[4], y: f32[4]", """
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %e = f32[4] exponential(f32[4] %x)
  %fusion = f32[4] fusion(f32[4] %e, f32[4] %y), kind=kLoop, calls=%fused_computation
  %fusion.1 = f32[4] fusion(f32[4] %y, f32[4] %x), kind=kLoop, calls=%fused_computation
  ROOT %s = f32[4] subtract(f32[4] %fusion.1, f32[4] %fusion)"""),
                 lambda x, y, z: _f(y, x) - _f(np.exp(x), y)),
    # fusing %n into %fusion gives its computation a third parameter; %fusion.1, calling
    # the same computation with two operands, is then merged into %fusion
    "producer_with_new_operand": (_shared("grow", "x: f32[4], y: f32[4], z: f32[4]", """
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %z = f32[4] parameter(2)
  %fusion.1 = f32[4] fusion(f32[4] %y, f32[4] %x), kind=kLoop, calls=%fused_computation
  %n = f32[4] add(f32[4] %x, f32[4] %z)
  %fusion = f32[4] fusion(f32[4] %n, f32[4] %fusion.1), kind=kLoop, calls=%fused_computation
  ROOT %t = f32[4] tanh(f32[4] %fusion)"""),
                                  lambda x, y, z: np.tanh(_f(x + z, _f(y, x)))),
}

TUPLE_LOOP = """
HloModule tuple_loop

%fused_computation (p0: f32[2,3], p1: f32[2,3], p2: f32[3]) -> (f32[2,3], f32[2,3], f32[3], f32[2,3]) {
  %p0 = f32[2,3] parameter(0)
  %p1 = f32[2,3] parameter(1)
  %p2 = f32[3] parameter(2)
  %m = f32[2,3] multiply(f32[2,3] %p0, f32[2,3] %p1)
  %b = f32[2,3] broadcast(f32[3] %p2), dimensions={1}
  %a = f32[2,3] add(f32[2,3] %m, f32[2,3] %b)
  %e = f32[3] exponential(f32[3] %p2)
  ROOT %t = (f32[2,3], f32[2,3], f32[3], f32[2,3]) tuple(f32[2,3] %m, f32[2,3] %a, f32[3] %e, f32[2,3] %p1)
}

ENTRY %main (x: f32[2,3], y: f32[2,3], z: f32[3]) -> (f32[2,3], f32[2,3], (f32[2,3], f32[2,3], f32[3], f32[2,3])) {
  %x = f32[2,3] parameter(0)
  %y = f32[2,3] parameter(1)
  %z = f32[3] parameter(2)
  %fusion = (f32[2,3], f32[2,3], f32[3], f32[2,3]) fusion(f32[2,3] %x, f32[2,3] %y, f32[3] %z), kind=kLoop,
      calls=%fused_computation
  %g0 = f32[2,3] get-tuple-element((f32[2,3], f32[2,3], f32[3], f32[2,3]) %fusion), index=0
  %g1 = f32[2,3] get-tuple-element((f32[2,3], f32[2,3], f32[3], f32[2,3]) %fusion), index=1
  %n = f32[2,3] negate(f32[2,3] %g1)
  ROOT %r = (f32[2,3], f32[2,3], (f32[2,3], f32[2,3], f32[3], f32[2,3])) tuple(f32[2,3] %g0, f32[2,3] %n,
      (f32[2,3], f32[2,3], f32[3], f32[2,3]) %fusion)
}
"""


def _tuple_loop_expected(x, y, z):
    m = x * y
    a = m + z
    return [m, -a, m, a, np.exp(z), y]


def _args(rng, shapes):
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _check(text, args, want, backend):
    got = get_backend(backend).compile(parse_module(text)).run_flat(args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", sorted(SHARED))
def test_fusions_sharing_a_computation(case, backend, rng):
    text, numpy_fn = SHARED[case]
    n = text.split("ENTRY")[1].count("parameter(")
    args = _args(rng, [(4,)] * n)
    _check(text, args, [numpy_fn(*args, *([None] * (3 - n)))], backend)


@pytest.mark.parametrize("case", sorted(SHARED))
def test_shared_computations_compile_to_a_valid_module(case):
    compiled = compile_module(parse_module(SHARED[case][0]))
    verify_module(compiled.module)
    calls = [i.attrs["calls"] for c in compiled.module.computations for i in c.instructions if i.opcode == "fusion"]
    assert len({id(c) for c in calls}) == len(calls)          # each fusion owns its computation


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_tuple_rooted_loop_fusion(backend, rng):
    args = _args(rng, [(2, 3), (2, 3), (3,)])
    _check(TUPLE_LOOP, args, _tuple_loop_expected(*args), backend)


def test_tuple_rooted_loop_fusion_is_split_per_output():
    module = parse_module(TUPLE_LOOP)
    assert prepare_fusions(module)
    verify_module(module)
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    # the parameter passed through is the operand itself, not a kernel
    assert len(fusions) == 3 and not any(f.shape.is_tuple for f in fusions)
    assert not prepare_fusions(module)


@pytest.mark.parametrize("text", [SHARED[c][0] for c in sorted(SHARED)] + [TUPLE_LOOP],
                         ids=sorted(SHARED) + ["tuple_loop"])
def test_xla_accepts_the_modules(text):
    parse_on_xla(text)
