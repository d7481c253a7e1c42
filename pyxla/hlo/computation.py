"""A computation: instructions in a valid order, parameters by number, one ROOT."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar, cast

from .instruction import HloInstruction
from .shape import Shape, TupleShape

T = TypeVar("T")


def predecessors_first(starts: Iterable[T], predecessors: Callable[[T], list[T]]) -> list[T]:
    """Every node reached from `starts` through `predecessors`, each after all of its
    predecessors, the first start's ancestors first; a cycle is cut where it closes (the
    verifier reports cycles)."""
    seen: set[int] = set()
    order: list[T] = []
    for start in starts:
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((op, False) for op in reversed(predecessors(node)) if id(op) not in seen)
    return order


def operands_first(starts: Iterable[HloInstruction],
                   predecessors: Callable[[HloInstruction], list[HloInstruction]] = lambda node: node.operands,
                   ) -> list[HloInstruction]:
    """Every instruction reached from `starts` through `predecessors` (operands, by default),
    each after all of its predecessors, the first start's ancestors first."""
    return predecessors_first(starts, predecessors)


class HloComputation:
    additions = 0   # instructions added to any computation so far (HloModule.fresh_name reads it)

    def __init__(self, name: str):
        self.name = name
        self.instructions: list[HloInstruction] = []
        self.root: HloInstruction | None = None
        self.is_fusion_computation = False

    # --- construction -------------------------------------------------------------------
    def add_instruction(self, instr: HloInstruction) -> HloInstruction:
        HloComputation.additions += 1
        instr.parent = self
        self.instructions.append(instr)
        for op in instr.operands:
            if instr not in op.users:
                op.users.append(instr)
        return instr

    def remove_instruction(self, instr: HloInstruction) -> None:
        if instr.users:
            raise ValueError(f"cannot remove {instr.describe()}: still used by "
                             + ", ".join("%" + u.name for u in instr.users))
        self.instructions.remove(instr)
        for op in instr.operands:
            if instr in op.users:
                op.users.remove(instr)
        instr.parent = None

    def replace_all_uses(self, old: HloInstruction, new: HloInstruction) -> None:
        for user in list(old.users):
            user.replace_operand(old, new)
        if self.root is old:
            self.root = new

    def replace_instruction(self, old: HloInstruction, new: HloInstruction) -> None:
        """Every use of `old` (and ROOT) becomes `new`; `old` is removed once nothing uses it."""
        if new.parent is None:
            self.add_instruction(new)
        self.replace_all_uses(old, new)
        if not old.users and old is not self.root and old.opcode != "parameter":
            self.remove_instruction(old)

    def sort_topologically(self) -> None:
        """Reorder `instructions` so operands come first, keeping the order otherwise."""
        position = {id(i): n for n, i in enumerate(self.instructions)}
        done: set[int] = set()
        order: list[HloInstruction] = []
        for start in self.instructions:
            stack = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    if id(node) not in done:
                        done.add(id(node))
                        order.append(node)
                    continue
                if id(node) in done:
                    continue
                stack.append((node, True))
                preds = sorted(node.operands + control_predecessors(node), key=lambda i: -position.get(id(i), 0))
                stack.extend((p, False) for p in preds if id(p) not in done)
        self.instructions = order

    # --- queries ------------------------------------------------------------------------
    @property
    def parameters(self) -> list[HloInstruction]:
        """Parameters sorted by parameter number (text order may differ)."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda p: cast(int, p.parameter_number))

    def parameter_shapes(self) -> list[Shape]:
        return [p.shape for p in self.parameters]

    @property
    def result_shape(self) -> Shape:
        assert self.root is not None, f"computation {self.name} has no ROOT"
        return self.root.shape

    def instruction(self, name: str) -> HloInstruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(f"no instruction %{name} in computation {self.name}")

    def post_order(self) -> list[HloInstruction]:
        """Instructions with every operand before its users, ROOT's ancestors first.

        Instructions that do not reach ROOT come after, still operands first, so a walk
        over the result visits everything (dead code included).
        """
        starts = ([self.root] if self.root is not None else []) + list(self.instructions)
        return operands_first(starts, lambda node: list(node.operands) + control_predecessors(node))

    def program_shape_text(self) -> str:
        params = ", ".join(f"{p.name}: {p.shape.to_text(False)}" for p in self.parameters)
        return f"({params}) -> {self.result_shape.to_text(False)}"

    def __repr__(self) -> str:
        return f"<HloComputation {self.name}: {len(self.instructions)} instructions>"


def control_predecessors(instr: HloInstruction) -> list[HloInstruction]:
    names = instr.attrs.get("control-predecessors") or ()
    if not names or instr.parent is None:
        return []
    by_name = {i.name: i for i in instr.parent.instructions}
    return [by_name[n] for n in names if n in by_name]


def tuple_arity(shape: Shape) -> int:
    return len(shape.elements) if isinstance(shape, TupleShape) else 0
