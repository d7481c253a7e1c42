"""HLO the CPU backend rewrites before the compiler driver, into opcodes it emits.

- Every opcode with an expansion in its registry record (map, stochastic-convert, the
  one-device collectives, dynamic-size queries, cholesky, triangular-solve, rng, ...)
  becomes that expansion, the graph the evaluator runs for it too; the loops of an
  expansion are filed as computations before their caller.
- A while whose body gives back its state unchanged is its operand: XLA's while-loop
  simplifier removes such a loop (run, it would end at once or never), and compiled it
  would spin forever where the evaluator stops.
- Tokens hold no data: after-all becomes an empty tuple, and every token in a shape (a
  loop's state, a tuple, a computation's parameter) the empty tuple (), which the backend
  keeps as a value of no arrays.
- A dot or convolution of two operand types (s8 x s16, f16 x f32) gets its operands
  converted to the result type, as XLA's operand upcaster does; the kernels take one type.
- A dot or convolution of f16 or bf16 operands is computed in f32 between converts, as
  XLA's CPU compiler does: the GEMM and convolution kernels are f32/f64, and the elemental
  loops (which also sum in f32, the half types' compute type) ran a bf16 256x256x256 product
  50x slower than its f32 GEMM. The sums are the same f32 sums in another order; the result
  is rounded to the half type once.
"""
from __future__ import annotations

from ...hlo.computation import HloComputation
from ...hlo.expansion import expand_instructions
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops import has_side_effects
from ...hlo.shape import Shape, TokenShape, TupleShape
from ...hlo.types import F32


def lower_for_cpu(module: HloModule) -> bool:
    """Rewrite `module` in place; whether anything changed."""
    def add_computation(new: HloComputation, caller: HloComputation) -> None:
        module.add_computation(new)
        module.computations.remove(new)
        module.computations.insert(module.computations.index(caller), new)

    changed = expand_instructions(module.computations, module.fresh_name, add_computation=add_computation)
    changed = _remove_identity_loops(module) or changed
    changed = _tokens_as_empty_tuples(module) or changed
    changed = _upcast_mixed_operands(module) or changed
    return _half_products_in_f32(module) or changed


def _remove_identity_loops(module: HloModule) -> bool:
    changed = False
    for comp in module.computations:
        for instr in list(comp.instructions):
            if instr.opcode == "while" and _gives_back_its_state(instr.attrs["body"]):
                comp.replace_instruction(instr, instr.operands[0])
                changed = True
    return changed


def _gives_back_its_state(body: HloComputation) -> bool:
    (param,) = body.parameters
    root = body.root
    if any(has_side_effects(i) for i in body.instructions):
        return False
    if root is param:
        return True
    return (root is not None and root.opcode == "tuple" and isinstance(param.shape, TupleShape)
            and len(root.operands) == len(param.shape.elements)
            and all(op.opcode == "get-tuple-element" and op.operands[0] is param and op.attrs["index"] == i
                    for i, op in enumerate(root.operands)))


def _without_tokens(shape: Shape) -> Shape:
    if isinstance(shape, TokenShape):
        return TupleShape(())
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(_without_tokens(e) for e in shape.elements))
    return shape


def _holds_token(shape: Shape) -> bool:
    return isinstance(shape, TokenShape) or (isinstance(shape, TupleShape)
                                             and any(_holds_token(e) for e in shape.elements))


def _tokens_as_empty_tuples(module: HloModule) -> bool:
    changed = False
    for comp in module.computations:
        for instr in list(comp.instructions):
            if instr.opcode == "after-all":
                empty = comp.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", TupleShape(())))
                comp.replace_instruction(instr, empty)
                if instr.parent is comp and not instr.users and instr is not comp.root:
                    comp.remove_instruction(instr)
                changed = True
            elif _holds_token(instr.shape):
                instr.shape = _without_tokens(instr.shape)
                changed = True
        if changed:
            comp.sort_topologically()
    return changed


def _upcast_mixed_operands(module: HloModule) -> bool:
    changed = False
    for comp in module.computations:
        for instr in list(comp.instructions):
            if instr.opcode not in ("dot", "convolution"):
                continue
            lhs, rhs = instr.operands
            if lhs.array_shape.dtype == rhs.array_shape.dtype:
                continue
            result = instr.array_shape.dtype
            for operand in (lhs, rhs):
                if operand.array_shape.dtype != result:
                    convert = comp.add_instruction(HloInstruction(
                        module.fresh_name("convert"), "convert", operand.array_shape.with_dtype(result), [operand]))
                    instr.replace_operand(operand, convert)
            changed = True
        if changed:
            comp.sort_topologically()
    return changed


HALF_TYPES = ("f16", "bf16")


def _half_products_in_f32(module: HloModule) -> bool:
    changed = False
    for comp in module.computations:
        for instr in list(comp.instructions):
            if instr.opcode not in ("dot", "convolution") or instr.array_shape.dtype.name not in HALF_TYPES + ("f32",) \
                    or not all(op.array_shape.dtype.name in HALF_TYPES for op in instr.operands):
                continue
            wide = [comp.add_instruction(HloInstruction(module.fresh_name("convert"), "convert",
                                                        op.array_shape.with_dtype(F32), [op]))
                    for op in instr.operands]
            result = instr.array_shape
            product = comp.add_instruction(HloInstruction(module.fresh_name(instr.opcode), instr.opcode,
                                                          result.with_dtype(F32), wide, instr.attrs))
            narrow = product if result.dtype == F32 else comp.add_instruction(HloInstruction(
                module.fresh_name("convert"), "convert", result, [product]))
            comp.replace_instruction(instr, narrow)
            changed = True
        if changed:
            comp.sort_topologically()
    return changed
