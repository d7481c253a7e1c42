"""Fusion decisions: the kernel counts that matter, values unchanged, reasons logged."""
import numpy as np
import pytest

from pyxla.fusion.instruction_fusion import fusion_pass, kernels
from pyxla.fusion.policy import FusionPolicy
from pyxla.hlo import parse_module, verify_module
from pyxla.passes.pipeline import run_pipeline

from ..passes.hlo_checks import assert_same_values, random_arguments
from . import programs
from .programs import ARGMAX_REDUCER


def fused(text: str, policy: FusionPolicy | None = None):
    module = parse_module(text)
    run_pipeline(module)
    fusion_pass(policy)(module)
    verify_module(module)
    return module


@pytest.mark.parametrize("name,text,most", [
    ("sum(x + y*z)", programs.SUM_OF_FMA, 1),
    ("tanh GELU", programs.GELU_TANH, 1),
    ("softmax", programs.SOFTMAX, 2),
    ("layer norm", programs.LAYER_NORM, 2),
    ("dense + bias + relu", programs.DENSE_RELU, 1),
])
def test_kernel_counts(name, text, most, rng):
    module = fused(text)
    ks = kernels(module.entry)
    assert len(ks) <= most, [f"{k.opcode}:{k.attrs.get('kind')}" for k in ks]
    assert_same_values(parse_module(text), module, rng, rtol=1e-5)


def test_kinds():
    assert fused(programs.SUM_OF_FMA).entry.root.attrs["kind"] == "kInput"
    assert fused(programs.GELU_TANH).entry.root.attrs["kind"] == "kLoop"
    assert fused(programs.DENSE_RELU).entry.root.attrs["kind"] == "kOutput"


def test_without_output_fusion_the_dot_stays_apart(rng):
    module = fused(programs.DENSE_RELU, FusionPolicy(output_fusion=False))
    opcodes = sorted(k.opcode for k in kernels(module.entry))
    assert opcodes == ["dot", "fusion"]
    assert_same_values(parse_module(programs.DENSE_RELU), module, rng, rtol=1e-5)


def test_expensive_producer_with_two_users_is_not_duplicated():
    text = """
HloModule shared_exp
ENTRY main {
  x = f32[8] parameter(0)
  e = f32[8] exponential(x)
  a = f32[8] negate(e)
  b = f32[8] abs(e)
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
"""
    module = fused(text)
    exps = [i for c in module.computations for i in c.instructions if i.opcode == "exponential"]
    assert len(exps) == 1
    assert any("expensive exponential has 2 users" in line for line in module.fusion_log)


def test_an_expensive_op_is_not_recomputed_through_elementwise_ops_then_a_broadcast(rng):
    """A batch norm's per-channel factor rsqrt(var + eps) * gamma, broadcast over a
    convolution's output: the rsqrt is a kernel of its own, not computed per output element."""
    text = """
HloModule bn_epilogue
ENTRY main {
  x = f32[2,6,6,3] parameter(0)
  w = f32[3,3,3,4] parameter(1)
  var = f32[4] parameter(2)
  gamma = f32[4] parameter(3)
  conv = f32[2,6,6,4] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  eps = f32[] constant(1e-05)
  eps4 = f32[4] broadcast(eps), dimensions={}
  shifted = f32[4] add(var, eps4)
  r = f32[4] rsqrt(shifted)
  scale = f32[4] multiply(r, gamma)
  spread = f32[2,6,6,4] broadcast(scale), dimensions={3}
  ROOT y = f32[2,6,6,4] multiply(conv, spread)
}
"""
    module = fused(text)
    output = next(k for k in kernels(module.entry) if k.attrs.get("kind") == "kOutput")
    assert "rsqrt" not in [i.opcode for i in output.attrs["calls"].instructions]
    assert any("rsqrt would be recomputed" in line for line in module.fusion_log)

    def positive_variance(m, rng):
        args = random_arguments(m, rng)
        args[2] = np.abs(args[2]) + np.float32(0.5)
        return args
    assert_same_values(parse_module(text), module, rng, rtol=1e-5, make_args=positive_variance)


def test_cheap_producer_is_duplicated_into_its_consumers():
    text = """
HloModule shared_add
ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  s = f32[8] add(x, y)
  a = f32[8] exponential(s)
  b = f32[8] tanh(s)
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
"""
    module = fused(text)
    assert [k.opcode for k in kernels(module.entry)] == ["fusion", "fusion"]
    adds = [i for c in module.computations for i in c.instructions if i.opcode == "add"]
    assert len(adds) == 2


