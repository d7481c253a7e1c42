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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import prod
from typing import Any

import numpy as np

from ..hlo.attributes import ConvDimensionNumbers, PadDim, SliceDim
from ..hlo.computation import HloComputation
from ..hlo.dims import Dim, DimExpr, Symbol, dim, evaluate_dim
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.ops.control import branch_computations
from ..hlo.shape import ArrayShape, Shape, TupleShape, describe_shape, flatten_shape
from ..hlo.types import PRED, S32
from .call_inliner import call_inliner

SIZE_TYPE = S32


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
    _Padder(work, entry, [s.name for s in symbols], values).run()
    _substitute(work, values)
    work.header_attrs.pop("entry_computation_layout", None)   # the signature has grown
    return PaddedModule(work, tuple(s.name for s in symbols), values, output_dims, param_dims)


# --- symbols and bounds -----------------------------------------------------------------------

def _dims_in(value: Any) -> Iterable[DimExpr]:
    """Every DimExpr inside a shape or an attribute value."""
    if isinstance(value, DimExpr):
        yield value
    elif isinstance(value, ArrayShape):
        for d in value.dims:
            if isinstance(d, DimExpr):
                yield d
    elif isinstance(value, TupleShape):
        for e in value.elements:
            yield from _dims_in(e)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _dims_in(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _dims_in(getattr(value, f.name))


def _module_symbols(module: HloModule) -> list[Symbol]:
    found: dict[str, Symbol] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            for expr in [*_dims_in(instr.shape), *_dims_in(list(instr.attrs.values()))]:
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
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and any(True for _ in _dims_in(value)):
        return dataclasses.replace(value, **{f.name: _static(getattr(value, f.name), values)
                                             for f in dataclasses.fields(value)})
    return value


def _substitute(module: HloModule, values: Mapping[str, int]) -> None:
    for comp in module.computations:
        for instr in comp.instructions:
            instr.shape = _static(instr.shape, values)
            for name, value in instr.attrs.items():
                if any(True for _ in _dims_in(value)):
                    instr.attrs[name] = _static(value, values)


# --- the rewrites -----------------------------------------------------------------------------

def _symbolic(d: Dim) -> bool:
    return isinstance(d, DimExpr)


def _has_symbolic(shape: Shape) -> bool:
    return any(True for _ in _dims_in(shape))


class _Padder:
    """Rewrites one module's computations; instructions added keep symbolic shapes until
    `_substitute` makes the whole module static."""

    def __init__(self, module: HloModule, entry: HloComputation, names: list[str], bounds: dict[str, int]):
        self.module = module
        self.bounds = bounds
        self.entry = entry
        self.names = names
        first = len(entry.parameters)
        params: dict[str, HloInstruction] = {}
        for i, name in enumerate(names):
            param = HloInstruction(module.fresh_name(f"size_{name}"), "parameter", ArrayShape(SIZE_TYPE, ()),
                                   parameter_number=first + i)
            params[name] = entry.add_instruction(param)
        # Where each computation reads the actual sizes: ENTRY from its parameters, a loop's
        # body and condition from the loop state they are threaded through (_while).
        self.sources: dict[int, dict[str, HloInstruction]] = {id(entry): params}
        self.sizes: dict[tuple[int, DimExpr], HloInstruction] = {}

    def run(self) -> None:
        """Rewrite every computation, callers before callees (a loop threads the sizes into
        its body before the body is rewritten)."""
        done: set[int] = set()
        queue = [self.entry]
        while queue:
            comp = queue.pop(0)
            if id(comp) in done:
                continue
            done.add(id(comp))
            self.rewrite(comp)
            queue.extend(callee for instr in comp.instructions for callee in instr.called_computations())
        for comp in list(self.module.computations):
            if id(comp) not in done:
                self.rewrite(comp)

    # -- building blocks -----------------------------------------------------------------------
    def add(self, comp: HloComputation, opcode: str, shape: Shape, operands: Iterable[HloInstruction] = (),
            **attrs: Any) -> HloInstruction:
        return comp.add_instruction(HloInstruction(self.module.fresh_name(opcode), opcode, shape, operands, attrs))

    def constant(self, comp: HloComputation, value: Any, dtype) -> HloInstruction:
        literal = np.asarray(value).astype(dtype.np_dtype)
        return comp.add_instruction(HloInstruction(self.module.fresh_name("constant"), "constant",
                                                   ArrayShape(dtype, ()), literal=literal))

    def size(self, comp: HloComputation, value: Dim, user: HloInstruction, dtype=SIZE_TYPE) -> HloInstruction:
        """An instruction computing the actual value of size `value` (a scalar of `dtype`)."""
        if not isinstance(value, DimExpr):
            return self.constant(comp, int(value), dtype)
        source = self.sources.get(id(comp))
        if source is None:
            raise NotImplementedError(
                f"dynamic padder: {user.describe()} needs the actual value of the symbolic size {value}, "
                f"but it is inside the called computation {comp.name}, which has no size parameters (only the "
                "ENTRY computation and the bodies and conditions of its loops have them)")
        key = (id(comp), value)
        if key not in self.sizes:
            total: HloInstruction | None = None
            scalar = ArrayShape(SIZE_TYPE, ())
            for monomial, coefficient in sorted(value.terms.items(), key=lambda mc: len(mc[0])):
                factors = [source[s.name] for s, p in monomial for _ in range(p)]
                if coefficient != 1 or not factors:
                    factors.append(self.constant(comp, coefficient, SIZE_TYPE))
                term = factors[0]
                for f in factors[1:]:
                    term = self.add(comp, "multiply", scalar, (term, f))
                total = term if total is None else self.add(comp, "add", scalar, (total, term))
            assert total is not None
            self.sizes[key] = total
        result = self.sizes[key]
        if dtype != SIZE_TYPE:
            result = self.add(comp, "convert", ArrayShape(dtype, ()), (result,))
        return result

    def valid(self, comp: HloComputation, shape: ArrayShape, dims: Iterable[int],
              user: HloInstruction) -> HloInstruction | None:
        """pred[shape]: true where every index along `dims` (those that are symbolic) is
        below the actual size; None when none of `dims` is symbolic."""
        mask: HloInstruction | None = None
        index_shape = ArrayShape(SIZE_TYPE, shape.dims)
        pred_shape = ArrayShape(PRED, shape.dims)
        for d in dims:
            if not _symbolic(shape.dims[d]):
                continue
            size = self.size(comp, shape.dims[d], user)
            iota = self.add(comp, "iota", index_shape, iota_dimension=d)
            limit = self.add(comp, "broadcast", index_shape, (size,), dimensions=())
            below = self.add(comp, "compare", pred_shape, (iota, limit), direction="LT")
            mask = below if mask is None else self.add(comp, "and", pred_shape, (mask, below))
        return mask

    def masked(self, comp: HloComputation, x: HloInstruction, dims: Iterable[int], fill: HloInstruction,
               user: HloInstruction) -> HloInstruction:
        """`x` with the padding along `dims` replaced by the scalar `fill`."""
        shape = x.array_shape
        mask = self.valid(comp, shape, dims, user)
        if mask is None:
            return x
        filler = self.add(comp, "broadcast", shape.without_layout(), (fill,), dimensions=())
        return self.add(comp, "select", shape.without_layout(), (mask, x, filler))

    def zero(self, comp: HloComputation, dtype) -> HloInstruction:
        return self.constant(comp, 0, dtype)

    # -- the walk --------------------------------------------------------------------------------
    def rewrite(self, comp: HloComputation) -> None:
        changed = False
        for instr in comp.post_order():
            if instr.parent is not comp:
                continue   # replaced already
            shapes = [instr.shape, *instr.operand_shapes(), *(v for v in instr.attrs.values())]
            if not any(True for _ in _dims_in(shapes)):
                continue
            handler = _HANDLERS.get(instr.opcode)
            if handler is not None:
                changed |= bool(handler(self, comp, instr))
            elif not _passes_through(instr):
                raise NotImplementedError(f"dynamic padder: {instr.opcode} with symbolic dimensions "
                                          f"({_symbolic_description(instr)}) is not supported: "
                                          f"{instr.describe()}")
        if changed:
            comp.sort_topologically()


def _symbolic_description(instr: HloInstruction) -> str:
    parts = []
    for what, shape in [("result", instr.shape)] + [(f"operand {i}", s) for i, s in enumerate(instr.operand_shapes())]:
        for k, leaf in enumerate(flatten_shape(shape)):
            if isinstance(leaf, ArrayShape) and not leaf.is_static:
                dims = ", ".join(f"dimension {d} is {e}" for d, e in enumerate(leaf.dims) if _symbolic(e))
                parts.append(f"{what}{f' element {k}' if isinstance(shape, TupleShape) else ''}: {dims}")
    return "; ".join(parts) or "in its attributes"


# Opcodes whose results never depend on the padding of their operands beyond the same
# positions (or that only move whole values around).
_THROUGH = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "broadcast", "iota", "transpose",
                      "copy", "map", "opt-barrier", "after-all", "call",
                      "batch-norm-inference", "rng", "rng-bit-generator", "stochastic-convert"})


