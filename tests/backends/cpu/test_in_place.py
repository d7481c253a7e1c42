"""dynamic-update-slice and scatter in place on the CPU backend, against the evaluator on
fresh random inputs: over dead temps, in fusions whose root is the update, in while bodies
that update a carried array in the loop state itself, and in scan / fori_loop programs of
several lengths; the counter-cases (the old array still read) give the evaluator's values
too, and the caller's arrays are never written."""
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla import lax
from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.fusion.buffer_assignment import assign_buffers
from pyxla.hlo import evaluate_module, flatten_result, parse_module

from ...fusion import test_buffer_assignment_in_place as programs
from .differential import random_inputs


def compile_cpu(text: str):
    compiled = compile_module(parse_module(text))
    executable = get_backend("cpu").compile(compiled.module, compiled=compiled)
    return compiled, executable


def run_against_evaluator(text: str, rng, inputs=None, runs: int = 3):
    """Run on the CPU `runs` times on fresh inputs (the same executable, so a state left
    behind by one run would show in the next); the inputs must come back unchanged."""
    compiled, executable = compile_cpu(text)
    for _ in range(runs):
        args = inputs(rng) if inputs else random_inputs(parse_module(text), rng)
        kept = [a.copy() for a in args]
        want = flatten_result(evaluate_module(parse_module(text), args))
        got = executable.run_flat(args)
        for a, k in zip(args, kept):
            np.testing.assert_array_equal(a, k, err_msg="the CPU executable wrote into an argument")
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(w).max(initial=0))))
    return compiled


def kernel_ir(compiled, instr) -> str:
    from pyxla.backends.cpu.codegen import ModuleCodegen
    text = ModuleCodegen(compiled.module, compiled.buffers).emit()
    kernel = text[text.index(f'define internal void @"kernel.{instr.name}"('):]
    return kernel[:kernel.index("\n}")]


def starts(rng, *limits):
    """Scalar s32 starts, some past either end (they clamp)."""
    return [np.asarray(rng.integers(-3, n + 3), np.int32) for n in limits]


def normal(rng, *shape):
    return (rng.standard_normal(shape)).astype(np.float32)


ENTRY_CASES = {
    # program, the update's opcode, in place, inputs
    "dus over a dead temp": (programs.DUS_OVER_DEAD_TEMP, "dynamic-update-slice", True,
                             lambda r: [normal(r, 64, 32), normal(r, 3, 32)] + starts(r, 64, 32)),
    "dus of its own slice": (programs.DUS_OF_OWN_SLICE, "dynamic-update-slice", True,
                             lambda r: [normal(r, 40, 16)] + starts(r, 40, 16)),
    "fused dus": (programs.FUSED_DUS, "fusion", True,
                  lambda r: [normal(r, 64, 32), normal(r, 3, 32)] + starts(r, 64) + [normal(r, 32, 32)]),
    "scatter over a dead temp": (programs.SCATTER_OVER_DEAD_TEMP, "scatter", True,
                                 lambda r: [normal(r, 20, 6), r.integers(-2, 22, 9).astype(np.int32),
                                            normal(r, 9, 6)]),
    "dus operand read later": (programs.DUS_OPERAND_READ_LATER, "dynamic-update-slice", False,
                               lambda r: [normal(r, 64, 32), normal(r, 3, 32)] + starts(r, 64, 32)),
    "dus of a parameter": (programs.DUS_OF_PARAMETER, "dynamic-update-slice", False,
                           lambda r: [normal(r, 64, 32), normal(r, 3, 32)] + starts(r, 64, 32)),
    "fused dus reading its operand": (programs.FUSED_DUS_READS_OPERAND, "fusion", False,
                                      lambda r: [normal(r, 64, 32), normal(r, 3, 32)] + starts(r, 64) + [normal(r, 32, 32)]),
    "scatter operand read later": (programs.SCATTER_OPERAND_READ_LATER, "scatter", False,
                                   lambda r: [normal(r, 20, 6), r.integers(-2, 22, 9).astype(np.int32),
                                              normal(r, 9, 6)]),
}


@pytest.mark.parametrize("case", list(ENTRY_CASES))
def test_update_in_place_or_not_matches_the_evaluator(case, rng):
    text, opcode, in_place, inputs = ENTRY_CASES[case]
    compiled = run_against_evaluator(text, rng, inputs)
    update = next(i for i in compiled.module.entry.instructions if i.opcode == opcode
                  and (opcode != "fusion" or i.attrs["calls"].root.opcode == "dynamic-update-slice"))
    shared = compiled.buffers.of(update) is compiled.buffers.of(update.operands[0])
    assert shared == in_place
    # in place, only the update region is written: the operand is not copied first
    assert ("memcpy" in kernel_ir(compiled, update)) != in_place


@pytest.mark.parametrize("text", [programs.TRANSPOSING_LOOP_FUSION, programs.ELEMENTWISE_LOOP_FUSION,
                                  programs.ELEMENTWISE_CHANGING_LAYOUT])
def test_loop_fusions_and_layout_changes_in_place_only_when_each_element_stays(text, rng):
    run_against_evaluator(text, rng)