def test_a_broadcast_is_duplicated_into_any_number_of_consumers(rng):
    """A shared scale broadcast over a feature map (batch norms whose constants CSE made one)
    is an index computation in each consumer, never a full-size buffer of its own."""
    consumers = "\n".join(f"  c{i} = f32[2,16,5,5] multiply(x{i}, s)" for i in range(6))
    text = f"""
HloModule shared_scale
ENTRY main {{
  p = f32[16] parameter(0)
{chr(10).join(f"  x{i} = f32[2,16,5,5] parameter({i + 1})" for i in range(6))}
  s = f32[2,16,5,5] broadcast(p), dimensions={{1}}
{consumers}
  ROOT t = (f32[2,16,5,5], f32[2,16,5,5], f32[2,16,5,5], f32[2,16,5,5], f32[2,16,5,5], f32[2,16,5,5]) tuple(c0, c1, c2, c3, c4, c5)
}}
"""
    module = fused(text)
    assert len(kernels(module.entry)) == 6
    assert all(k.opcode == "fusion" and "broadcast" in {i.opcode for i in k.attrs["calls"].instructions}
               for k in kernels(module.entry))
    assert_same_values(parse_module(text), module, rng, rtol=1e-6)


def test_a_residual_stream_is_computed_once(rng):
    """Each value of the stream feeds a convolution (which reads it from memory) and the
    next add: fused into the add's kernel it would be computed again there, and with it
    every value before it."""
    text = """
HloModule residual
ENTRY main {
  x = f32[1,6,6,8] parameter(0)
  w = f32[3,3,8,8] parameter(1)
  zero = f32[] constant(0)
  z = f32[1,6,6,8] broadcast(zero), dimensions={}
  c1 = f32[1,6,6,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  a1 = f32[1,6,6,8] add(x, c1)
  r1 = f32[1,6,6,8] maximum(a1, z)
  c2 = f32[1,6,6,8] convolution(r1, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  a2 = f32[1,6,6,8] add(r1, c2)
  r2 = f32[1,6,6,8] maximum(a2, z)
  c3 = f32[1,6,6,8] convolution(r2, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  a3 = f32[1,6,6,8] add(r2, c3)
  ROOT r3 = f32[1,6,6,8] maximum(a3, z)
}
"""
    module = fused(text)
    adds = [i for c in module.computations for i in c.instructions if i.opcode == "add"]
    assert len(adds) == 3
    assert any("written to memory for" in line for line in module.fusion_log)
    assert_same_values(parse_module(text), module, rng, rtol=1e-5)


def _pre_norm_stream(layers: int) -> str:
    """A pre-LN transformer's residual stream: each sum is read by the next layer norm's
    kernels (mean, variance, normalise) and by the next sum; the layers' outputs come as
    parameters (dots in a real model)."""
    lines = ["  x0 = f32[4,32] parameter(0)", "  zero = f32[] constant(0)",
             "  n = f32[] constant(32)", "  nb = f32[4] broadcast(n), dimensions={}"]
    for i in range(1, layers + 1):
        p = i - 1
        lines += [f"  s{p} = f32[4] reduce(x{p}, zero), dimensions={{1}}, to_apply=add",
                  f"  m{p} = f32[4] divide(s{p}, nb)",
                  f"  mb{p} = f32[4,32] broadcast(m{p}), dimensions={{0}}",
                  f"  c{p} = f32[4,32] subtract(x{p}, mb{p})",
                  f"  q{p} = f32[4,32] multiply(c{p}, c{p})",
                  f"  v{p} = f32[4] reduce(q{p}, zero), dimensions={{1}}, to_apply=add",
                  f"  vb{p} = f32[4,32] broadcast(v{p}), dimensions={{0}}",
                  f"  y{p} = f32[4,32] multiply(c{p}, vb{p})",
                  f"  d{i} = f32[4,32] parameter({i})",
                  f"  t{i} = f32[4,32] multiply(y{p}, d{i})",
                  f"  x{i} = f32[4,32] add(x{p}, t{i})"]
    return (f"HloModule pre_norm\n{programs.REDUCERS}\nENTRY main {{\n" + "\n".join(lines)
            + f"\n  ROOT out = f32[4,32] negate(x{layers})\n}}\n")


def test_a_residual_stream_read_by_layer_norms_is_not_recomputed(rng):
    """Each sum of the stream is computed once: duplicated into the next layer norm's
    kernels, a sum's operands (the previous sum) are not duplicated with it, so no kernel
    recomputes the stream from its start. Computed again in every later kernel, the number
    of adds would grow with the square of the depth."""
    layers = 8
    text = _pre_norm_stream(layers)
    module = fused(text)
    stream_adds = [i for c in module.computations for i in c.instructions
                   if i.opcode == "add" and len(i.shape.dims) == 2]
    assert len(stream_adds) <= 3 * layers, len(stream_adds)
    assert any("duplicating it too would grow every copy" in line for line in module.fusion_log)
    assert_same_values(parse_module(text), module, rng, rtol=1e-5)


