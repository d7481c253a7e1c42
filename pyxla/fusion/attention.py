"""Attention fusion: softmax(f(Q K^T)) V as one fusion instruction, so a backend can compute
it by blocks of queries (flash attention's online softmax) and never write the scores.

The pattern, over leading batch dimensions (batch, heads), in f32, as the front ends write it
after the optimisation passes (pyxla.numpy's `nn.softmax`, the ONNX importer's Softmax, the
torch backend's decomposed attention all produce this stable softmax):

    s = dot(Q, K)                      batch dims 0..nb-1, one contracting dim each: [B.., Sq, Sk]
    x = f(s, side inputs)              elementwise ops of the scores' shape only: a scale
                                       (multiply or divide by a scalar), an additive mask or
                                       bias (add, subtract), select(mask, x, y) with a mask
                                       that does not read the scores, converts
    m = reduce(x, -inf), max           over the last dimension
    e = exponential(x - broadcast(m))
    l = reduce(e, 0), add              over the last dimension
    out = dot(e / broadcast(l), V)     contracting the keys: [B.., Sq, Dv]

Also taken, as torch.compile's decomposition of scaled_dot_product_attention writes it: the
products over a flattened batch (reshape(dot(...)) into the scores, dot(reshape(P), ...)),
and between P and the product a select(broadcast(all(x == -inf) per row), 0, P) that makes
fully masked rows 0 rather than NaN (torch's semantics; the kernel keeps them).

Every intermediate must be used only inside the pattern (otherwise the scores would have to
reach memory anyway). The match becomes `fusion(Q, K, V, side inputs...), kind=kCustom,
backend_config=ATTENTION_CONFIG` whose fused computation holds the original instructions,
so the evaluator (and any backend without an attention kernel) computes exactly what the
unfused program meant; the CPU backend's kernel (backends/cpu/ops/attention.py) computes
the same function by key blocks. Semantics kept there: a row whose scores are all -inf
(fully masked) is NaN, as exp(-inf - -inf) makes it in the unfused graph (0 under torch's
select).

Runs after the optimisation passes and before instruction fusion, so the pieces are still
plain instructions, on modules whose backend has an attention kernel (the CPU backend's
`prepare` calls enable_attention_fusion). `PYXLA_DEBUG=fusion` logs each match and each near miss's reason;
`PYXLA_ATTENTION_FUSION=0` turns the pass off (to compare with the unfused program).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..hlo.computation import HloComputation, operands_first
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape, element_strides
from ..passes.hlo_pass import HloPass

# The fusion's backend_config (raw text, printed and parsed as it is): what kernel computes it.
ATTENTION_CONFIG = '{"fusion_backend_config":{"kind":"__pyxla$attention"}}'


def is_attention_fusion(instr: HloInstruction) -> bool:
    return instr.opcode == "fusion" and instr.attrs.get("kind") == "kCustom" and \
        instr.attrs.get("backend_config") == ATTENTION_CONFIG


@dataclass
class AttentionParts:
    """The instructions of a matched pattern (in the module, or in a fused computation)."""
    scores_dot: HloInstruction    # dot(Q, K)
    scores: HloInstruction        # x: the softmax's input, elementwise on the scores_dot
    chain: list[HloInstruction]   # the elementwise ops from scores_dot to scores, operands first
    row_max: HloInstruction
    exp: HloInstruction
    row_sum: HloInstruction
    probabilities: HloInstruction
    output_dot: HloInstruction    # dot(P, V)
    between: list[HloInstruction]  # ops from P to output_dot: a select zeroing fully masked rows
                                   # (and what computes its predicate), a reshape merging batch dims
    zero_masked_rows: bool        # rows whose scores are all -inf give 0 (the select), not NaN

    def members(self) -> list[HloInstruction]:
        """Every instruction the fusion holds besides its side inputs' broadcasts."""
        ops = [self.scores_dot, *self.chain, self.row_max, self.row_max.operands[1], self.exp.operands[0],
               self.exp, self.row_sum, self.row_sum.operands[1], self.probabilities, *self.between,
               self.output_dot]
        ops += [self.exp.operands[0].operands[1], self.probabilities.operands[1]]   # the broadcasts of m, l
        return list({id(i): i for i in ops}.values())


def _log(text: str) -> None:
    if "fusion" in os.environ.get("PYXLA_DEBUG", "").split(","):
        print(f"pyxla attention fusion: {text}", file=sys.stderr)


