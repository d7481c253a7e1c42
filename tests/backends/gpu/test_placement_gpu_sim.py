"""Placement (placement.py) through gpu-sim: small scalar work and a conditional's selector
run on the host, large work on the device, the results unchanged in every mode (against the
evaluator and XLA's corpus outputs), the decisions in PYXLA_DUMP, and the ways to choose
the mode (jit's device=, PYXLA_GPU_PLACEMENT)."""
import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla.backends import get_backend
from pyxla.backends.gpu import memory_for
from pyxla.backends.gpu.placement import DEVICE, HOST
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.errors import ArgumentError
from pyxla.hlo import evaluate_module, flatten_result, parse_module

SCALAR_WORK = """HloModule scalars
yes {
  p = f32[4096] parameter(0)
  ROOT n = f32[4096] negate(p)
}
no {
  p = f32[4096] parameter(0)
  ROOT s = f32[4096] sine(p)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[4096] parameter(1)
  c = s32[] constant(3)
  j = s32[] multiply(i, i)
  k = s32[] add(j, c)
  p = pred[] compare(k, c), direction=GT
  t = f32[4096] exponential(x)
  r = f32[4096] conditional(p, t, t), true_computation=yes, false_computation=no
  ROOT o = (f32[4096], s32[]) tuple(r, k)
}
"""


def compile_sim(text, placement):
    return get_backend("gpu-sim").compile(parse_module(text), placement=placement)


