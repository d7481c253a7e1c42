"""Polymorphic shapes in the front end: specs, binding sizes to symbols, sizes as values.

`jit(fn, polymorphic_shapes=("b, 32", None))` gives each positional argument a spec as
jax.export writes them: one entry per axis, an integer (that size), `_` (the size the
argument has), or a dimension expression over named symbols (`b`, `2*b`, `s - 1`); the same
name in two specs is the same size. `shape_constraints=("b <= 512",)` bound the symbols.

`PolySpecs.bind` finds the symbols' values from the arguments' shapes (solving `2*b` = 10
for b = 5) and checks them, raising `ArgumentError` naming the argument, the axis and the
dimension before any native code runs. `dimension_value` turns a symbolic size used as a
value inside a trace (`x.sum(0) / x.shape[0]`) into a traced scalar, computed from
`get-dimension-size` of a parameter that has that size.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, TraceError
from ..hlo.dims import (
    Constraint,
    Dim,
    DimensionSyntaxError,
    DimExpr,
    InconclusiveDimensionOperation,
    Symbol,
    bound_symbols,
    evaluate_dim,
    parse_constraint,
    parse_dim,
    rebind,
)
from ..hlo.shape import ArrayShape
from ..hlo.types import S32
from .tracing import Trace, Tracer, current_trace, where

AS_GIVEN = "_"


def as_dim(value: Any) -> Dim:
    """A dimension size from user code: a DimExpr stays symbolic, anything else is an int
    (a traced value is refused by the caller before this)."""
    if isinstance(value, DimExpr):
        return value
    return int(value)


def broadcast_dims(*shapes: Sequence[Dim]) -> tuple[Dim, ...] | None:
    """NumPy's broadcast of `shapes` with symbolic sizes (a symbol is never 1: JAX's rule),
    or None when they do not broadcast."""
    shapes = tuple(tuple(as_dim(d) for d in s) for s in shapes)   # NumPy integers as ints
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        sizes = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        stretched = [d for d in sizes if not (isinstance(d, int) and d == 1)]
        if not stretched:
            out.append(1)
            continue
        first = stretched[0]
        if any(not (d == first) for d in stretched[1:]):
            return None
        out.append(first)
    return tuple(out)


# --- specs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeafSpec:
    """The dims of one argument leaf: ints, DimExprs, or None for `_` (as given)."""
    argument: str
    dims: tuple[Dim | None, ...]
    text: str


class PolySpecs:
    """Parsed polymorphic_shapes and shape_constraints of one function."""

    def __init__(self, specs: Sequence[str | None] | str, constraints: Sequence[str] = ()):
        if isinstance(specs, str):
            specs = (specs,)
        self.texts: tuple[str | None, ...] = tuple(specs)
        names: dict[str, Symbol] = {}
        parsed: list[tuple[Dim | None, ...] | None] = []
        for i, text in enumerate(self.texts):
            if text is None:
                parsed.append(None)
                continue
            if not isinstance(text, str):
                raise TypeError(f"polymorphic_shapes[{i}] must be a string such as 'b, 32' or None, "
                                f"got {type(text).__name__}")
            body = text.strip()
            if body.startswith("(") and body.endswith(")"):
                body = body[1:-1]
            entries = [e.strip() for e in body.split(",")] if body.strip() else []
            if entries and entries[-1] == "":   # "b," is a 1-tuple
                entries.pop()
            dims: list[Dim | None] = []
            for entry in entries:
                if entry in (AS_GIVEN, "..."):
                    if entry == "...":
                        raise NotImplementedError(f"polymorphic_shapes[{i}] = {text!r}: '...' is not supported; "
                                                  "write one entry per axis ('_' for a size as given)")
                    dims.append(None)
                    continue
                try:
                    dims.append(parse_dim(entry, names))
                except DimensionSyntaxError as e:
                    raise DimensionSyntaxError(f"polymorphic_shapes[{i}] = {text!r}: {e}") from None
            parsed.append(tuple(dims))
        self.constraints: tuple[Constraint, ...] = tuple(parse_constraint(c, names) for c in constraints)
        self.symbols: dict[str, Symbol] = bound_symbols(names, self.constraints)
        for s in self.symbols.values():
            if s.upper is not None and s.upper < s.lower:
                raise ArgumentError(f"the constraints leave no size for the dimension {s.name!r} "
                                    f"({s.lower} <= {s.name} <= {s.upper})")
        self.dims: tuple[tuple[Dim | None, ...] | None, ...] = tuple(
            None if p is None else tuple(None if d is None else rebind(d, self.symbols) for d in p) for p in parsed)

    def leaf_specs(self, leaf_counts: Sequence[int], positions: Sequence[int]) -> list[LeafSpec | None]:
        """The spec of each leaf of the positional dynamic arguments, at `positions` among all
        positional arguments (static ones included; a spec applies to every leaf of its
        argument); leaves of later arguments get None."""
        if len(self.texts) > len(positions) + (max(positions, default=-1) + 1 - len(positions)):
            raise ArgumentError(f"polymorphic_shapes has {len(self.texts)} entries for "
                                f"{max(positions, default=-1) + 1} positional arguments")
        out: list[LeafSpec | None] = []
        for i, count in zip(positions, leaf_counts):
            dims = self.dims[i] if i < len(self.dims) else None
            text = self.texts[i] if i < len(self.texts) else None
            for j in range(count):
                name = f"argument {i}" + (f" (leaf {j})" if count > 1 else "")
                out.append(None if dims is None else LeafSpec(name, dims, text or ""))
        return out

    # --- binding -------------------------------------------------------------------------
    def bind(self, specs: Sequence[LeafSpec | None], shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
        """The symbols' values for arguments of `shapes`; ArgumentError on any mismatch."""
        values: dict[str, int] = {}
        where_bound: dict[str, str] = {}
        pending: list[tuple[LeafSpec, int, DimExpr, int]] = []
        for spec, shape in zip(specs, shapes):
            if spec is None:
                continue
            if len(shape) != len(spec.dims):
                raise ArgumentError(f"{spec.argument} has shape {tuple(shape)} (rank {len(shape)}), but its "
                                    f"polymorphic shape {spec.text!r} has rank {len(spec.dims)}")
            for axis, (d, n) in enumerate(zip(spec.dims, shape)):
                if d is None:
                    continue
                if isinstance(d, int):
                    if d != n:
                        raise ArgumentError(f"{spec.argument} axis {axis} has size {n}, but its polymorphic "
                                            f"shape {spec.text!r} fixes it to {d}")
                    continue
                pending.append((spec, axis, d, n))
        # Solve the dims that are linear in one unknown symbol, until nothing changes.
        progress = True
        while progress:
            progress = False
            for spec, axis, d, n in pending:
                unknown = [s for s in d.symbols if s.name not in values]
                if len(unknown) != 1:
                    continue
                sym = unknown[0]
                solved = _solve_linear(d, sym, n, values)
                if solved is None:
                    continue
                value, exact = solved
                if not exact:
                    raise ArgumentError(f"{spec.argument} axis {axis} has size {n}, which is not of the form "
                                        f"{d} (dimension {sym.name!r} would not be an integer)")
                values[sym.name] = value
                where_bound[sym.name] = f"{spec.argument} axis {axis}"
                progress = True
        for spec, axis, d, n in pending:
            missing = [s.name for s in d.symbols if s.name not in values]
            if missing:
                raise ArgumentError(f"{spec.argument} axis {axis}: the dimension {d} does not determine "
                                    f"{', '.join(repr(m) for m in missing)}; give each symbol alone in some axis")
            expected = d.evaluate(values)
            if expected != n:
                names = ", ".join(f"{s.name} = {values[s.name]} (from {where_bound[s.name]})"
                                  for s in sorted(d.symbols, key=lambda s: s.name))
                raise ArgumentError(f"{spec.argument} axis {axis} has size {n}, but its polymorphic shape "
                                    f"{spec.text!r} says {d} = {expected} with {names}: the arguments disagree "
                                    f"on the dimension {', '.join(repr(s.name) for s in d.symbols)}")
        for name, value in values.items():
            sym = self.symbols[name]
            if value < sym.lower or (sym.upper is not None and value > sym.upper):
                bound = f">= {sym.lower}" if value < sym.lower else f"<= {sym.upper}"
                raise ArgumentError(f"{where_bound[name]} gives the dimension {name!r} the size {value}, "
                                    f"which violates {name} {bound}")
        for c in self.constraints:
            if not c.holds(values):
                shown = ", ".join(f"{n} = {values[n]} (from {where_bound[n]})" for n in sorted(values))
                raise ArgumentError(f"the shape constraint {c.text!r} does not hold for {shown}")
        return values

    def symbolic_shape(self, spec: LeafSpec | None, shape: tuple[int, ...]) -> tuple[Dim, ...]:
        if spec is None:
            return tuple(shape)
        return tuple(n if d is None else d for d, n in zip(spec.dims, shape))


