"""The GPU backend's kernels for ops that do not write element by element (sort, top-k,
dynamic-update-slice, scatter, select-and-scatter) and host-driven control flow (while,
conditional), through gpu-sim on odd sizes, against NumPy (float64 where values are
computed; exact where they are moved)."""
import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.hlo import parse_module

SIZES = [1, 31, 33, 1025]


def run(text: str, inputs: list) -> list:
    return get_backend("gpu-sim").compile(parse_module(text)).run_flat(inputs)


@pytest.mark.parametrize("rows,n", [(1, 1), (3, 31), (2, 33), (1, 1025), (33, 5)])
def test_sort_rows_with_payload_is_stable(rows, n, rng):
    text = f"""HloModule m
lt {{
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT
}}
ENTRY e {{
  k = s32[{rows},{n}] parameter(0)
  v = s32[{rows},{n}] iota(), iota_dimension=1
  ROOT s = (s32[{rows},{n}], s32[{rows},{n}]) sort(k, v), dimensions={{1}}, to_apply=lt
}}
"""
    keys = rng.integers(0, 5, (rows, n)).astype(np.int32)   # many ties: stability shows
    got_keys, got_order = run(text, [keys])
    order = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(got_order, order)
    np.testing.assert_array_equal(got_keys, np.take_along_axis(keys, order, 1))


@pytest.mark.parametrize("n", SIZES)
def test_sort_along_the_major_dimension(n, rng):
    text = f"""HloModule m
gt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GT
}}
ENTRY e {{
  x = f32[{n},3] parameter(0)
  ROOT s = f32[{n},3] sort(x), dimensions={{0}}, to_apply=gt
}}
"""
    x = rng.standard_normal((n, 3)).astype(np.float32)
    (got,) = run(text, [x])
    np.testing.assert_array_equal(got, -np.sort(-x, axis=0))


@pytest.mark.parametrize("n,k", [(1, 1), (31, 4), (33, 33), (1025, 7)])
def test_topk(n, k, rng):
    text = f"""HloModule m
ENTRY e {{
  x = f32[3,{n}] parameter(0)
  ROOT t = (f32[3,{k}], s32[3,{k}]) topk(x), k={k}, largest=true
}}
"""
    x = rng.integers(-4, 4, (3, n)).astype(np.float32)   # ties go to the lower index
    values, where = run(text, [x])
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(where, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))


@pytest.mark.parametrize("n", [31, 33, 1025])
def test_dynamic_update_slice_clamps_its_start(n, rng):
    text = f"""HloModule m
ENTRY e {{
  x = f32[{n},3] parameter(0)
  u = f32[5,2] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = f32[{n},3] dynamic-update-slice(x, u, i, j)
}}
"""
    x = rng.standard_normal((n, 3)).astype(np.float32)
    u = rng.standard_normal((5, 2)).astype(np.float32)
    for i, j in [(0, 0), (n - 2, 1), (-3, 7)]:
        (got,) = run(text, [x, u, np.int32(i), np.int32(j)])
        want = x.copy()
        ci, cj = min(max(i, 0), n - 5), min(max(j, 0), 1)
        want[ci:ci + 5, cj:cj + 2] = u
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n,m", [(1, 1), (31, 33), (33, 1025)])
def test_scatter_add_with_duplicates_and_outside_indices(n, m, rng):
    text = f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{n},4] parameter(0)
  i = s32[{m},1] parameter(1)
  u = f32[{m},4] parameter(2)
  ROOT s = f32[{n},4] scatter(x, i, u), update_window_dims={{1}}, inserted_window_dims={{0}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
"""
    x = rng.standard_normal((n, 4)).astype(np.float32)
    idx = rng.integers(-2, n + 2, (m, 1)).astype(np.int32)
    u = rng.standard_normal((m, 4)).astype(np.float32)
    (got,) = run(text, [x, idx, u])
    want = x.astype(np.float64)
    for r, row in zip(idx[:, 0], u):
        if 0 <= r < n:
            want[r] += row
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("h,w", [(2, 2), (6, 33), (32, 31)])
def test_select_and_scatter_max_pool_gradient(h, w, rng):
    oh, ow = (h - 2) // 2 + 1, (w - 2) // 2 + 1
    text = f"""HloModule m
ge {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{h},{w}] parameter(0)
  g = f32[{oh},{ow}] parameter(1)
  z = f32[] constant(0)
  ROOT s = f32[{h},{w}] select-and-scatter(x, g, z), window={{size=2x2 stride=2x2}}, select=ge, scatter=add
}}
"""
    x = rng.standard_normal((h, w)).astype(np.float32)
    g = rng.standard_normal((oh, ow)).astype(np.float32)
    (got,) = run(text, [x, g])
    want = np.zeros((h, w))
    for i in range(oh):
        for j in range(ow):
            win = x[2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, c = np.unravel_index(np.argmax(win), win.shape)   # first maximum, row-major
            want[2 * i + a, 2 * j + c] += g[i, j]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_while_loop_runs_on_the_host_with_device_bodies(rng):
    text = """HloModule m
cond {
  p = (s32[], f32[33]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(7)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[33]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[33] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[33] multiply(x, x)
  h = f32[] constant(0.5)
  hb = f32[33] broadcast(h), dimensions={}
  z = f32[33] multiply(y, hb)
  q = f32[] constant(0.25)
  qb = f32[33] broadcast(q), dimensions={}
  r = f32[33] add(z, qb)
  ROOT t = (s32[], f32[33]) tuple(j, r)
}
ENTRY e {
  x = f32[33] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[33]) tuple(zero, x)
  w = (s32[], f32[33]) while(t), condition=cond, body=body
  ROOT r = f32[33] get-tuple-element(w), index=1
}
"""
    x = rng.uniform(0.5, 1.5, 33).astype(np.float32)
    (got,) = run(text, [x])
    want = x.astype(np.float64)
    for _ in range(7):
        want = want * want * 0.5 + 0.25
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("index,branch", [(0, "neg"), (1, "exp"), (5, "exp")])
def test_conditional_picks_its_branch_on_the_host(index, branch, rng):
    text = """HloModule m
neg {
  p = f32[31] parameter(0)
  ROOT n = f32[31] negate(p)
}
exp {
  p = f32[31] parameter(0)
  ROOT n = f32[31] exponential(p)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[31] parameter(1)
  ROOT c = f32[31] conditional(i, x, x), branch_computations={neg, exp}
}
"""
    x = rng.standard_normal(31).astype(np.float32)
    (got,) = run(text, [np.int32(index), x])
    want = -x.astype(np.float64) if branch == "neg" else np.exp(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("n,bitonic", [(1025, True), (3000, False)])
def test_sort_forms_agree_with_a_stable_sort(n, bitonic, rng):
    """Rows that fit shared memory sort by a bitonic network, longer ones by insertion."""
    from pyxla.backends.gpu import kernel_ir
    from pyxla.backends.gpu.simt import Barrier
    from pyxla.compiler import compile_module
    text = f"""HloModule m
lt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}}
ENTRY e {{
  x = f32[2,{n}] parameter(0)
  ROOT s = f32[2,{n}] sort(x), dimensions={{1}}, to_apply=lt
}}
"""
    (spec,) = kernel_ir(compile_module(parse_module(text)), "host")[1]
    assert any(isinstance(s, Barrier) for s in spec.launches[0].steps) == bitonic
    x = rng.integers(-20, 20, (2, n)).astype(np.float32)
    (got,) = run(text, [x])
    np.testing.assert_array_equal(got, np.sort(x, axis=1))