def matches_evaluator(got, text, inputs):
    want = flatten_result(evaluate_module(parse_module(text), inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_scalar_work_stays_on_the_host_and_large_work_on_the_device():
    executable = compile_sim(SCALAR_WORK, "auto")
    entry = executable.module.entry
    placed = {i.name: executable.placement.where[id(i)] for i in entry.instructions
              if id(i) in executable.placement.where}
    big = [name for name, i in ((i.name, i) for i in entry.instructions) if name in placed and i.shape.size == 4096]
    small = [name for name in placed if name not in big]
    assert big and small
    assert all(placed[n] == DEVICE for n in big), placed
    assert all(placed[n] == HOST for n in small), placed


@pytest.mark.parametrize("i", [0, 1, 5])
def test_results_are_the_same_in_every_mode_and_the_selector_needs_no_copy_back(i, rng):
    memory = memory_for("gpu-sim")
    downloads = {}
    for mode in ("auto", "device", "host"):
        executable = compile_sim(SCALAR_WORK, mode)
        # sine(exponential(x)) near a root amplifies exp's last-bit difference by
        # |exp(x)|: arguments in [-1, 1] keep that under the tolerance
        inputs = [np.int32(i), rng.uniform(-1, 1, 4096).astype(np.float32)]
        before = memory.counts()["downloads"]
        outs = executable.run_device(inputs)
        downloads[mode] = memory.counts()["downloads"] - before
        matches_evaluator([np.asarray(o) for o in outs], SCALAR_WORK, inputs)
    # on the device the selector is read back once; computed on the host it is not
    assert downloads == {"auto": 0, "device": 1, "host": 0}


COUNTED_LOOP = """HloModule counted
cond {
  s = (s32[], f32[2000]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[2000]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[2000] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[2000] sine(v)
  h = f32[2000] constant({...})
  ROOT t = (s32[], f32[2000]) tuple(j, w)
}
ENTRY e {
  x = f32[2000] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[2000]) tuple(zero, x)
  ROOT w = (s32[], f32[2000]) while(init), condition=cond, body=body
}
""".replace("  h = f32[2000] constant({...})\n", "")


def test_a_loop_condition_runs_on_the_host_and_its_body_on_the_device(rng):
    x = rng.standard_normal(2000).astype(np.float32)
    launches = {}
    for mode in ("auto", "device"):
        executable = compile_sim(COUNTED_LOOP, mode)
        count = [0]
        launch = executable.kernels.launch

        def counting(*args, launch=launch, count=count):
            count[0] += 1
            launch(*args)
        executable.kernels.launch = counting
        matches_evaluator([np.asarray(o) for o in executable.run_device([x])], COUNTED_LOOP, [x])
        launches[mode] = count[0]
        cond = next(c for c in executable.module.computations if c.name == "cond")
        (compare,) = [i for i in cond.instructions if id(i) in executable.placements[id(_program_of(executable, cond))].where]
        assert executable.placements[id(_program_of(executable, cond))].where[id(compare)] == (HOST if mode == "auto" else DEVICE)
    # the condition runs 7 times: as kernels on the device, not at all in auto
    assert launches["device"] - launches["auto"] == 7


def _program_of(executable, computation):
    from pyxla.backends.gpu.arena import programs
    return next(p for p in programs(executable.program) if p.computation is computation)


def test_host_work_reads_constants_without_a_copy(rng):
    text = """HloModule consts
ENTRY e {
  i = f32[] parameter(0)
  c = f32[4] constant({1.5, -2, 3, 0.25})
  b = f32[4] broadcast(i), dimensions={}
  m = f32[4] multiply(b, c)
  ROOT s = f32[4] add(m, c)
}
"""
    executable = compile_sim(text, "host")
    memory = memory_for("gpu-sim")
    before = memory.counts()
    (out,) = executable.run_device([np.float32(2.5)])
    after = memory.counts()
    assert after["downloads"] == before["downloads"]   # the constant was not read back
    assert after["uploads"] - before["uploads"] == 1   # the result, as a device array
    np.testing.assert_array_equal(np.asarray(out), np.float32(2.5) * np.float32([1.5, -2, 3, 0.25])
                                  + np.float32([1.5, -2, 3, 0.25]))


def test_the_decisions_are_in_the_dump(tmp_path, monkeypatch):
    monkeypatch.setenv("PYXLA_DUMP", str(tmp_path))
    compile_sim(SCALAR_WORK, "auto")
    text = (tmp_path / "scalars" / "gpu-placement.txt").read_text()
    assert text.startswith("placement of e (auto): ")
    assert "  host   %" in text and "  device %" in text and " us, device " in text
    assert "placement of yes (auto)" in text and "placement of no (auto)" in text


def test_the_mode_from_the_environment_and_refusals(monkeypatch):
    monkeypatch.setenv("PYXLA_GPU_PLACEMENT", "host")
    executable = get_backend("gpu-sim").compile(parse_module(SCALAR_WORK))
    assert executable.placement.mode == "host"
    assert set(executable.placement.where.values()) == {HOST}
    monkeypatch.delenv("PYXLA_GPU_PLACEMENT")
    assert get_backend("gpu-sim").compile(parse_module(SCALAR_WORK)).placement.mode == "device"
    with pytest.raises(ArgumentError, match="placement 'cpu': expected one of auto, device, host"):
        compile_sim(SCALAR_WORK, "cpu")
    with pytest.raises(ArgumentError, match="on the gpu backends, not on 'cpu'"):
        pyxla.jit(lambda x: x, backend="cpu", device="host")


def test_jit_device_chooses_the_placement(rng):
    def f(n, x):
        return pnp.tanh(x) * (n * n + 1), n * 2 + 1

    x = rng.standard_normal(3000).astype(np.float32)
    results = {}
    for device in ("auto", "device", "host"):
        g = pyxla.jit(f, backend="gpu-sim", device=device)
        executable = g.lower(np.int32(3), x).compile().executable
        assert executable.placement.mode == device
        results[device] = [np.asarray(o) for o in g(np.int32(3), x)]
        np.testing.assert_allclose(results[device][0], np.tanh(x.astype(np.float64)) * 10, rtol=1e-5, atol=1e-6)
        assert results[device][1] == 7
    assert HOST in pyxla.jit(f, backend="gpu-sim", device="auto").lower(np.int32(3), x).compile() \
        .executable.placement.where.values()


SAMPLE = ["cond_pred", "switch_index", "io_scalar_inputs", "while_fori_loop", "while_loop_dynamic",
          "reduce_argmax_argmin", "sort_top_k", "dynamic_update_slice", "scatter_add_duplicates",
          "misc_constants_literals", "io_nested_tuple_outputs", "model_rnn_scan", "rng_bit_generator_rbg",
          "gather_take", "shape_iota"]


@pytest.mark.parametrize("mode", ["auto", "host"])
@pytest.mark.parametrize("name", SAMPLE)
def test_corpus_cases_match_xla_in_auto_and_host_modes(name, mode):
    (case_dir,) = [d for d in corpus_case_dirs() if d.name == name]
    case = load_case(case_dir)
    problems = run_case(case, "optimized",
                        lambda text, inputs: compile_sim(text, mode).run_flat(inputs))
    assert not problems, "\n".join(problems)