def _is_f32(i: HloInstruction) -> bool:
    return isinstance(i.shape, ArrayShape) and i.shape.dtype.name == "f32"


def _scalar_constant(i: HloInstruction) -> float | None:
    if i.opcode == "constant" and isinstance(i.shape, ArrayShape) and i.shape.rank == 0 and i.literal is not None:
        return float(np.asarray(i.literal).reshape(-1)[0])
    return None


def _reducer_is(reduce: HloInstruction, opcode: str) -> bool:
    comp = reduce.attrs.get("to_apply")
    if comp is None or comp.root is None or comp.root.opcode != opcode:
        return False
    params = {p.parameter_number for p in comp.root.operands if p.opcode == "parameter"}
    return params == {0, 1} and len(comp.instructions) == 3


def _row_reduction(r: HloInstruction, opcode: str, init: float, rows: tuple[int, ...]) -> str | None:
    if r.opcode != "reduce" or len(r.operands) != 2:
        return f"{r.opcode} is not a reduce"
    operand = r.operands[0].array_shape
    if tuple(r.attrs["dimensions"]) != (operand.rank - 1,) or r.array_shape.dims != rows:
        return "reduces something other than the last (key) dimension"
    if not _reducer_is(r, opcode):
        return f"reducer is not {opcode}"
    if _scalar_constant(r.operands[1]) != init:
        return f"init value is not {init}"
    return None


def _is_row_broadcast(bcast: HloInstruction, rank: int) -> bool:
    return bcast.opcode == "broadcast" and tuple(bcast.attrs["dimensions"]) == tuple(range(rank - 1))


def _batch_dot(d: HloInstruction, nb: int) -> bool:
    a = d.attrs
    return (d.opcode == "dot" and tuple(a.get("lhs_batch_dims", ())) == tuple(range(nb))
            and tuple(a.get("rhs_batch_dims", ())) == tuple(range(nb))
            and len(a.get("lhs_contracting_dims", ())) == 1 and len(a.get("rhs_contracting_dims", ())) == 1
            and d.operands[0].array_shape.rank == nb + 2 and d.operands[1].array_shape.rank == nb + 2)


def match_attention(output_dot: HloInstruction) -> AttentionParts | str:
    """The pattern ending in `output_dot`, or why it is not one."""
    d2 = output_dot
    if d2.opcode != "dot" or not _is_f32(d2):
        return "not an f32 dot"
    nb2 = len(d2.attrs.get("lhs_batch_dims", ()))
    if not _batch_dot(d2, nb2) or tuple(d2.attrs["lhs_contracting_dims"]) != (nb2 + 1,):
        return "not a batched product contracting P's last dimension"
    p = d2.operands[0]
    between: list[HloInstruction] = []
    if p.opcode == "reshape" and _merges_batch(p):
        between.append(p)
        p = p.operands[0]
    zero_rows = False
    if p.opcode == "select":
        found = _zeroing_select(p)
        if isinstance(found, str):
            return found
        between += found
        zero_rows = True
        p = p.operands[2]
    rank = p.array_shape.rank
    nb = rank - 2
    rows = p.array_shape.dims[:-1]
    if p.opcode != "divide" or not _is_row_broadcast(p.operands[1], rank):
        return "P is not e / broadcast(sum)"
    e, row_sum = p.operands[0], p.operands[1].operands[0]
    if e.opcode != "exponential":
        return "P's numerator is not an exponential"
    why = _row_reduction(row_sum, "add", 0.0, rows)
    if why or row_sum.operands[0] is not e:
        return f"row sum: {why or 'not of the exponential'}"
    sub = e.operands[0]
    if sub.opcode != "subtract" or not _is_row_broadcast(sub.operands[1], rank):
        return "exponential's operand is not x - broadcast(max)"
    x, row_max = sub.operands[0], sub.operands[1].operands[0]
    why = _row_reduction(row_max, "maximum", float("-inf"), rows)
    if why or row_max.operands[0] is not x:
        return f"row max: {why or 'not of the same scores'}"
    if not all(_is_f32(i) for i in (p, e, sub, x)):
        return "softmax not in f32"
    scored = _score_chain(x, nb)
    if isinstance(scored, str):
        return scored
    d1, chain = scored
    if zero_rows:
        row_pred = between[-1]
        if not _all_minus_inf(row_pred, x):
            return "the select after the softmax is not of rows whose scores are all -inf"
        between += predicate_ops(row_pred, x)
    parts = AttentionParts(d1, x, chain, row_max, e, row_sum, p, d2, between, zero_rows)
    inside = {id(i) for i in parts.members()}
    for i in parts.members():
        if i is d2 or i.opcode == "constant":
            continue
        outside = [u for u in i.users if id(u) not in inside]
        if outside:
            return f"%{i.name} is also used by %{outside[0].name}: the scores would reach memory anyway"
        if i.parent is not None and i.parent.root is i:
            return f"%{i.name} is an output"
    return parts