def _passes_through(instr: HloInstruction) -> bool:
    return instr.opcode in _THROUGH or op_def(instr.opcode).fusion_kind == "elementwise"


def _refuse(instr: HloInstruction, why: str) -> NotImplementedError:
    return NotImplementedError(f"dynamic padder: {instr.describe()}: {why}")


# --- reductions -------------------------------------------------------------------------------

def _reduce(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    n = len(instr.operands) // 2
    dims = tuple(instr.attrs["dimensions"])
    changed = False
    for i in range(n):
        x, init = instr.operands[i], instr.operands[n + i]
        masked = p.masked(comp, x, dims, init, instr)
        if masked is not x:
            _set_operand(instr, i, masked)
            changed = True
    return changed


def _drop_user(old: HloInstruction, user: HloInstruction) -> None:
    if old not in user.operands and user in old.users:
        old.users.remove(user)


def _set_operand(instr: HloInstruction, index: int, new: HloInstruction) -> None:
    old = instr.operands[index]
    instr.operands[index] = new
    if instr not in new.users:
        new.users.append(instr)
    _drop_user(old, instr)


def _reduce_window(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    n = len(instr.operands) // 2
    window = instr.attrs["window"]
    changed = False
    for i in range(n):
        x, init = instr.operands[i], instr.operands[n + i]
        dims = [d for d, w in enumerate(window)
                if not (w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1)]
        masked = p.masked(comp, x, dims, init, instr)
        if masked is not x:
            _set_operand(instr, i, masked)
            changed = True
    return changed


def _dot(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    lhs, rhs = instr.operands
    lc, rc = tuple(instr.attrs.get("lhs_contracting_dims", ())), tuple(instr.attrs.get("rhs_contracting_dims", ()))
    if not any(_symbolic(lhs.array_shape.dims[d]) for d in lc):
        return False
    _set_operand(instr, 0, p.masked(comp, lhs, lc, p.zero(comp, lhs.array_shape.dtype), instr))
    _set_operand(instr, 1, p.masked(comp, rhs, rc, p.zero(comp, rhs.array_shape.dtype), instr))
    return True


# --- sizes as values --------------------------------------------------------------------------

def _get_dimension_size(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    value = instr.operands[0].array_shape.dims[instr.attrs["dimensions"][0]]
    comp.replace_instruction(instr, p.size(comp, value, instr))
    return True


# --- data movement ----------------------------------------------------------------------------

def _concatenate(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    d = instr.attrs["dimensions"][0]
    sizes = [o.array_shape.dims[d] for o in instr.operands]
    if not any(_symbolic(s) for s in sizes[:-1]):
        return False   # the padding of the last operand lands in the result's padding
    shape = instr.array_shape
    result = p.add(comp, "broadcast", shape.without_layout(), (p.zero(comp, shape.dtype),), dimensions=())
    zero = p.zero(comp, SIZE_TYPE)
    offset: Dim = 0
    for operand, size in zip(instr.operands, sizes):
        starts = [zero] * shape.rank
        starts[d] = p.size(comp, offset, instr)
        result = p.add(comp, "dynamic-update-slice", shape.without_layout(), (result, operand, *starts))
        offset = offset + size
    comp.replace_instruction(instr, result)
    return True


def _pad(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, value = instr.operands
    padding = instr.attrs["padding"]
    dims = [d for d, pd in enumerate(padding) if _symbolic(x.array_shape.dims[d]) and (pd.high != 0 or pd.interior)]
    for d, pd in enumerate(padding):
        if _symbolic(pd.low) or (_symbolic(pd.interior)):
            raise _refuse(instr, f"the padding of dimension {d} ({pd.low}_{pd.high}_{pd.interior}) has a symbolic "
                                 "low or interior part")
    masked = p.masked(comp, x, dims, value, instr)
    if masked is x:
        return False
    _set_operand(instr, 0, masked)
    return True


def _slice(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x = instr.operands[0]
    spec: tuple[SliceDim, ...] = instr.attrs["slice"]
    moving = [d for d, s in enumerate(spec) if _symbolic(s.start)]
    if not moving:
        return False
    shape = x.array_shape
    zero = p.zero(comp, SIZE_TYPE)
    starts = [zero] * shape.rank
    sizes = list(shape.dims)
    for d in moving:
        s = spec[d]
        count = instr.array_shape.dims[d]
        span = (count - 1) * s.stride + 1 if not (isinstance(count, int) and count == 0) else 0
        if not _grows(shape.dims[d] - s.start - span):
            raise _refuse(instr, f"dimension {d} is sliced from the symbolic start {s.start} with "
                                 f"{count} elements out of {shape.dims[d]}: the padded slice may not fit")
        starts[d] = p.size(comp, s.start, instr)
        sizes[d] = span
    window = p.add(comp, "dynamic-slice", ArrayShape(shape.dtype, tuple(sizes)), (x, *starts),
                   dynamic_slice_sizes=tuple(sizes))
    rest = tuple(SliceDim(0, sizes[d], s.stride) if d in moving else s for d, s in enumerate(spec))
    result = p.add(comp, "slice", instr.shape, (window,), slice=rest)
    comp.replace_instruction(instr, result)
    return True


def _grows(value: Dim) -> bool:
    """Whether `value` is >= 0 for all sizes in a bucket when it is at the bounds: an int >= 0,
    or an expression with no negative term but possibly the constant, itself >= 0."""
    if isinstance(value, DimExpr):
        return all(c >= 0 for m, c in value.terms.items() if m) and value.constant >= 0
    return value >= 0


def _clamped_start(p: _Padder, comp: HloComputation, start: HloInstruction, limit: Dim,
                   user: HloInstruction) -> HloInstruction:
    """`start` clamped to [0, limit] at the actual sizes (limit: operand size - slice size)."""
    dtype = start.array_shape.dtype
    return p.add(comp, "clamp", start.shape, (p.zero(comp, dtype), start, p.size(comp, limit, user, dtype)))


def _dynamic_slice(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, *starts = instr.operands
    shape = x.array_shape
    sizes = instr.attrs["dynamic_slice_sizes"]
    changed = False
    for d, (full, size) in enumerate(zip(shape.dims, sizes)):
        if not (_symbolic(full) or _symbolic(size)):
            continue
        if _symbolic(size) and not _grows(full - size):
            raise _refuse(instr, f"dimension {d}: a slice of {size} out of {full} may not fit when padded")
        _set_operand(instr, 1 + d, _clamped_start(p, comp, starts[d], full - size, instr))
        changed = True
    return changed


def _dynamic_update_slice(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, update, *starts = instr.operands
    shape, ushape = x.array_shape, update.array_shape
    changed = False
    clamped = list(starts)
    for d, (full, size) in enumerate(zip(shape.dims, ushape.dims)):
        if not (_symbolic(full) or _symbolic(size)):
            continue
        if _symbolic(size) and not _grows(full - size):
            raise _refuse(instr, f"dimension {d}: an update of {size} into {full} may not fit when padded")
        clamped[d] = _clamped_start(p, comp, starts[d], full - size, instr)
        _set_operand(instr, 2 + d, clamped[d])
        changed = True
    symbolic_update = [d for d, size in enumerate(ushape.dims) if _symbolic(size)]
    if symbolic_update:
        # The update's padding must not overwrite the operand: merge it with what is there.
        old = p.add(comp, "dynamic-slice", ushape.without_layout(), (x, *clamped),
                    dynamic_slice_sizes=tuple(ushape.dims))
        mask = p.valid(comp, ushape, symbolic_update, instr)
        assert mask is not None
        merged = p.add(comp, "select", ushape.without_layout(), (mask, update, old))
        _set_operand(instr, 1, merged)
    return changed or bool(symbolic_update)


def _reshape(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    problem = reshape_problem(instr.operands[0].array_shape.dims, instr.array_shape.dims)
    if problem:
        raise _refuse(instr, f"reshape {describe_shape(instr.operands[0].shape)} -> {describe_shape(instr.shape)}: "
                             f"{problem}")
    return False


def reshape_problem(source: tuple[int, ...], target: tuple[int, ...]) -> str | None:
    """Why a reshape of padded arrays would mix padding into valid elements, or None when it
    keeps them apart. It keeps them apart when the symbolic dimensions of both sides pair up,
    in order, so that each pair starts at the same row-major stride boundary (equal products
    of the dimensions before) and spans the same extent (equal products from it on), with
    the dimensions after each in a constant ratio: then a padded element's flat position is
    padding on both sides."""
    src = [d for d, size in enumerate(source) if _symbolic(size)]
    dst = [d for d, size in enumerate(target) if _symbolic(size)]
    if len(src) != len(dst):
        return (f"it turns {len(src)} symbolic dimension(s) into {len(dst)}, so padding would be interleaved "
                "with valid elements")
    for a, b in zip(src, dst):
        before_a, before_b = prod(source[:a]), prod(target[:b])
        after_a, after_b = prod(source[a + 1:]), prod(target[b + 1:])
        if not (dim(before_a) == dim(before_b) and dim(source[a] * after_a) == dim(target[b] * after_b)
                and _constant_ratio(after_a, after_b)):
            return (f"symbolic dimension {a} ({source[a]}) does not map onto symbolic dimension {b} ({target[b]}) "
                    "as the outermost dimension of its group")
    return None


def _constant_ratio(a: Dim, b: Dim) -> bool:
    """Whether a / b is a constant (the same for every value of the symbols)."""
    ea = a if isinstance(a, DimExpr) else DimExpr({(): a})
    eb = b if isinstance(b, DimExpr) else DimExpr({(): b})
    if set(ea.terms) != set(eb.terms):
        return False
    ratios = {Fraction(ea.terms[m], eb.terms[m]) for m in ea.terms}
    return len(ratios) <= 1


# --- ops that look along a dimension ------------------------------------------------------------

def _sort(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Along a symbolic dimension, a leading key operand (1 in the padding, 0 elsewhere) sorts
    the padding after every valid element; between valid elements the comparator decides, so
    the valid elements end first, in the order the actual size gives them."""
    (d,) = instr.attrs["dimensions"]
    shape = instr.operands[0].array_shape
    if not _symbolic(shape.dims[d]):
        return False
    valid = p.valid(comp, shape, [d], instr)
    assert valid is not None
    key_shape = ArrayShape(SIZE_TYPE, shape.without_layout().dims)
    key = p.add(comp, "select", key_shape,
                (valid, *(p.add(comp, "broadcast", key_shape, (p.constant(comp, v, SIZE_TYPE),), dimensions=())
                          for v in (0, 1))))
    elements = [o.shape for o in instr.operands]
    loop = p.add(comp, "sort", TupleShape((key_shape, *elements)), (key, *instr.operands),
                 **{**instr.attrs, "to_apply": _padding_last(p, comp, instr.attrs["to_apply"])})
    if isinstance(instr.shape, TupleShape):
        result = p.add(comp, "tuple", instr.shape,
                       [p.add(comp, "get-tuple-element", e, (loop,), index=k + 1) for k, e in enumerate(elements)])
    else:
        result = p.add(comp, "get-tuple-element", instr.shape, (loop,), index=1)
    comp.replace_instruction(instr, result)
    return True


def _padding_last(p: _Padder, caller: HloComputation, comparator: HloComputation) -> HloComputation:
    """`(key_l, key_r, *params) -> key_l < key_r if key_l != key_r else comparator(*params)`."""
    module = p.module
    new = HloComputation(module.fresh_name(f"{comparator.name}_padding_last"))
    scalar, pred = ArrayShape(SIZE_TYPE, ()), ArrayShape(PRED, ())

    def param(number: int, shape: Shape) -> HloInstruction:
        return new.add_instruction(HloInstruction(module.fresh_name("p"), "parameter", shape,
                                                  parameter_number=number))

    left, right = param(0, scalar), param(1, scalar)
    copies: dict[int, HloInstruction] = {}
    for instr in comparator.post_order():
        if instr.opcode == "parameter":
            assert instr.parameter_number is not None
            copies[id(instr)] = param(instr.parameter_number + 2, instr.shape)
        else:
            copies[id(instr)] = new.add_instruction(HloInstruction(
                module.fresh_name(instr.opcode), instr.opcode, instr.shape, [copies[id(o)] for o in instr.operands],
                dict(instr.attrs), literal=instr.literal))
    assert comparator.root is not None
    differ = p.add(new, "compare", pred, (left, right), direction="NE")
    first = p.add(new, "compare", pred, (left, right), direction="LT")
    new.root = p.add(new, "select", pred, (differ, first, copies[id(comparator.root)]))
    module.computations.insert(module.computations.index(caller), new)
    return new


def _topk(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Along a symbolic last dimension the padding is set to the value that comes last in the
    total order top-k sorts by (-NaN with every payload bit for the largest k, +NaN for the
    smallest; the extreme integers), and ties go to the lower, valid, index."""
    x = instr.operands[0]
    shape = x.array_shape
    if not _symbolic(shape.dims[-1]):
        return False
    storage = np.dtype(shape.dtype.np_dtype)
    largest = instr.attrs.get("largest", True)
    if shape.dtype.is_float:
        bits = np.dtype(f"u{storage.itemsize}")
        ones = np.array(np.iinfo(bits).max, bits)
        value = (ones if largest else ones >> np.array(1, bits)).view(storage)
    elif shape.dtype.is_integral:
        value = np.array(np.iinfo(storage).min if largest else np.iinfo(storage).max, storage)
    else:
        raise _refuse(instr, f"top-k of {shape.dtype} along the symbolic dimension {shape.rank - 1} is not supported")
    fill = comp.add_instruction(HloInstruction(p.module.fresh_name("constant"), "constant",
                                               ArrayShape(shape.dtype, ()), literal=np.array(value)))
    _set_operand(instr, 0, p.masked(comp, x, [shape.rank - 1], fill, instr))
    return True


def _matrix_op(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    for i, o in enumerate(instr.operands):
        shape = o.array_shape
        for d in range(max(shape.rank - 2, 0), shape.rank):
            if _symbolic(shape.dims[d]):
                raise _refuse(instr, f"{instr.opcode} over the symbolic matrix dimension {d} ({shape.dims[d]}) of "
                                     f"operand {i} is not supported (batch dimensions may be symbolic)")
    return False


def _convolution(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """The input's padding along symbolic spatial dimensions becomes zeros, which is what the
    convolution's own padding and base dilation hold, so every valid output position sees
    what it sees at the actual size; a symbolic input feature dimension is contracted like a
    dot's (both operands masked to 0). The batch dimension needs nothing."""
    lhs, rhs = instr.operands
    dn: ConvDimensionNumbers = instr.attrs["dim_labels"]
    lshape, rshape = lhs.array_shape, rhs.array_shape
    fgc, bgc = instr.attrs.get("feature_group_count", 1), instr.attrs.get("batch_group_count", 1)
    if bgc != 1 and _symbolic(lshape.dims[dn.input_batch]):
        raise _refuse(instr, "convolution with batch groups over a symbolic batch dimension "
                             f"{dn.input_batch} ({lshape.dims[dn.input_batch]}) is not supported")
    feature = lshape.dims[dn.input_feature]
    if _symbolic(feature) and (fgc != 1 or bgc != 1):
        raise _refuse(instr, f"convolution with groups over the symbolic feature dimension {dn.input_feature} "
                             f"({feature}) is not supported")
    for d in dn.kernel_spatial:
        if _symbolic(rshape.dims[d]):
            raise _refuse(instr, f"convolution with the symbolic kernel dimension {d} ({rshape.dims[d]}) is not "
                                 "supported")
    lhs_dims = [d for d in (dn.input_feature, *dn.input_spatial) if _symbolic(lshape.dims[d])]
    if not lhs_dims:
        return False
    _set_operand(instr, 0, p.masked(comp, lhs, lhs_dims, p.zero(comp, lshape.dtype), instr))
    if _symbolic(feature):
        _set_operand(instr, 1, p.masked(comp, rhs, [dn.kernel_input_feature], p.zero(comp, rshape.dtype), instr))
    return True


def _reverse(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Reversed, the valid elements of a symbolic dimension end the padded array: they are
    moved back to the front with a dynamic-slice at (padded size - actual size), from the
    reversed array padded by its own size so the slice never clamps."""
    x = instr.operands[0]
    shape = x.array_shape
    moved = [d for d in instr.attrs["dimensions"] if _symbolic(shape.dims[d])]
    if not moved:
        return False
    flipped = p.add(comp, "reverse", shape.without_layout(), (x,), **instr.attrs)
    grown = tuple(2 * size if d in moved else size for d, size in enumerate(shape.dims))
    padding = tuple(PadDim(0, size if d in moved else 0) for d, size in enumerate(shape.dims))
    extended = p.add(comp, "pad", ArrayShape(shape.dtype, grown), (flipped, p.zero(comp, shape.dtype)),
                     padding=padding)
    starts = [p.zero(comp, SIZE_TYPE)] * shape.rank
    for d in moved:
        starts[d] = p.add(comp, "subtract", ArrayShape(SIZE_TYPE, ()),
                          (p.constant(comp, evaluate_dim(shape.dims[d], p.bounds), SIZE_TYPE),
                           p.size(comp, shape.dims[d], instr)))
    result = p.add(comp, "dynamic-slice", instr.shape, (extended, *starts), dynamic_slice_sizes=tuple(shape.dims))
    comp.replace_instruction(instr, result)
    return True


def _index_limits(p: _Padder, comp: HloComputation, instr: HloInstruction, indices: HloInstruction,
                  index_map: tuple[int, ...], window: list[Dim], other: int) -> HloInstruction | None:
    """An array shaped like `indices` holding, for each index component that addresses a
    symbolic operand dimension d, the largest start whose window fits the actual size
    (size(d) - window[d]), and `other` for the other components; None when no component
    addresses a symbolic dimension."""
    shape, ishape = instr.operands[0].array_shape, indices.array_shape
    if not any(_symbolic(shape.dims[d]) for d in index_map):
        return None
    dtype, vector = ishape.dtype, instr.attrs["index_vector_dim"]
    one = ArrayShape(dtype, (1,))
    parts = [p.size(comp, shape.dims[d] - window[d], instr, dtype) if _symbolic(shape.dims[d])
             else p.constant(comp, other, dtype) for d in index_map]
    bounds_shape = ArrayShape(dtype, ishape.without_layout().dims)
    if vector == ishape.rank:
        return p.add(comp, "broadcast", bounds_shape, (parts[0],), dimensions=())
    pieces = [p.add(comp, "reshape", one, (part,)) for part in parts]
    vector_limits = p.add(comp, "concatenate", ArrayShape(dtype, (len(parts),)), pieces, dimensions=(0,))
    return p.add(comp, "broadcast", bounds_shape, (vector_limits,), dimensions=(vector,))


def _gather(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Gather clamps each start so its slice fits the operand: into a symbolic dimension, the
    starts are first clamped to fit the actual size."""
    shape = instr.operands[0].array_shape
    sizes = instr.attrs["slice_sizes"]
    for d, (full, size) in enumerate(zip(shape.dims, sizes)):
        if _symbolic(size) and not full == size:
            raise _refuse(instr, f"gather with the symbolic slice size {size} in dimension {d} is not supported")
    indices = instr.operands[1]
    largest = int(np.iinfo(indices.array_shape.dtype.np_dtype).max)
    limits = _index_limits(p, comp, instr, indices, tuple(instr.attrs["start_index_map"]), list(sizes), largest)
    if limits is None:
        return False
    _set_operand(instr, 1, p.add(comp, "minimum", limits.shape, (indices, limits)))
    return True


def _scatter(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Scatter skips an update window that does not fit the operand. Index rows in the padding
    of the indices, and starts whose window does not fit a symbolic dimension's actual size,
    are set out of bounds (the type's largest value), so they are skipped too."""
    n = (len(instr.operands) - 1) // 2
    shape = instr.operands[0].array_shape
    indices, updates = instr.operands[n], instr.operands[n + 1].array_shape
    ishape = indices.array_shape
    index_map = tuple(instr.attrs["scatter_dims_to_operand_dims"])
    largest = int(np.iinfo(ishape.dtype.np_dtype).max)
    for d in index_map:
        if largest < evaluate_dim(shape.dims[d], p.bounds):
            raise _refuse(instr, f"the indices' type {ishape.dtype} cannot hold an index out of bounds of operand "
                                 f"dimension {d} ({shape.dims[d]}), which the padding needs")
    far = p.constant(comp, largest, ishape.dtype)
    vector = instr.attrs["index_vector_dim"]
    masked = p.masked(comp, indices, [d for d in range(ishape.rank) if d != vector], far, instr)
    dropped = set(instr.attrs.get("inserted_window_dims", ())) | set(instr.attrs.get("input_batching_dims", ()))
    window: list[Dim] = [1] * shape.rank
    for d, w in zip([d for d in range(shape.rank) if d not in dropped], instr.attrs["update_window_dims"]):
        window[d] = updates.dims[w]
    limits = _index_limits(p, comp, instr, indices, index_map, window, largest)
    if limits is not None:
        beyond = p.add(comp, "compare", ArrayShape(PRED, limits.array_shape.dims), (masked, limits), direction="GT")
        masked = p.add(comp, "select", limits.shape,
                       (beyond, p.add(comp, "broadcast", limits.shape, (far,), dimensions=()), masked))
    if masked is indices:
        return False
    _set_operand(instr, n, masked)
    return True


def _select_and_scatter(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    shape = instr.operands[0].array_shape
    for d, w in enumerate(instr.attrs["window"]):
        if _symbolic(shape.dims[d]) and not (w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0):
            raise _refuse(instr, f"select-and-scatter with a window over the symbolic dimension {d} "
                                 f"({shape.dims[d]}) is not supported")
    return False


def _batch_norm(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    shape = instr.operands[0].array_shape
    feature = instr.attrs["feature_index"]
    for d, size in enumerate(shape.dims):
        if _symbolic(size) and d != feature:
            raise _refuse(instr, f"{instr.opcode} reduces over the symbolic dimension {d} ({size}); expand it into "
                                 "reductions before tracing symbolically")
    return False


# --- loops ---------------------------------------------------------------------------------------

def _mentions_symbols(comp: HloComputation, seen: set[int] | None = None) -> bool:
    """Whether `comp`, or a computation it calls, has a symbolic shape or attribute."""
    seen = set() if seen is None else seen
    if id(comp) in seen:
        return False
    seen.add(id(comp))
    for instr in comp.instructions:
        if any(True for _ in _dims_in([instr.shape, *instr.attrs.values()])):
            return True
        if any(_mentions_symbols(c, seen) for c in instr.called_computations()):
            return True
    return False


def _while(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Thread the actual sizes through the loop state, so that the body and the condition can
    build masks: the state gets one s32[] element per symbol, which the body passes on."""
    body, cond = instr.attrs["body"], instr.attrs["condition"]
    if id(comp) not in p.sources or not (_mentions_symbols(body) or _mentions_symbols(cond)):
        return False
    state = instr.shape
    if not isinstance(state, TupleShape):
        raise _refuse(instr, f"a loop whose state {describe_shape(state)} is not a tuple cannot carry the "
                             "actual sizes its body needs")
    for c in (body, cond):
        if id(c) in p.sources:
            raise _refuse(instr, f"the computation {c.name} serves another loop already; the sizes cannot be "
                                 "threaded through both")
        param = c.parameters[0]
        if any(u.opcode != "get-tuple-element" for u in param.users) or c.root is param:
            raise _refuse(instr, f"the loop state is used whole in {c.name}, so the actual sizes cannot be "
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


def _conditional(p: _Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Pass the actual sizes to each branch that has symbolic shapes: its operand becomes
    (operand, sizes...), and the branch reads the operand and the sizes from that tuple."""
    branches = branch_computations(instr.attrs)
    needing = [i for i, branch in enumerate(branches) if _mentions_symbols(branch)]
    if id(comp) not in p.sources or not needing:
        return False
    scalar = ArrayShape(SIZE_TYPE, ())
    sizes = [p.sources[id(comp)][name] for name in p.names]
    for i in needing:
        branch = branches[i]
        if id(branch) in p.sources or branches.count(branch) > 1:
            raise _refuse(instr, f"the branch {branch.name} serves another conditional or branch already; the sizes "
                                 "cannot be passed to both")
        operand = instr.operands[1 + i]
        wrapped = p.add(comp, "tuple", TupleShape((operand.shape, *(scalar for _ in sizes))), (operand, *sizes))
        _set_operand(instr, 1 + i, wrapped)
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


_HANDLERS: dict[str, Any] = {
    "while": _while,
    "conditional": _conditional,
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "dot": _dot,
    "get-dimension-size": _get_dimension_size,
    "concatenate": _concatenate,
    "pad": _pad,
    "slice": _slice,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "reshape": _reshape,
    "sort": _sort,
    "reverse": _reverse,
    "topk": _topk,
    "cholesky": _matrix_op,
    "triangular-solve": _matrix_op,
    "convolution": _convolution,
    "gather": _gather,
    "scatter": _scatter,
    "select-and-scatter": _select_and_scatter,
    "batch-norm-training": _batch_norm,
    "batch-norm-grad": _batch_norm,
}
