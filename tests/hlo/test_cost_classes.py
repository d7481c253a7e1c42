"""The ops' cost classes in the opcode registry, and the three places that read them: cost
analysis (transcendentals counted apart), the fusion policy (expensive producers are not
duplicated into several consumers) and the CPU backend's work estimate."""
import numpy as np
import pytest

from pyxla.backends.cpu import codegen
from pyxla.fusion.instruction_fusion import fusion_pass
from pyxla.hlo import parse_module
from pyxla.hlo.cost_analysis import cost_analysis
from pyxla.hlo.ops.registry import (
    EXPENSIVE_OPS,
    TRANSCENDENTAL_OPS,
    is_expensive,
    is_transcendental,
    known_opcodes,
    op_def,
)


def test_classes_name_registered_ops_and_nest():
    assert TRANSCENDENTAL_OPS <= EXPENSIVE_OPS <= set(known_opcodes())
    assert is_transcendental("sqrt") and is_expensive("sqrt")          # XLA counts sqrt as transcendental
    assert is_expensive("divide") and not is_transcendental("divide")
    assert not is_expensive("add") and not is_expensive("multiply")


def test_backend_weighs_the_expensive_elementwise_ops():
    assert codegen.EXPENSIVE_OPS == {op for op in EXPENSIVE_OPS if op_def(op).fusion_kind == "elementwise"}
    assert "gather" not in codegen.EXPENSIVE_OPS and "divide" in codegen.EXPENSIVE_OPS


@pytest.mark.parametrize("op, transcendental", [("sqrt", True), ("exponential", True), ("divide", False),
                                                ("add", False)])
def test_cost_analysis_counts_transcendentals(op, transcendental):
    n = np.random.default_rng(0).integers(3, 40)
    operands = "p, p" if op in ("divide", "add") else "p"
    module = parse_module(f"HloModule m\nENTRY e {{\n  p = f32[{n}] parameter(0)\n"
                          f"  ROOT r = f32[{n}] {op}({operands})\n}}\n")
    assert cost_analysis(module)["transcendentals"] == (n if transcendental else 0)


@pytest.mark.parametrize("op", ["exponential", "divide", "add"])
def test_fusion_duplicates_only_cheap_producers(op):
    """A producer read by two fusions that each also read a reduce: an expensive one stays a
    kernel of its own, a cheap one is computed again inside each consumer."""
    module = parse_module(f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  p = f32[64,32] parameter(0)
  q = f32[64,32] parameter(1)
  x = f32[64,32] {op}(p, q)
  zero = f32[] constant(0)
  r0 = f32[64] reduce(x, zero), dimensions={{1}}, to_apply=add
  t = f32[32,64] transpose(x), dimensions={{1,0}}
  r1 = f32[32] reduce(t, zero), dimensions={{1}}, to_apply=add
  ROOT o = (f32[64], f32[32]) tuple(r0, r1)
}}
""".replace(f"{op}(p, q)", "exponential(p)" if op == "exponential" else f"{op}(p, q)"))
    fusion_pass().run(module)
    entry = module.entry
    kept = [i for i in entry.instructions if i.opcode == op]
    assert bool(kept) == is_expensive(op)
