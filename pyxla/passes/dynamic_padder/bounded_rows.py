"""Padding that no kernel needs to compute: the marks the padder leaves, and the bound each
fusion gets from them after fusion.

Why it is sound. By the padder's contract an array holds its valid elements in [0, e) of a
dimension of symbolic size e and unspecified values beyond, and everything that could
observe the padding along a dimension reads it through a mask the padder adds along that
dimension (`select(iota < size, x, fill)` before a reduction, a contraction, a window, a
scatter's indices, ...; a sort gets a select as its key). Ops that do not mix elements along
a dimension keep what its padding holds in its padding. So the padding of a value that is
not a mask is never read as a value, and a mask's padding is read only along the
dimensions it masks: a kernel may leave the rest as the memory held it. (A mask fused into
its consumer is computed element by element as the consumer reads it.)

The rule, in two steps:
  - `mark_dynamic_rows` (at the end of `pad_to_bounds`, before the sizes become numbers):
    each instruction of the traced ENTRY computation that computes an array with a symbolic
    dimension gets `dynamic_rows="<d>:<expression>"` for its outermost one d (`"0:b"`,
    `"1:s"`, `"0:2*b"`); a mask the padder made, for its outermost symbolic dimension that
    it does not mask. Nothing else the padder made is marked (sizes, sort keys, the pieces
    of rewritten concatenations), nor loop bodies and branches, nor any `select` of the
    user's: every value the padder makes whose padding is read is a select, and CSE, which
    compares instructions without their annotations, could otherwise keep the user's
    marked select in place of an identical mask. Fusion copies the attribute with the
    instruction; a pass that makes an op anew from another's semantic attributes at
    another shape (moving a reshape or transpose across it) leaves it out, so the new op is
    computed whole.
  - `bound_kernel_rows` (a compiler stage after fusion, before scheduling): each fusion of
    the ENTRY computation whose outputs (ROOT, or every element of a ROOT tuple) are all
    marked alike, each with dimension d at the expression's value at the bucket's bounds,
    gets the expression's actual value as an `s32[]` operand (the size parameter itself
    for `"0:b"`, an existing operand when the fusion already reads it, else a scalar
    computed from the size parameters) and `bounded_rows={<operand number>,<d>}`: its
    kernel needs only indices [0, that value) of dimension d of each output. Kernels may
    still compute more (the attribute permits, it does not require). Marked dots and
    elementwise ops that fusion left alone are first wrapped in a fusion of their own;
    fusions of kinds other than kLoop, kInput and kOutput (custom kernels) are left alone.

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


def mark_dynamic_rows(module: HloModule, originals: Sequence[HloInstruction], masks: Mapping[int, tuple[int, ...]],
                      params: Mapping[str, HloInstruction], bounds: Mapping[str, int]) -> None:
    """Mark `originals` (the traced ENTRY instructions, before the padder added its own) and
    the padder's masks (`masks`: id -> the dimensions each masks) that are in ENTRY; note
    the size parameters on the module for `bound_kernel_rows`."""
    entry = module.entry
    assert entry is not None
    chosen: dict[int, tuple[int, ...]] = {id(i): () for i in originals if i.opcode != "select"}
    chosen.update(masks)
    for instr in entry.instructions:
        masked = chosen.get(id(instr))
        if masked is None or not isinstance(instr.shape, ArrayShape):
            continue
        d = next((d for d, n in enumerate(instr.shape.dims) if isinstance(n, DimExpr) and d not in masked), None)
        if d is None:
            continue
        size = instr.shape.dims[d]
        if _parsed(str(size), params) == size:
            instr.attrs["dynamic_rows"] = f"{d}:{size}"
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
        fusion = _wrapped(module, instr) if "dynamic_rows" in instr.attrs and instr.opcode in WRAPPED else instr
        mark = _bounded_mark(fusion, bounds)
        if mark is None:
            continue
        d, text = mark
        if text not in computed:
            computed[text] = _size(module, entry, _parsed(text, sizes), sizes, parameters)  # type: ignore[arg-type]
        size = computed[text]
        if size in fusion.operands:
            fusion.attrs["bounded_rows"] = (fusion.operands.index(size), d)
        else:
            fused = fusion.attrs["calls"]
            number = len(fusion.operands)
            fused.add_instruction(HloInstruction(module.fresh_name("rows"), "parameter", ArrayShape(S32, ()),
                                                 parameter_number=number))
            fusion.operands.append(size)
            size.users.append(fusion)
            fusion.attrs["bounded_rows"] = (number, d)
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


def _bounded_mark(fusion: HloInstruction, bounds: Mapping[str, int]) -> tuple[int, str] | None:
    """(dimension, size expression) shared by every output of `fusion`, when it may be bounded."""
    if fusion.opcode != "fusion" or fusion.attrs.get("kind") not in BOUNDED_KINDS or "bounded_rows" in fusion.attrs:
        return None
    outputs = fusion.attrs["calls"].root.outputs
    marks = {o.attrs.get("dynamic_rows") for o in outputs}
    if len(marks) != 1 or None in marks:
        return None
    (mark,) = marks
    dimension, _, text = str(mark).partition(":")
    expr = _parsed(text, bounds)
    if not dimension.isdigit() or not isinstance(expr, DimExpr) or any(s.name not in bounds for s in expr.symbols):
        return None
    d, at_bounds = int(dimension), expr.evaluate(bounds)
    if any(not isinstance(o.shape, ArrayShape) or o.shape.rank <= d or o.shape.dims[d] != at_bounds for o in outputs):
        return None   # a pass changed the value's shape but kept the mark: compute it whole
    return d, text


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