def test_an_operand_with_no_chain_behind_it_is_still_duplicated(rng):
    """The rule above keeps the operands of a value several consumers recompute, so that no
    chain is repeated; a slice of an argument has no chain behind it (a copy in each consumer
    reads what the materialised slice's readers would), so it is fused, not left a kernel of
    its own (a max pool's strided slices, read by its maximum and its index)."""
    text = """HloModule pool_like
ENTRY main {
  x = f32[8,16] parameter(0)
  a = f32[8,8] slice(x), slice={[0:8], [0:16:2]}
  b = f32[8,8] slice(x), slice={[0:8], [1:16:2]}
  m = f32[8,8] maximum(a, b)
  two = f32[] constant(2)
  twos = f32[8,8] broadcast(two), dimensions={}
  v = f32[8,8] multiply(m, twos)
  e = pred[8,8] compare(b, m), direction=EQ
  i = f32[8,8] select(e, twos, m)
  ROOT t = (f32[8,8], f32[8,8]) tuple(v, i)
}
"""
    module = fused(text)
    assert not [k for k in kernels(module.entry) if k.opcode == "slice"], module.to_text()
    assert_same_values(parse_module(text), module, rng, rtol=0)


def test_never_fuses_across_control_flow_or_custom_calls(rng):
    text = """
HloModule boundaries
cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s2 = (s32[], f32[4]) parameter(0)
  i2 = s32[] get-tuple-element(s2), index=0
  v = f32[4] get-tuple-element(s2), index=1
  one = s32[] constant(1)
  i3 = s32[] add(i2, one)
  v2 = f32[4] sine(v)
  ROOT t = (s32[], f32[4]) tuple(i3, v2)
}
ENTRY main {
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  z = s32[] constant(0)
  init = (s32[], f32[4]) tuple(z, e)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  r = f32[4] get-tuple-element(w), index=1
  c = f32[4] custom-call(r), custom_call_target="Sharding", sharding={replicated}
  ROOT out = f32[4] negate(c)
}
"""
    module = fused(text)
    opcodes = [k.opcode for k in kernels(module.entry)]
    assert "while" in opcodes and "custom-call" in opcodes
    assert_same_values(parse_module(text), module, rng)


def test_log_gives_reasons(monkeypatch, capsys):
    monkeypatch.setenv("PYXLA_DEBUG", "fusion")
    module = parse_module(programs.DENSE_RELU)
    fusion_pass(FusionPolicy(output_fusion=False))(module)
    err = capsys.readouterr().err
    assert "not fusing %d (dot)" in err and "output fusion is off" in err
    assert "pyxla fusion: fuse %" in err


def test_argmax_reduction_fuses_its_producers(rng):
    text = f"""
HloModule argmax
{ARGMAX_REDUCER}
ENTRY main {{
  x = f32[8,50] parameter(0)
  e = f32[8,50] exponential(x)
  idx = s32[8,50] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  am = (f32[8], s32[8]) reduce(e, idx, ninf, zero), dimensions={{1}}, to_apply=argmax
  ROOT index = s32[8] get-tuple-element(am), index=1
}}
"""
    module = fused(text)
    ks = kernels(module.entry)
    assert len(ks) == 1 and ks[0].attrs["kind"] == "kInput"
    assert_same_values(parse_module(text), module, rng)


PADDED_CONVOLUTION = """HloModule padded
ENTRY main {
  x = f32[1,6,6,8] parameter(0)
  w = f32[1,1,8,8] parameter(1)
  b = f32[8] parameter(2)
  c = f32[1,6,6,8] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f
  bb = f32[1,6,6,8] broadcast(b), dimensions={3}
  a = f32[1,6,6,8] add(c, bb)
  z = f32[] constant(0)
  zb = f32[1,6,6,8] broadcast(z), dimensions={}
  r = f32[1,6,6,8] maximum(a, zb)
  v = f32[] constant(-1.5)
  ROOT p = f32[1,9,8,8] pad(r, v), padding=0_0x1_2x0_2x0_0
}
"""


@pytest.mark.parametrize("allowed", [True, False])
def test_a_convolution_epilogue_may_end_in_a_pad(allowed, rng):
    """A convolution, its bias and ReLU and a pad around them: one output fusion, whose
    kernel writes the result inside the border (the next convolution's padded input)."""
    module = fused(PADDED_CONVOLUTION, FusionPolicy(padded_convolution_output=allowed))
    ks = kernels(module.entry)
    if allowed:
        assert [(k.opcode, k.attrs.get("kind")) for k in ks] == [("fusion", "kOutput")]
        assert module.entry.root.attrs["calls"].root.opcode == "pad"
    else:
        assert sorted(k.attrs.get("kind") or k.opcode for k in ks) == ["convolution", "kLoop"]
    assert_same_values(parse_module(PADDED_CONVOLUTION), module, rng, rtol=1e-5)
