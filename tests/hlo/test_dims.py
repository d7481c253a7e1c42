"""Symbolic dimension expressions (pyxla/hlo/dims.py): arithmetic, decisions, text."""
import math

import numpy as np
import pytest

from pyxla.hlo.dims import (
    DimensionSyntaxError,
    DimExpr,
    InconclusiveDimensionOperation,
    bound_symbols,
    evaluate_dim,
    parse_constraint,
    parse_dim,
    rebind,
    upper_bound,
)
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import ELEMENT_TYPES

F32 = ELEMENT_TYPES["f32"]


@pytest.fixture
def bs():
    syms: dict = {}
    return parse_dim("b", syms), parse_dim("s", syms), syms


def test_arithmetic_matches_integers_for_random_values(bs):
    b, s, _ = bs
    rng = np.random.default_rng()
    exprs = [lambda b, s: 2 * b + 1, lambda b, s: b * s - s, lambda b, s: (b + 3) * (s - 1) * 4,
             lambda b, s: b * s * 768 // 768, lambda b, s: (b * s * 6) // (3 * b)]
    for f in exprs:
        e = f(b, s)
        for _ in range(5):
            vb, vs = (int(v) for v in rng.integers(1, 1000, 2))
            assert e.evaluate({"b": vb, "s": vs}) == f(vb, vs)


def test_symbols_cancel_to_plain_ints(bs):
    b, s, _ = bs
    assert (b + 5 - b) == 5 and isinstance(b + 5 - b, int)
    assert isinstance((b * 12) // b, int) and (b * 12) // b == 12
    assert math.prod([b, 32]) == 32 * b


def test_equality_is_provable_or_false(bs):
    b, s, _ = bs
    assert b == b and b * s == s * b and b + 1 != b
    assert not (b == 1) and b != s and hash(b * s) == hash(s * b)


def test_ordering_decided_by_bounds_or_inconclusive(bs):
    b, s, _ = bs
    assert b >= 1 and b > 0 and not (b < 1) and 2 * b >= b + 1 and b * s >= 1
    with pytest.raises(InconclusiveDimensionOperation, match="b >= 4"):
        _ = b >= 4


def test_constraints_give_bounds(bs):
    b, s, syms = bs
    bounded = bound_symbols(syms, [parse_constraint("b <= 128", syms), parse_constraint("16 <= s", syms)])
    b2, s2 = rebind(b, bounded), rebind(s, bounded)
    assert upper_bound(2 * b2) == 256 and upper_bound(s2) is None
    assert s2 >= 16 and b2 <= 128
    assert parse_constraint("b <= 128", syms).holds({"b": 128}) and not parse_constraint("b <= 128", syms).holds({"b": 129})


def test_inexact_division_and_concrete_use_are_refused(bs):
    b, _, _ = bs
    with pytest.raises(InconclusiveDimensionOperation, match="not exact"):
        _ = (b + 1) // 2
    with pytest.raises(InconclusiveDimensionOperation, match="needs a concrete integer"):
        int(b)
    with pytest.raises(InconclusiveDimensionOperation):
        list(range(b))
    assert (4 * b + 6) % 2 == 0


def test_parse_dim_forms_and_errors():
    syms: dict = {}
    e = parse_dim("2*b + (s - 1)*3", syms)
    assert isinstance(e, DimExpr) and e.evaluate({"b": 5, "s": 7}) == 28
    assert parse_dim("12", syms) == 12 and evaluate_dim(12, {}) == 12
    for bad in ("b +", "2**b", "(b", "b $ 3"):
        with pytest.raises(DimensionSyntaxError):
            parse_dim(bad, {})
    with pytest.raises(DimensionSyntaxError):
        parse_constraint("b = 3", {})


def test_shapes_print_as_xla_dynamic_dims(bs):
    b, _, syms = bs
    assert ArrayShape(F32, (b, 32)).to_text() == "f32[?,32]{1,0}"
    bounded = rebind(b, bound_symbols(syms, [parse_constraint("b <= 64", syms)]))
    assert ArrayShape(F32, (bounded, 32)).to_text(with_layout=False) == "f32[<=64,32]"
    assert not ArrayShape(F32, (b, 32)).is_static and ArrayShape(F32, (3, 32)).is_static
