"""gather, scatter, dynamic-update-slice and the Sharding custom-call on the CPU backend
against the evaluator, exactly: indices out of bounds on both sides and of several integer
types (u64 past i64's range included), duplicates applied in order, index vectors on any
dimension, batching dimensions, size-1 and zero-size dimensions, non-default layouts,
variadic scatter, and XLA-style fusions whose root is a scatter or dynamic-update-slice."""
import ml_dtypes
import numpy as np
import pytest

import pyxla.fusion.buffer_assignment as buffer_assignment
from pyxla.backends import get_backend
from pyxla.backends.cpu.codegen import ModuleCodegen
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter

INDEX_TYPES = {"s8": np.int8, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u32": np.uint32,
               "u64": np.uint64}


def exact(text: str, rng, inputs):
    return assert_cpu_matches_interpreter(text, rng, inputs, rtol=0, atol=0)


def indices(rng, shape, low: int, high: int, dtype=np.int32) -> np.ndarray:
    """Indices from low to high inclusive: past both ends of a dimension when asked."""
    info = np.iinfo(dtype)
    return rng.integers(max(low, info.min), min(high, info.max), shape, endpoint=True).astype(dtype)


def scalar_starts(rng, count: int, low: int, high: int, dtype=np.int32) -> list[np.ndarray]:
    return [np.asarray(indices(rng, (), low, high, dtype)) for _ in range(count)]


def data(rng, shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-100, 100, shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 3).astype(dtype)


# --- gather ----------------------------------------------------------------------------------------

def gather_module(operand: str, idx: str, out: str, attrs: str, consumer: str = "") -> str:
    root = "ROOT g" if not consumer else "g"
    tail = f"\n  ROOT r = {out} {consumer}(g)" if consumer else ""
    return f"""HloModule g
ENTRY main {{
  x = {operand} parameter(0)
  i = {idx} parameter(1)
  {root} = {out} gather(x, i), {attrs}{tail}
}}
"""


TAKE_ROWS = "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}"


@pytest.mark.parametrize("itype", list(INDEX_TYPES))
def test_gather_rows_clamps_out_of_bounds_indices_of_every_integer_type(itype, rng):
    np_type = INDEX_TYPES[itype]
    i = indices(rng, (9,), -12, 20, np_type)
    if itype == "u64":   # past i64's range: clamps to the last row
        i[:3] = np.array([2**63, 2**64 - 1, 2**63 + 5], np.uint64)
    text = gather_module("f32[7,5]", f"{itype}[9]", "f32[9,5]", TAKE_ROWS)
    got = exact(text, rng, [data(rng, (7, 5)), i])
    assert got[0].shape == (9, 5)


@pytest.mark.parametrize("dtype,np_dtype", [("bf16", ml_dtypes.bfloat16), ("s16", np.int16), ("pred", np.bool_),
                                            ("f64", np.float64)])
def test_gather_element_types(dtype, np_dtype, rng):
    text = gather_module(f"{dtype}[7,5]", "s32[9]", f"{dtype}[9,5]", TAKE_ROWS)
    exact(text, rng, [data(rng, (7, 5), np_dtype), indices(rng, (9,), -3, 9)])


def test_gather_index_vector_in_the_middle_with_windows_on_several_dims(rng):
    # indices [3,2,4]: index vectors along dim 1 map to operand dims 2 and 0; slices 2x3x1
    # with dim 2 collapsed; batch dims (3,4) and window dims (2,3) interleave in the output.
    attrs = ("offset_dims={1,3}, collapsed_slice_dims={2}, start_index_map={2,0}, index_vector_dim=1, "
             "slice_sizes={2,3,1}")
    text = gather_module("f32[6,7,8]", "s32[3,2,4]", "f32[3,2,4,3]", attrs)
    exact(text, rng, [data(rng, (6, 7, 8)), indices(rng, (3, 2, 4), -4, 12)])


