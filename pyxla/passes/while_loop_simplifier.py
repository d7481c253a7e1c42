"""While-loop simplification.

- A loop whose trip count is known at compile time to be 0 is its initial state; one
  whose trip count is 1 is its body applied once (inlined).
- Loop state elements that neither the condition, the rest of the state nor any user after
  the loop reads are removed from the state.
- Loop-invariant code motion: an expensive instruction of the body that depends only on
  state elements the body passes through unchanged is computed once before the loop and
  carried in the state instead.

Trip counts are recognised in the form front ends emit: an integer counter starting at a
constant, incremented by a positive constant, compared LT/LE/GT/GE against a constant.
"""
from __future__ import annotations

import math

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction, uniform_value
from ..hlo.module import HloModule
from ..hlo.ops import has_side_effects
from ..hlo.shape import ArrayShape, TupleShape
from .call_inliner import inline_computation
from .dce import remove_dead_instructions
from .hlo_pass import hlo_pass

# Not worth hoisting: free or cheaper to recompute than to carry.
CHEAP = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "broadcast", "reshape", "bitcast",
                   "iota", "copy", "transpose", "slice"})


def _gte_index(instr: HloInstruction, param: HloInstruction) -> int | None:
    if instr.opcode == "get-tuple-element" and instr.operands[0] is param:
        return instr.attrs["index"]
    return None


def _callers(module: HloModule) -> dict[int, int]:
    count: dict[int, int] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            for callee in instr.called_computations():
                count[id(callee)] = count.get(id(callee), 0) + 1
    return count


# --- trip count ---------------------------------------------------------------------------------

def known_trip_count(loop: HloInstruction) -> int | None:
    init = loop.operands[0]
    cond: HloComputation = loop.attrs["condition"]
    body: HloComputation = loop.attrs["body"]
    body_root, cmp = body.root, cond.root
    assert body_root is not None and cmp is not None
    if init.opcode != "tuple" or body_root.opcode != "tuple":
        return None
    if cmp.opcode != "compare":
        return None
    (cparam,) = cond.parameters
    (bparam,) = body.parameters
    lhs, rhs = cmp.operands
    direction = cmp.attrs["direction"]
    k = _gte_index(lhs, cparam)
    limit_instr = rhs
    if k is None:
        k = _gte_index(rhs, cparam)
        limit_instr = lhs
        direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
    if k is None or direction not in ("LT", "LE"):
        return None
    limit = uniform_value(limit_instr)
    start = uniform_value(init.operands[k])
    update = body_root.operands[k]
    if limit is None or start is None or update.opcode != "add" or not init.operands[k].array_shape.dtype.is_integral:
        return None
    a, b = update.operands
    counter, step_instr = (a, b) if _gte_index(a, bparam) == k else (b, a)
    if _gte_index(counter, bparam) != k:
        return None
    step = uniform_value(step_instr)
    if step is None or int(step) <= 0:
        return None
    end = int(limit) + (1 if direction == "LE" else 0)
    return max(0, math.ceil((end - int(start)) / int(step)))


# --- dead state -----------------------------------------------------------------------------------

def _reads(comp: HloComputation, roots: list[HloInstruction]) -> set[int] | None:
    """State indices reachable from `roots` in `comp`; None when the parameter is used whole."""
    (param,) = comp.parameters
    found: set[int] = set()
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        instr = stack.pop()
        if id(instr) in seen:
            continue
        seen.add(id(instr))
        if instr is param:
            return None
        idx = _gte_index(instr, param)
        if idx is not None:
            found.add(idx)
            continue
        stack.extend(instr.operands)
    return found


def _live_state(loop: HloInstruction) -> set[int] | None:
    n = len(loop.tuple_shape.elements)
    cond: HloComputation = loop.attrs["condition"]
    body: HloComputation = loop.attrs["body"]
    assert loop.parent is not None and cond.root is not None and body.root is not None
    if any(u.opcode != "get-tuple-element" for u in loop.users) or loop.parent.root is loop:
        return None
    live = {u.attrs["index"] for u in loop.users}
    cond_reads = _reads(cond, [cond.root])
    if cond_reads is None or body.root.opcode != "tuple":
        return None
    live |= cond_reads
    side = [i for i in body.instructions if has_side_effects(i)]
    side_reads = _reads(body, side) if side else set()
    if side_reads is None:
        return None
    live |= side_reads
    while True:
        reads = _reads(body, [body.root.operands[i] for i in live])
        if reads is None:
            return None
        if reads <= live:
            return live if len(live) < n else None
        live |= reads


def _restate(comp: HloComputation, keep: list[int], new_shape: TupleShape) -> None:
    """Give `comp`'s parameter the smaller state shape and renumber its get-tuple-elements."""
    (param,) = comp.parameters
    param.shape = new_shape
    position = {old: new for new, old in enumerate(keep)}
    for user in param.users:
        user.attrs["index"] = position[user.attrs["index"]]


