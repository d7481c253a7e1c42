"""Batching: pyxla.vmap (JAX's API), by rules per HLO opcode.

    import pyxla, pyxla.numpy as pnp

    per_example = pyxla.vmap(pyxla.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)

The function is traced once on one example's shapes into an HLO computation (autodiff's
staging); each instruction is then emitted again, batched, by its opcode's rule, written
in pyxla.lax. So the batched program is ordinary HLO: inside `jit` it is compiled with the
rest, outside it each instruction runs at once.

Files:
  api.py                 vmap
  axes.py                in_axes / out_axes as pytree prefixes, JAX's errors
  interpreter.py         the walk over the computation, the rule table, batched computations
  rule_helpers.py        moving and adding the batch dimension
  elementwise_rules.py   elementwise ops, broadcast, reshape, transpose, slice, concatenate, pad, reverse
  reduction_rules.py     reduce, reduce-window, select-and-scatter, sort, topk
  contraction_rules.py   dot, convolution
  indexing_rules.py      gather, scatter, dynamic-slice, dynamic-update-slice
  control_rules.py       while, conditional, call, opt-barrier, rng-bit-generator
  custom_rules.py        calls of custom_jvp, custom_vjp, checkpoint: batched with their rules
Design and coverage: docs/vmap.md.
"""
from . import contraction_rules, control_rules, elementwise_rules, indexing_rules, reduction_rules  # noqa: F401
from .api import vmap
from .interpreter import BATCH_RULES

__all__ = ["BATCH_RULES", "vmap"]
