"""The search: candidates checked against the defaults' results, a wrong one discarded, the
winner of a tiny search space recorded and read by the next compile. Timing is replaced by
a fixed answer (every candidate "faster"), so no assertion depends on this machine's speed."""
import numpy as np
import pytest

from pyxla.backends.cpu.tuning import database, search
from pyxla.backends.cpu.tuning.params import ConvParams, to_json
from pyxla.backends.cpu.tuning.search import Program, check
from pyxla.backends.cpu.tuning.selection import parameters_of
from pyxla.backends.cpu.tuning.tuner import Report, record

from .programs import CONV, compile_text, conv_inputs, conv_reference


def test_check_is_exact_on_the_same_route():
    rng = np.random.default_rng(5)
    want = [rng.standard_normal((4, 8)).astype(np.float32)]
    assert check(want, [want[0].copy()], 0.0) == (True, 0.0)
    nudged = want[0].copy()
    nudged[1, 2] = np.nextafter(nudged[1, 2], np.float32(np.inf))   # one ulp
    ok, worst = check(want, [nudged], 0.0)
    assert not ok and worst > 0
    assert check(want, [nudged], 1e-6)[0]


def test_check_bounds_the_difference_by_the_largest_result():
    rng = np.random.default_rng(6)
    want = rng.standard_normal(1000).astype(np.float32)
    scale = float(np.abs(want).max())
    off = want.copy()
    off[7] += np.float32(2e-5 * scale)
    ok, worst = check([want], [off], 1e-5)
    assert not ok and worst == pytest.approx(2e-5, rel=1e-2)
    assert check([want], [off], 3e-5)[0]


def test_check_refuses_nan_infinity_and_shape_differences():
    want = np.array([1.0, np.nan, np.inf], np.float32)
    assert check([want], [want.copy()], 1e-3)[0]
    assert not check([want], [np.array([1.0, 0.0, np.inf], np.float32)], 1e-3)[0]
    assert not check([want], [np.array([1.0, np.nan, -np.inf], np.float32)], 1e-3)[0]
    assert not check([want], [want[:2]], 1e-3)[0]


def _faster(program, a, b):
    return 1.0, 0.5


def test_tiny_space_picks_a_checked_candidate_and_discards_a_wrong_one():
    program = Program(CONV)
    events = []
    report = Report("conv")

    def emit(event):
        events.append(event)
        report.add(event)

    def corrupt_tiles(kernel, candidate, outputs):   # a deliberately wrong candidate
        if candidate.route == "tiles":
            outputs = [o.copy() for o in outputs]
            outputs[0][0, 3, 4, 5] += 1.0
        return outputs

    winners = search.search(program, 120.0, emit, spaces=lambda k, p: [("tasks_per_thread", [1])],
                            outputs_hook=corrupt_tiles, timer=_faster)
    (kernel,) = report.kernels
    assert kernel["route"] == "winograd2" and kernel["routes"] == ["winograd2", "winograd4", "tiles"]
    (discarded,) = report.discarded
    assert discarded["status"] == "rejected" and discarded["params"] == {"kind": "conv", "route": "tiles"}
    assert "differ from the default's" in discarded["reason"]
    # winograd4 came first ("faster"), tiles was discarded, then one step of the tiny space
    won = ConvParams(route="winograd", winograd_tile=4, tasks_per_thread=1)
    assert winners == {kernel["key"]: won}
    (result,) = report.results
    assert result["params"] == to_json(won) and result["route"] == "winograd4"

    record(report)                                     # the database round trip ...
    assert database.load().kernels[kernel["key"]].params == won
    exe = compile_text(CONV)                           # ... and the next compile reads the winner
    assert parameters_of(exe) == {kernel["key"]: to_json(won)}
    x, w = conv_inputs(np.random.default_rng(7))
    want = conv_reference(x, w)
    np.testing.assert_allclose(exe.run_flat([x, w])[0], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_a_winner_not_faster_than_the_defaults_at_the_end_is_not_kept():
    program = Program(CONV)
    report = Report("conv")
    calls = []

    def timer(program, a, b):   # every step looks faster; the final check against the defaults does not
        calls.append(1)
        return (1.0, 0.5) if len(calls) == 1 else (1.0, 1.0)

    winners = search.search(program, 120.0, report.add, spaces=lambda k, p: [("tasks_per_thread", [1])],
                            try_routes=False, timer=timer)
    assert list(winners.values()) == [ConvParams()]
    assert len(report.unconfirmed) == 1 and report.results[0]["params"] == {"kind": "conv"}


def test_a_candidate_that_fails_to_build_is_reported_not_fatal(monkeypatch):
    program = Program(CONV)
    report = Report("conv")
    real = program.compile

    def compile_or_fail(selection):
        if any(getattr(p, "tasks_per_thread", None) == 8 for p in selection.kernels.values()):
            raise RuntimeError("no code for this candidate")
        return real(selection)

    monkeypatch.setattr(program, "compile", compile_or_fail)
    winners = search.search(program, 120.0, report.add, spaces=lambda k, p: [("tasks_per_thread", [8, 1])],
                            try_routes=False, timer=_faster)
    assert [d["status"] for d in report.discarded] == ["failed"]
    assert "no code for this candidate" in report.discarded[0]["reason"]
    assert list(winners.values()) == [ConvParams(tasks_per_thread=1)]


def test_the_defaults_are_not_tried_again_as_candidates():
    from pyxla.backends.cpu.codegen import TASKS_PER_THREAD
    program = Program(CONV)
    report = Report("conv")
    tried = []

    def emit(event):
        report.add(event)
        if event["event"] == "candidate":
            tried.append(event["params"])

    search.search(program, 120.0, emit, spaces=lambda k, p: [("tasks_per_thread", [TASKS_PER_THREAD, 1])],
                  try_routes=False, timer=lambda program, a, b: (1.0, 1.0))
    assert tried == [{"kind": "conv", "tasks_per_thread": 1}]