def _solve_linear(d: DimExpr, sym: Symbol, n: int, values: Mapping[str, int]) -> tuple[int, bool] | None:
    """The value of `sym` making `d` equal `n` when d is a*sym + rest (rest known), with
    whether it is an exact integer; None when d is not linear in sym."""
    coef = 0
    rest = 0
    for m, c in d.terms.items():
        powers = dict((s.name, p) for s, p in m)
        if sym.name in powers:
            if powers[sym.name] != 1 or len(powers) != 1:
                return None
            coef += c
        else:
            rest += c * math.prod(values[s] ** p for s, p in powers.items())
    if coef == 0:
        return None
    return (n - rest) // coef, (n - rest) % coef == 0


# --- buckets -------------------------------------------------------------------------------

# The default buckets are the powers of two from this one up. Kernels stop at the actual
# size along most dynamic dimensions (passes/dynamic_padder/bounded_rows.py), so a small
# size in a larger bucket costs little: sizes 3 and 9 ran as fast in bucket 16 or 32 as in
# bucket 4 or 16 (MLP and encoder layer of benchmarks/dynamic_shapes.py), and sizes 1-16
# then share one compile instead of five. Above it the buckets keep doubling: what still
# computes the whole bucket (masked dimensions: the columns of attention scores, the
# copies of the arguments) grows with the bucket, and in a bucket four times the size
# the encoder layer took up to 1.2-1.9x the static time (docs/dynamic-shapes.md).
SMALLEST_BUCKET = 16


