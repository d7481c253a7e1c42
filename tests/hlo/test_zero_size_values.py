"""A value with no elements needs no memory: `f32[1000000000000,0]` and what computes it
cost nothing on the evaluator and on the cpu backend, even where an operand that only such a
value reads would itself be huge (it is never computed)."""
from __future__ import annotations

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import evaluate_module, flatten_result, parse_module

H = 10**12   # 4 TB of f32 if anything allocated it: NumPy refuses at once (MemoryError)

PROGRAMS = {
    "iota": (f"ROOT i = f32[{H},0] iota(), iota_dimension=0", (H, 0)),
    "iota along the empty dimension": (f"ROOT i = s32[0,{H}] iota(), iota_dimension=0", (0, H)),
    "broadcast of a huge operand": (f"i = f32[{H}] iota(), iota_dimension=0\n"
                                    f"  ROOT b = f32[{H},0] broadcast(i), dimensions={{0}}", (H, 0)),
    "elementwise chain": (f"i = s32[{H},0] iota(), iota_dimension=0\n  c = f32[{H},0] convert(i)\n"
                          f"  e = f32[{H},0] exponential(c)\n  ROOT t = f32[0,{H}] transpose(e), dimensions={{1,0}}",
                          (0, H)),
    "concatenate and slice": (f"i = f32[{H},0] iota(), iota_dimension=0\n"
                              f"  c = f32[{2 * H},0] concatenate(i, i), dimensions={{0}}\n"
                              f"  ROOT s = f32[{H},0] slice(c), slice={{[0:{H}], [0:0]}}", (H, 0)),
    "dot": (f"i = f32[{H},0] iota(), iota_dimension=0\n  j = f32[0,0] iota(), iota_dimension=0\n"
            f"  ROOT d = f32[{H},0] dot(i, j), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}", (H, 0)),
    "reduce to nothing": (f"i = f32[0,{H}] iota(), iota_dimension=1\n  z = f32[] constant(0)\n"
                          f"  ROOT r = f32[0] reduce(i, z), dimensions={{1}}, to_apply=add", (0,)),
}

ADD = "add {\n  l = f32[] parameter(0)\n  r = f32[] parameter(1)\n  ROOT a = f32[] add(l, r)\n}\n"


def _module(body: str) -> str:
    return f"HloModule zero_size\n{ADD}ENTRY e {{\n  {body}\n}}\n"


@pytest.mark.parametrize("name", PROGRAMS)
def test_evaluator(name):
    body, dims = PROGRAMS[name]
    (out,) = flatten_result(evaluate_module(parse_module(_module(body)), []))
    assert out.shape == dims and out.nbytes == 0


@pytest.mark.parametrize("name", PROGRAMS)
def test_cpu_backend(name):
    body, dims = PROGRAMS[name]
    (out,) = get_backend("cpu").compile(parse_module(_module(body))).run_flat([])
    assert out.shape == dims and out.nbytes == 0


def test_huge_empty_parameter():
    text = f"HloModule p\nENTRY e {{\n  p = f32[{H},0] parameter(0)\n  ROOT n = f32[{H},0] negate(p)\n}}\n"
    x = np.empty((H, 0), np.float32)
    (out,) = flatten_result(evaluate_module(parse_module(text), [x]))
    assert out.shape == (H, 0)
    (out,) = get_backend("cpu").compile(parse_module(text)).run_flat([x])
    assert out.shape == (H, 0)


def test_nonempty_operands_still_run_when_used_elsewhere():
    text = ("HloModule used\nENTRY e {\n  i = f32[3] iota(), iota_dimension=0\n"
            "  b = f32[3,0] broadcast(i), dimensions={0}\n  ROOT t = (f32[3], f32[3,0]) tuple(i, b)\n}\n")
    ramp, empty = flatten_result(evaluate_module(parse_module(text), []))
    assert ramp.tolist() == [0, 1, 2] and empty.shape == (3, 0)