LOOP_CASES = {
    "dus": (programs.LOOP_DUS, True), "scatter": (programs.LOOP_SCATTER, True),
    "fused dus": (programs.LOOP_FUSED_DUS, True), "dus over a body temp": (programs.LOOP_DUS_OVER_BODY_TEMP, False),
    "old rows read after": (programs.LOOP_DUS_READ_AFTER, False),
    "update is no result": (programs.LOOP_DUS_RESULT_ELSEWHERE, False),
    "old rows carried on": (programs.LOOP_DUS_AND_OLD_ROWS, False),
    "updated rows carried twice": (programs.LOOP_DUS_TWICE_IN_RESULT, False),
    "body also a branch": (programs.LOOP_BODY_ALSO_A_BRANCH, False),
}


def while_bodies(module):
    return [i.attrs["body"] for c in module.computations for i in c.instructions if i.opcode == "while"]


@pytest.mark.parametrize("case", list(LOOP_CASES))
def test_while_loop_updates_matches_the_evaluator(case, rng):
    text, in_state = LOOP_CASES[case]
    compiled = run_against_evaluator(text, rng)
    (body,) = while_bodies(compiled.module)
    in_parameter = [b for b in assign_buffers(compiled.module, body).buffers if b.in_parameter is not None]
    assert [b.in_parameter for b in in_parameter] == ([1] if in_state else [])


def test_carried_rows_are_copied_only_into_the_loop_at_its_start():
    compiled, _ = compile_cpu(programs.LOOP_DUS)
    from pyxla.backends.cpu.codegen import ModuleCodegen
    text = ModuleCodegen(compiled.module, compiled.buffers).emit()
    rows_bytes = 16 * 8 * 4
    copies = [line for line in text.splitlines() if "llvm.memcpy" in line and f"i64 {rows_bytes}," in line]
    assert len(copies) == 1, copies   # the initial state; no copy back after each step


# --- traced programs: scan and fori_loop ------------------------------------------------------------

def stacking_scan(xs, w, h0):
    def step(h, x):
        h = pnp.tanh(h * w + x)
        return h, (h, pnp.sum(h))
    return lax.scan(step, h0, xs)


def np_stacking_scan(xs, w, h0):
    h, ys, sums = h0.astype(np.float64), [], []
    for x in xs:
        h = np.tanh(h * w + x)
        ys.append(h)
        sums.append(h.sum())
    return h, (np.stack(ys).reshape(len(xs), -1), np.asarray(sums))


def in_state_leaves(jitted, *args) -> list[int]:
    compiled = jitted.lower(*args).compile()
    return [b.in_parameter for body in while_bodies(compiled.module)
            for b in assign_buffers(compiled.module, body).buffers if b.in_parameter is not None]


@pytest.mark.parametrize("length", [1, 2, 7, 64, 257])
def test_scan_stacks_its_outputs_in_place(length, rng):
    # |w| < 1 keeps the recurrence contracting: with |w| > 1 an f32 run drifts from the f64
    # reference by rounding amplified over hundreds of steps, whatever computes it.
    w = rng.uniform(-0.9, 0.9, 33).astype(np.float32)
    xs, h0 = normal(rng, length, 33), normal(rng, 33)
    f = pyxla.jit(stacking_scan)
    h, (ys, sums) = f(xs, w, h0)
    want_h, (want_ys, want_sums) = np_stacking_scan(xs, w, h0)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ys, want_ys, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-4, atol=1e-4)
    ih, (iys, isums) = pyxla.jit(stacking_scan, backend="interpreter")(xs, w, h0)
    np.testing.assert_allclose(ys, iys, rtol=1e-5, atol=1e-5)
    if length > 1:   # (one step needs no loop)
        assert len(in_state_leaves(f, xs, w, h0)) == 2   # both stacked outputs


def rnn(params, h0, xs):
    def step(h, x):
        h = lax.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        return h, h
    return lax.scan(step, h0, xs, reverse=True)


@pytest.mark.parametrize("length", [1, 5, 40])
def test_reversed_rnn_scan_in_place(length, rng):
    params = {"wx": normal(rng, 6, 9) * 0.5, "wh": normal(rng, 9, 9) * 0.3, "b": normal(rng, 9)}
    h0, xs = normal(rng, 3, 9), normal(rng, length, 3, 6)
    f = pyxla.jit(rnn)
    h, ys = f(params, h0, xs)
    want_h, want_ys = h0.astype(np.float64), [None] * length
    for t in reversed(range(length)):
        want_h = np.tanh(xs[t] @ params["wx"] + want_h @ params["wh"] + params["b"])
        want_ys[t] = want_h
    np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ys, np.stack(want_ys), rtol=1e-4, atol=1e-5)
    assert in_state_leaves(f, params, h0, xs) or length == 1


def test_fori_loop_dynamic_update_slice_in_place(rng):
    def fill(buf, v):
        def body(i, b):
            row = (v * i.astype(np.float32) + b[i])[None]
            return lax.dynamic_update_slice(b, row, (i, 0))
        return lax.fori_loop(0, buf.shape[0], body, buf)

    buf, v = normal(rng, 50, 7), normal(rng, 7)
    kept = buf.copy()
    f = pyxla.jit(fill)
    out = f(buf, v)
    np.testing.assert_array_equal(buf, kept)
    np.testing.assert_allclose(out, buf + np.arange(50, dtype=np.float32)[:, None] * v, rtol=1e-6, atol=1e-6)
    assert in_state_leaves(f, buf, v) == [1]
