"""The dynamic padder: a shape polymorphic module specialised to one bucket of sizes.

A traced shape polymorphic module has symbolic dimensions (hlo/dims.py): `f32[b,32]`.
`pad_to_bounds(module, {"b": 64})` returns a static module that serves every size
1 <= b <= 64 (XLA's dynamic padder, driven by bounds instead of dynamic shapes):

  - every dimension expression becomes its value at the bounds (`2*b` -> 128), in shapes
    and in attributes (slice limits, pad configurations, window sizes, ...);
  - the ENTRY computation gets one `s32[]` parameter per symbol, sorted by name, after its
    own parameters: the call's actual size;
  - an array whose dimension has expression e holds its valid elements in [0, e(n)) of that
    dimension and unspecified values beyond (the padding). Whatever would observe the
    padding is rewritten with masks built from iota and the size parameters (below).

Rewrites, by opcode:
  reduce over a symbolic dimension        inputs masked to the init values
  dot contracting a symbolic dimension    both operands masked to 0
  reduce-window over a symbolic dimension inputs masked to the init values
  concatenate along a symbolic dimension  dynamic-update-slices at runtime offsets (unless only
                                          the last operand's size is symbolic)
  pad with high or interior padding on a symbolic dimension
                                          operand masked to the padding value
  slice with a symbolic start             dynamic-slice at the runtime start
  dynamic-slice / dynamic-update-slice    starts clamped to the actual sizes; an update with
                                          symbolic sizes is merged with what it overwrites
  convolution over a symbolic spatial or input feature dimension
                                          input masked to 0 (what its own padding holds); a
                                          symbolic feature dimension masks the kernel too
  reverse along a symbolic dimension      a dynamic-slice moves the valid elements to the front
  top-k along a symbolic dimension        padding set to what comes last in top-k's order
  sort along a symbolic dimension         a leading key operand sorts the padding last
  gather indexing into a symbolic dimension
                                          starts clamped to fit the actual size first
  scatter with symbolically many updates, or into a symbolic dimension
                                          the padding rows of the indices, and starts whose
                                          window does not fit the actual size, set out of
                                          bounds (scatter skips those windows)
  get-dimension-size                      the size computed from the size parameters
  while whose body or condition has symbolic shapes
                                          the sizes threaded through the loop state, so the
                                          body and condition build masks like ENTRY
  conditional whose branches have symbolic shapes
                                          each such branch's operand becomes (operand, sizes...)
Calls are inlined first. Unchanged: elementwise ops, broadcast, iota, transpose, reshapes
that keep each symbolic dimension outermost of the dimensions it merges with or splits into,
dot batch and free dimensions, a convolution's batch dimension, slices with static starts,
sort along static dimensions. Masking a reduction's padding with its init value assumes the
init is the reducer's identity, as XLA's reduce semantics require.

Padding left uncomputed: each ENTRY instruction of the traced module with a symbolic
dimension is marked `dynamic_rows="<dimension>:<expression>"` for its outermost one (a mask
for its outermost one that it does not mask), and after fusion `bound_kernel_rows` gives each
fusion whose outputs are all marked alike the actual size as an extra operand
(`bounded_rows={<operand>,<dimension>}`), so its kernel may skip the indices beyond it along
that dimension (bounded_rows.py says why that is sound).

Files: padder.py (the size parameters, masks, the walk), rewrites.py (data operations),
control_flow.py (loops and conditionals), bounded_rows.py (the marks and the bounds); this
file specialises the shapes and attributes.

Everything else with a symbolic dimension raises NotImplementedError naming the op, the
instruction and the dimension: top-k of pred along a symbolic dimension, reshapes that merge
a symbolic dimension as other than the outermost of its group, gather with a symbolic slice
size smaller than its dimension, scatter with indices too narrow to point out of bounds,
convolution with a symbolic kernel window or with groups over symbolic features, sizes
needed inside other called computations (a loop body or branch shared by two instructions,
a sort comparator, ...), and opcodes the padder
does not know (custom-call, fusion, ...).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...hlo.dims import Dim, DimExpr, Symbol
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape, TupleShape, flatten_shape
from ..call_inliner import call_inliner
from .bounded_rows import bound_kernel_rows, mark_dynamic_rows
from .control_flow import CONTROL_FLOW_REWRITES
from .padder import Padder, dims_in
from .rewrites import REWRITES, reshape_problem

__all__ = ["HANDLERS", "PaddedModule", "bound_kernel_rows", "pad_to_bounds", "reshape_problem"]


@dataclass(frozen=True)
class PaddedModule:
    """A symbolic module specialised to a bucket (see the module doc).

    `module` is static; its ENTRY takes the original parameters at their padded sizes, then
    one s32[] actual size per name in `symbols`. `output_dims` / `param_dims` hold, per leaf
    of the result / of the original parameters (tuples flattened), the symbolic dimensions:
    evaluate them at the actual sizes to know which part of each padded array is valid."""
    module: HloModule
    symbols: tuple[str, ...]
    bounds: dict[str, int]
    output_dims: tuple[tuple[Dim, ...], ...]
    param_dims: tuple[tuple[Dim, ...], ...]


def pad_to_bounds(module: HloModule, bounds: Mapping[str, int] | None = None) -> PaddedModule:
    """`module` (left as it is) specialised to the bucket whose sizes are at most `bounds`
    (by symbol name; a symbol left out is padded to its declared upper bound, as a `<=N`
    dimension read from text is)."""
    work = module.clone()
    call_inliner(work)   # a call's body then gets the size parameters like the rest of ENTRY
    work.computations = work.reachable_computations()
    entry = work.entry
    assert entry is not None, f"module {module.name} has no ENTRY computation"
    symbols = _module_symbols(work)
    values = _checked_bounds(module.name, symbols, bounds)
    param_dims = tuple(tuple(s.dims) for p in entry.parameters for s in flatten_shape(p.shape)
                       if isinstance(s, ArrayShape))
    output_dims = tuple(tuple(s.dims) for s in flatten_shape(entry.result_shape) if isinstance(s, ArrayShape))
    originals = [i for i in entry.instructions if i.opcode not in ("parameter", "constant")]
    padder = Padder(work, entry, [s.name for s in symbols], values, HANDLERS)
    padder.run()
    mark_dynamic_rows(work, originals, padder.mask_dims, padder.params, values)
    _substitute(work, values)
    work.header_attrs.pop("entry_computation_layout", None)   # the signature has grown
    return PaddedModule(work, tuple(s.name for s in symbols), values, output_dims, param_dims)



# --- symbols and bounds -----------------------------------------------------------------------

def _module_symbols(module: HloModule) -> list[Symbol]:
    found: dict[str, Symbol] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            for expr in [*dims_in(instr.shape), *dims_in(list(instr.attrs.values()))]:
                _check_increasing(expr, instr)
                for s in expr.symbols:
                    found.setdefault(s.name, s)
    return [found[n] for n in sorted(found)]


def _check_increasing(expr: DimExpr, instr: HloInstruction) -> None:
    """A size at the bounds is the largest the bucket holds only when the expression grows
    with its symbols: no term but the constant may be negative."""
    if any(m and c < 0 for m, c in expr.terms.items()):
        raise NotImplementedError(f"dynamic padder: {instr.describe()} has the size {expr}, which does not "
                                  "grow with its symbols, so its value at the bucket's bounds is not an "
                                  "upper bound")


def _checked_bounds(name: str, symbols: list[Symbol], bounds: Mapping[str, int] | None) -> dict[str, int]:
    bounds = {} if bounds is None else bounds
    values: dict[str, int] = {}
    for s in symbols:
        if s.name not in bounds and s.upper is None:
            raise ValueError(f"pad_to_bounds: module {name} has the symbolic size {s.name!r}, which has no "
                             f"upper bound, and the bounds give no value for it (bounds: {dict(bounds)})")
        value = int(bounds.get(s.name, s.upper))   # type: ignore[arg-type]
        if value < s.lower or (s.upper is not None and value > s.upper):
            upper = "" if s.upper is None else f" and at most {s.upper}"
            raise ValueError(f"pad_to_bounds: the bound {value} for {s.name!r} is outside its range "
                             f"(at least {s.lower}{upper})")
        values[s.name] = value
    return values


# --- substitution -----------------------------------------------------------------------------

def _static(value: Any, values: Mapping[str, int]) -> Any:
    """`value` (a shape or an attribute value) with every DimExpr replaced by its value."""
    if isinstance(value, DimExpr):
        return value.evaluate(values)
    if isinstance(value, ArrayShape):
        if value.is_static:
            return value
        return ArrayShape(value.dtype, tuple(_static(d, values) for d in value.dims), value.layout)
    if isinstance(value, TupleShape):
        return TupleShape(tuple(_static(e, values) for e in value.elements))
    if isinstance(value, tuple):
        return tuple(_static(v, values) for v in value)
    if isinstance(value, list):
        return [_static(v, values) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and any(True for _ in dims_in(value)):
        return dataclasses.replace(value, **{f.name: _static(getattr(value, f.name), values)
                                             for f in dataclasses.fields(value)})
    return value


def _substitute(module: HloModule, values: Mapping[str, int]) -> None:
    for comp in module.computations:
        for instr in comp.instructions:
            instr.shape = _static(instr.shape, values)
            for name, value in instr.attrs.items():
                if any(True for _ in dims_in(value)):
                    instr.attrs[name] = _static(value, values)


HANDLERS: dict[str, Any] = {**CONTROL_FLOW_REWRITES, **REWRITES}
