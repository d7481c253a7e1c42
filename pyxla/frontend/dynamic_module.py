"""HLO modules whose text has dynamic dimensions (`f32[?,32]`, `f32[<=128,32]`), run as XLA
runs them: each call reads the sizes from its arguments.

The parser gives every `?` / `<=N` an anonymous symbol and unifies the symbols of the
instructions that follow from their operands (hlo/dynamic_dims.py), so a module read from
text is a shape polymorphic module like a traced one. `compile_dynamic(module, backend)`
runs it the way `jit(polymorphic_shapes=...)` runs a traced function: a call binds each
symbol to the size of the parameter dimension it names (checking `<=N` and that a symbol
used twice has one size), picks the size's bucket (the next power of two, at least 16, capped by `N`),
specialises the module to the bucket with the dynamic padder (compiled once per bucket,
`PYXLA_LOG_COMPILES` logs it), pads the arguments, and slices the results to their sizes.

XLA takes the operands of an elementwise op (and a dot's batch and contracting dimensions)
to have equal sizes at run time; the parser cannot know that two `?` parameters are one
size, so `compile_dynamic` first unifies such symbols (`tie_equal_sizes`), and a call whose
arguments break it is an ArgumentError.

What the parameters do not determine cannot run: a dynamic dimension whose size no parameter
gives (an `iota` or `broadcast` written `f32[?]` with nothing to infer it from, a loop
state's dimension) is refused when compiled, naming the instruction, as XLA needs
`set-dimension-size` for such sizes; `set-dimension-size` itself (a size given as a value)
is refused too.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..hlo.dims import DimExpr, Symbol, single_symbol
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape, Shape, TupleShape, flatten_shape
from .shape_poly import choose_buckets, run_padded


@dataclass
class _Bucket:
    executable: Any             # the backend's executable of the padded module
    symbols: tuple[str, ...]    # the size parameters' order
    param_shapes: list[tuple[int, ...]]
    output_dims: list[tuple]    # each output's dimensions (ints and DimExprs)


def has_dynamic_dimensions(module: HloModule) -> bool:
    """Whether some instruction of `module` has a symbolic (dynamic) dimension."""
    return any(isinstance(s, ArrayShape) and not s.is_static
               for comp in module.computations for instr in comp.instructions for s in flatten_shape(instr.shape))


def _tied_positions(instr) -> list[list[object]]:
    """Groups of dimensions of `instr` and its operands that XLA requires to be equal."""
    shapes = [instr.shape, *instr.operand_shapes()]
    if not all(isinstance(s, ArrayShape) for s in shapes):
        return []
    if instr.opcode == "dot":
        a, lhs, rhs = instr.attrs, shapes[1], shapes[2]
        pairs = zip([*a.get("lhs_batch_dims", ()), *a.get("lhs_contracting_dims", ())],
                    [*a.get("rhs_batch_dims", ()), *a.get("rhs_contracting_dims", ())])
        return [[lhs.dims[i], rhs.dims[j]] for i, j in pairs]
    try:
        elementwise = op_def(instr.opcode).fusion_kind == "elementwise"
    except NotImplementedError:
        return []
    ranked = [s for s in shapes if s.rank == instr.shape.rank]
    return [[s.dims[d] for s in ranked] for d in range(instr.shape.rank)] if elementwise else []


def tie_equal_sizes(module: HloModule) -> HloModule:
    """A copy of `module` in which the dynamic dimensions XLA requires to be equal (the
    operands and result of an elementwise op, a dot's batch and contracting dimensions)
    share one symbol, bounded by the smallest of their bounds."""
    parent: dict[str, str] = {}          # a tied symbol's name -> the name it was tied to
    roots: dict[str, Symbol] = {}        # a group's name -> its symbol, with the group's bound

    def find(sym: Symbol) -> Symbol:
        name = sym.name
        while name in parent:
            name = parent[name]
        return roots.get(name, sym)

    for comp in module.computations:
        for instr in comp.instructions:
            for group in _tied_positions(instr):
                found = [find(s) for s in map(single_symbol, group) if s]
                distinct = list({s.name: s for s in found}.values())
                if len(distinct) < 2:
                    continue
                bounds = [s.upper for s in distinct if s.upper is not None]
                keep = Symbol(distinct[0].name, distinct[0].lower, min(bounds) if bounds else None)
                roots[keep.name] = keep
                for other in distinct[1:]:
                    parent[other.name] = keep.name
    out = module.clone()
    if roots:
        for comp in out.computations:
            for instr in comp.instructions:
                instr.shape = _substituted(instr.shape, find)
    return out


def _substituted(shape: Shape, find) -> Shape:
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(_substituted(e, find) for e in shape.elements))
    if not isinstance(shape, ArrayShape) or shape.is_static:
        return shape
    dims = []
    for size in shape.dims:
        if isinstance(size, DimExpr):
            total: DimExpr | int = 0
            for monomial, coefficient in size.terms.items():
                term: DimExpr | int = coefficient
                for sym, power in monomial:
                    for _ in range(power):
                        term = term * DimExpr({((find(sym), 1),): 1})
                total = total + term
            size = total
        dims.append(size)
    return ArrayShape(shape.dtype, tuple(dims), shape.layout)


def _parameter_symbols(module: HloModule) -> tuple[list[tuple[int, int, Symbol]], dict[str, Symbol]]:
    """(parameter number, dimension, symbol) for every parameter dimension that is one symbol,
    and every symbol the module uses; NotImplementedError naming the first instruction whose
    size no parameter gives."""
    entry = module.entry
    assert entry is not None, f"module {module.name} has no ENTRY computation"
    bound: list[tuple[int, int, Symbol]] = []
    for p in entry.parameters:
        if not isinstance(p.shape, ArrayShape):
            if not all(s.is_static for s in flatten_shape(p.shape) if isinstance(s, ArrayShape)):
                raise NotImplementedError(f"{p.describe()}: a tuple-shaped parameter with dynamic dimensions "
                                          "cannot have its sizes read from the arguments")
            continue
        for d, size in enumerate(p.shape.dims):
            if isinstance(size, DimExpr):
                symbol = single_symbol(size)
                if symbol is None:
                    raise NotImplementedError(f"{p.describe()}: dimension {d} is {size}; a parameter's dynamic "
                                              "dimension must be one size (`?` or `<=N`)")
                bound.append((p.parameter_number, d, symbol))
    known = {s.name for _, _, s in bound}
    used: dict[str, Symbol] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == "set-dimension-size":
                raise NotImplementedError(f"{instr.describe()}: set-dimension-size (a dimension's size given as "
                                          "a value) is not supported; pyxla reads dynamic sizes from the "
                                          "parameters' shapes")
            for s in flatten_shape(instr.shape):
                for size in (s.dims if isinstance(s, ArrayShape) else ()):
                    for symbol in (size.symbols if isinstance(size, DimExpr) else ()):
                        if symbol.name not in known:
                            raise NotImplementedError(
                                f"{instr.describe()} has the shape {s.to_text(False)}, whose dynamic size no "
                                "parameter gives (it is not inferred from its operands): pyxla reads dynamic "
                                "sizes from the parameters' shapes only")
                        used[symbol.name] = symbol
    return bound, used


class DynamicExecutable:
    """A module with dynamic dimensions on `backend`: `run_flat(arrays)` like any executable,
    for arguments of any sizes its dimensions allow."""

    def __init__(self, module: HloModule, backend):
        self.module = module = tie_equal_sizes(module)
        self.backend = backend
        self.bindings, self.symbols = _parameter_symbols(module)
        entry = module.entry
        assert entry is not None
        # a symbol shown as the first parameter dimension giving it: `x.0`
        self.labels: dict[str, str] = {}
        for number, d, symbol in self.bindings:
            self.labels.setdefault(symbol.name, f"{entry.parameters[number].name}.{d}")
        self.buckets: dict[tuple, _Bucket] = {}
        self.compile_count = 0

    def sizes(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """Each symbol's size in these arguments; ArgumentError naming the parameter and
        dimension when a size breaks its bound or two disagree."""
        entry = self.module.entry
        assert entry is not None
        params = entry.parameters
        if len(arrays) != len(params):
            raise ArgumentError(f"{self.module.name} takes {len(params)} arguments, got {len(arrays)}")
        for p, a in zip(params, arrays):
            if isinstance(p.shape, ArrayShape) and np.ndim(a) != p.shape.rank:
                raise ArgumentError(f"argument {p.parameter_number} ({p.name}): rank {np.ndim(a)}, expected "
                                    f"{p.shape.rank} ({p.shape.to_text(False)})")
            if isinstance(p.shape, ArrayShape):
                for d, size in enumerate(p.shape.dims):
                    if isinstance(size, int) and np.shape(a)[d] != size:
                        raise ArgumentError(f"argument {p.parameter_number} ({p.name}): dimension {d} has size "
                                            f"{np.shape(a)[d]}, expected {size} ({p.shape.to_text(False)})")
        values: dict[str, int] = {}
        where: dict[str, str] = {}
        for number, d, symbol in self.bindings:
            n = int(np.shape(arrays[number])[d])
            here = f"argument {number} ({params[number].name}) dimension {d}"
            if symbol.upper is not None and n > symbol.upper:
                raise ArgumentError(f"{here} has size {n}, larger than its bound {symbol.upper} "
                                    f"({params[number].shape.to_text(False)})")
            if symbol.name in values and values[symbol.name] != n:
                raise ArgumentError(f"{here} has size {n}, but {where[symbol.name]} has {values[symbol.name]}, "
                                    "and the module gives both one size")
            values[symbol.name] = n
            where.setdefault(symbol.name, here)
        return values

    def _bucket(self, values: dict[str, int]) -> _Bucket:
        from ..passes.dynamic_padder import pad_to_bounds
        bounds = choose_buckets({n: max(1, v) for n, v in values.items()}, self.symbols, {})
        key = tuple(sorted(bounds.items()))
        bucket = self.buckets.get(key)
        if bucket is None:
            if os.environ.get("PYXLA_LOG_COMPILES"):
                shown = ", ".join(f"{self.labels[n]}<={bounds[n]}" for n in sorted(bounds))
                print(f"pyxla: compiling {self.module.name} for bucket {shown}", file=sys.stderr)
            padded = pad_to_bounds(self.module, bounds)
            entry = padded.module.entry
            assert entry is not None
            n_params = len(entry.parameters) - len(padded.symbols)
            bucket = _Bucket(self.backend.compile(padded.module), tuple(padded.symbols),
                             [tuple(p.array_shape.dims) for p in entry.parameters[:n_params]],
                             [tuple(d) for d in padded.output_dims])
            self.buckets[key] = bucket
            self.compile_count += 1
        return bucket

    def prepare(self, arrays: Sequence[np.ndarray]) -> None:
        """Compile the bucket a call with these arguments runs, now rather than on the call."""
        self._bucket(self.sizes([np.asarray(a) for a in arrays]))

    def run_flat(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in arrays]
        values = self.sizes(arrays)
        bucket = self._bucket(values)
        return run_padded(bucket.executable.run_flat, arrays, bucket.param_shapes, bucket.symbols,
                          bucket.output_dims, values)


def compile_dynamic(module: HloModule, backend="cpu") -> DynamicExecutable:
    """`module` (with dynamic dimensions, as read from text) ready to run on `backend` (a
    name or a backend object) for any sizes its dimensions allow; see the module doc."""
    if isinstance(backend, str):
        from ..backends import get_backend
        backend = get_backend(backend)
    return DynamicExecutable(module, backend)
