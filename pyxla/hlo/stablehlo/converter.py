"""The op tree (optree.py) as an HloModule, built with HloBuilder.

Each function becomes a computation (the public `main`, or the only public function, is
ENTRY); `func.call` becomes `call`; `stablehlo.composite` is inlined from its decomposition.
Regions become computations: reducers, comparators and scatter combiners take their block
arguments as scalar parameters; while, case and if take one tuple parameter, and the values
a region uses from around it (MLIR regions may capture them, HLO computations may not) are
passed in that tuple as well. An op with several results is one tuple-shaped instruction
read by get-tuple-element.

The op families live in ops_*.py and chlo.py; each registers `handler(em, op, args) ->
results` under the MLIR op names in HANDLERS. Every instruction carries its MLIR line as
metadata (source_file, source_line), so the verifier's and the backends' messages point
into the .mlir file.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import ParseError, PyxlaError
from ..builder import HloBuilder
from ..computation import HloComputation
from ..instruction import HloInstruction
from ..module import HloModule
from ..shape import ArrayShape, Shape, TupleShape
from .lexer import MlirLexer
from .optree import Function, MlirModule, Op, Region, ValueRef

Handler = Callable[["Emitter", Op, list[HloInstruction]], list[HloInstruction]]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


class Converter:
    """Module-wide state: the functions, their computations, the text for error messages."""

    def __init__(self, module: MlirModule, lexer: MlirLexer):
        self.module = module
        self.lexer = lexer
        self.computations: dict[str, HloComputation] = {}
        self.in_progress: set[str] = set()

    def error(self, pos: int, message: str) -> ParseError:
        return self.lexer.error_at(pos, message)

    def entry_function(self) -> Function:
        funcs = self.module.functions
        if "main" in funcs:
            return funcs["main"]
        public = [f for f in funcs.values() if f.public]
        if len(public) == 1:
            return public[0]
        raise self.error(self.lexer.n, "no entry function: expected 'func.func public @main'")

    def convert(self) -> HloModule:
        fn = self.entry_function()
        b, results = self.function_body(fn, entry=True)
        root = results[0] if len(results) == 1 else b.tuple(*results)
        return b.module(root, self.module.name)

    def function(self, name: str, pos: int) -> HloComputation:
        """The computation of function `name` (built once, on first call)."""
        if name in self.computations:
            return self.computations[name]
        fn = self.module.functions.get(name)
        if fn is None:
            raise self.error(pos, f"call of undefined function '@{name}'")
        if name in self.in_progress:
            raise self.error(pos, f"recursive call of '@{name}' (HLO has no recursion)")
        self.in_progress.add(name)
        b, results = self.function_body(fn)
        self.in_progress.discard(name)
        root = results[0] if len(results) == 1 else b.tuple(*results)
        comp = b.build(root)
        self.computations[name] = comp
        return comp

    def function_body(self, fn: Function, entry: bool = False) -> tuple[HloBuilder, list[HloInstruction]]:
        if fn.body is None:
            raise self.error(fn.pos, f"function '@{fn.name}' has no body")
        b = HloBuilder(fn.name if not entry else "main")
        em = Emitter(self, b)
        for i, (arg, shape) in enumerate(fn.args):
            em.bind(arg, [b.parameter(shape, _hlo_name(arg), i)])
        results = em.run_region(fn.body)
        if len(results) != len(fn.result_types):
            raise self.error(fn.pos, f"function '@{fn.name}' returns {len(results)} values, its type "
                                     f"says {len(fn.result_types)}")
        return b, results


class Emitter:
    """Converts ops into one builder's computation; `env` maps SSA names to instructions."""

    def __init__(self, cv: Converter, b: HloBuilder, env: dict[str, list[HloInstruction]] | None = None):
        self.cv = cv
        self.b = b
        self.env: dict[str, list[HloInstruction]] = env if env is not None else {}

    def error(self, where: Op | ValueRef | int, message: str) -> ParseError:
        pos = where if isinstance(where, int) else where.pos
        return self.cv.error(pos, message)

    def bind(self, name: str, values: list[HloInstruction]) -> None:
        self.env[name] = values

    def lookup(self, ref: ValueRef) -> HloInstruction:
        values = self.env.get(ref.name)
        if values is None:
            raise self.error(ref, f"undefined value '%{ref.name}'")
        if ref.index >= len(values):
            raise self.error(ref, f"'%{ref.name}' has {len(values)} results, no #{ref.index}")
        return values[ref.index]

    # --- ops and regions ----------------------------------------------------------------
    def run_region(self, region: Region) -> list[HloInstruction]:
        """Run the ops of a one-block region; the values its terminator returns."""
        if len(region.blocks) != 1:
            raise self.error(region.pos, "regions with several blocks are not supported")
        for op in region.blocks[0].ops:
            if op.name in ("func.return", "stablehlo.return"):
                return [self.lookup(v) for v in op.operands]
            self.emit(op)
        raise self.error(region.pos, "region has no return")

    def emit(self, op: Op) -> None:
        handler = HANDLERS.get(op.name)
        if handler is None:
            raise self.error(op, f"unsupported op '{op.name}'")
        args = [self.lookup(v) for v in op.operands]
        before = len(self.b.computation.instructions)
        try:
            results = handler(self, op, args)
        except ParseError:
            raise
        except (PyxlaError, ValueError, KeyError, IndexError, TypeError, AssertionError, AttributeError) as e:
            raise self.error(op, f"'{op.name}': {type(e).__name__}: {e}") from None
        for instr in self.b.computation.instructions[before:]:
            instr.attrs.setdefault("metadata", {"op_name": op.name, "source_file": self.cv.lexer.source,
                                                "source_line": op.line})
        if len(results) != op.num_results:
            raise self.error(op, f"'{op.name}' gives {len(results)} results, {op.num_results} are named")
        i = 0
        for name, count in op.results:
            self.bind(name, results[i:i + count])
            i += count

    def unpack(self, instr: HloInstruction, n: int | None = None) -> list[HloInstruction]:
        """The elements of a tuple-shaped instruction, by get-tuple-element."""
        shape = instr.shape
        assert isinstance(shape, TupleShape)
        return [self.b.op("get-tuple-element", instr, index=i, shape=s) for i, s in enumerate(shape.elements)]

    def scalar_region(self, region: Region, name: str, op: Op) -> HloComputation:
        """A reducer or comparator: block arguments become scalar parameters."""
        block = region.blocks[0] if region.blocks else None
        if block is None or not block.args:
            raise self.error(region.pos, f"the region of '{op.name}' needs block arguments")
        b = HloBuilder(name)
        em = Emitter(self.cv, b)
        for i, (arg, shape) in enumerate(block.args):
            em.bind(arg, [b.parameter(shape, _hlo_name(arg), i)])
        free = free_values(region)
        if free:
            raise self.error(free[0].pos, f"'{op.name}' region uses '%{free[0].name}' from outside it "
                                          "(its HLO computation cannot capture values)")
        results = em.run_region(region)
        return b.build(results[0] if len(results) == 1 else b.tuple(*results))

    def tuple_region(self, region: Region, name: str, arg_names: list[str], arg_shapes: list[Shape],
                     captured: list[ValueRef]) -> tuple[HloBuilder, list[HloInstruction], list[HloInstruction]]:
        """A computation of one tuple parameter: the block arguments, then the captured values.
        Returns its builder (root not set), the parameter's elements, and what the region returns."""
        b = HloBuilder(name)
        em = Emitter(self.cv, b)
        shapes = list(arg_shapes) + [self.lookup(v).shape for v in captured]
        param = b.parameter(TupleShape(tuple(shapes)), "p", 0)
        items = em.unpack(param)
        for arg, item in zip(arg_names, items):
            em.bind(arg, [item])
        for ref, item in zip(captured, items[len(arg_names):]):
            values = em.env.setdefault(ref.name, [])
            while len(values) <= ref.index:
                values.append(item)
            values[ref.index] = item
        return b, items, em.run_region(region)