def _score_chain(x: HloInstruction, nb: int) -> tuple[HloInstruction, list[HloInstruction]] | str:
    """(dot(Q, K), the elementwise ops from it to x, operands first) or why not."""
    dims = x.array_shape.dims
    dots: dict[int, HloInstruction] = {}
    on_path: dict[int, HloInstruction] = {}

    def reaches_dot(i: HloInstruction, seen: dict[int, bool]) -> bool:
        if id(i) in seen:
            return seen[id(i)]
        if i.opcode == "dot" and _is_f32(i) and i.array_shape.dims == dims and _batch_dot(i, nb):
            dots[id(i)] = i
            seen[id(i)] = True
            return True
        if i.opcode == "reshape" and i.array_shape.dims == dims and _merges_batch(i, split=True):
            d = i.operands[0]
            if d.opcode == "dot" and _is_f32(d) and _batch_dot(d, d.array_shape.rank - 2):
                dots[id(d)] = d
                on_path[id(i)] = i
                seen[id(i)] = True
                return True
        result = False
        if isinstance(i.shape, ArrayShape) and i.shape.dims == dims and i.opcode not in ("parameter", "constant") \
                and op_def(i.opcode).fusion_kind == "elementwise":
            result = any([reaches_dot(op, seen) for op in i.operands])
            if result:
                on_path[id(i)] = i
        seen[id(i)] = result
        return result

    if not reaches_dot(x, {}):
        return "the softmax's input is not computed elementwise from a batched dot of its shape"
    if len(dots) != 1:
        return "the scores come from more than one dot"
    (d1,) = dots.values()
    chain = [i for i in operands_first([x]) if id(i) in on_path]
    on_path[id(d1)] = d1
    for i in chain:
        why = _chain_op_refused(i, on_path)
        if why:
            return f"%{i.name} between the scores and the softmax: {why}"
    return d1, chain


def _merges_batch(r: HloInstruction, split: bool = False) -> bool:
    """Whether reshape `r` only merges (or, with split, splits) the leading batch dimensions,
    keeping the last two: the same elements in the same order per matrix."""
    a, b_ = (r.operands[0].array_shape, r.array_shape) if not split else (r.array_shape, r.operands[0].array_shape)
    return (a.rank >= 2 and b_.rank >= 2 and a.dims[-2:] == b_.dims[-2:] and a.is_row_major and b_.is_row_major
            and int(np.prod(a.dims)) == int(np.prod(b_.dims)))


def _is_constant(i: HloInstruction, value: float) -> bool:
    while i.opcode == "broadcast":
        i = i.operands[0]
    return _scalar_constant(i) == value


def _zeroing_select(sel: HloInstruction) -> list[HloInstruction] | str:
    """select(broadcast(rows), 0, P): the ops it holds (the select, its broadcasts and
    constants, the row predicate's ops), or why it is not that form. Whether the predicate
    is "all scores of the row are -inf" is checked by _all_minus_inf."""
    pred, zero, _ = sel.operands
    if pred.opcode != "broadcast" or not _is_row_broadcast(pred, sel.array_shape.rank) or not _is_constant(zero, 0.0):
        return "a select after the softmax other than one zeroing whole rows"
    ops = [sel, pred, zero] + ([zero.operands[0]] if zero.opcode == "broadcast" else [])
    return ops + [pred.operands[0]]


