"""Build HLO modules from Python: the API front ends and tests construct modules with.

    b = HloBuilder("f")
    x = b.parameter(array(F32, 4, 8), "x")
    y = b.op("exponential", x)
    total = b.reduce(y, b.constant(0.0, F32), dimensions=(1,), to_apply=scalar_add(F32))
    module = b.module(total)

`op` infers the result shape from the opcode's registry record; pass `shape=` where it
does not follow from the operands (broadcast, reshape, convert, iota, ...).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ShapeError
from .computation import HloComputation
from .instruction import HloInstruction
from .module import HloModule
from .ops import op_def
from .shape import ArrayShape, Shape, TupleShape
from .types import ElementType, from_numpy_dtype

_ids = itertools.count(1)


class HloBuilder:
    def __init__(self, name: str):
        self.name = name
        self.computation = HloComputation(name)
        self._names: set[str] = set()
        self._num_params = 0

    def _fresh(self, base: str) -> str:
        base = base.replace("-", "_")
        name = f"{base}.{next(_ids)}"
        while name in self._names:
            name = f"{base}.{next(_ids)}"
        self._names.add(name)
        return name

    def _add(self, instr: HloInstruction) -> HloInstruction:
        return self.computation.add_instruction(instr)

    def parameter(self, shape: Shape, name: str | None = None, number: int | None = None) -> HloInstruction:
        number = self._num_params if number is None else number
        self._num_params = max(self._num_params, number + 1)
        pname = name if name and name not in self._names else self._fresh(name or "param")
        self._names.add(pname)
        return self._add(HloInstruction(pname, "parameter", shape, parameter_number=number))

    def constant(self, value: Any, dtype: ElementType | None = None) -> HloInstruction:
        arr = np.asarray(value) if dtype is None else np.asarray(value).astype(dtype.np_dtype)
        etype = dtype or from_numpy_dtype(arr.dtype)
        shape = ArrayShape(etype, arr.shape)
        return self._add(HloInstruction(self._fresh("constant"), "constant", shape, literal=arr))

    def op(self, opcode: str, *operands: HloInstruction, shape: Shape | None = None,
           attrs: dict | None = None, name: str | None = None, **kw_attrs: Any) -> HloInstruction:
        """Add `opcode(operands)`; keyword attributes use XLA's names."""
        all_attrs = dict(attrs or {})
        all_attrs.update(kw_attrs)
        record = op_def(opcode)
        problem = record.check_arity(len(operands))
        if problem:
            raise ShapeError(problem)
        inferred = record.shape([o.shape for o in operands], all_attrs, shape)
        return self._add(HloInstruction(name or self._fresh(opcode), opcode, shape or inferred,
                                        operands, all_attrs))

    def tuple(self, *elements: HloInstruction) -> HloInstruction:
        shape = TupleShape(tuple(e.shape for e in elements))
        return self._add(HloInstruction(self._fresh("tuple"), "tuple", shape, elements))

    def build(self, root: HloInstruction) -> HloComputation:
        self.computation.root = root
        return self.computation

    def module(self, root: HloInstruction, name: str | None = None) -> HloModule:
        """The module whose ENTRY is this builder's computation, with every callee added."""
        entry = self.build(root)
        module = HloModule(name or self.name)
        module.entry = entry
        module.computations = module.reachable_computations()
        module.uniquify_names()   # names chosen in separate builders may coincide
        return module

    def __getattr__(self, attr: str) -> Callable[..., HloInstruction]:
        # b.reduce_window(...) is b.op("reduce-window", ...)
        if attr.startswith("_"):
            raise AttributeError(attr)
        opcode = attr.replace("_", "-")
        op_def(opcode)
        return lambda *operands, **kw: self.op(opcode, *operands, **kw)


def scalar_computation(opcode: str, dtype: ElementType, name: str | None = None) -> HloComputation:
    """`(a, b) -> opcode(a, b)` on scalars of `dtype`: the usual reducer."""
    b = HloBuilder(name or f"{opcode}_{dtype.name}")
    s = ArrayShape(dtype, ())
    x = b.parameter(s, "a")
    y = b.parameter(s, "b")
    return b.build(b.op(opcode, x, y))
