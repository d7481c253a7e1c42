"""The dynamic padder's rewrites of loops and conditionals: the actual sizes passed into the
computations they call, so that those build masks as ENTRY does."""
from __future__ import annotations

from typing import Any

from ...hlo.computation import HloComputation
from ...hlo.instruction import HloInstruction
from ...hlo.ops.control import branch_computations
from ...hlo.shape import ArrayShape, TupleShape, describe_shape
from .padder import SIZE_TYPE, Padder, dims_in, refuse
from .rewrites import set_operand

# --- loops ---------------------------------------------------------------------------------------

def mentions_symbols(comp: HloComputation, seen: set[int] | None = None) -> bool:
    """Whether `comp`, or a computation it calls, has a symbolic shape or attribute."""
    seen = set() if seen is None else seen
    if id(comp) in seen:
        return False
    seen.add(id(comp))
    for instr in comp.instructions:
        if any(True for _ in dims_in([instr.shape, *instr.attrs.values()])):
            return True
        if any(mentions_symbols(c, seen) for c in instr.called_computations()):
            return True
    return False


def _while(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Thread the actual sizes through the loop state, so that the body and the condition can
    build masks: the state gets one s32[] element per symbol, which the body passes on."""
    body, cond = instr.attrs["body"], instr.attrs["condition"]
    if id(comp) not in p.sources or not (mentions_symbols(body) or mentions_symbols(cond)):
        return False
    state = instr.shape
    if not isinstance(state, TupleShape):
        raise refuse(instr, f"a loop whose state {describe_shape(state)} is not a tuple cannot carry the "
                             "actual sizes its body needs")
    for c in (body, cond):
        if id(c) in p.sources:
            raise refuse(instr, f"the computation {c.name} serves another loop already; the sizes cannot be "
                                 "threaded through both")
        param = c.parameters[0]
        if any(u.opcode != "get-tuple-element" for u in param.users) or c.root is param:
            raise refuse(instr, f"the loop state is used whole in {c.name}, so the actual sizes cannot be "
                                 "added to it")
    n, scalar = len(state.elements), ArrayShape(SIZE_TYPE, ())
    extended = TupleShape(state.elements + (scalar,) * len(p.names))
    init = instr.operands[0]
    elements = [p.add(comp, "get-tuple-element", e, (init,), index=k) for k, e in enumerate(state.elements)]
    elements += [p.sources[id(comp)][name] for name in p.names]
    loop = p.add(comp, "while", extended, (p.add(comp, "tuple", extended, elements),), **instr.attrs)
    restored = p.add(comp, "tuple", state,
                     [p.add(comp, "get-tuple-element", e, (loop,), index=k) for k, e in enumerate(state.elements)])
    comp.replace_instruction(instr, restored)
    for c in (body, cond):
        param = c.parameters[0]
        param.shape = extended
        p.sources[id(c)] = {name: p.add(c, "get-tuple-element", scalar, (param,), index=n + i)
                            for i, name in enumerate(p.names)}
    root = body.root
    assert root is not None
    carried = [p.add(body, "get-tuple-element", e, (root,), index=k) for k, e in enumerate(state.elements)]
    body.root = p.add(body, "tuple", extended, carried + [p.sources[id(body)][name] for name in p.names])
    return True


def _conditional(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Pass the actual sizes to each branch that has symbolic shapes: its operand becomes
    (operand, sizes...), and the branch reads the operand and the sizes from that tuple."""
    branches = branch_computations(instr.attrs)
    needing = [i for i, branch in enumerate(branches) if mentions_symbols(branch)]
    if id(comp) not in p.sources or not needing:
        return False
    scalar = ArrayShape(SIZE_TYPE, ())
    sizes = [p.sources[id(comp)][name] for name in p.names]
    for i in needing:
        branch = branches[i]
        if id(branch) in p.sources or branches.count(branch) > 1:
            raise refuse(instr, f"the branch {branch.name} serves another conditional or branch already; the sizes "
                                 "cannot be passed to both")
        operand = instr.operands[1 + i]
        wrapped = p.add(comp, "tuple", TupleShape((operand.shape, *(scalar for _ in sizes))), (operand, *sizes))
        set_operand(instr, 1 + i, wrapped)
        param = branch.parameters[0]
        users = list(param.users)
        inner = p.add(branch, "get-tuple-element", param.shape, (param,), index=0)
        for user in users:
            user.replace_operand(param, inner)
        if branch.root is param:
            branch.root = inner
        param.shape = wrapped.shape
        p.sources[id(branch)] = {name: p.add(branch, "get-tuple-element", scalar, (param,), index=1 + k)
                                 for k, name in enumerate(p.names)}
    return True


CONTROL_FLOW_REWRITES: dict[str, Any] = {
    "while": _while,
    "conditional": _conditional,
}
