"""Padding rows that no kernel needs to compute: the marks the padder leaves, and the bound
each fusion gets from them after fusion.

Why it is sound. By the padder's contract an array holds its valid elements in [0, e) of a
dimension of symbolic size e and unspecified values beyond, and everything that could
observe the padding reads it through a mask the padder adds (`select(iota < size, x,
fill)` before a reduction, a contraction, a window, a sort key, a scatter's indices, ...).
So the padding of every other value is never read as a value: a kernel may leave it as
the memory held it. Only the masks' padding must be defined, and only when a mask is a
kernel's output (a mask fused into its consumer is computed element by element as the
consumer reads it, whatever rows the consumer computes).

The rule, in two steps:
  - `mark_dynamic_rows` (at the end of `pad_to_bounds`, before the sizes become numbers):
    each instruction of the traced ENTRY computation that computes an array whose dimension
    0 is symbolic gets `dynamic_rows="<expression>"` (`"b"`, `"2*b"`). The padder's own
    instructions (masks, sizes, the pieces of rewritten concatenations) get none, nor do
    loop bodies and branches, nor any `select`: every value the padder makes whose padding
    is read (a mask, a sort's key) is a select, and CSE, which compares instructions
    without their annotations, could otherwise keep a marked select of the user's in place
    of an identical mask. Fusion copies the attribute with the instruction; a pass that
    makes an op anew from another's semantic attributes, at another shape (moving a reshape
    or transpose across it), leaves it out, so the new op is computed whole.
  - `bound_kernel_rows` (a compiler stage after fusion, before scheduling): each fusion of
    the ENTRY computation whose outputs (ROOT, or every element of a ROOT tuple) are all
    marked with the same expression, with dimension 0 of each at the expression's value at
    the bucket's bounds, gets the expression's actual value as an `s32[]` operand (the size
    parameter itself for `"b"`, an existing operand when the fusion already reads it, else
    a scalar computed from the size parameters) and `bounded_rows=<operand number>`: its
    kernel needs only rows [0, that value) of dimension 0 of each output. Kernels may
    still compute more (the attribute permits, it does not require). Fusions of kinds
    other than kLoop, kInput and kOutput (custom kernels) are left alone.

Nothing is marked in a static module, so its compile is unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...hlo.computation import HloComputation
from ...hlo.dims import DimensionSyntaxError, DimExpr, Symbol, parse_dim
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.ops.registry import REGISTRY
from ...hlo.shape import ArrayShape
from ...hlo.types import S32

ELEMENTWISE = tuple(name for name, record in REGISTRY.items() if record.fusion_kind == "elementwise")

SIZE_PARAMETERS = "size_parameters"   # the module annotation: symbol -> (ENTRY parameter number, bound)
BOUNDED_KINDS = ("kLoop", "kInput", "kOutput")
# Marked ops that fusion left on their own, wrapped in a fusion of this kind to be bounded.
WRAPPED = {"dot": "kOutput", **{op: "kLoop" for op in ELEMENTWISE}}


def mark_dynamic_rows(module: HloModule, originals: Sequence[HloInstruction],
                      params: Mapping[str, HloInstruction], bounds: Mapping[str, int]) -> None:
    """Mark `originals` (the traced ENTRY instructions, before the padder added its own)
    that are still in ENTRY and have a symbolic dimension 0; note the size parameters on
    the module for `bound_kernel_rows`."""
    entry = module.entry
    for instr in originals:
        if instr.parent is not entry or instr.opcode == "select" or not isinstance(instr.shape, ArrayShape) \
                or not instr.shape.rank:
            continue
        rows = instr.shape.dims[0]
        if isinstance(rows, DimExpr) and _parsed(str(rows), params) == rows:
            instr.attrs["dynamic_rows"] = str(rows)
    setattr(module, SIZE_PARAMETERS, {name: (p.parameter_number, bounds[name]) for name, p in params.items()})


def _parsed(text: str, names) -> object:
    try:
        return parse_dim(text, {n: Symbol(n) for n in names})
    except DimensionSyntaxError:
        return None


def bound_kernel_rows(module: HloModule) -> bool:
    """Give each fully marked fusion of ENTRY its run-time row count (see the module doc);
    False, changing nothing, for a module without size parameters."""
    sizes = getattr(module, SIZE_PARAMETERS, None)
    entry = module.entry
    if not sizes or entry is None:
        return False
    bounds = {name: bound for name, (_, bound) in sizes.items()}
    parameters = {p.parameter_number: p for p in entry.parameters}
    computed: dict[str, HloInstruction] = {}
    changed = False
    for instr in list(entry.instructions):
        fusion = _wrapped(module, instr) if instr.attrs.get("dynamic_rows") and instr.opcode in WRAPPED else instr
        text = _bounded_expression(fusion, bounds)
        if text is None:
            continue
        if text not in computed:
            computed[text] = _size(module, entry, _parsed(text, sizes), sizes, parameters)  # type: ignore[arg-type]
        size = computed[text]
        if size in fusion.operands:
            fusion.attrs["bounded_rows"] = fusion.operands.index(size)
        else:
            fused = fusion.attrs["calls"]
            number = len(fusion.operands)
            fused.add_instruction(HloInstruction(module.fresh_name("rows"), "parameter", ArrayShape(S32, ()),
                                                 parameter_number=number))
            fusion.operands.append(size)
            size.users.append(fusion)
            fusion.attrs["bounded_rows"] = number
        changed = True
    if changed:
        entry.sort_topologically()
    return changed


def _wrapped(module: HloModule, instr: HloInstruction) -> HloInstruction:
    """`instr` (a dot or an elementwise op of ENTRY left unfused) replaced by a fusion that
    computes just it, which can then take the row count as an operand."""
    entry = instr.parent
    assert entry is not None
    comp = HloComputation(module.fresh_name("fused_computation"))
    comp.is_fusion_computation = True
    distinct = list(dict.fromkeys(instr.operands))
    params = [comp.add_instruction(HloInstruction(module.fresh_name("param"), "parameter", op.shape,
                                                  parameter_number=i)) for i, op in enumerate(distinct)]
    attrs = {k: v for k, v in instr.attrs.items() if k != "control-predecessors"}
    comp.root = comp.add_instruction(HloInstruction(module.fresh_name(instr.opcode), instr.opcode, instr.shape,
                                                    [params[distinct.index(op)] for op in instr.operands], attrs))
    fusion = HloInstruction(module.fresh_name("fusion"), "fusion", instr.shape, distinct,
                            {"kind": WRAPPED[instr.opcode], "calls": comp})
    if "metadata" in instr.attrs:
        fusion.attrs["metadata"] = instr.attrs["metadata"]
    entry.replace_instruction(instr, fusion)
    module.computations.insert(module.computations.index(entry), comp)
    return fusion


def _bounded_expression(fusion: HloInstruction, bounds: Mapping[str, int]) -> str | None:
    """The row expression shared by every output of `fusion`, when it may be bounded."""
    if fusion.opcode != "fusion" or fusion.attrs.get("kind") not in BOUNDED_KINDS or "bounded_rows" in fusion.attrs:
        return None
    root = fusion.attrs["calls"].root
    outputs = root.operands if root.opcode == "tuple" else [root]
    texts = {o.attrs.get("dynamic_rows") for o in outputs}
    if len(texts) != 1 or None in texts:
        return None
    (text,) = texts
    expr = _parsed(text, bounds)
    if not isinstance(expr, DimExpr) or any(s.name not in bounds for s in expr.symbols):
        return None
    at_bounds = expr.evaluate(bounds)
    if any(not isinstance(o.shape, ArrayShape) or not o.shape.rank or o.shape.dims[0] != at_bounds for o in outputs):
        return None   # a pass changed the value's shape but kept the mark: compute it whole
    return text


def _size(module: HloModule, entry, expr: DimExpr, sizes, parameters) -> HloInstruction:
    """An s32[] instruction of ENTRY computing `expr` from the size parameters."""
    scalar = ArrayShape(S32, ())

    def add(opcode: str, operands, **attrs) -> HloInstruction:
        return entry.add_instruction(HloInstruction(module.fresh_name(opcode), opcode, scalar, operands, attrs))

    def constant(value: int) -> HloInstruction:
        return entry.add_instruction(HloInstruction(module.fresh_name("constant"), "constant", scalar,
                                                    literal=np.asarray(value, np.int32)))

    total: HloInstruction | None = None
    for monomial, coefficient in sorted(expr.terms.items(), key=lambda mc: len(mc[0])):
        factors = [parameters[sizes[s.name][0]] for s, p in monomial for _ in range(p)]
        if coefficient != 1 or not factors:
            factors.append(constant(coefficient))
        term = factors[0]
        for f in factors[1:]:
            term = add("multiply", (term, f))
        total = term if total is None else add("add", (total, term))
    assert total is not None
    return total
