"""The CPU code generator's structure: kernels whose reductions and outputs do not share rows
(computed apart, through kernel scratch), the memory plan of called computations, the one
entry function, and refusals."""
import numpy as np
import pytest

from pyxla.backends.cpu.codegen import ModuleCodegen
from pyxla.backends.cpu.control_flow import CONTROL_FLOW, VIEWS
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module

from .differential import assert_cpu_matches_interpreter

REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  v = f32[] select(gt, v1, v0)
  i = s32[] select(gt, i1, i0)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
"""


def layer_norm_with_bitcast_output(rows: int, cols: int) -> str:
    """XLA's layer norm: rows [1, R] reduced, the output a bitcast to [R, C]."""
    return f"""HloModule layer_norm
{REDUCERS}
fused {{
  x = f32[1,{rows},{cols}] parameter(0)
  zero = f32[] constant(0)
  sum = f32[1,{rows}] reduce(x, zero), dimensions={{2}}, to_apply=add
  inv = f32[] constant({1.0 / cols})
  invs = f32[1,{rows}] broadcast(inv), dimensions={{}}
  mean = f32[1,{rows}] multiply(sum, invs)
  means = f32[1,{rows},{cols}] broadcast(mean), dimensions={{0,1}}
  centered = f32[1,{rows},{cols}] subtract(x, means)
  squares = f32[1,{rows},{cols}] multiply(centered, centered)
  sum2 = f32[1,{rows}] reduce(squares, zero), dimensions={{2}}, to_apply=add
  var = f32[1,{rows}] multiply(sum2, invs)
  eps = f32[] constant(1e-5)
  epss = f32[1,{rows}] broadcast(eps), dimensions={{}}
  shifted = f32[1,{rows}] add(var, epss)
  r = f32[1,{rows}] rsqrt(shifted)
  rs = f32[1,{rows},{cols}] broadcast(r), dimensions={{0,1}}
  y = f32[1,{rows},{cols}] multiply(centered, rs)
  ROOT out = f32[{rows},{cols}] bitcast(y)
}}
ENTRY main {{
  input = f32[1,{rows},{cols}] parameter(0)
  ROOT f = f32[{rows},{cols}] fusion(input), kind=kInput, calls=fused
}}
"""


def test_reductions_apart_from_an_output_laid_out_otherwise(rng):
    rows, cols = (int(n) for n in rng.integers(2, 40, 2))
    text = layer_norm_with_bitcast_output(rows, cols)
    (got,) = assert_cpu_matches_interpreter(text, rng, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.mean(axis=1), 0, atol=1e-4)   # normalised rows


def test_reductions_over_different_rows_in_one_kernel(rng):
    rows, cols = (int(n) for n in rng.integers(2, 30, 2))
    text = f"""HloModule different_rows
{REDUCERS}
fused {{
  x = f32[{rows},{cols}] parameter(0)
  zero = f32[] constant(0)
  by_row = f32[{rows}] reduce(x, zero), dimensions={{1}}, to_apply=add
  by_column = f32[{cols}] reduce(x, zero), dimensions={{0}}, to_apply=add
  rb = f32[{rows},{cols}] broadcast(by_row), dimensions={{0}}
  cb = f32[{rows},{cols}] broadcast(by_column), dimensions={{1}}
  sum = f32[{rows},{cols}] add(rb, cb)
  centered = f32[{rows},{cols}] subtract(x, sum)
  transposed = f32[{cols},{rows}] transpose(centered), dimensions={{1,0}}
  ROOT outputs = (f32[{rows},{cols}], f32[{cols},{rows}], f32[{cols}]) tuple(sum, transposed, by_column)
}}
ENTRY main {{
  input = f32[{rows},{cols}] parameter(0)
  ROOT f = (f32[{rows},{cols}], f32[{cols},{rows}], f32[{cols}]) fusion(input), kind=kInput, calls=fused
}}
"""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    total, transposed, by_column = assert_cpu_matches_interpreter(text, rng, [x], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, x.sum(1, keepdims=True) + x.sum(0), rtol=1e-4, atol=1e-4)


def test_variadic_reduction_apart(rng):
    """An argmax whose rows [R] reach the output only through a bitcast to [1, R]."""
    rows, cols = (int(n) for n in rng.integers(2, 30, 2))
    text = f"""HloModule argmax_apart
{REDUCERS}
fused {{
  x = f32[{rows},{cols}] parameter(0)
  iota = s32[{rows},{cols}] iota(), iota_dimension=1
  low = f32[] constant(-inf)
  zero = s32[] constant(0)
  best = (f32[{rows}], s32[{rows}]) reduce(x, iota, low, zero), dimensions={{1}}, to_apply=argmax
  where = s32[{rows}] get-tuple-element(best), index=1
  ROOT out = s32[1,{rows}] bitcast(where)
}}
ENTRY main {{
  input = f32[{rows},{cols}] parameter(0)
  ROOT f = s32[1,{rows}] fusion(input), kind=kInput, calls=fused
}}
"""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    (got,) = assert_cpu_matches_interpreter(text, rng, [x])
    np.testing.assert_array_equal(got[0], x.argmax(axis=1))


