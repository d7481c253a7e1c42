"""pyxla.checkpoint (pyxla.remat): JAX's jax.checkpoint, rematerialisation.

    layer = pyxla.checkpoint(lambda w, x: pnp.tanh(x @ w))

In reverse mode the backward pass recomputes the function's intermediates from its inputs
instead of keeping them as residuals: less memory held between the passes, more compute.

Called while a trace is active, the function is traced into a computation and emitted as a
`call` of it, its policy recorded for that computation (traced_calls.CALL_RULES); when
nothing differentiates it, that is ordinary HLO. call_rules.py linearises the call by
emitting the computation again inside the tangent program, so its values are computed from
the inputs when the backward pass needs them. With `prevent_cse` (the default, as in JAX)
the recomputation reads the inputs through an `opt-barrier`, so that CSE cannot merge it
with the forward pass.

Policies (`policy(instr) -> bool`: whether the value of an HLO instruction is saved):
None and `checkpoint_policies.nothing_saveable` save nothing but the inputs;
`everything_saveable` saves everything (as without checkpoint); `dots_saveable` and
`dots_with_no_batch_dims_saveable` save the results of `dot`s and recompute the rest.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..frontend.pytree import tree_unflatten
from ..frontend.tracing import current_trace
from ..hlo.instruction import HloInstruction
from .custom import Arguments
from .traced_calls import emit_call, trace_leaves

Policy = Callable[[HloInstruction], bool]


class checkpoint_policies:
    """JAX's jax.checkpoint_policies, as predicates on HLO instructions: whether to save it."""

    @staticmethod
    def nothing_saveable(instr: HloInstruction) -> bool:
        return False

    @staticmethod
    def everything_saveable(instr: HloInstruction) -> bool:
        return True

    @staticmethod
    def dots_saveable(instr: HloInstruction) -> bool:
        return instr.opcode == "dot"

    checkpoint_dots = dots_saveable

    @staticmethod
    def dots_with_no_batch_dims_saveable(instr: HloInstruction) -> bool:
        return instr.opcode == "dot" and not instr.attrs.get("lhs_batch_dims")


@dataclass
class CheckpointCall:
    """What call_rules.py needs to linearise one call of a checkpointed function."""
    prevent_cse: bool
    policy: Policy | None

    @property
    def saves_everything(self) -> bool:
        return self.policy is checkpoint_policies.everything_saveable

    @property
    def saves_nothing(self) -> bool:
        return self.policy is None or self.policy is checkpoint_policies.nothing_saveable


def checkpoint(fun: Callable | None = None, *, prevent_cse: bool = True, policy: Policy | None = None,
               static_argnums: int | Sequence[int] = ()) -> Callable:
    """`fun`, whose intermediates reverse-mode differentiation recomputes in the backward pass
    instead of saving (those `policy` saves excepted). Arguments at `static_argnums` are
    Python values, not traced. Without `fun`, a decorator."""
    if fun is None:
        return functools.partial(checkpoint, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    record = CheckpointCall(prevent_cse, policy)
    name = getattr(fun, "__name__", "fn")

    @functools.wraps(fun)
    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        if current_trace() is None:
            return fun(*args, **kwargs)
        a = Arguments.of(f"checkpoint of {name}", args, static)
        traced = trace_leaves(lambda *leaves: fun(*a.merged(leaves), **kwargs), a.avals, a.weak,
                              f"checkpoint_{name}")
        return tree_unflatten(traced.out_tree, emit_call(traced, a.leaves + traced.captures, record))

    return checkpointed


remat = checkpoint

__all__ = ["checkpoint", "checkpoint_policies", "remat"]