def _all_minus_inf(row_pred: HloInstruction, x: HloInstruction) -> bool:
    """Whether pred-typed `row_pred` is, for each row, "every element of x is -inf" (torch's
    decomposition: not(reduce-or(compare(convert(not(x == -inf)), 0, NE)))); the ops it
    reads are the fusion's too (predicate_ops)."""
    def polarity(i: HloInstruction) -> bool | None:
        """For an elementwise pred (or integer 0/1) i of x's shape: True if i is x == -inf,
        False if i is its negation, None otherwise."""
        if i.opcode == "not":
            inner = polarity(i.operands[0])
            return None if inner is None else not inner
        if i.opcode == "convert":
            return polarity(i.operands[0])
        if i.opcode == "compare":
            a, c = i.operands
            direction = i.attrs.get("direction")
            if a is x and _is_constant(c, float("-inf")) and direction in ("EQ", "NE"):
                return direction == "EQ"
            if _is_constant(c, 0.0) and direction in ("EQ", "NE"):
                inner = polarity(a)
                return None if inner is None else (inner if direction == "NE" else not inner)
        return None

    flip = False
    while row_pred.opcode == "not":
        flip, row_pred = not flip, row_pred.operands[0]
    if row_pred.opcode != "reduce" or len(row_pred.operands) != 2 or \
            tuple(row_pred.attrs["dimensions"]) != (x.array_shape.rank - 1,):
        return False
    kind = "or" if _reducer_is(row_pred, "or") else "and" if _reducer_is(row_pred, "and") else None
    inner = polarity(row_pred.operands[0])
    if kind is None or inner is None:
        return False
    # all(x == -inf) = and(x == -inf) = not(or(x != -inf))
    return (kind == "and" and inner and not flip) or (kind == "or" and not inner and flip)


def predicate_ops(row_pred: HloInstruction, x: HloInstruction) -> list[HloInstruction]:
    """The ops between x and a row predicate (for the fusion's members)."""
    found: list[HloInstruction] = []
    stack = [row_pred]
    while stack:
        i = stack.pop()
        if i is x or any(i is f for f in found):
            continue
        found.append(i)
        stack.extend(i.operands)
    return found


def _chain_op_refused(i: HloInstruction, on_path: dict[int, HloInstruction]) -> str | None:
    """Ops allowed between Q K^T and the softmax: a scale (multiply or divide by a scalar
    broadcast), an additive mask or bias (add, subtract), select(mask, ...), convert."""
    if i.opcode == "convert" or i.opcode == "select" and id(i.operands[0]) not in on_path:
        return None
    if i.opcode == "reshape":     # of the dot, splitting a flattened batch (_score_chain checked)
        return None
    if i.opcode in ("add", "subtract"):
        return None
    if i.opcode in ("multiply", "divide"):
        side = [op for op in i.operands if id(op) not in on_path]
        if i.opcode == "divide" and id(i.operands[1]) in on_path:
            return "divides by the scores"
        if len(side) == 1 and (side[0].array_shape.size == 1 or side[0].opcode == "broadcast"
                               and side[0].operands[0].array_shape.size == 1):
            return None
        return f"{i.opcode} by something other than a scalar (not a scale)"
    return f"{i.opcode} is not a scale, an additive mask or a select"


# --- strided views ------------------------------------------------------------------------------
# Q, K and V usually arrive as transpose(reshape(projection)) (heads split from [batch, seq,
# heads * dim]) and the output leaves as reshape(transpose(...)) (heads merged): copies of
# the whole activations in separate kernels. A chain of these ops is a strided view of the
# array beneath it (each dimension a stride, plus an offset for a slice), so the fusion takes
# the chain in and the kernel reads and writes the buffers where they lie.
VIEW_OPS = frozenset({"transpose", "reshape", "slice"})
OUTPUT_VIEW_OPS = frozenset({"transpose", "reshape"})


def _reshape_strides(old_dims: Sequence[int], old_strides: Sequence[int],
                     new_dims: Sequence[int]) -> list[int] | None:
    """Strides of a reshape of a strided array without a copy (NumPy's rule), or None."""
    old = [(d, st) for d, st in zip(old_dims, old_strides) if d != 1]
    new_strides = [0] * len(new_dims)
    new_nonunit = [k for k, d in enumerate(new_dims) if d != 1]
    oi = oj = 0
    while oi < len(old) and oj < len(new_nonunit):
        np_, op = new_dims[new_nonunit[oj]], old[oi][0]
        oi2, oj2 = oi + 1, oj + 1
        while np_ != op:
            if np_ < op:
                if oj2 >= len(new_nonunit):
                    return None
                np_ *= new_dims[new_nonunit[oj2]]
                oj2 += 1
            else:
                if oi2 >= len(old):
                    return None
                op *= old[oi2][0]
                oi2 += 1
        for k in range(oi, oi2 - 1):     # the old dimensions merged must be contiguous
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        new_strides[new_nonunit[oj2 - 1]] = old[oi2 - 1][1]
        for k in range(oj2 - 1, oj, -1):
            new_strides[new_nonunit[k - 1]] = new_strides[new_nonunit[k]] * new_dims[new_nonunit[k]]
        oi, oj = oi2, oj2
    if oi != len(old) or oj != len(new_nonunit):
        return None
    return new_strides


