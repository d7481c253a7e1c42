"""Automatic differentiation: grad, value_and_grad, vjp, jvp, linearize (JAX's API).

    import pyxla, pyxla.numpy as pnp

    loss = lambda w, x: pnp.sum(pnp.tanh(x @ w) ** 2)
    g = pyxla.jit(pyxla.grad(loss))(w, x)       # forward and backward: one HLO program

The function is traced into an HLO computation; its derivative is built from rules per
HLO opcode and emitted as ordinary HLO (into the enclosing jit, or run eagerly), so the
backward pass goes through pyxla's passes, fusion and backends like any program.

Files, in the order a derivative is built:
  staging.py          the function traced into a computation (and gradient stops kept)
  forward.py          forward mode over the computation: primal and tangent, per instruction
  jvp_rules.py        the tangent rule of each opcode
  transpose.py        the backward pass: the linear tangent program run in reverse
  transpose_rules.py  the cotangent rule of each linear opcode
  rule_helpers.py     what the rules share
  control_flow_rules.py  call and conditional (cond, switch): forward, linearised, transposed
  while_rules.py      while (while_loop, fori_loop, scan): forward, linearised with stacked
                      residuals where the trip count is known, transposed
  subcomputations.py  the branches and loop bodies those rules build, and their emission
  api.py              grad, value_and_grad, vjp, jvp, linearize
  custom.py           custom_jvp, custom_vjp: the function emitted as a call, its rule traced beside it
  checkpoint.py       checkpoint / remat and its policies
  traced_calls.py     those calls and their rules (CALL_RULES), and re-emitting a traced rule
  call_rules.py       the joint rule of call that applies them; custom_vjp's transpose (bwd)
  remat_policies.py   checkpoints that save some values (dots_saveable)
Design and coverage: docs/autodiff.md.
"""
from . import (
           call_rules,  # noqa: F401  (custom_jvp, custom_vjp, checkpoint calls)
           control_flow_rules,  # noqa: F401  (registers the rules of call, conditional and while)
)
from .api import float0, grad, jvp, linearize, value_and_grad, vjp
from .checkpoint import checkpoint, checkpoint_policies, remat
from .custom import custom_jvp, custom_vjp

__all__ = ["checkpoint", "checkpoint_policies", "custom_jvp", "custom_vjp", "float0", "grad", "jvp", "linearize",
           "remat", "value_and_grad", "vjp"]