def test_gather_index_vector_first_and_no_collapsed_dims(rng):
    attrs = "offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={1,0}, index_vector_dim=0, slice_sizes={2,3}"
    text = gather_module("f32[5,6]", "s64[2,7]", "f32[7,2,3]", attrs)
    exact(text, rng, [data(rng, (5, 6)), indices(rng, (2, 7), -5, 9, np.int64)])


def test_gather_with_batching_dims(rng):
    # operand dim 0 is indexed by the position along indices dim 0 (vmap of a take)
    attrs = ("offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, "
             "start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,6}")
    text = gather_module("f32[4,5,6]", "s32[4,3,1]", "f32[4,3,6]", attrs)
    exact(text, rng, [data(rng, (4, 5, 6)), indices(rng, (4, 3, 1), -2, 7)])


def test_gather_slice_as_large_as_the_operand_starts_at_zero(rng):
    attrs = "offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={4,3}"
    text = gather_module("f32[4,3]", "s32[5,2]", "f32[5,4,3]", attrs)
    got = exact(text, rng, [data(rng, (4, 3)), indices(rng, (5, 2), -9, 9)])
    assert np.all(got[0] == got[0][:1])   # every start clamps to (0, 0)


@pytest.mark.parametrize("operand,idx,out,attrs", [
    ("f32[7,5]", "s32[0]", "f32[0,5]", TAKE_ROWS),   # no index vectors
    ("f32[7,0]", "s32[4]", "f32[4,0]",               # zero-size slices of a zero-size dimension
     "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,0}"),
    ("f32[1,5]", "s32[6]", "f32[6,5]",               # size-1 dimension: every index clamps to 0
     "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}"),
])
def test_gather_size_one_and_zero_size_dims(operand, idx, out, attrs, rng):
    module = parse_module(gather_module(operand, idx, out, attrs))
    shapes = [p.shape.dims for p in module.entry.parameters]
    exact(gather_module(operand, idx, out, attrs), rng, [data(rng, shapes[0]), indices(rng, shapes[1], -3, 8)])


def test_gather_fused_between_elementwise_ops_and_a_transposed_output(rng):
    text = f"""HloModule g
ENTRY main {{
  x = f32[7,5] parameter(0)
  i = s32[9] parameter(1)
  e = f32[7,5] exponential(x)
  g = f32[9,5] gather(e, i), {TAKE_ROWS}
  n = f32[9,5] negate(g)
  ROOT t = f32[5,9]{{0,1}} transpose(n), dimensions={{1,0}}
}}
"""
    executable = get_backend("cpu").compile(parse_module(text))
    fused = [i for i in executable.module.entry.instructions if i.opcode == "fusion"]
    assert any(any(f.opcode == "gather" for f in i.attrs["calls"].instructions) for i in fused)
    assert_cpu_matches_interpreter(text, rng, [data(rng, (7, 5)), indices(rng, (9,), -4, 11)], rtol=2e-6, atol=0)


# --- dynamic-slice ---------------------------------------------------------------------------------

@pytest.mark.parametrize("itype", list(INDEX_TYPES))
def test_dynamic_slice_fused_clamps_starts_of_every_integer_type(itype, rng):
    text = f"""HloModule d
ENTRY main {{
  x = f32[6,7] parameter(0)
  i = {itype}[] parameter(1)
  j = {itype}[] parameter(2)
  d = f32[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={{2,3}}
  ROOT n = f32[2,3] negate(d)
}}
"""
    np_type = INDEX_TYPES[itype]
    for _ in range(4):
        starts = scalar_starts(rng, 2, -9, 12, np_type)
        if itype == "u64" and rng.random() < 0.5:   # past i64's range: the last position
            starts[0] = np.asarray(np.uint64(2**63 + int(rng.integers(0, 2**62))))
        exact(text, rng, [data(rng, (6, 7))] + starts)


# --- scatter ---------------------------------------------------------------------------------------

COMBINERS = {"add": "add(a, b)", "max": "maximum(a, b)", "mul": "multiply(a, b)"}


def combiner(name: str, t: str, kind: str) -> str:
    """A scatter combiner: "set" returns the update, the others combine old and new."""
    if kind == "set":
        return f"""{name} {{
  a = {t}[] parameter(0)
  ROOT b = {t}[] parameter(1)
}}
"""
    return f"""{name} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {COMBINERS[kind]}
}}
"""


