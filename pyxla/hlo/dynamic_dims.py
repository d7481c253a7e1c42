"""Dynamic dimensions read from HLO text (`f32[?,32]`, `f32[<=128,32]`), and the rule that
only static modules compile.

The text keeps neither symbols nor how dimensions relate: the parser gives each `?` / `<=N`
a fresh anonymous symbol (dims.anonymous_symbol). So that a module read from text verifies,
each instruction's shape is unified with what the registry's shape rule infers from its
operands as the module is read (`unify_text_dimensions`): a written dynamic dimension takes
the inferred expression when that prints the same (`?`, or the same `<=N`), so that
`exponential(p)` has p's symbol rather than one of its own. What a shape rule cannot infer
(a parameter's sizes, an iota's, a broadcast's new dimensions) keeps its own symbol; a
dynamic dimension crossing into a called computation (a while loop's state) is not unified.

No backend compiles a symbolic shape: a module traced with symbolic sizes is specialised
first (passes/dynamic_padder), one read from text runs through
frontend/dynamic_module.py (which does that per bucket of the arguments' sizes).
`require_static_shapes` says so at compile time, naming the first instruction with a
symbolic shape.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ShapeError
from .dims import DimExpr, InconclusiveDimensionOperation, is_anonymous, single_symbol
from .shape import ArrayShape, Shape, TupleShape, describe_shape

if TYPE_CHECKING:
    from .instruction import HloInstruction
    from .module import HloModule


def _anonymous_dim(d: object) -> bool:
    """A dimension written in text as `?` or `<=N`: one anonymous symbol, nothing else."""
    symbol = single_symbol(d)
    return symbol is not None and is_anonymous(symbol)


def has_text_dynamic(shape: Shape) -> bool:
    """Whether `shape` has a dimension read from text as `?` or `<=N`."""
    if isinstance(shape, TupleShape):
        return any(has_text_dynamic(e) for e in shape.elements)
    return isinstance(shape, ArrayShape) and any(_anonymous_dim(d) for d in shape.dims)


def _symbolic(shape: Shape) -> bool:
    if isinstance(shape, TupleShape):
        return any(_symbolic(e) for e in shape.elements)
    return isinstance(shape, ArrayShape) and not shape.is_static


def compatible_as_text(a: Shape, b: Shape) -> bool:
    """Equal ignoring layouts; where either has a dimension read from text, equal as text
    (a `?` matches any unbounded symbolic dimension, `<=N` any with the bound N)."""
    if a.compatible(b):
        return True
    return (has_text_dynamic(a) or has_text_dynamic(b)) and a.to_text(False) == b.to_text(False)


def _merged(written: Shape, inferred: Shape) -> Shape | None:
    """`written` with each dynamic dimension replaced by the inferred one, when the two are the
    same shape as text; None when they differ."""
    if isinstance(written, TupleShape) and isinstance(inferred, TupleShape):
        if len(written.elements) != len(inferred.elements):
            return None
        elements = [_merged(w, i) for w, i in zip(written.elements, inferred.elements)]
        return None if any(e is None for e in elements) else TupleShape(tuple(e for e in elements if e is not None))
    if isinstance(written, ArrayShape) and isinstance(inferred, ArrayShape):
        if written.dtype != inferred.dtype or written.rank != inferred.rank:
            return None
        dims = []
        for w, i in zip(written.dims, inferred.dims):
            if _anonymous_dim(w) and isinstance(i, DimExpr) and ArrayShape(written.dtype, (w,)).to_text() == \
                    ArrayShape(written.dtype, (i,)).to_text():
                dims.append(i)
            elif w == i:
                dims.append(w)
            else:
                return None
        return ArrayShape(written.dtype, tuple(dims), written.layout)
    return written if written.compatible(inferred) else None


def _candidate(instr: HloInstruction) -> Shape:
    """The written shape with the dynamic dimensions the operands determine filled in, for the
    opcodes whose shape rule takes dimensions from the written shape."""
    written = instr.shape
    if not isinstance(written, ArrayShape) or not instr.operands:
        return written
    operand = instr.operands[0].shape
    if not isinstance(operand, ArrayShape):
        return written
    dims = list(written.dims)
    if instr.opcode == "broadcast":
        for i, d in enumerate(instr.attrs.get("dimensions", ())):
            if i < operand.rank and 0 <= d < len(dims) and _anonymous_dim(dims[d]):
                dims[d] = operand.dims[i]
    elif instr.opcode == "reshape":
        unknown = [k for k, d in enumerate(dims) if _anonymous_dim(d)]
        if len(unknown) == 1:
            rest = 1
            for k, d in enumerate(dims):
                if k != unknown[0]:
                    rest = rest * d
            try:
                dims[unknown[0]] = operand.size // rest
            except (InconclusiveDimensionOperation, ZeroDivisionError):
                return written
    elif operand.rank == written.rank and instr.opcode in ("convert", "bitcast-convert", "reduce-precision",
                                                          "set-dimension-size", "copy"):
        kept = tuple(instr.attrs.get("dimensions", ())) if instr.opcode == "set-dimension-size" else ()
        dims = [o if _anonymous_dim(w) and k not in kept else w for k, (w, o) in enumerate(zip(dims, operand.dims))]
    else:
        return written
    return ArrayShape(written.dtype, tuple(dims), written.layout)


def unify_text_dimensions(instr: HloInstruction) -> None:
    """Give `instr` the dimensions its shape rule infers where its written shape has `?` /
    `<=N` (see the module doc); left as written when the rule does not agree."""
    if not (has_text_dynamic(instr.shape) or any(_symbolic(s) for s in instr.operand_shapes())):
        return
    from .ops import op_def
    try:
        record = op_def(instr.opcode)
    except NotImplementedError:
        return
    for declared in (_candidate(instr), None):
        try:
            inferred = record.shape(instr.operand_shapes(), instr.attrs, declared)
        except (ShapeError, InconclusiveDimensionOperation, KeyError, TypeError, ValueError, IndexError):
            continue
        merged = _merged(instr.shape, inferred)
        if merged is not None:
            instr.shape = merged
            return


def require_static_shapes(module: HloModule) -> None:
    """Raise NotImplementedError when an instruction of `module` has a symbolic shape."""
    for comp in module.computations:
        for instr in comp.instructions:
            if not _symbolic(instr.shape):
                continue
            if has_text_dynamic(instr.shape):
                raise NotImplementedError(
                    f"{instr.describe()} has the dynamic shape {instr.shape.to_text(False)}: a module with "
                    "dynamic dimensions read from text runs through pyxla.frontend.dynamic_module."
                    "compile_dynamic (what `pyxla run` does), which reads the sizes from the arguments and "
                    "compiles one padded module per bucket of sizes")
            raise NotImplementedError(
                f"module {module.name} has symbolic shapes ({instr.describe()} is {describe_shape(instr.shape)}): "
                "specialise it to a bucket of sizes with pyxla.passes.dynamic_padder.pad_to_bounds before "
                "compiling")