def free_values(region: Region) -> list[ValueRef]:
    """The values a region uses but does not define (one ValueRef per distinct name#index)."""
    defined: set[str] = set()
    seen: set[tuple[str, int]] = set()
    out: list[ValueRef] = []

    def walk(r: Region, bound: set[str]) -> None:
        for block in r.blocks:
            local = bound | {a for a, _ in block.args}
            for op in block.ops:
                for v in op.operands:
                    if v.name not in local and (v.name, v.index) not in seen:
                        seen.add((v.name, v.index))
                        out.append(v)
                for g in op.groups:
                    for entry in g:
                        if entry[0] == "bind":
                            local = local | {entry[1]}
                for sub in op.regions:
                    walk(sub, local)
                local = local | {name for name, _ in op.results}
            defined.update(local)

    walk(region, set())
    return out


def _hlo_name(mlir_name: str) -> str:
    return mlir_name.replace("$", "_")


def result_shape(em: Emitter, op: Op, i: int = 0) -> Shape:
    if i >= len(op.result_types):
        raise em.error(op, f"'{op.name}' needs its result type")
    return op.result_types[i]


def array_result(em: Emitter, op: Op, i: int = 0) -> ArrayShape:
    shape = result_shape(em, op, i)
    if not isinstance(shape, ArrayShape):
        raise em.error(op, f"'{op.name}' must give an array, not {shape.to_text(False)}")
    return shape


def attr(em: Emitter, op: Op, name: str, default: Any = ...) -> Any:
    if name in op.attrs:
        return op.attrs[name]
    if default is ...:
        raise em.error(op, f"'{op.name}' needs attribute '{name}'")
    return default