def view_through(op: HloInstruction, dims: Sequence[int], strides: Sequence[int],
                 offset: int) -> tuple[list[int], int] | None:
    """(strides, offset) of `op`'s result when its operand is the strided view (dims,
    strides, offset); None when it is not a view without a copy."""
    if op.opcode == "transpose":
        perm = op.attrs["dimensions"]
        return [strides[p] for p in perm], offset
    if op.opcode == "reshape":
        new = _reshape_strides(dims, strides, op.array_shape.dims)
        return (new, offset) if new is not None else None
    if op.opcode == "slice":
        spec = op.attrs["slice"]
        offset += sum(sl.start * st for sl, st in zip(spec, strides))
        return [st * sl.stride for sl, st in zip(spec, strides)], offset
    return None


def operand_view(value: HloInstruction,
                 single_use: bool = False) -> tuple[HloInstruction, list[HloInstruction], list[int], int]:
    """(the array beneath, the chain of view ops from value down to it, strides, offset) for
    the operand `value`: strides and offset of value's elements in the array's buffer. With
    `single_use` the chain stops below an op that has other users."""
    chain: list[HloInstruction] = []
    while value.opcode in VIEW_OPS and _is_f32(value) and (not single_use or len(value.users) == 1):
        chain.append(value)
        value = value.operands[0]
    while chain:
        strides, offset = element_strides(value.array_shape), 0
        ok = True
        for op in reversed(chain):
            got = view_through(op, op.operands[0].array_shape.dims, strides, offset)
            if got is None:
                ok = False
                break
            strides, offset = got
        if ok:
            return value, list(reversed(chain)), strides, offset
        value = chain.pop()     # the op nearest the array stays a buffer: try the rest
    return value, [], element_strides(value.array_shape), 0


def output_view(dot: HloInstruction, root: HloInstruction) -> list[int] | None:
    """Strides of `dot`'s elements in the buffer of `root`, a chain of transposes and
    reshapes of dot; None when that is not a view."""
    chain: list[HloInstruction] = []
    value = root
    while value is not dot:
        if value.opcode not in OUTPUT_VIEW_OPS:
            return None
        chain.append(value)
        value = value.operands[0]
    strides, dims = element_strides(root.array_shape), root.array_shape.dims
    for op in chain:    # undo each op, from the root down
        if op.opcode == "transpose":
            perm = op.attrs["dimensions"]
            inverse = [0] * len(perm)
            for i, p_ in enumerate(perm):
                inverse[p_] = i
            strides = [strides[inverse[d]] for d in range(len(perm))]
        else:
            reshaped = _reshape_strides(dims, strides, op.operands[0].array_shape.dims)
            if reshaped is None:
                return None
            strides = reshaped
        dims = op.operands[0].array_shape.dims
    return strides


def output_dot_of(root: HloInstruction) -> HloInstruction:
    """The output dot beneath an attention fusion's root (the root, or views of it)."""
    while root.opcode in OUTPUT_VIEW_OPS:
        root = root.operands[0]
    return root


def parts_of_fusion(comp: HloComputation) -> AttentionParts:
    """The pattern inside an attention fusion's computation (its root is the output dot)."""
    assert comp.root is not None, f"{comp.name} has no ROOT"
    parts = match_attention(output_dot_of(comp.root))
    if isinstance(parts, str):
        raise ValueError(f"{comp.name} is not an attention fusion: {parts}")
    return parts


