"""The HLO verifier: checks a module against the opcode registry and HLO's structural rules.

It runs after parsing, after building and (under tests or PYXLA_VERIFY=1) after every
pass. Every problem is a VerifierError naming the computation and the instruction, with the
instruction's source location when its metadata has one.
"""
from __future__ import annotations

from typing import cast

from ..errors import ShapeError, VerifierError
from .attributes import NON_SEMANTIC_ATTRIBUTES
from .computation import HloComputation
from .dynamic_dims import compatible_as_text
from .instruction import HloInstruction
from .module import HloModule
from .ops import op_def
from .shape import ArrayShape, Shape, TupleShape, describe_shape


def verify_module(module: HloModule) -> None:
    if module.entry is None:
        raise VerifierError(f"module {module.name} has no ENTRY computation")
    if module.entry not in module.computations:
        raise VerifierError(f"module {module.name}: ENTRY {module.entry.name} is not among its computations")
    _check_entry_layout(module)
    names: dict[str, HloComputation] = {}
    for comp in module.computations:
        if comp.name in names:
            raise VerifierError(f"module {module.name}: two computations are named {comp.name}")
        names[comp.name] = comp
    seen_instructions: dict[str, HloComputation] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.name in seen_instructions:
                raise VerifierError(f"instruction name %{instr.name} is used in both "
                                    f"{seen_instructions[instr.name].name} and {comp.name}")
            seen_instructions[instr.name] = comp
        verify_computation(comp, module)
    _check_no_recursion(module)


def _check_entry_layout(module: HloModule) -> None:
    """The header's entry_computation_layout, where given, is the ENTRY computation's signature
    (its layouts aside: tiles and memory spaces are a device's business)."""
    text = module.header_attrs.get("entry_computation_layout")
    entry = module.entry
    if text is None or entry is None or entry.root is None:
        return
    from ..errors import ParseError
    from .parser import parse_program_shape
    try:
        params, result = parse_program_shape(text)
    except ParseError as e:
        raise VerifierError(f"module {module.name}: entry_computation_layout={text} does not parse: "
                            f"{e.message}") from None
    actual = entry.parameter_shapes()
    if len(params) != len(actual) or not all(compatible_as_text(a, b) for a, b in zip(params, actual)) \
            or not compatible_as_text(result, entry.result_shape):
        signature = TupleShape(tuple(actual)).to_text(False) + "->" + entry.result_shape.to_text(False)
        raise VerifierError(f"module {module.name}: entry_computation_layout={text} does not match "
                            f"the signature of ENTRY computation {entry.name}, {signature}")


def verify_computation(comp: HloComputation, module: HloModule | None = None) -> None:
    if comp.root is None:
        raise VerifierError(f"computation {comp.name} has no ROOT")
    members = {id(i) for i in comp.instructions}
    if id(comp.root) not in members:
        raise VerifierError(f"computation {comp.name}: ROOT %{comp.root.name} is not one of its instructions")
    _check_parameters(comp)
    for instr in comp.instructions:
        for op in instr.operands:
            if id(op) not in members:
                raise VerifierError(f"{instr.describe()}: operand %{op.name} belongs to another computation")
        if module is not None:
            for callee in instr.called_computations():
                if callee not in module.computations:
                    raise VerifierError(f"{instr.describe()}: calls {callee.name}, which is not in the module")
        verify_instruction(instr)
    _check_acyclic(comp)


def verify_instruction(instr: HloInstruction) -> None:
    """One instruction against its opcode's record: operand count, attributes and shape."""
    try:
        record = op_def(instr.opcode)
    except NotImplementedError as e:
        raise VerifierError(f"{instr.describe()}: {e}") from None
    problem = record.check_arity(len(instr.operands))
    if problem:
        raise VerifierError(f"{instr.describe()}: {problem}")
    for name in record.required_attrs:
        if name not in instr.attrs:
            raise VerifierError(f"{instr.describe()}: missing attribute {name}=")
    allowed = record.allowed_attrs
    for name in instr.attrs:
        if name not in allowed and name not in NON_SEMANTIC_ATTRIBUTES:
            raise VerifierError(f"{instr.describe()}: {instr.opcode} has no attribute {name}=")
    _check_layouts(instr, instr.shape)
    try:
        inferred = record.shape(instr.operand_shapes(), instr.attrs, instr.shape)
        # Facts the shape rule cannot see (a constant's literal) are checked by the record's hook.
        check_instruction = record.extra.get("check_instruction")
        if check_instruction is not None:
            check_instruction(instr)
    except ShapeError as e:
        raise VerifierError(f"{instr.describe()}: {e}") from None
    if not inferred.compatible(instr.shape):
        raise VerifierError(f"{instr.describe()}: shape is {describe_shape(instr.shape)}, "
                            f"but its operands and attributes give {describe_shape(inferred)}")


def _check_layouts(instr: HloInstruction, shape: Shape) -> None:
    if isinstance(shape, TupleShape):
        for e in shape.elements:
            _check_layouts(instr, e)
    elif isinstance(shape, ArrayShape):
        if any(d < 0 for d in shape.dims):
            raise VerifierError(f"{instr.describe()}: negative dimension in {shape.to_text()}")
        if shape.layout is not None and sorted(shape.layout) != list(range(shape.rank)):
            raise VerifierError(f"{instr.describe()}: layout {{{','.join(map(str, shape.layout))}}} "
                                f"is not a permutation of the {shape.rank} dimensions of {shape.to_text(False)}")


def _check_parameters(comp: HloComputation) -> None:
    numbers = sorted(cast(int, p.parameter_number) for p in comp.instructions if p.opcode == "parameter")
    if numbers != list(range(len(numbers))):
        raise VerifierError(f"computation {comp.name}: parameter numbers are {numbers}, "
                            f"expected 0..{len(numbers) - 1} each once")


def _check_acyclic(comp: HloComputation) -> None:
    state: dict[int, int] = {}   # 1 = on the current path, 2 = done
    for start in comp.instructions:
        if id(start) in state:
            continue
        stack = [(start, iter(start.operands))]
        state[id(start)] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[id(node)] = 2
                stack.pop()
            elif state.get(id(nxt)) == 1:
                raise VerifierError(f"computation {comp.name}: %{nxt.name} depends on itself through %{node.name}")
            elif id(nxt) not in state:
                state[id(nxt)] = 1
                stack.append((nxt, iter(nxt.operands)))


def _check_no_recursion(module: HloModule) -> None:
    state: dict[int, int] = {}

    def visit(comp: HloComputation, path: list[str]) -> None:
        if state.get(id(comp)) == 2:
            return
        if state.get(id(comp)) == 1:
            raise VerifierError("computations call themselves: " + " -> ".join(path + [comp.name]))
        state[id(comp)] = 1
        for instr in comp.instructions:
            for callee in instr.called_computations():
                visit(callee, path + [comp.name])
        state[id(comp)] = 2

    for comp in module.computations:
        visit(comp, [])
