"""Control flow, calls and annotations.

  while(%a = %x, ...) cond {..} do {..}  -> while over a tuple of the loop values and of the
                                            values the regions capture (passed through unchanged)
  "stablehlo.case"(%i) ({..}, {..})      -> conditional branch_computations={..}: each branch takes
                                            a tuple of the values it captures
  "stablehlo.if"(%p) ({..}, {..})        -> conditional true_computation, false_computation
  call @f / func.call @f                  -> call to_apply=f
  composite "name" %a {decomposition = @f} -> the body of @f, inlined
  optimization_barrier                    -> opt-barrier of a tuple
  rng_bit_generator algorithm = X         -> rng-bit-generator algorithm=rng_x
  custom_call @Sharding, sdy.sharding_constraint -> the operand itself (annotations)
"""
from __future__ import annotations

from ..instruction import HloInstruction
from ..shape import TupleShape
from .converter import Emitter, free_values, handles, result_shape
from .ops_basic import enum_word
from .optree import Op, Region, Symbol, ValueRef

_IDENTITY_TARGETS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement"}
_RNG = {"DEFAULT": "rng_default", "THREE_FRY": "rng_three_fry", "PHILOX": "rng_philox"}


def _captures(em: Emitter, regions: list[Region], bound: set[str]) -> list[ValueRef]:
    seen: set[tuple[str, int]] = set()
    out: list[ValueRef] = []
    for region in regions:
        for ref in free_values(region):
            if ref.name not in bound and (ref.name, ref.index) not in seen:
                seen.add((ref.name, ref.index))
                em.lookup(ref)   # undefined here: an error at the use
                out.append(ref)
    return out


@handles("stablehlo.while")
def while_(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if len(op.regions) != 2:
        raise em.error(op, "while needs a cond and a body region")
    cond, body = op.regions
    names = [e[1] for g in op.groups for e in g if e[0] == "bind"]
    if not names:
        names = [a for a, _ in cond.blocks[0].args]
        body_names = [a for a, _ in body.blocks[0].args]
    else:
        body_names = names
    if len(names) != len(args) or len(body_names) != len(args):
        raise em.error(op, f"while has {len(args)} values but its regions take {len(names)}")
    shapes = [a.shape for a in args]
    captured = _captures(em, [cond, body], set(names) | set(body_names))
    cb, _, cond_results = em.tuple_region(cond, "while_cond", names, shapes, captured)
    cond_comp = cb.build(cond_results[0])
    bb, items, body_results = em.tuple_region(body, "while_body", body_names, shapes, captured)
    body_comp = bb.build(bb.tuple(*body_results, *items[len(args):]))
    state = em.b.tuple(*args, *[em.lookup(v) for v in captured])
    loop = em.b.op("while", state, shape=state.shape, condition=cond_comp, body=body_comp)
    return em.unpack(loop)[:len(args)]


def _branches(em: Emitter, op: Op, label: str) -> tuple[list, list[HloInstruction]]:
    """One computation per region over the values all branches capture, and the operands."""
    captured = _captures(em, op.regions, set())
    operand = em.b.tuple(*[em.lookup(v) for v in captured])
    comps = []
    for i, region in enumerate(op.regions):
        b, _, results = em.tuple_region(region, f"{label}_{i}", [], [], captured)
        comps.append(b.build(results[0] if op.num_results == 1 else b.tuple(*results)))
    return comps, [operand] * len(comps)


def _conditional_result(em: Emitter, op: Op, out: HloInstruction) -> list[HloInstruction]:
    return [out] if op.num_results == 1 else em.unpack(out)


def _result_shape(em: Emitter, op: Op):
    return result_shape(em, op) if op.num_results == 1 else TupleShape(tuple(op.result_types))


@handles("stablehlo.case")
def case(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    comps, operands = _branches(em, op, "branch")
    out = em.b.op("conditional", args[0], *operands, shape=_result_shape(em, op),
                  branch_computations=tuple(comps))
    return _conditional_result(em, op, out)


@handles("stablehlo.if")
def if_(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    if len(op.regions) != 2:
        raise em.error(op, "if needs a then and an else region")
    comps, operands = _branches(em, op, "if")
    out = em.b.op("conditional", args[0], *operands, shape=_result_shape(em, op),
                  true_computation=comps[0], false_computation=comps[1])
    return _conditional_result(em, op, out)


@handles("func.call")
def call(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    callee = op.attrs.get("callee")
    if not isinstance(callee, Symbol):
        raise em.error(op, "call needs '@function'")
    comp = em.cv.function(callee.name, op.pos)
    assert comp.root is not None
    out = em.b.op("call", *args, shape=comp.root.shape, to_apply=comp)
    return [out] if op.num_results == 1 else em.unpack(out)


@handles("stablehlo.composite")
def composite(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    decomposition = op.attrs.get("decomposition")
    if not isinstance(decomposition, Symbol):
        raise em.error(op, "composite needs 'decomposition = @function'")
    fn = em.cv.module.functions.get(decomposition.name)
    if fn is None or fn.body is None:
        raise em.error(op, f"composite's decomposition '@{decomposition.name}' is not defined")
    if len(fn.args) != len(args):
        raise em.error(op, f"'@{fn.name}' takes {len(fn.args)} arguments, the composite gives {len(args)}")
    inner = Emitter(em.cv, em.b, {name: [a] for (name, _), a in zip(fn.args, args)})
    return inner.run_region(fn.body)


@handles("stablehlo.optimization_barrier")
def optimization_barrier(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    state = em.b.tuple(*args)
    return em.unpack(em.b.op("opt-barrier", state, shape=state.shape))


@handles("stablehlo.rng_bit_generator")
def rng_bit_generator(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    word = enum_word(op.attrs.get("algorithm", op.attrs.get("rng_algorithm", "DEFAULT")))
    if word not in _RNG:
        raise em.error(op, f"unknown rng algorithm {word!r}")
    shape = TupleShape(tuple(op.result_types))
    return em.unpack(em.b.op("rng-bit-generator", *args, shape=shape, algorithm=_RNG[word]))


@handles("stablehlo.custom_call")
def custom_call(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    target = op.attrs.get("callee", op.attrs.get("call_target_name"))
    name = target.name if isinstance(target, Symbol) else str(target)
    if name in _IDENTITY_TARGETS and len(args) == 1 and op.num_results == 1:
        return [args[0]]
    raise em.error(op, f"unsupported op 'stablehlo.custom_call' with target '{name}'")


@handles("sdy.sharding_constraint", "sdy.reshard")
def sharding_constraint(em: Emitter, op: Op, args: list[HloInstruction]) -> list[HloInstruction]:
    return [args[0]]
