"""Buffer assignment: no two live buffers overlap, memory is reused, donations alias."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pyxla.conformance import corpus_case_dirs, load_case
from pyxla.fusion.buffer_assignment import assign_buffers
from pyxla.fusion.instruction_fusion import fusion_pass
from pyxla.fusion.schedule import schedule_module
from pyxla.hlo import F32, HloBuilder, array, evaluate_module, parse_module, verify_module
from pyxla.passes.pipeline import run_pipeline


def check_no_overlap(assignment) -> None:
    temps = assignment.temps
    for i, a in enumerate(temps):
        assert 0 <= a.offset and a.offset + a.size <= assignment.arena_size
        for b in temps[i + 1:]:
            if a.overlaps_in_time(b):
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, \
                    f"{a.name} and {b.name} are live together and overlap"
    assert assignment.arena_size <= sum(b.size for b in temps) + 64 * len(temps)


OPS = ["add", "multiply", "subtract", "maximum", "tanh", "negate", "exponential"]


@st.composite
def random_dag(draw):
    """A random DAG of elementwise ops, transposes and reductions over a few sizes."""
    b = HloBuilder("random")
    n = draw(st.integers(2, 4))
    values = [b.parameter(array(F32, n, n), f"p{i}") for i in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(3, 25))):
        kind = draw(st.sampled_from(OPS + ["transpose"]))
        x = draw(st.sampled_from(values))
        if kind in ("tanh", "negate", "exponential"):
            values.append(b.op(kind, x))
        elif kind == "transpose":
            values.append(b.op("transpose", x, dimensions=(1, 0)))
        else:
            values.append(b.op(kind, x, draw(st.sampled_from(values))))
    outs = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    root = b.tuple(*outs) if len(outs) > 1 else outs[0]
    return b.module(root)


@settings(max_examples=60, deadline=None)
@given(random_dag())
def test_random_dags_never_overlap_live_buffers(module):
    verify_module(module)
    schedule_module(module)
    verify_module(module)
    check_no_overlap(assign_buffers(module))


def test_chain_reuses_memory():
    b = HloBuilder("chain")
    x = b.parameter(array(F32, 256), "x")
    v = x
    for op in ["exponential", "tanh", "negate", "sine", "cosine", "abs"] * 3:
        v = b.op(op, v)
    module = b.module(b.op("add", v, x))
    schedule_module(module)
    a = assign_buffers(module)
    check_no_overlap(a)
    # each op writes over its dead operand: one temp buffer for the whole chain
    assert a.arena_size == 256 * 4
    assert sum(b.size for b in a.temps) == 256 * 4
    assert len(a.temps[0].values) == 18


def test_corpus_models_arena_well_below_sum_of_buffers(rng):
    total_arena = total_values = 0
    for case_dir in corpus_case_dirs():
        if not case_dir.name.startswith("model_"):
            continue
        module = parse_module(load_case(case_dir).hlo_text("module"))
        run_pipeline(module)
        fusion_pass()(module)
        schedule_module(module)
        a = assign_buffers(module)
        check_no_overlap(a)
        total_arena += a.arena_size
        total_values += sum(v.shape.byte_size for b in a.temps for v in b.values)
    assert total_arena < 0.6 * total_values, (total_arena, total_values)


def test_donated_parameter_aliases_matching_output():
    b = HloBuilder("update")
    w = b.parameter(array(F32, 8), "w")
    g = b.parameter(array(F32, 8), "g")
    module = b.module(b.op("subtract", w, g))
    schedule_module(module)
    a = assign_buffers(module, donated=(0,))
    assert a.donated_aliases == {0: 0}
    assert "aliases donated parameter 0" in a.to_text()


def test_schedule_keeps_values_and_lowers_peak(rng):
    text = """
HloModule wide
ENTRY main {
  x = f32[1024] parameter(0)
  a1 = f32[1024] exponential(x)
  b1 = f32[1024] exponential(x)
  c1 = f32[1024] exponential(x)
  a2 = f32[1024] tanh(a1)
  b2 = f32[1024] tanh(b1)
  c2 = f32[1024] tanh(c1)
  s1 = f32[1024] add(a2, b2)
  ROOT s2 = f32[1024] add(s1, c2)
}
"""
    module = parse_module(text)
    args = [rng.standard_normal(1024).astype(np.float32)]
    before = evaluate_module(module, args)
    schedule_module(module)
    verify_module(module)
    np.testing.assert_array_equal(evaluate_module(module, args), before)
    a = assign_buffers(module)
    check_no_overlap(a)
    assert a.peak_temp_bytes() <= 3 * 1024 * 4
