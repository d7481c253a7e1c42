"""What the parser settles once the whole module is read: names and omitted shapes.

XLA scopes instruction names to their computation (every reducer may call its operands
`lhs` and `rhs`), while pyxla's IR names every instruction once in the module (passes
inline computations into each other and name new instructions by the module). So names
used again in another computation are renamed here, the ENTRY computation's first. A
shape left out of the text (`ROOT r = add(a, b)`) is inferred by the opcode's shape rule,
callees before callers, so that a call's shape follows from its computation's.
"""
from __future__ import annotations

from collections.abc import Callable

from ..errors import ParseError, ShapeError
from .computation import HloComputation
from .dynamic_dims import unify_text_dimensions
from .instruction import HloInstruction
from .module import HloModule
from .shape import ArrayShape, TupleShape

# The shape of an instruction whose text left it out, until it is inferred (compared by identity).
OMITTED_SHAPE = TupleShape(())


def name_inline_computations(module: HloModule, top_level: set[str]) -> None:
    """A computation written in place (`to_apply={...}`) is named after its user and
    attribute; should that name be taken, it gets a numbered suffix."""
    taken = set(top_level)
    for comp in module.computations:
        if comp.name in top_level:
            continue
        base, n = comp.name, 0
        while comp.name in taken:
            n += 1
            comp.name = f"{base}.{n}"
        taken.add(comp.name)


def infer_omitted_shapes(module: HloModule, omitted: list[tuple[HloInstruction, int]],
                         error_at: Callable[[int, str], ParseError]) -> None:
    """Each omitted shape from the opcode's shape rule; attributes XLA lets a scalar operand
    leave out are filled in first."""
    where = {id(instr): pos for instr, pos in omitted}
    for comp in _callees_first(module):
        for instr in comp.instructions:
            if id(instr) not in where:
                _fill_scalar_defaults(instr)
                unify_text_dimensions(instr)
                continue
            if any(op.shape is OMITTED_SHAPE for op in instr.operands):   # not defined before use
                raise error_at(where[id(instr)], f"cannot infer the shape of '{instr.name}': "
                                                 "an operand's shape is not known yet")
            _fill_scalar_defaults(instr)
            try:
                from .ops import op_def  # the op files register themselves on first use
                record = op_def(instr.opcode)
                instr.shape = record.shape(instr.operand_shapes(), instr.attrs, None)
            except (ShapeError, NotImplementedError, KeyError, TypeError, ValueError) as e:
                raise error_at(where[id(instr)], f"cannot infer the shape of '{instr.name}' "
                                                 f"({instr.opcode}): {e}; write it") from None


# Attributes XLA's parser lets a scalar operand leave out, and their value then.
_SCALAR_DEFAULTS = {"broadcast": ("dimensions", ()), "reduce-window": ("window", ())}


def _fill_scalar_defaults(instr: HloInstruction) -> None:
    default = _SCALAR_DEFAULTS.get(instr.opcode)
    if default is None or default[0] in instr.attrs or not instr.operands:
        return
    operand = instr.operands[0].shape
    if isinstance(operand, ArrayShape) and operand.rank == 0:
        instr.attrs[default[0]] = default[1]


def _callees_first(module: HloModule) -> list[HloComputation]:
    order: list[HloComputation] = []
    seen: set[int] = set()

    def visit(comp: HloComputation) -> None:
        stack = [(comp, iter(_callees(comp)))]
        seen.add(id(comp))
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(node)
                stack.pop()
            elif id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append((nxt, iter(_callees(nxt))))

    for comp in module.computations:
        if id(comp) not in seen:
            visit(comp)
    return order


def _callees(comp: HloComputation) -> list[HloComputation]:
    return [c for instr in comp.instructions for c in instr.called_computations()
            if isinstance(c, HloComputation)]


def scope_instruction_names(module: HloModule) -> None:
    """Rename each instruction whose name an earlier computation (the ENTRY computation
    first, then the text's order) already uses to `name.N`, a name used nowhere in the
    module; control-predecessors lists follow their computation's renames."""
    every = {i.name for c in module.computations for i in c.instructions}
    claimed: set[str] = set()
    order = sorted(module.computations, key=lambda c: c is not module.entry)
    for comp in order:
        renamed: dict[str, str] = {}
        for instr in comp.instructions:
            if instr.name in claimed:
                base, n = instr.name, 1
                while f"{base}.{n}" in every:
                    n += 1
                renamed[instr.name] = instr.name = f"{base}.{n}"
                every.add(instr.name)
            claimed.add(instr.name)
        if renamed:
            for instr in comp.instructions:
                preds = instr.attrs.get("control-predecessors")
                if preds:
                    instr.attrs["control-predecessors"] = tuple(renamed.get(p, p) for p in preds)
