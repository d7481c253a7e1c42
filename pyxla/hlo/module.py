"""An HLO module: named computations, one of them the ENTRY."""
from __future__ import annotations

import numpy as np

from .attributes import ATTRIBUTE_KINDS
from .computation import HloComputation
from .instruction import HloInstruction


class HloModule:
    def __init__(self, name: str):
        self.name = name
        self.computations: list[HloComputation] = []   # callees before callers, ENTRY last
        self.entry: HloComputation | None = None
        # Header attributes kept as raw text (`is_scheduled=true`,
        # `entry_computation_layout={...}`, `frontend_attributes={...}`): none changes a value.
        self.header_attrs: dict[str, str] = {}
        self._names: set[str] | None = None   # see _taken_names
        self._names_synced = self._issued = self._computations_added = 0

    def fresh_name(self, base: str) -> str:
        """An instruction or computation name not yet used in the module."""
        taken = self._taken_names()
        stem = base.split(".")[0].replace("-", "_") or "v"
        n = len(taken)
        while f"{stem}.{n}" in taken:
            n += 1
        name = f"{stem}.{n}"
        taken.add(name)
        self._issued += 1   # the caller adds an instruction or computation by this name
        return name

    def _taken_names(self) -> set[str]:
        """A superset of the names in the module: every name it held when last scanned and
        every name issued since. It is scanned again when more instructions or computations
        were added (to any computation: a count kept by HloComputation) than names were
        issued, so that a name added by other means is seen; instructions removed keep
        their names taken, which costs nothing (scanning after every removal, as fusion
        removes instructions, took DenseNet-121's passes 0.58 s)."""
        added = HloComputation.additions + self._computations_added
        if self._names is None or added - self._names_synced > self._issued:
            self._names = {c.name for c in self.computations}
            self._names.update(i.name for c in self.computations for i in c.instructions)
            self._names_synced, self._issued = added, 0
        return self._names

    def add_computation(self, comp: HloComputation, entry: bool = False) -> HloComputation:
        self._computations_added += 1
        self.computations.append(comp)
        if entry:
            self.entry = comp
        return comp

    def uniquify_names(self) -> None:
        """Rename computations and instructions so every name is used once in the module."""
        seen: set[str] = set()
        for comp in self.computations:
            if comp.name in seen:
                n = 1
                while f"{comp.name}.{n}" in seen:
                    n += 1
                comp.name = f"{comp.name}.{n}"
            seen.add(comp.name)
        for comp in self.computations:
            for instr in comp.instructions:
                if instr.name in seen:
                    base, n = instr.name, 1
                    while f"{base}.{n}" in seen:
                        n += 1
                    instr.name = f"{base}.{n}"
                seen.add(instr.name)

    def computation(self, name: str) -> HloComputation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"no computation {name} in module {self.name}")

    def reachable_computations(self) -> list[HloComputation]:
        """Computations reachable from ENTRY, callees before callers."""
        order: list[HloComputation] = []
        seen: set[int] = set()

        def visit(comp: HloComputation) -> None:
            if id(comp) in seen:
                return
            seen.add(id(comp))
            for instr in comp.instructions:
                for callee in instr.called_computations():
                    visit(callee)
            order.append(comp)

        assert self.entry is not None, f"module {self.name} has no ENTRY computation"
        visit(self.entry)
        return order

    def clone(self) -> HloModule:
        """An independent copy: new computations and instructions with the same names,
        shapes and attributes (their values are immutable, but for the metadata and raw
        lists, which are copied), literals copied. Rebuilt object by object rather than
        through the text format, which printed and parsed every literal (DenseNet-121's
        traced module: 0.85 s)."""
        copy = HloModule(self.name)
        copy.header_attrs = dict(self.header_attrs)
        computations = {id(c): HloComputation(c.name) for c in self.computations}
        for comp in self.computations:
            new = computations[id(comp)]
            new.is_fusion_computation = comp.is_fusion_computation
            instructions = {id(i): HloInstruction(i.name, i.opcode, i.shape, (), _copied_attrs(i.attrs, computations),
                                                  _copied_literal(i.literal), i.parameter_number)
                            for i in comp.instructions}
            for instr in comp.instructions:
                twin = instructions[id(instr)]
                twin.operands = [instructions[id(o)] for o in instr.operands]
                new.add_instruction(twin)
            new.root = instructions[id(comp.root)] if comp.root is not None else None
            copy.add_computation(new, entry=comp is self.entry)
        for key, value in self.__dict__.items():   # annotations front ends attach (donations, ...)
            if key not in copy.__dict__ and not key.startswith("_"):
                setattr(copy, key, value)
        return copy

    def to_text(self, **options: bool) -> str:
        from .printer import print_module
        return print_module(self, **options)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"


def _copied_attrs(attrs: dict, computations: dict) -> dict:
    """An instruction's attributes for its copy: called computations mapped to their copies."""
    out = {}
    for name, value in attrs.items():
        kind = ATTRIBUTE_KINDS.get(name)
        if kind == "computation":
            value = computations[id(value)]
        elif kind == "computations":
            value = tuple(computations[id(c)] for c in value)
        elif isinstance(value, dict):
            value = dict(value)
        elif isinstance(value, list):
            value = list(value)
        out[name] = value
    return out


def _copied_literal(literal):
    if isinstance(literal, np.ndarray):
        return literal.copy()
    if isinstance(literal, tuple):
        return tuple(_copied_literal(v) for v in literal)
    return literal
