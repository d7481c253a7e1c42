"""Reshape in the elemental emitter (llvm/elemental.py): indices map run by run of common factors,
so a reshape that splits dimensions needs no division; any reshape, fused with a transpose,
equals the evaluator's."""
import math
import re

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.backends.llvm.elemental import common_factors
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter


def random_factorings(rng):
    """Two shapes with the same element count, made by grouping one list of factors two ways
    (with unit dimensions sprinkled in)."""
    factors = [int(f) for f in rng.choice([1, 2, 3, 4, 5, 7], size=int(rng.integers(1, 7)))]

    def group():
        dims, i = [], 0
        while i < len(factors):
            j = i + int(rng.integers(1, 4))
            dims.append(math.prod(factors[i:j]))
            if rng.random() < 0.2:
                dims.append(1)
            i = j
        return tuple(dims)
    return group(), group()


def test_common_factors_partition_both_shapes_into_shortest_equal_runs(rng):
    for _ in range(300):
        a, b = random_factorings(rng)
        runs = common_factors(a, b)
        assert [i for s, _ in runs for i in range(s.start, s.stop)] == list(range(len(a)))
        assert [j for _, d in runs for j in range(d.start, d.stop)] == list(range(len(b)))
        for s, d in runs:
            assert math.prod(a[s]) == math.prod(b[d])
            # shortest: no shorter prefixes of both runs have equal products (unit runs aside)
            for i in range(s.start + 1, s.stop):
                for j in range(d.start + 1, d.stop):
                    assert math.prod(a[s.start:i]) != math.prod(b[d.start:j]) or math.prod(a[s.start:i]) == 1


@pytest.mark.parametrize("a,b,runs", [
    ((2048, 512), (8, 256, 8, 64), [((0, 1), (0, 2)), ((1, 2), (2, 4))]),
    ((2, 3, 4), (4, 6), [((0, 3), (0, 2))]),
    ((6, 1), (6,), [((0, 1), (0, 1)), ((1, 2), (1, 1))]),
    ((0, 3), (3, 0), [((0, 2), (0, 2))]),
])
def test_common_factors_examples(a, b, runs):
    assert [((s.start, s.stop), (d.start, d.stop)) for s, d in common_factors(a, b)] == runs


def reshape_transpose(src, dst, perm):
    out = [dst[p] for p in perm]

    def dims(t):
        return ",".join(map(str, t))

    return f"""HloModule r
fused {{
  p = f32[{dims(src)}] parameter(0)
  r = f32[{dims(dst)}] reshape(p)
  ROOT t = f32[{dims(out)}] transpose(r), dimensions={{{dims(perm)}}}
}}

ENTRY main {{
  x = f32[{dims(src)}] parameter(0)
  ROOT f = f32[{dims(out)}] fusion(x), kind=kLoop, calls=fused
}}"""


def kernel_ir(text, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    get_backend("cpu").compile(parse_module(text))
    monkeypatch.delenv("PYXLA_DUMP")
    return next(tmp_path.glob("*/llvm-ir.ll")).read_text()


def divisions(ir_text: str) -> list[str]:
    return re.findall(r"\b[us](?:div|rem) i64 %\S+, (\d+)", ir_text)


@pytest.mark.parametrize("src,dst,perm", [
    ((64, 48), (4, 16, 6, 8), (0, 2, 1, 3)),     # attention's head split
    ((12, 1, 10), (3, 4, 10), (2, 0, 1)),
    ((30,), (1, 2, 1, 15), (3, 2, 1, 0)),
])
def test_split_reshapes_use_no_division(src, dst, perm, rng, tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_NUM_THREADS", "1")   # a whole kernel, not tasks of a split one
    text = reshape_transpose(src, dst, perm)
    assert divisions(kernel_ir(text, tmp_path, monkeypatch)) == []
    assert_cpu_matches_interpreter(text, rng)


def test_random_reshapes_match_the_evaluator(rng):
    for _ in range(12):
        src, dst = random_factorings(rng)
        perm = tuple(int(p) for p in rng.permutation(len(dst)))
        text = reshape_transpose(src, dst, perm)
        x = rng.standard_normal(src).astype(np.float32)
        assert_cpu_matches_interpreter(text, rng, inputs=[x])


def test_reshape_across_runs_still_divides_correctly(rng):
    """(6, 10) -> (4, 15): one run of everything, delinearised with division."""
    assert_cpu_matches_interpreter(reshape_transpose((6, 10), (4, 15), (1, 0)), rng)
