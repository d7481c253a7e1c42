"""Shared checks for pass tests: run a pass on HLO text, compare values and structure."""
from __future__ import annotations

from collections import Counter

import numpy as np

from pyxla.hlo import evaluate_module, flatten_result, parse_module, verify_module
from pyxla.hlo.shape import ArrayShape
from pyxla.passes.pipeline import run_pipeline


def random_arguments(module, rng) -> list[np.ndarray]:
    """Fresh random values for every ENTRY parameter (never zeros)."""
    args = []
    for p in module.entry.parameters:
        shape: ArrayShape = p.shape
        dt = shape.dtype
        if dt.is_pred:
            a = rng.random(shape.dims) < 0.5
        elif dt.is_integral:
            lo, hi = (-50, 50) if dt.is_signed else (1, 100)
            a = rng.integers(lo, hi, shape.dims)
            a[a == 0] = 7
        else:
            a = rng.standard_normal(shape.dims) + 0.1
        args.append(np.asarray(a).astype(dt.np_dtype))
    return args


def assert_same_values(before, after, rng, trials: int = 3, rtol: float = 1e-6, make_args=random_arguments,
                       atol: float = 1e-12) -> None:
    for _ in range(trials):
        args = make_args(before, rng)
        want = flatten_result(evaluate_module(before, args))
        got = flatten_result(evaluate_module(after, args))
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert w.shape == g.shape and w.dtype == g.dtype
            if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                           equal_nan=True)
            else:
                np.testing.assert_array_equal(g, w)


def run_pass(passes, text: str, rng, rtol: float = 1e-6):
    """Parse `text`, run `passes` (verifying after each), check values are unchanged; the result."""
    passes = passes if isinstance(passes, (list, tuple)) else [passes]
    before = parse_module(text)
    verify_module(before)
    after = parse_module(text)
    run_pipeline(after, passes, verify=True)
    assert_same_values(before, after, rng, rtol=rtol)
    return after


def entry_opcodes(module) -> Counter:
    """Opcodes left in ENTRY that compute something (parameters not counted)."""
    return Counter(i.opcode for i in module.entry.post_order() if i.opcode != "parameter"
                   and _reaches_root(module.entry, i))


def _reaches_root(comp, instr) -> bool:
    return instr is comp.root or bool(instr.users)


def assert_structure(module, expected_text: str) -> None:
    """The ENTRY ROOT's expression DAG equals the one in `expected_text`, names aside."""
    expected = parse_module(expected_text)
    got_expr = expression(module.entry.root)
    want_expr = expression(expected.entry.root)
    assert got_expr == want_expr, f"\n got: {got_expr}\nwant: {want_expr}"


def expression(instr, memo=None) -> str:
    """ROOT as a nested expression: opcode[attributes](operands), parameters by number."""
    if instr.opcode == "parameter":
        return f"p{instr.parameter_number}"
    if instr.opcode == "constant":
        return f"constant({np.asarray(instr.literal).tolist()})"
    attrs = {k: v for k, v in instr.semantic_attrs().items() if k not in ("to_apply", "calls", "condition", "body")}
    shown = ",".join(f"{k}={v}" for k, v in sorted(attrs.items()))
    inner = ", ".join(expression(o) for o in instr.operands)
    return f"{instr.opcode}{'[' + shown + ']' if shown else ''}({inner}) : {instr.shape.to_text(False)}"
