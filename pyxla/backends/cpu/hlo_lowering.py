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
- A dot or convolution of 8- and 16-bit integers is computed in f64 between converts when
  every sum is exact there (each term's magnitude times the number of terms below 2**53,
  always for 8 bits), then wrapped to the result type through s64: the same integers as the
  wrapping integer sum (a quantized model's MatMulInteger), on the GEMM and convolution
  kernels instead of elemental loops (s8 256x256x256: 11 ms before).
"""
from __future__ import annotations

from ...hlo.computation import HloComputation
from ...hlo.expansion import expand_instructions
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops import has_side_effects
from ...hlo.shape import Shape, TokenShape, TupleShape
from ...hlo.types import F32, F64, S64, integer_limits


def lower_for_cpu(module: HloModule) -> bool:
    """Rewrite `module` in place; whether anything changed."""
    def add_computation(new: HloComputation, caller: HloComputation) -> None:
        module.add_computation(new)
        module.computations.remove(new)
        module.computations.insert(module.computations.index(caller), new)

    changed = expand_instructions(module.computations, module.fresh_name, add_computation=add_computation)
    changed = _remove_identity_loops(module) or changed
    changed = _tokens_as_empty_tuples(module) or changed
    changed = _narrow_integer_products_in_f64(module) or changed
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
                    instr.replace_operand(operand, _convert(module, comp, operand, result))
            changed = True
        if changed:
            comp.sort_topologically()
    return changed


HALF_TYPES = ("f16", "bf16")
NARROW_INTEGERS = ("s8", "u8", "s16", "u16")


def _terms(instr: HloInstruction) -> int:
    """At most how many products one result element sums: a dot's contracting size; for a
    convolution, every element of its input (each term reads a different one)."""
    lhs = instr.operands[0].array_shape
    if instr.opcode == "dot":
        terms = 1
        for d in instr.attrs.get("lhs_contracting_dims", ()):
            terms *= lhs.dims[d]
        return terms
    return max(1, lhs.size)


def _exact_in_f64(instr: HloInstruction) -> bool:
    types = [op.array_shape.dtype for op in instr.operands]
    if not all(t.name in NARROW_INTEGERS for t in types) or instr.array_shape.dtype.name[0] not in "su":
        return False
    largest = [max(abs(v) for v in integer_limits(t)) for t in types]
    return largest[0] * largest[1] * _terms(instr) < 2 ** 53


def _replace_products(module: HloModule, replacement) -> bool:
    """Each dot and convolution for which replacement(comp, instr) gives an instruction (added
    to comp) replaced by it; whether any was."""
    changed = False
    for comp in module.computations:
        replaced = False
        for instr in list(comp.instructions):
            new = replacement(comp, instr) if instr.opcode in ("dot", "convolution") else None
            if new is not None:
                comp.replace_instruction(instr, new)
                replaced = True
        if replaced:
            comp.sort_topologically()
        changed = changed or replaced
    return changed


def _narrow_integer_products_in_f64(module: HloModule) -> bool:
    def in_f64(comp, instr):
        if not _exact_in_f64(instr):
            return None
        exact = _convert(module, comp, _product_in(module, comp, instr, F64), S64)
        return _convert(module, comp, exact, instr.array_shape.dtype)
    return _replace_products(module, in_f64)


def _convert(module: HloModule, comp: HloComputation, x: HloInstruction, t) -> HloInstruction:
    return comp.add_instruction(HloInstruction(module.fresh_name("convert"), "convert",
                                               x.array_shape.with_dtype(t), [x]))


def _product_in(module: HloModule, comp: HloComputation, instr: HloInstruction, t) -> HloInstruction:
    """A copy of the dot or convolution `instr` computing in type `t`, its operands converted."""
    wide = [_convert(module, comp, op, t) for op in instr.operands]
    return comp.add_instruction(HloInstruction(module.fresh_name(instr.opcode), instr.opcode,
                                               instr.array_shape.with_dtype(t), wide, instr.attrs))


def _half_products_in_f32(module: HloModule) -> bool:
    def in_f32(comp, instr):
        if instr.array_shape.dtype.name not in HALF_TYPES + ("f32",) or \
                not all(op.array_shape.dtype.name in HALF_TYPES for op in instr.operands):
            return None
        product = _product_in(module, comp, instr, F32)
        return product if instr.array_shape.dtype == F32 else _convert(module, comp, product, instr.array_shape.dtype)
    return _replace_products(module, in_f32)
