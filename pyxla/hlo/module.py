"""An HLO module: named computations, one of them the ENTRY."""
from __future__ import annotations

from .computation import HloComputation


class HloModule:
    def __init__(self, name: str):
        self.name = name
        self.computations: list[HloComputation] = []   # callees before callers, ENTRY last
        self.entry: HloComputation | None = None
        # Header attributes kept as raw text (`is_scheduled=true`,
        # `entry_computation_layout={...}`, `frontend_attributes={...}`): none changes a value.
        self.header_attrs: dict[str, str] = {}

    def fresh_name(self, base: str) -> str:
        """An instruction or computation name not yet used in the module."""
        taken = self._taken_names()
        stem = base.split(".")[0].replace("-", "_") or "v"
        n = len(taken)
        while f"{stem}.{n}" in taken:
            n += 1
        name = f"{stem}.{n}"
        taken.add(name)
        self._names_count += 1   # the caller adds an instruction or computation by this name
        return name

    def _taken_names(self) -> set[str]:
        # Rebuilt when the module changed by other means than fresh_name.
        count = sum(len(c.instructions) for c in self.computations) + len(self.computations)
        if getattr(self, "_names_count", None) != count:
            issued = getattr(self, "_names", set())   # names handed out may not be in the module yet
            self._names = issued | {c.name for c in self.computations}
            self._names.update(i.name for c in self.computations for i in c.instructions)
            self._names_count = count
        return self._names

    def add_computation(self, comp: HloComputation, entry: bool = False) -> HloComputation:
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

        visit(self.entry)
        return order

    def clone(self) -> "HloModule":
        """An independent copy (through the text format, which round-trips exactly)."""
        from .parser import parse_module
        from .printer import print_module
        copy = parse_module(print_module(self), source=f"<clone of {self.name}>")
        for key, value in self.__dict__.items():   # annotations front ends attach (donations, ...)
            if key not in copy.__dict__ and not key.startswith("_"):
                setattr(copy, key, value)
        return copy

    def to_text(self, **options) -> str:
        from .printer import print_module
        return print_module(self, **options)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"
