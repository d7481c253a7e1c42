"""One HLO instruction: `name = shape opcode(operands), attributes`."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .attributes import ATTRIBUTE_KINDS, NON_SEMANTIC_ATTRIBUTES
from .shape import ArrayShape, Shape, TupleShape

if TYPE_CHECKING:
    from .computation import HloComputation


class HloInstruction:
    """An operation in a computation.

    `operands` are other instructions of the same computation. `attrs` holds every
    attribute in text order (see attributes.py for value types). Two operand forms are
    not instructions and have fields of their own: a constant's `literal` (a NumPy array
    in the element type's storage dtype, or a tuple of them for tuple constants) and a
    parameter's `parameter_number`.
    """

    __slots__ = ("name", "opcode", "shape", "operands", "attrs", "literal", "parameter_number",
                 "parent", "users")

    def __init__(self, name: str, opcode: str, shape: Shape, operands: Iterable[HloInstruction] = (),
                 attrs: dict | None = None, literal: Any = None, parameter_number: int | None = None):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands: list[HloInstruction] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.literal = literal
        self.parameter_number = parameter_number
        self.parent: HloComputation | None = None
        self.users: list[HloInstruction] = []

    @property
    def array_shape(self) -> ArrayShape:
        """`shape`, where the instruction produces an array (not a tuple or a token)."""
        shape = self.shape
        if not isinstance(shape, ArrayShape):
            raise TypeError(f"{self.describe()} has shape {shape.to_text(False)}, not an array shape")
        return shape

    @property
    def tuple_shape(self) -> TupleShape:
        """`shape`, where the instruction produces a tuple."""
        shape = self.shape
        if not isinstance(shape, TupleShape):
            raise TypeError(f"{self.describe()} has shape {shape.to_text(False)}, not a tuple shape")
        return shape

    @property
    def outputs(self) -> list[HloInstruction]:
        """The values this instruction's result is made of: a tuple's operands, else the
        instruction itself (a multi-output fusion's root has one per output)."""
        return list(self.operands) if self.opcode == "tuple" else [self]

    # --- attributes -------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def called_computations(self) -> list[HloComputation]:
        """The computations this instruction calls, in attribute order."""
        out = []
        for name, value in self.attrs.items():
            kind = ATTRIBUTE_KINDS.get(name)
            if kind == "computation":
                out.append(value)
            elif kind == "computations":
                out.extend(value)
        return out

    def semantic_attrs(self) -> dict[str, Any]:
        return {k: v for k, v in self.attrs.items() if k not in NON_SEMANTIC_ATTRIBUTES}

    @property
    def metadata(self) -> dict:
        return self.attrs.get("metadata") or {}

    def source_location(self) -> str:
        """`file:line` from metadata where a front end recorded it, else the op_name, else ''."""
        md = self.metadata
        if "source_file" in md:
            return f"{md['source_file']}:{md.get('source_line', '?')}"
        return str(md.get("op_name", ""))

    def describe(self) -> str:
        """How an error names this instruction: `%name (opcode) in computation, at loc`."""
        where = f" in {self.parent.name}" if self.parent is not None else ""
        loc = self.source_location()
        return f"%{self.name} ({self.opcode}){where}" + (f", from {loc}" if loc else "")

    # --- graph ------------------------------------------------------------------------
    def replace_operand(self, old: HloInstruction, new: HloInstruction) -> None:
        for i, op in enumerate(self.operands):
            if op is old:
                self.operands[i] = new
        if self in old.users and old not in self.operands:
            old.users.remove(self)
        if self not in new.users:
            new.users.append(self)

    def operand_shapes(self) -> list[Shape]:
        return [op.shape for op in self.operands]

    def walk_operands(self) -> Iterator[HloInstruction]:
        yield from self.operands

    def literal_equal(self, other: HloInstruction) -> bool:
        a, b = self.literal, other.literal
        if isinstance(a, tuple) or isinstance(b, tuple):
            return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                    and all(np.array_equal(x, y, equal_nan=False) and x.dtype == y.dtype
                            for x, y in zip(a, b)))
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def __repr__(self) -> str:
        return f"<HloInstruction %{self.name} = {self.shape} {self.opcode}>"


def uniform_value(instr: HloInstruction) -> Any:
    """The single value every element of `instr` has, when it is a constant (or a broadcast of
    one) with all elements equal; else None."""
    while instr.opcode == "broadcast":
        instr = instr.operands[0]
    if instr.opcode != "constant" or not isinstance(instr.shape, ArrayShape):
        return None
    lit = np.asarray(instr.literal)
    if lit.size == 0:
        return None
    first = lit.reshape(-1)[0]
    if lit.dtype.kind == "f" or lit.dtype.name == "bfloat16":
        bits = lit.view(np.dtype(f"u{lit.dtype.itemsize}"))
        return first if np.all(bits == bits.reshape(-1)[0]) else None
    return first if np.all(lit == first) else None
