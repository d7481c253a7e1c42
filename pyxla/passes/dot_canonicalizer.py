"""Canonical dot form: every dot becomes (batch..., M, K) x (batch..., K, N) -> (batch..., M, N).

Backends then handle one shape of matrix product (a GEMM per batch element, with the two
minor dimensions of each operand in either order, as BLAS's transpose flags allow).
Operands are transposed so batch dimensions lead, and reshaped so free and contracting
dimensions are each one dimension; the result is reshaped back.

Of the two orders a canonical operand's minor dimensions may take, the one its transpose
makes cheapest is chosen: an operand transposed so that its minor dimension moves (K^T in
attention, [b, s, h, d] -> [b, h, d, s]) is read as the transpose that keeps the minor
dimension in place ([b, h, s, d], rows copied whole) with the dot's contracting dimension on
the other side, since the GEMM reads either order at no cost.
"""
from __future__ import annotations

from math import prod

from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.shape import ArrayShape
from .hlo_pass import hlo_pass
from .rewrite import RewriteContext, RuleTable, apply_rules

RULES = RuleTable("dot-canonical")


def is_canonical(lhs: ArrayShape, rhs: ArrayShape, attrs: dict) -> bool:
    lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
    lc, rc = tuple(attrs.get("lhs_contracting_dims", ())), tuple(attrs.get("rhs_contracting_dims", ()))
    b = len(lb)
    if lb != tuple(range(b)) or rb != tuple(range(b)) or len(lc) != 1 or len(rc) != 1:
        return False
    return lhs.rank in (b + 1, b + 2) and rhs.rank in (b + 1, b + 2)


def _operand_to(ctx, x: HloInstruction, batch, middle, last, like) -> HloInstruction:
    """x transposed to (batch, middle, last) and reshaped to (batch..., prod(middle), prod(last))."""
    perm = tuple(batch) + tuple(middle) + tuple(last)
    dims = x.array_shape.dims
    if perm != tuple(range(len(perm))):
        x = ctx.add("transpose", [x], ArrayShape(x.array_shape.dtype, tuple(dims[d] for d in perm)),
                    {"dimensions": perm}, like=like)
    new_dims = tuple(dims[d] for d in batch)
    if middle:
        new_dims += (prod(dims[d] for d in middle),)
    new_dims += (prod(dims[d] for d in last),) if last else ()
    if new_dims != x.array_shape.dims:
        x = ctx.add("reshape", [x], ArrayShape(x.array_shape.dtype, new_dims), like=like)
    return x


@RULES.rule("dot")
def canonicalize_dot(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    lhs, rhs = instr.operands
    attrs = instr.attrs
    if is_canonical(lhs.array_shape, rhs.array_shape, attrs):
        return None
    lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
    lc, rc = tuple(attrs.get("lhs_contracting_dims", ())), tuple(attrs.get("rhs_contracting_dims", ()))
    lfree = [d for d in range(lhs.array_shape.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs.array_shape.rank) if d not in rb and d not in rc]
    if not lc:   # an outer product: contract over a new dimension of size 1
        return None
    b = len(lb)
    new_lhs = _operand_to(ctx, lhs, lb, lfree, lc, instr)
    new_rhs = _operand_to(ctx, rhs, rb, rc, rfree, instr)   # (batch, K, N)
    k_rhs = b
    out_dims = tuple(lhs.array_shape.dims[d] for d in lb)
    if lfree:
        out_dims += (prod(lhs.array_shape.dims[d] for d in lfree),)
    if rfree:
        out_dims += (prod(rhs.array_shape.dims[d] for d in rfree),)
    new_attrs = {k: v for k, v in attrs.items() if not k.endswith("_dims")}
    new_attrs.update({"lhs_batch_dims": tuple(range(b)), "rhs_batch_dims": tuple(range(b)),
                      "lhs_contracting_dims": (new_lhs.array_shape.rank - 1,), "rhs_contracting_dims": (k_rhs,)})
    if not b:
        del new_attrs["lhs_batch_dims"], new_attrs["rhs_batch_dims"]
    dot = ctx.add("dot", [new_lhs, new_rhs], ArrayShape(instr.array_shape.dtype, out_dims), new_attrs, like=instr)
    if out_dims == instr.array_shape.dims:
        return dot
    return ctx.add("reshape", [dot], instr.shape, like=instr)


@RULES.rule("dot")
def keep_minor_dimension(instr: HloInstruction, ctx: RewriteContext) -> HloInstruction | None:
    """A canonical dot whose operand is transpose(x) moving x's minor dimension, where
    swapping the operand's two minor dimensions would keep it: that transpose, with the
    contracting dimension moved to the other of the two."""
    attrs = instr.attrs
    if not is_canonical(instr.operands[0].array_shape, instr.operands[1].array_shape, attrs):
        return None
    b = len(attrs.get("lhs_batch_dims", ()))
    new_attrs = dict(attrs)
    operands = list(instr.operands)
    for side, key in enumerate(("lhs_contracting_dims", "rhs_contracting_dims")):
        x = operands[side]
        if x.opcode != "transpose" or x.array_shape.rank != b + 2:
            continue
        perm = tuple(x.attrs["dimensions"])
        rank = len(perm)
        if perm[-1] == rank - 1 or perm[-2] != rank - 1:
            continue
        swapped = perm[:-2] + (perm[-1], perm[-2])
        source = x.operands[0]
        if swapped == tuple(range(rank)):
            operands[side] = source
        else:
            swapped_dims = tuple(source.array_shape.dims[d] for d in swapped)
            operands[side] = ctx.add("transpose", [source], ArrayShape(x.array_shape.dtype, swapped_dims),
                                     {"dimensions": swapped}, like=x)
        new_attrs[key] = (2 * b + 1 - attrs[key][0],)
    if operands == list(instr.operands):
        return None
    return ctx.add("dot", operands, instr.shape, new_attrs, like=instr)


@hlo_pass("dot-canonicalizer")
def dot_canonicalizer(module: HloModule) -> bool:
    """Rewrite every dot to (batch..., M, K) x (batch..., K, N) with transposes and reshapes."""
    return apply_rules(module, RULES)