def choose_buckets(values: Mapping[str, int], symbols: Mapping[str, Symbol],
                   size_buckets: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Each symbol's bucket: the size the compiled code is padded to. The smallest declared
    bucket holding the size, or the next power of two from SMALLEST_BUCKET up, capped by the
    symbol's upper bound."""
    out = {}
    for name, n in values.items():
        sym = symbols[name]
        declared = size_buckets.get(name)
        if declared:
            fitting = [b for b in declared if b >= n]
            if not fitting:
                raise ArgumentError(f"the dimension {name!r} has size {n}, larger than its largest bucket "
                                    f"{max(declared)} (size_buckets={{{name!r}: {tuple(declared)}}})")
            out[name] = min(fitting)
            continue
        bucket = max(SMALLEST_BUCKET, 1 << max(0, n - 1).bit_length())
        if sym.upper is not None:
            bucket = min(bucket, sym.upper)
        out[name] = max(bucket, n)
    return out


def check_size_buckets(size_buckets: Mapping[str, Any], symbols: Mapping[str, Symbol]) -> dict:
    out = {}
    for name, buckets in size_buckets.items():
        if name not in symbols:
            raise ArgumentError(f"size_buckets names {name!r}, which no polymorphic shape uses "
                                f"(symbols: {', '.join(sorted(symbols)) or 'none'})")
        sym = symbols[name]
        listed: Sequence[Any] = (buckets,) if np.ndim(buckets) == 0 else buckets
        sizes = tuple(sorted(int(b) for b in listed))
        for b in sizes:
            if b < sym.lower or (sym.upper is not None and b > sym.upper):
                raise ArgumentError(f"size_buckets[{name!r}] has {b}, outside the dimension's range "
                                    f"[{sym.lower}, {sym.upper if sym.upper is not None else 'inf'}]")
        out[name] = sizes
    return out


# --- sizes as values ---------------------------------------------------------------------

def register_dimension_sources(trace: Trace, params: Sequence[Tracer]) -> None:
    """Remember, for each symbol, a parameter axis whose size determines it (`b` before
    `2*b`), so that `dimension_value` can read the size at run time."""
    sources: dict[str, tuple[Tracer, int, DimExpr]] = {}
    for p in params:
        for axis, d in enumerate(p.shape):
            if not isinstance(d, DimExpr) or len(d.symbols) != 1:
                continue
            (sym,) = d.symbols
            linear = _solve_linear(d, sym, 0, {})
            if linear is None:
                continue
            current = sources.get(sym.name)
            if current is None or len(d.terms) < len(current[2].terms):
                sources[sym.name] = (p, axis, d)
    trace.dimension_sources = sources   # type: ignore[attr-defined]
    trace.dimension_values = {}   # type: ignore[attr-defined]


def _root(trace: Trace) -> Trace:
    while trace.parent is not None:
        trace = trace.parent
    return trace


def dimension_value(expr: DimExpr) -> Tracer:
    """The value of a symbolic size as a traced, weakly typed s32 scalar (a Python int's
    role), computed from get-dimension-size of the parameters that carry its symbols."""
    from .tracing import bind
    trace = current_trace()
    if trace is None:
        raise InconclusiveDimensionOperation(f"the symbolic size {expr} was used as a value outside a trace")
    root = _root(trace)
    sources = getattr(root, "dimension_sources", None)
    if sources is None:
        raise TraceError(f"the symbolic size {expr} was used as a value{where()}, but this trace has no "
                         "polymorphic parameters")
    cache = root.dimension_values   # type: ignore[attr-defined]
    scalar = ArrayShape(S32, ())

    def symbol_value(name: str) -> Tracer:
        if name in cache:
            return cache[name]
        if name not in sources:
            raise TraceError(f"the symbolic size {name!r} is used as a value{where()}, but no argument axis is "
                             f"{name} alone or a multiple of it")
        param, axis, d = sources[name]
        (sym,) = d.symbols
        # Emitted into the outermost trace, where the parameter lives; inner traces capture it.
        v = root.emit("get-dimension-size", [param], None, {"dimensions": (axis,)})
        coef = sum(c for m, c in d.terms.items() if m)
        if d.constant:
            v = root.emit("subtract", [v, np.asarray(d.constant, np.int32)], scalar, {})
        if coef != 1:
            v = root.emit("divide", [v, np.asarray(coef, np.int32)], scalar, {})
        cache[name] = v
        del sym
        return v

    total: Any = None
    for m, c in expr.terms.items():
        term: Any = np.asarray(c, np.int32) if (c != 1 or not m) else None
        for s, p in m:
            for _ in range(p):
                v = symbol_value(s.name)
                term = v if term is None else bind("multiply", term, v)
        total = term if total is None else bind("add", total, term)
    if not isinstance(total, Tracer):
        total = trace.lift(total)
    elif total.trace is not trace:
        total = trace.lift(total)
    return Tracer(total.instr, total.trace, weak=True)


def evaluate_dims(dims: Sequence[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate_dim(d, values) for d in dims)


def run_padded(run_flat, arrays: Sequence[np.ndarray], param_shapes: Sequence[tuple[int, ...]],
               symbols: Sequence[str], output_dims: Sequence[Sequence[Dim]], values: Mapping[str, int]) -> list:
    """Run a bucket's padded executable (`run_flat`) on `arrays`: each argument at the start
    of a zero-filled array of its bucket shape, the sizes of `symbols` appended as s32
    scalars, and each result sliced to its dimensions at `values`."""
    padded = [_in_bucket(a, shape) for a, shape in zip(arrays, param_shapes)]
    padded += [np.asarray(values[name], np.int32) for name in symbols]
    outs = run_flat(padded)
    return [_sliced(o, evaluate_dims(dims, values)) for o, dims in zip(outs, output_dims)]


def _in_bucket(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`a` in a zero-filled buffer of `shape` (the bucket's), or itself when it fits exactly."""
    if tuple(a.shape) == tuple(shape):
        return np.ascontiguousarray(a)
    if len(shape) != a.ndim or any(n > m for n, m in zip(a.shape, shape)):
        raise ArgumentError(f"an argument of shape {a.shape} does not fit its bucket's shape {shape}")
    buf = np.zeros(shape, a.dtype)
    buf[tuple(slice(0, n) for n in a.shape)] = a
    return buf


def _sliced(out: Any, dims: tuple[int, ...]) -> Any:
    arr = np.asarray(out)
    if tuple(arr.shape) == dims:
        return out
    return arr[tuple(slice(0, n) for n in dims)]
