"""The dynamic padder's machinery: the size parameters, masks built from them, and the walk
that hands each instruction with symbolic dimensions to its opcode's rewrite."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...hlo.computation import HloComputation
from ...hlo.dims import Dim, DimExpr
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops import op_def
from ...hlo.shape import ArrayShape, Shape, TupleShape, flatten_shape
from ...hlo.types import PRED, S32

SIZE_TYPE = S32


def dims_in(value: Any) -> Iterable[DimExpr]:
    """Every DimExpr inside a shape or an attribute value."""
    if isinstance(value, DimExpr):
        yield value
    elif isinstance(value, ArrayShape):
        for d in value.dims:
            if isinstance(d, DimExpr):
                yield d
    elif isinstance(value, TupleShape):
        for e in value.elements:
            yield from dims_in(e)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from dims_in(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from dims_in(getattr(value, f.name))



# --- the rewrites -----------------------------------------------------------------------------

def symbolic(d: Dim) -> bool:
    return isinstance(d, DimExpr)


def has_symbolic(shape: Shape) -> bool:
    return any(True for _ in dims_in(shape))


class Padder:
    """Rewrites one module's computations; instructions added keep symbolic shapes until
    `_substitute` makes the whole module static."""

    def __init__(self, module: HloModule, entry: HloComputation, names: list[str], bounds: dict[str, int],
                 handlers: Mapping[str, Any]):
        self.module = module
        self.handlers = handlers   # opcode -> rewrite(padder, computation, instruction) -> changed
        self.bounds = bounds
        self.entry = entry
        self.names = names
        first = len(entry.parameters)
        params: dict[str, HloInstruction] = {}
        for i, name in enumerate(names):
            param = HloInstruction(module.fresh_name(f"size_{name}"), "parameter", ArrayShape(SIZE_TYPE, ()),
                                   parameter_number=first + i)
            params[name] = entry.add_instruction(param)
        self.params = params   # symbol name -> its ENTRY size parameter
        self.mask_dims: dict[int, tuple[int, ...]] = {}   # id of a mask -> the dimensions it defines the padding of
        # Where each computation reads the actual sizes: ENTRY from its parameters, a loop's
        # body and condition from the loop state they are threaded through (_while).
        self.sources: dict[int, dict[str, HloInstruction]] = {id(entry): params}
        self.sizes: dict[tuple[int, DimExpr], HloInstruction] = {}

    def run(self) -> None:
        """Rewrite every computation, callers before callees (a loop threads the sizes into
        its body before the body is rewritten)."""
        done: set[int] = set()
        queue = [self.entry]
        while queue:
            comp = queue.pop(0)
            if id(comp) in done:
                continue
            done.add(id(comp))
            self.rewrite(comp)
            queue.extend(callee for instr in comp.instructions for callee in instr.called_computations())
        for comp in list(self.module.computations):
            if id(comp) not in done:
                self.rewrite(comp)

    # -- building blocks -----------------------------------------------------------------------
    def add(self, comp: HloComputation, opcode: str, shape: Shape, operands: Iterable[HloInstruction] = (),
            **attrs: Any) -> HloInstruction:
        return comp.add_instruction(HloInstruction(self.module.fresh_name(opcode), opcode, shape, operands, attrs))

    def constant(self, comp: HloComputation, value: Any, dtype) -> HloInstruction:
        literal = np.asarray(value).astype(dtype.np_dtype)
        return comp.add_instruction(HloInstruction(self.module.fresh_name("constant"), "constant",
                                                   ArrayShape(dtype, ()), literal=literal))

    def size(self, comp: HloComputation, value: Dim, user: HloInstruction, dtype=SIZE_TYPE) -> HloInstruction:
        """An instruction computing the actual value of size `value` (a scalar of `dtype`)."""
        if not isinstance(value, DimExpr):
            return self.constant(comp, int(value), dtype)
        source = self.sources.get(id(comp))
        if source is None:
            raise NotImplementedError(
                f"dynamic padder: {user.describe()} needs the actual value of the symbolic size {value}, "
                f"but it is inside the called computation {comp.name}, which has no size parameters (only the "
                "ENTRY computation and the bodies and conditions of its loops have them)")
        key = (id(comp), value)
        if key not in self.sizes:
            total: HloInstruction | None = None
            scalar = ArrayShape(SIZE_TYPE, ())
            for monomial, coefficient in sorted(value.terms.items(), key=lambda mc: len(mc[0])):
                factors = [source[s.name] for s, p in monomial for _ in range(p)]
                if coefficient != 1 or not factors:
                    factors.append(self.constant(comp, coefficient, SIZE_TYPE))
                term = factors[0]
                for f in factors[1:]:
                    term = self.add(comp, "multiply", scalar, (term, f))
                total = term if total is None else self.add(comp, "add", scalar, (total, term))
            assert total is not None
            self.sizes[key] = total
        result = self.sizes[key]
        if dtype != SIZE_TYPE:
            result = self.add(comp, "convert", ArrayShape(dtype, ()), (result,))
        return result

    def valid(self, comp: HloComputation, shape: ArrayShape, dims: Iterable[int],
              user: HloInstruction) -> HloInstruction | None:
        """pred[shape]: true where every index along `dims` (those that are symbolic) is
        below the actual size; None when none of `dims` is symbolic."""
        mask: HloInstruction | None = None
        index_shape = ArrayShape(SIZE_TYPE, shape.dims)
        pred_shape = ArrayShape(PRED, shape.dims)
        for d in dims:
            if not symbolic(shape.dims[d]):
                continue
            size = self.size(comp, shape.dims[d], user)
            iota = self.add(comp, "iota", index_shape, iota_dimension=d)
            limit = self.add(comp, "broadcast", index_shape, (size,), dimensions=())
            below = self.add(comp, "compare", pred_shape, (iota, limit), direction="LT")
            mask = below if mask is None else self.add(comp, "and", pred_shape, (mask, below))
        return mask

    def masked(self, comp: HloComputation, x: HloInstruction, dims: Iterable[int], fill: HloInstruction,
               user: HloInstruction) -> HloInstruction:
        """`x` with the padding along `dims` replaced by the scalar `fill`."""
        shape = x.array_shape
        mask = self.valid(comp, shape, dims, user)
        if mask is None:
            return x
        filler = self.add(comp, "broadcast", shape.without_layout(), (fill,), dimensions=())
        result = self.add(comp, "select", shape.without_layout(), (mask, x, filler))
        self.mask_dims[id(result)] = tuple(d for d in dims if symbolic(shape.dims[d]))
        return result

    def zero(self, comp: HloComputation, dtype) -> HloInstruction:
        return self.constant(comp, 0, dtype)

    # -- the walk --------------------------------------------------------------------------------
    def rewrite(self, comp: HloComputation) -> None:
        changed = False
        for instr in comp.post_order():
            if instr.parent is not comp:
                continue   # replaced already
            shapes = [instr.shape, *instr.operand_shapes(), *(v for v in instr.attrs.values())]
            if not any(True for _ in dims_in(shapes)):
                continue
            handler = self.handlers.get(instr.opcode)
            if handler is not None:
                changed |= bool(handler(self, comp, instr))
            elif not _passes_through(instr):
                raise NotImplementedError(f"dynamic padder: {instr.opcode} with symbolic dimensions "
                                          f"({_symbolic_description(instr)}) is not supported: "
                                          f"{instr.describe()}")
        if changed:
            comp.sort_topologically()


def _symbolic_description(instr: HloInstruction) -> str:
    parts = []
    for what, shape in [("result", instr.shape)] + [(f"operand {i}", s) for i, s in enumerate(instr.operand_shapes())]:
        for k, leaf in enumerate(flatten_shape(shape)):
            if isinstance(leaf, ArrayShape) and not leaf.is_static:
                dims = ", ".join(f"dimension {d} is {e}" for d, e in enumerate(leaf.dims) if symbolic(e))
                parts.append(f"{what}{f' element {k}' if isinstance(shape, TupleShape) else ''}: {dims}")
    return "; ".join(parts) or "in its attributes"


# Opcodes whose results never depend on the padding of their operands beyond the same
# positions (or that only move whole values around).
_THROUGH = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "broadcast", "iota", "transpose",
                      "copy", "map", "opt-barrier", "after-all", "call",
                      "batch-norm-inference", "rng", "rng-bit-generator", "stochastic-convert"})


def _passes_through(instr: HloInstruction) -> bool:
    return instr.opcode in _THROUGH or op_def(instr.opcode).fusion_kind == "elementwise"


def refuse(instr: HloInstruction, why: str) -> NotImplementedError:
    return NotImplementedError(f"dynamic padder: {instr.describe()}: {why}")