def scatter_module(operand: str, idx: str, updates: str, attrs: str, kind: str = "add") -> str:
    t = operand.split("[")[0]
    return f"""HloModule s
{combiner("comb", t, kind)}
ENTRY main {{
  x = {operand} parameter(0)
  i = {idx} parameter(1)
  u = {updates} parameter(2)
  ROOT s = {operand} scatter(x, i, u), {attrs}, to_apply=comb
}}
"""


ROWS = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1"


@pytest.mark.parametrize("kind", ["add", "set", "max", "mul"])
def test_scatter_rows_with_duplicates_applies_them_in_order(kind, rng):
    i = indices(rng, (12,), -3, 8)
    i[:4] = [2, 2, 5, 2]   # certainly duplicates
    x, u = data(rng, (6, 4)), data(rng, (12, 4))
    got = exact(scatter_module("f32[6,4]", "s32[12]", "f32[12,4]", ROWS, kind), rng, [x, i, u])
    if kind == "set":   # the last update of a row wins
        inside = (i >= 0) & (i < 6)
        last = {int(r): k for k, r in enumerate(i) if inside[k]}
        for r, k in last.items():
            np.testing.assert_array_equal(got[0][r], u[k])


@pytest.mark.parametrize("itype", list(INDEX_TYPES))
def test_scatter_skips_out_of_bounds_windows_for_every_index_type(itype, rng):
    np_type = INDEX_TYPES[itype]
    i = indices(rng, (10, 1), -4, 9, np_type)
    if itype == "u64":
        i[:2, 0] = np.array([2**63 + 1, 2**64 - 1], np.uint64)
    text = scatter_module("s32[6,4]", f"{itype}[10,1]", "s32[10,4]", ROWS, "add")
    exact(text, rng, [data(rng, (6, 4), np.int32), i, data(rng, (10, 4), np.int32)])


def test_scatter_partial_windows_that_would_overflow_are_skipped_whole(rng):
    # windows of 3x2 at (row, col) starts: a start near an edge puts part of the window outside
    attrs = "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1"
    i = indices(rng, (20, 2), -2, 6)
    exact(scatter_module("f32[5,6]", "s32[20,2]", "f32[20,3,2]", attrs), rng,
          [data(rng, (5, 6)), i, data(rng, (20, 3, 2))])


def test_scatter_index_vector_first_and_window_between_scatter_dims(rng):
    attrs = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=0"
    text = scatter_module("f32[6,4]", "s32[1,3,5]", "f32[3,4,5]", attrs)
    exact(text, rng, [data(rng, (6, 4)), indices(rng, (1, 3, 5), -1, 6), data(rng, (3, 4, 5))])


def test_scatter_with_batching_dims(rng):
    attrs = ("update_window_dims={2}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, "
             "input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2")
    text = scatter_module("f32[4,5,6]", "s32[4,7,1]", "f32[4,7,6]", attrs)
    exact(text, rng, [data(rng, (4, 5, 6)), indices(rng, (4, 7, 1), -1, 5), data(rng, (4, 7, 6))])


@pytest.mark.parametrize("operand,idx,updates", [
    ("f32[6,4]", "s32[0]", "f32[0,4]"),    # no updates: the operand
    ("f32[0,4]", "s32[3]", "f32[3,4]"),    # an empty operand: nothing fits
    ("f32[1,4]", "s32[5]", "f32[5,4]"),    # size-1 dimension: only index 0 fits
])
def test_scatter_size_one_and_zero_size_dims(operand, idx, updates, rng):
    text = scatter_module(operand, idx, updates, ROWS)
    shapes = [p.shape.dims for p in parse_module(text).entry.parameters]
    exact(text, rng, [data(rng, shapes[0]), indices(rng, shapes[1], -1, 2), data(rng, shapes[2])])


