"""Building the computations that differentiated control flow calls, and emitting the
`while` and `conditional` instructions that call them.

The control-flow rules build a branch or a loop body as Python code run in a `FlatTrace`:
a trace whose parameters are flat arrays, each bound to a *slot* of the state the caller
passes (a loop's state element, a branch operand). Unlike lax's tracing, parameters can be
added after the code has run, which a loop body needs: the residuals it must stack are
known only once its derivative has been traced. Values of enclosing traces the code uses
are captured as usual and become extra, unchanging state elements.

HLO's while and conditional take computations of one tuple parameter; `emit_while` and
`emit_conditional` wrap each flat computation into one that unpacks the state tuple and
`call`s it, as pyxla.lax lowers its loops (the call inliner removes the calls under jit).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..frontend.tracing import Trace, Tracer, bind, current_trace, make_tuple, shape_of
from ..hlo.builder import HloBuilder
from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.shape import Shape, TupleShape
from ..numpy.core import computation_name
from .rule_helpers import MissingRule

# --- flat states ----------------------------------------------------------------------------------

def flat_elements(value: Any, shape: Shape) -> list[Any]:
    """The elements of a flat tuple value (or the one array); nested tuples have no rule."""
    if not isinstance(shape, TupleShape):
        return [value]
    if any(isinstance(e, TupleShape) for e in shape.elements):
        raise MissingRule("control flow over nested tuples")
    return list(value) if value is not None else [None] * len(shape.elements)


def as_state(elements: Sequence[Any], shape: Shape) -> Any:
    """Flat elements as the value a parameter of `shape` takes: a tuple, or the one array."""
    return tuple(elements) if isinstance(shape, TupleShape) else elements[0]


def element_shape(shape: Shape, i: int) -> Shape:
    return shape.elements[i] if isinstance(shape, TupleShape) else shape


# --- flat computations ----------------------------------------------------------------------------

@dataclass
class Captured:
    """A parameter bound to a value of an enclosing trace (or a concrete array)."""
    value: Any


@dataclass
class Flat:
    """A built flat computation: per parameter number, the state slot it reads (an int) or
    the outside value it was captured from. Its ROOT is a tuple."""
    comp: HloComputation
    inputs: list[int | Captured]


class FlatTrace:
    """A trace for a computation of flat parameters bound to state slots (see the module
    docstring). Use `with flat:` to emit into it."""

    def __init__(self, name: str, parent: Trace | None = None):
        self.trace = Trace(computation_name(name), parent=current_trace() if parent is None else parent)
        self._slots: dict[int, int] = {}

    def parameter(self, shape: Shape, slot: int) -> Tracer:
        param = self.trace.new_parameter(shape, f"s{slot}")
        self._slots[id(param.instr)] = slot
        return param

    def __enter__(self) -> FlatTrace:
        self.trace.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.trace.__exit__(*exc)

    def finish(self, outputs: Sequence[Any]) -> Flat:
        """The computation returning the tuple of `outputs`."""
        with self.trace:
            roots = [self.trace.lift(o).instr for o in outputs]
        comp = self.trace.builder.build(self.trace.builder.tuple(*roots))
        captured = {id(inner.instr): outer for outer, inner in self.trace.captures}
        inputs: list[int | Captured] = [self._slots[id(p)] if id(p) in self._slots else Captured(captured[id(p)])
                                        for p in comp.parameters]
        return Flat(comp, inputs)


def _captured_values(flats: Sequence[Flat]) -> list[Any]:
    seen: set[int] = set()
    out = []
    for flat in flats:
        for x in flat.inputs:
            if isinstance(x, Captured) and id(x.value) not in seen:
                seen.add(id(x.value))
                out.append(x.value)
    return out


class _Wrapper:
    """A computation of one tuple parameter (the state) that calls a flat computation."""

    def __init__(self, name: str, state_shape: TupleShape):
        self.builder = HloBuilder(computation_name(name))
        self.state = self.builder.parameter(state_shape, f"{self.builder.name}.state")
        self._elements: dict[int, HloInstruction] = {}

    def element(self, i: int) -> HloInstruction:
        if i not in self._elements:
            self._elements[i] = self.builder.op("get-tuple-element", self.state, index=i)
        return self._elements[i]

    def call(self, flat: Flat, capture_slots: dict[int, int]) -> HloInstruction:
        args = [self.element(x if isinstance(x, int) else capture_slots[id(x.value)]) for x in flat.inputs]
        return self.builder.op("call", *args, to_apply=flat.comp)

    def result(self, call: HloInstruction, i: int) -> HloInstruction:
        return self.builder.op("get-tuple-element", call, index=i)


def _state(values: Sequence[Any], flats: Sequence[Flat]) -> tuple[list[Any], TupleShape, dict[int, int]]:
    captured = _captured_values(flats)
    state = list(values) + captured
    slots = {id(v): len(values) + k for k, v in enumerate(captured)}
    return state, TupleShape(tuple(shape_of(v) for v in state)), slots


def emit_while(cond: Flat, body: Flat, init: Sequence[Any], backend_config: str | None = None) -> list[Any]:
    """The final state of `while cond(state): state = body(state)` from `init`: `body`
    returns the new value of each slot of `init`, `cond` a one-element tuple of pred[]."""
    state, shape, slots = _state(init, [body, cond])
    n = len(init)
    b = _Wrapper("while_body", shape)
    call = b.call(body, slots)
    root = b.builder.tuple(*[b.result(call, i) for i in range(n)], *[b.element(i) for i in range(n, len(state))])
    body_comp = b.builder.build(root)
    c = _Wrapper("while_cond", shape)
    cond_comp = c.builder.build(c.result(c.call(cond, slots), 0))
    attrs: dict[str, Any] = {"condition": cond_comp, "body": body_comp}
    if backend_config is not None:
        attrs["backend_config"] = backend_config
    out = bind("while", make_tuple(*state), **attrs)
    return list(out[:n])


def emit_conditional(index: Any, branches: Sequence[Flat], operands: Sequence[Any]) -> list[Any]:
    """The tuple `branches[index]` returns (the last branch for an index out of range) on the
    slots `operands`."""
    state, shape, slots = _state(operands, branches)
    comps = []
    for flat in branches:
        w = _Wrapper("branch", shape)
        comps.append(w.builder.build(w.call(flat, slots)))
    out = bind("conditional", index, *([make_tuple(*state)] * len(comps)), branch_computations=tuple(comps))
    return list(out)
