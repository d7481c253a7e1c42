"""stop_gradient: the identity function whose derivative is zero.

Inside a trace, each floating-point array of the pytree becomes an HLO `copy` (the
algebraic simplifier removes it when compiling) that the trace records as a gradient stop:
pyxla.grad, vjp and jvp treat its result as a constant. Outside a trace the values are
returned as they are.
"""
from __future__ import annotations

from typing import Any

from ..frontend.pytree import tree_map
from ..frontend.tracing import Tracer, bind, current_trace, emission_scope


def _stop(x: Any) -> Any:
    trace = current_trace()
    if trace is None or not isinstance(x, Tracer) or not x.aval.dtype.is_float:
        return x   # concrete values and integers carry no derivative to stop
    with emission_scope("stop_gradient"):
        y = bind("copy", x)
    trace.gradient_stops.add(y.instr)
    return Tracer(y.instr, y.trace, x.weak)


def stop_gradient(x: Any) -> Any:
    """`x` (a pytree of arrays) unchanged, with derivatives through it taken to be zero."""
    return tree_map(_stop, x)