def test_variadic_scatter_combines_both_inputs_with_one_combiner(rng):
    # keeps, per row, the (value, index) pair of the largest value seen: an argmax scatter
    text = f"""HloModule s
comb {{
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(b, a), direction=GT
  v = f32[] select(gt, b, a)
  k = s32[] select(gt, bi, ai)
  ROOT r = (f32[], s32[]) tuple(v, k)
}}
ENTRY main {{
  x = f32[6,3] parameter(0)
  xi = s32[6,3] parameter(1)
  i = s32[9] parameter(2)
  u = f32[9,3] parameter(3)
  ui = s32[9,3] parameter(4)
  ROOT s = (f32[6,3], s32[6,3]) scatter(x, xi, i, u, ui), {ROWS}, to_apply=comb
}}
"""
    exact(text, rng, [data(rng, (6, 3)), data(rng, (6, 3), np.int32), indices(rng, (9,), -2, 7),
                      data(rng, (9, 3)), data(rng, (9, 3), np.int32)])


def test_scatter_into_a_non_default_layout(rng):
    text = scatter_module("f32[6,4]{0,1}", "s32[12]", "f32[12,4]", ROWS)
    exact(text, rng, [data(rng, (6, 4)), indices(rng, (12,), -2, 7), data(rng, (12, 4))])


def test_fusion_whose_root_is_a_scatter_computes_its_fused_operands(rng):
    # XLA's wrapped_scatter, with the operand, indices and updates computed inside the fusion
    text = f"""HloModule s
comb {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
fused {{
  p0 = f32[6,4] parameter(0)
  p1 = s32[10] parameter(1)
  p2 = f32[10,4] parameter(2)
  x = f32[6,4] exponential(p0)
  one = s32[] constant(1)
  ones = s32[10] broadcast(one), dimensions={{}}
  i = s32[10] subtract(p1, ones)
  u = f32[10,4] negate(p2)
  ROOT s = f32[6,4] scatter(x, i, u), {ROWS}, to_apply=comb
}}
ENTRY main {{
  q0 = f32[6,4] parameter(0)
  q1 = s32[10] parameter(1)
  q2 = f32[10,4] parameter(2)
  ROOT f = f32[6,4] fusion(q0, q1, q2), kind=kLoop, calls=fused
}}
"""
    got = assert_cpu_matches_interpreter(text, rng, [data(rng, (6, 4)), indices(rng, (10,), -1, 8),
                                                     data(rng, (10, 4))], rtol=1e-6, atol=1e-6)
    assert got[0].shape == (6, 4)


# --- dynamic-update-slice ---------------------------------------------------------------------------

def dus_module(operand: str, update: str, itype: str = "s32") -> str:
    rank = operand.split("[")[1].split("]")[0].count(",") + 1
    starts = "\n".join(f"  i{d} = {itype}[] parameter({2 + d})" for d in range(rank))
    names = ", ".join(f"i{d}" for d in range(rank))
    return f"""HloModule d
ENTRY main {{
  x = {operand} parameter(0)
  u = {update} parameter(1)
{starts}
  ROOT r = {operand} dynamic-update-slice(x, u, {names})
}}
"""


@pytest.mark.parametrize("itype", list(INDEX_TYPES))
def test_dynamic_update_slice_clamps_starts_of_every_integer_type(itype, rng):
    np_type = INDEX_TYPES[itype]
    for _ in range(4):   # several start pairs: inside, negative, past the end
        starts = scalar_starts(rng, 2, -9, 12, np_type)
        if itype == "u64" and rng.random() < 0.5:
            starts[0] = np.asarray(np.uint64(2**64 - 3))
        exact(dus_module("f32[6,7]", "f32[2,3]", itype), rng, [data(rng, (6, 7)), data(rng, (2, 3))] + starts)