def compiled_codegen(text: str) -> ModuleCodegen:
    module = parse_module(text)
    module.uniquify_names()
    compiled = compile_module(module, optimize=False)
    return ModuleCodegen(compiled.module, compiled.buffers)


SWAPPING_LOOP = """HloModule swapping_loop
body {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[16] get-tuple-element(p), index=1
  b = f32[16] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  e = f32[16] exponential(a)
  s = f32[16] sine(e)
  ROOT t = (s32[], f32[16], f32[16]) tuple(i1, b, s)
}
cond {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
branch {
  x = f32[16] parameter(0)
  y = f32[16] cosine(x)
  ROOT z = f32[16] exponential(y)
}
ENTRY main {
  which = s32[] parameter(0)
  x = f32[16] parameter(1)
  e = f32[16] exponential(x)
  zero = s32[] constant(0)
  init = (s32[], f32[16], f32[16]) tuple(zero, x, e)
  loop = (s32[], f32[16], f32[16]) while(init), condition=cond, body=body
  a = f32[16] get-tuple-element(loop), index=1
  ROOT c = f32[16] conditional(which, a, x), branch_computations={branch, branch}
}
"""


def test_called_computations_have_disjoint_regions_after_the_entry_temps():
    codegen = compiled_codegen(SWAPPING_LOOP)
    codegen.emit()
    entry = codegen.hlo.entry
    spans = []
    for memory in codegen.memory.computations.values():
        if memory.computation is entry:
            continue
        assignment = memory.buffers
        if assignment.arena_size:
            spans.append((memory.base, memory.base + assignment.arena_size))
        outputs = {id(b): b for b in assignment.buffers}
        spans += [(at, at + outputs[key].size) for key, at in memory.output_offsets.items() if outputs[key].size]
        spans += [(at, at + 16 * 4) for at in memory.staging.values()]
    assert len(codegen.memory.computations) == 4   # entry, cond, body, branch (once, though run by two branches)
    body = next(m for m in codegen.memory.computations.values() if m.computation.name.startswith("body"))
    assert list(body.staging) == [1]   # b moves from element 2 to element 1
    spans.sort()
    assert spans[0][0] >= codegen.entry_buffers.arena_size
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start
    assert spans[-1][1] <= codegen.scratch_offset <= codegen.arena_size


def test_one_entry_function_and_each_kernel_once():
    """Control flow is code inside `entry` (one foreign call per execution), and a computation
    run from two places (both branches) has its kernels emitted once."""
    codegen = compiled_codegen(SWAPPING_LOOP)
    codegen.emit()
    defined = [f for f in codegen.ir.functions if not f.is_declaration]
    assert [f.name for f in defined if f.linkage != "internal"] == ["entry"]
    kernels = [f.name for f in defined if f.name.startswith("kernel.")]
    computing = [i for c in codegen.hlo.computations if id(c) in codegen.memory.computations
                 for i in c.instructions if i.opcode not in VIEWS and i.opcode not in CONTROL_FLOW]
    assert sorted(kernels) == sorted(f"kernel.{i.name}" for i in computing)


def test_a_tuple_entry_parameter_is_refused_by_name():
    text = """HloModule tuple_parameter
ENTRY main {
  p = (f32[2], f32[2]) parameter(0)
  a = f32[2] get-tuple-element(p), index=0
  b = f32[2] get-tuple-element(p), index=1
  ROOT s = f32[2] add(a, b)
}
"""
    with pytest.raises(NotImplementedError, match="the CPU backend cannot take a tuple-shaped ENTRY parameter"):
        compiled_codegen(text)


REPEATED_LAYERS = """HloModule repeated_layers
ENTRY main {
  x = f32[64,33] parameter(0)
  y = f32[64,33] parameter(1)
  z = f32[64,33] parameter(2)
  two = f32[] constant(2)
  three = f32[] constant(3)
  twos = f32[64,33] broadcast(two), dimensions={}
  threes = f32[64,33] broadcast(three), dimensions={}
  t = f32[64,33] tanh(x)
  a = f32[64,33] multiply(t, twos)
  u = f32[64,33] tanh(y)
  b = f32[64,33] multiply(u, twos)
  v = f32[64,33] tanh(z)
  c = f32[64,33] multiply(v, threes)
  ROOT r = (f32[64,33], f32[64,33], f32[64,33]) tuple(a, b, c)
}
"""


def test_kernels_with_the_same_code_are_emitted_once(rng):
    """Two fusions that compute the same thing on different buffers share one kernel function
    (LLVM optimises it once); a fusion that differs in a constant gets its own."""
    codegen = compiled_codegen(REPEATED_LAYERS)
    codegen.emit()
    fusions = [i for i in codegen.hlo.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 3
    kernels = [f for f in codegen.ir.functions if not f.is_declaration and f.name.startswith("kernel.")]
    assert len(kernels) == 2
    assert len({id(codegen.kernels[id(f)]) for f in fusions}) == 2
    assert_cpu_matches_interpreter(REPEATED_LAYERS, rng)