def remove_dead_state(module: HloModule, loop: HloInstruction) -> bool:
    if not isinstance(loop.shape, TupleShape):
        return False   # an array state is one value: nothing to remove
    live = _live_state(loop)
    if live is None:
        return False
    keep = sorted(live)
    comp = loop.parent
    assert comp is not None
    init, cond, body = loop.operands[0], loop.attrs["condition"], loop.attrs["body"]
    shape = TupleShape(tuple(loop.tuple_shape.elements[i] for i in keep))
    new_init = comp.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", shape,
                                                   [_element(module, comp, init, i) for i in keep]))
    loop.replace_operand(init, new_init)
    body.root = body.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", shape,
                                                    [body.root.operands[i] for i in keep]))
    for c in (body, cond):   # the dead elements' readers go first, then the state shrinks
        remove_dead_instructions(c)
        _restate(c, keep, shape)
    position = {old: new for new, old in enumerate(keep)}
    for user in loop.users:
        user.attrs["index"] = position[user.attrs["index"]]
    loop.shape = shape
    for c in (comp, body, cond):
        c.sort_topologically()
    return True


def _element(module: HloModule, comp: HloComputation, tup: HloInstruction, i: int) -> HloInstruction:
    if tup.opcode == "tuple":
        return tup.operands[i]
    return comp.add_instruction(HloInstruction(module.fresh_name("get-tuple-element"), "get-tuple-element",
                                               tup.tuple_shape.elements[i], [tup], {"index": i}))


# --- loop-invariant code motion ------------------------------------------------------------------------

def hoist_invariants(module: HloModule, loop: HloInstruction) -> bool:
    body: HloComputation = loop.attrs["body"]
    cond: HloComputation = loop.attrs["condition"]
    assert body.root is not None
    if body.root.opcode != "tuple":
        return False
    (param,) = body.parameters
    passthrough = {i for i, op in enumerate(body.root.operands) if _gte_index(op, param) == i}
    invariant: set[int] = set()
    for instr in body.post_order():
        idx = _gte_index(instr, param)
        if idx is not None:
            if idx in passthrough:
                invariant.add(id(instr))
        elif instr.opcode == "constant" or (instr.operands and instr.opcode not in ("parameter", "rng-bit-generator")
                                             and not has_side_effects(instr)
                                             and not instr.called_computations()
                                             and all(id(o) in invariant for o in instr.operands)):
            invariant.add(id(instr))
    hoist = [i for i in body.post_order()
             if id(i) in invariant and i.opcode not in CHEAP and isinstance(i.shape, ArrayShape)
             and any(id(u) not in invariant or u is body.root for u in i.users)]
    if not hoist:
        return False
    comp = loop.parent
    assert comp is not None
    init = loop.operands[0]
    outside: dict[int, HloInstruction] = {}

    def copy_out(instr: HloInstruction) -> HloInstruction:
        if id(instr) in outside:
            return outside[id(instr)]
        idx = _gte_index(instr, param)
        if idx is not None:
            made = _element(module, comp, init, idx)
        else:
            made = comp.add_instruction(HloInstruction(module.fresh_name(instr.opcode), instr.opcode, instr.shape,
                                                       [copy_out(o) for o in instr.operands], dict(instr.attrs),
                                                       literal=instr.literal))
        outside[id(instr)] = made
        return made

    n = len(loop.tuple_shape.elements)
    extra = [copy_out(h) for h in hoist]
    shape = TupleShape(loop.tuple_shape.elements + tuple(h.shape for h in hoist))
    new_init = comp.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", shape,
                                                   [_element(module, comp, init, i) for i in range(n)] + extra))
    loop.replace_operand(init, new_init)
    param.shape = shape
    (cparam,) = cond.parameters
    cparam.shape = shape
    carried = []
    for k, h in enumerate(hoist):
        gte = body.add_instruction(HloInstruction(module.fresh_name("get-tuple-element"), "get-tuple-element",
                                                  h.shape, [param], {"index": n + k}))
        body.replace_all_uses(h, gte)
        carried.append(gte)
    old_root = body.root
    body.root = body.add_instruction(HloInstruction(module.fresh_name("tuple"), "tuple", shape,
                                                    list(old_root.operands) + carried))
    remove_dead_instructions(body)
    loop.shape = shape
    for c in (comp, body):
        c.sort_topologically()
    return True


@hlo_pass("while-loop-simplifier")
def while_loop_simplifier(module: HloModule) -> bool:
    """Remove loops of 0 or 1 trips, dead loop state, and loop-invariant work from bodies."""
    changed = False
    for comp in list(module.computations):
        for loop in [i for i in comp.post_order() if i.opcode == "while"]:
            trips = known_trip_count(loop)
            if trips == 0:
                comp.replace_instruction(loop, loop.operands[0])
                changed = True
                continue
            if trips == 1:
                comp.replace_instruction(loop, inline_computation(module, comp, loop.attrs["body"], loop.operands))
                comp.sort_topologically()
                changed = True
                continue
            callers = _callers(module)
            if callers.get(id(loop.attrs["body"])) != 1 or callers.get(id(loop.attrs["condition"])) != 1:
                continue   # shared computations: changing their state shape would break the other loop
            for _ in range(4):   # hoisting can leave a state element dead, removing one frees nothing more
                did = remove_dead_state(module, loop)
                did |= isinstance(loop.shape, TupleShape) and hoist_invariants(module, loop)
                changed |= did
                if not did:
                    break
    if changed:
        module.computations = module.reachable_computations()
    return changed