@pytest.mark.parametrize("operand,update", [
    ("f32[6,7]", "f32[6,7]"),          # the whole operand
    ("f32[6,7]", "f32[0,3]"),          # nothing
    ("f32[1,7]", "f32[1,2]"),          # a size-1 dimension
    ("s8[3,4,5]", "s8[2,1,5]"),
    ("bf16[4,9]", "bf16[3,4]"),
    ("f32[5,6]{0,1}", "f32[2,3]"),     # a non-default layout
])
def test_dynamic_update_slice_shapes_and_types(operand, update, rng):
    text = dus_module(operand, update)
    params = parse_module(text).entry.parameters
    x, u = (data(rng, p.shape.dims, p.shape.dtype.np_dtype) for p in params[:2])
    exact(text, rng, [x, u] + scalar_starts(rng, len(params) - 2, -3, 8))


def test_fusion_whose_root_is_a_dynamic_update_slice_computes_its_fused_operands(rng):
    # XLA's select_dynamic-update-slice_fusion: the starts wrap negatives, the update is scaled
    text = """HloModule d
fused {
  p0 = f32[6,7] parameter(0)
  p1 = f32[2,3] parameter(1)
  p2 = s32[] parameter(2)
  zero = s32[] constant(0)
  six = s32[] constant(6)
  neg = pred[] compare(p2, zero), direction=LT
  wrapped = s32[] add(p2, six)
  start = s32[] select(neg, wrapped, p2)
  two = f32[] constant(2)
  twos = f32[2,3] broadcast(two), dimensions={}
  u = f32[2,3] multiply(p1, twos)
  x = f32[6,7] negate(p0)
  ROOT d = f32[6,7] dynamic-update-slice(x, u, start, p2)
}
ENTRY main {
  a = f32[6,7] parameter(0)
  b = f32[2,3] parameter(1)
  c = s32[] parameter(2)
  ROOT f = f32[6,7] fusion(a, b, c), kind=kLoop, calls=fused
}
"""
    for _ in range(3):
        exact(text, rng, [data(rng, (6, 7)), data(rng, (2, 3))] + scalar_starts(rng, 1, -8, 8))


def test_dynamic_update_slice_writes_in_place_when_buffer_assignment_aliases_it(rng, monkeypatch):
    """Buffer assignment does not alias a dynamic-update-slice with its operand today; with a
    plan that does, the kernel must update the shared buffer without copying it first."""
    plain = buffer_assignment._can_write_in_place

    def aliasing(instr, operand):
        if instr.opcode == "dynamic-update-slice":
            return instr.operands[0] is operand and instr.shape.dims == operand.shape.dims
        return plain(instr, operand)

    monkeypatch.setattr(buffer_assignment, "_can_write_in_place", aliasing)
    text = """HloModule d
ENTRY main {
  x = f32[64,32] parameter(0)
  u = f32[3,32] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  e = f32[64,32] exponential(x)
  d = f32[64,32] dynamic-update-slice(e, u, i, j)
  ROOT n = f32[64,32] negate(d)
}
"""
    compiled = compile_module(parse_module(text))
    dus = next(i for i in compiled.module.entry.instructions if i.opcode == "dynamic-update-slice")
    assert compiled.buffers.of(dus) is compiled.buffers.of(dus.operands[0]), "the test needs the aliased plan"
    ir_text = ModuleCodegen(compiled.module, compiled.buffers).emit()
    kernel = ir_text[ir_text.index(f'@"kernel.{dus.name}"('):]
    kernel = kernel[:kernel.index("\n}")]
    assert "memcpy" not in kernel
    for _ in range(3):
        assert_cpu_matches_interpreter(text, rng, [data(rng, (64, 32)), data(rng, (3, 32))]
                                       + scalar_starts(rng, 2, -5, 70), rtol=1e-6, atol=0)


# --- the Sharding custom-call -----------------------------------------------------------------------

@pytest.mark.parametrize("out_layout", ["{1,0}", "{0,1}"])
def test_sharding_custom_call_passes_its_operand_through(out_layout, rng):
    text = f"""HloModule c
ENTRY main {{
  x = f32[5,7] parameter(0)
  m = f32[5,7] multiply(x, x)
  s = f32[5,7]{out_layout} custom-call(m), custom_call_target="Sharding", sharding={{replicated}}
  ROOT n = f32[5,7] negate(s)
}}
"""
    exact(text, rng, [data(rng, (5, 7))])