def _fuse(module: HloModule, comp: HloComputation, parts: AttentionParts) -> HloInstruction:
    members = parts.members()
    inside = {id(i) for i in members}
    # Side inputs: operands of members from outside. Scalar constants and broadcasts of them
    # (or of any value) come in, so the fusion reads the small value, not a broadcast buffer.
    for i in list(parts.chain):
        for op in i.operands:
            if id(op) in inside:
                continue
            if op.opcode == "broadcast" and (len(op.users) == 1 or op.operands[0].array_shape.size == 1):
                members.append(op)
                inside.add(id(op))
                if _scalar_constant(op.operands[0]) is not None:
                    members.append(op.operands[0])
                    inside.add(id(op.operands[0]))
            elif _scalar_constant(op) is not None:
                members.append(op)
                inside.add(id(op))
    fused = HloComputation(module.fresh_name("fused_attention"))
    fused.is_fusion_computation = True
    operands: list[HloInstruction] = []
    mapping: dict[int, HloInstruction] = {}

    def value(op: HloInstruction) -> HloInstruction:
        if id(op) in mapping:
            return mapping[id(op)]
        if id(op) in inside and op.opcode == "constant":
            clone = HloInstruction(module.fresh_name(op.opcode), "constant", op.shape, [], dict(op.attrs),
                                   literal=op.literal)
            mapping[id(op)] = fused.add_instruction(clone)
            return mapping[id(op)]
        if id(op) not in inside:
            if op not in operands:
                operands.append(op)
            param = HloInstruction(module.fresh_name("param"), "parameter", op.shape,
                                   parameter_number=operands.index(op))
            mapping[id(op)] = fused.add_instruction(param)
            return mapping[id(op)]
        clone = HloInstruction(module.fresh_name(op.opcode), op.opcode, op.shape, [value(o) for o in op.operands],
                               {k: v for k, v in op.attrs.items() if k != "control-predecessors"},
                               literal=op.literal)
        mapping[id(op)] = fused.add_instruction(clone)
        return mapping[id(op)]

    # Q, K and V through the views that only they use (the kernel reads the arrays beneath).
    for op in (*parts.scores_dot.operands, parts.output_dot.operands[1]):
        if len(op.users) == 1:
            _, chain, _, _ = operand_view(op, single_use=True)
            for i in chain:
                members.append(i)
                inside.add(id(i))
    top = parts.output_dot
    while (len(top.users) == 1 and top.users[0].opcode in OUTPUT_VIEW_OPS and top is not comp.root
           and output_view(parts.output_dot, top.users[0]) is not None):
        top = top.users[0]
        members.append(top)
        inside.add(id(top))
    fused.root = value(top)
    fused.sort_topologically()
    fusion = HloInstruction(module.fresh_name("fusion"), "fusion", top.shape, operands,
                            {"kind": "kCustom", "calls": fused, "backend_config": ATTENTION_CONFIG})
    if "metadata" in parts.output_dot.attrs:
        fusion.attrs["metadata"] = parts.output_dot.attrs["metadata"]
    comp.add_instruction(fusion)
    comp.replace_instruction(top, fusion)
    for i in reversed(_operands_first_all(members)):
        if i.parent is comp and not i.users and i is not comp.root and i.opcode != "parameter":
            comp.remove_instruction(i)
    module.computations.insert(module.computations.index(comp), fused)
    comp.sort_topologically()
    return fusion


def _operands_first_all(instrs: list[HloInstruction]) -> list[HloInstruction]:
    ids = {id(i) for i in instrs}
    order: list[HloInstruction] = []
    seen: set[int] = set()
    for i in instrs:
        for j in operands_first([i]):
            if id(j) in ids and id(j) not in seen:
                seen.add(id(j))
                order.append(j)
    return order


def enable_attention_fusion(module: HloModule) -> None:
    """Called by a backend that has an attention kernel (its `prepare`): only then does the
    pass fuse. Elsewhere the fused computation would be computed from its instructions, which
    is correct but, for a backend that computes a fusion per output element (the GPU's
    elementwise kernels), recomputes each row's softmax for every element of the result."""
    module.fuse_attention = True   # type: ignore[attr-defined]


def _run(module: HloModule) -> bool:
    if os.environ.get("PYXLA_ATTENTION_FUSION", "1") == "0" or not getattr(module, "fuse_attention", False):
        return False
    changed = False
    for comp in list(module.computations):
        if comp.is_fusion_computation:
            continue
        for instr in list(comp.instructions):
            if instr.parent is not comp or instr.opcode != "dot":
                continue
            parts = match_attention(instr)
            if isinstance(parts, str):
                if instr.operands[0].opcode == "divide":
                    _log(f"not fusing %{instr.name}: {parts}")
                continue
            fusion = _fuse(module, comp, parts)
            _log(f"%{fusion.name}: attention ending in %{instr.name}")
            changed = True
    return changed


attention_fusion = HloPass("attention-fusion", _run,
                           "softmax(f(Q K^T)) V as one fusion (kCustom, backend_config names attention).")
