"""Parser for XLA's HLO text: `parse_module(text) -> HloModule`.

The grammar, as XLA prints it (whitespace, `/* ... */` and `// ...` comments may stand
between any two tokens; `%` sigils on names are optional):

  module       ::= 'HloModule' name (',' attr_name '=' raw)* stack_frames? computation+
  stack_frames ::= ('FileNames' | 'FunctionNames' | 'FileLocations' | 'StackFrames'
                    (int (string | braced))*)*                        -- debug info, skipped
  computation  ::= 'ENTRY'? name signature? '{' instruction+ '}'
  signature    ::= '(' (name ':' shape (',' name ':' shape)*)? ')' '->' shape
  instruction  ::= 'ROOT'? name '=' shape opcode '(' operands ')' (',' attribute)*
  operands     ::= int                       -- parameter(N)
                 | literal                   -- constant(...)
                 | (shape? name (',' shape? name)*)?
  shape        ::= type '[' (int (',' int)*)? ']' layout? | 'token[]' | '(' shapes? ')'
  attribute    ::= attr_name '=' value       -- value syntax by attributes.ATTRIBUTE_KINDS

The parser checks syntax and name resolution only (operands must be defined before use
in their computation; called computations may be defined anywhere in the module). It
runs no shape inference and no verifier. Every problem is a ParseError pointing at the
offending token; no other exception escapes, whatever the input.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..errors import ParseError
from .attributes import ConvDimensionNumbers, PadDim, SliceDim, WindowDim, attribute_kind
from .computation import HloComputation
from .dims import DimExpr, anonymous_symbol
from .dynamic_dims import compatible_as_text
from .instruction import HloInstruction
from .lexer import (
    BOOL,
    DIM_LABELS,
    DXD,
    INLINE_OPCODE,
    INT64_MAX,
    INT64_MIN,
    LAYOUT_DETAIL,
    MODULE_NAME,
    PADDING,
    SCALAR,
    TYPE_WORD,
    UINT,
    WINDOW_PAD,
    WORD,
    decode_text,
    parse_int,
    skip_whitespace,
)
from .literal_reader import MAX_NESTING, LiteralReader
from .module import HloModule
from .parse_scoping import OMITTED_SHAPE, infer_omitted_shapes, name_inline_computations, scope_instruction_names
from .shape import ArrayShape, Shape, TokenShape, TupleShape, default_layout
from .types import ELEMENT_TYPES, ElementType

# Every opcode of XLA's HloOpcode list (xla/hlo/ir/hlo_opcode.h). The parser accepts these
# and whatever the registry knows; whether pyxla can run an opcode is the verifier's and
# the evaluator's business, not the parser's.
XLA_OPCODES = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start
all-reduce all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start
async-update atan atan2 atanh batch-norm-grad batch-norm-inference batch-norm-training bitcast
bitcast-convert broadcast call cbrt ceil cholesky clamp count-leading-zeros collective-broadcast
collective-permute collective-permute-done collective-permute-start collective-reduce compare
complex concatenate conditional constant convert convolution copy copy-done copy-start cosine
cosh custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf
exponential exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element
imag infeed iota is-finite log log-plus-one logistic map maximum minimum mulhi multiply negate
not opt-barrier or outfeed pad parameter partition-id popcnt power ragged-all-to-all ragged-dot
real recv recv-done reduce reduce-precision reduce-scatter reduce-window remainder replica-id
reshape reverse rng rng-bit-generator rng-get-and-update-state round-nearest-afz
round-nearest-even rsqrt scaled-dot scan scatter select select-and-scatter send send-done
set-dimension-size shift-left shift-right-arithmetic shift-right-logical shuffle sign sine sinh
slice sort sqrt stochastic-convert subtract tan tanh topk transpose triangular-solve tuple while
xor
""".split())

# XLA element types pyxla does not implement: named as unsupported rather than unknown.
_UNSUPPORTED_TYPES = frozenset("""
s1 u1 c64 c128 f8e8m0fnu opaque
""".split())

_STACK_FRAME_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})


T = TypeVar("T")


def parse_module(text: str | bytes, source: str = "<hlo>") -> HloModule:
    """Parse XLA's HLO text (a str, or a file's UTF-8 bytes) into an HloModule (syntax and name
    resolution only)."""
    if isinstance(text, (bytes, bytearray)):
        text = decode_text(bytes(text), source)
    if not isinstance(text, str):
        raise TypeError(f"parse_module needs a str or bytes, got {type(text).__name__}")
    parser = _Parser(text, source)
    try:
        return parser.module()
    except ParseError:
        raise
    except Exception as e:  # a parser bug must still honour the one-exception contract
        raise parser.error_at(parser.pos, f"internal parser error: {type(e).__name__}: {e}") from e


def parse_program_shape(text: str, source: str = "entry_computation_layout") -> tuple[list[Shape], Shape]:
    """`{(f32[2]{0}, s32[])->f32[2]{0}}` (a module's entry_computation_layout): the parameter
    shapes and the result shape."""
    parser = _Parser(text, source)
    parser.expect("{", "to start the program shape")
    params = parser.shape("the parameter shapes")
    if not isinstance(params, TupleShape):
        raise parser.expected("'(' to start the parameter shapes")
    parser.expect("->", "after the parameter shapes")
    result = parser.shape("the result shape")
    parser.expect("}", "to close the program shape")
    return list(params.elements), result


def known_opcode(opcode: str) -> bool:
    if opcode in XLA_OPCODES:
        return True
    from .ops import known_opcodes  # loads the op files: only for opcodes XLA does not have
    return opcode in known_opcodes()


class _ComputationScope:
    """Instructions of the computation being parsed, by name."""

    def __init__(self, comp: HloComputation):
        self.comp = comp
        self.by_name: dict[str, HloInstruction] = {}
        self.parameter_numbers: dict[int, HloInstruction] = {}
        self.root: HloInstruction | None = None
        self.control_refs: list[tuple[str, int]] = []


class _Parser(LiteralReader):
    def __init__(self, text: str, source: str):
        super().__init__(text, source)
        # (instruction, attribute name, [(computation name, position)], single?) resolved
        # once every computation is read: calls may point forward.
        self.computation_refs: list[tuple[HloInstruction, str, list[tuple[str, int]], bool]] = []
        self.inline_count = 0
        self.inline_computations: list[HloComputation] = []   # `to_apply={...}`, for the module
        self.omitted_shapes: list[tuple[HloInstruction, int]] = []   # (instruction, where its name is)
        self.signatures: list[tuple[HloComputation, Shape, int]] = []   # result shapes as written, checked at the end

    # --- shapes -------------------------------------------------------------------------
    def looks_like_shape(self) -> bool:
        c = self.peek()
        return c == "(" or bool(TYPE_WORD.match(self.text, self.pos))

    def shape(self, what: str = "a shape", depth: int = 0) -> Shape:
        self.skip_ws()
        start = self.pos
        if self.accept("("):
            if depth >= MAX_NESTING:
                raise self.error_at(start, f"tuple shape nests deeper than {MAX_NESTING} levels")
            elements = []
            if not self.accept(")"):
                while True:
                    elements.append(self.shape("a tuple element shape", depth + 1))
                    if self.accept(","):
                        continue
                    self.expect(")", "to close the tuple shape")
                    break
            return TupleShape(tuple(elements))
        m = TYPE_WORD.match(self.text, self.pos)
        if not m:
            raise self.expected(what)
        word = m.group(1)
        if word == "token":
            self.pos = m.end()
            self.expect("]", "after 'token['")
            return TokenShape()
        etype = ELEMENT_TYPES.get(word)
        if etype is None:
            if word in _UNSUPPORTED_TYPES:
                raise self.error_at(start, f"element type '{word}' is not supported by pyxla")
            raise self.error_at(start, f"unknown element type '{word}'")
        self.pos = m.end()
        dims = self.dimensions()
        layout = self.layout(etype, dims)
        return ArrayShape(etype, dims, layout)

    def dimensions(self) -> tuple[int, ...]:
        dims: list[int] = []
        if self.accept("]"):
            return ()
        while True:
            self.skip_ws()
            start = self.pos
            if self.accept("?"):   # a dynamic dimension: a fresh symbol (dynamic_dims.py)
                dims.append(cast(int, DimExpr.symbol(anonymous_symbol())))
                if self.accept(","):
                    continue
                self.expect("]", "after dimensions")
                return tuple(dims)
            bounded = self.accept("<=")
            m = self.match(UINT)
            if not m:
                raise self.expected("a dimension size")
            size = parse_int(m.group())
            if size > INT64_MAX:
                raise self.error_at(start, f"dimension size {size} is too large")
            dims.append(cast(int, DimExpr.symbol(anonymous_symbol(size))) if bounded else size)
            if self.accept(","):
                continue
            self.expect("]", "after dimensions")
            return tuple(dims)

    def layout(self, etype: ElementType, dims: tuple[int, ...]) -> tuple[int, ...] | None:
        """`{1,0}` after an array shape: minor_to_major, None when it is the default.

        A '{' is a layout only if a digit, ':' or '}' follows; otherwise it opens something
        else (the body after a computation signature's result shape). What follows a ':'
        (tiles `T(8,128)(4,1)`, a memory space `S(5)`, an element size `E(4)`, ...) says how
        a device stores the array, not what it holds: it is read and dropped. (pyxla's
        arrays of 2- and 4-bit types hold one element per byte, as ml_dtypes' do.)
        """
        self.skip_ws()
        start = self.pos
        if not self.text.startswith("{", start):
            return None
        after = skip_whitespace(self.text, start + 1)
        if after >= self.n or not (self.text[after].isdigit() or self.text[after] in "}:"):
            return None
        self.pos = start + 1
        order: list[int] = []
        if not self.accept("}"):
            while self.peek() != ":":
                order.append(self.integer("a layout dimension", 0, INT64_MAX))
                if not self.accept(","):
                    break
            if self.accept(":"):
                self.layout_details()
            self.expect("}", "to close the layout")
        if sorted(order) != list(range(len(dims))):
            shape_text = f"{etype.name}[{','.join(map(str, dims))}]"
            raise self.error_at(start, f"layout {{{','.join(map(str, order))}}} is not a permutation "
                                       f"of the dimensions of {shape_text}")
        order_t = tuple(order)
        return None if order_t == default_layout(len(dims)) else order_t

    def layout_details(self) -> None:
        """The part of a layout after ':': letters, each with parenthesised arguments
        (`T(8,128)(4,1)S(5)`), up to the closing '}'."""
        while self.peek() not in ("}", ""):
            m = self.match(LAYOUT_DETAIL)
            if not m:
                raise self.expected("a layout detail such as T(8,128), S(1) or E(4), or '}'")

    # --- module -------------------------------------------------------------------------
    def module(self) -> HloModule:
        if not self.accept_keyword("HloModule"):
            raise self.expected("'HloModule' at the start of the module")
        self.skip_ws()
        m = self.match(MODULE_NAME)
        if not m:
            raise self.expected("a module name after 'HloModule'")
        module = HloModule(m.group(1))
        self.accept(":")   # the old header, `HloModule name:`
        while self.accept(","):
            key, key_pos = self.attribute_name()
            if key in module.header_attrs:
                raise self.error_at(key_pos, f"duplicate module attribute '{key}'")
            module.header_attrs[key] = self.raw_value(f"the value of module attribute '{key}'")
        self.skip_stack_frames()

        computations: dict[str, HloComputation] = {}
        while not self.at_end():
            comp, is_entry, entry_pos = self.computation(computations)
            if is_entry:
                if module.entry is not None:
                    raise self.error_at(entry_pos, f"second ENTRY computation '{comp.name}' "
                                                   f"(the first is '{module.entry.name}')")
                module.entry = comp
            computations[comp.name] = comp
            module.computations.extend(self.inline_computations)   # callees before their caller
            self.inline_computations.clear()
            module.computations.append(comp)
        if not module.computations:
            raise self.error_at(self.n, "expected a computation, found end of input")
        if module.entry is None:   # as XLA's parser: without 'ENTRY', the last computation
            module.entry = module.computations[-1]
        self.resolve_computation_refs(computations)
        name_inline_computations(module, set(computations))
        infer_omitted_shapes(module, self.omitted_shapes, self.error_at)
        self.check_signatures()
        scope_instruction_names(module)
        return module

    def attribute_name(self) -> tuple[str, int]:
        self.skip_ws()
        start = self.pos
        m = self.match(WORD)
        if not m:
            raise self.expected("an attribute name")
        name = m.group()
        self.expect("=", f"after attribute name '{name}'")
        return name, start

    def skip_stack_frames(self) -> None:
        """The FileNames / FunctionNames / FileLocations / StackFrames tables of a dump."""
        while True:
            self.skip_ws()
            m = WORD.match(self.text, self.pos)
            if not m or m.group() not in _STACK_FRAME_SECTIONS:
                return
            after = skip_whitespace(self.text, m.end())
            if self.text.startswith(("{", "(", "="), after):   # a computation of that name
                return
            self.pos = m.end()
            while self.match(UINT):
                if self.peek() == '"':
                    self.string("a stack-frame table entry")
                elif self.peek() == "{":
                    self.raw_value("a stack-frame table entry")
                else:
                    raise self.expected("a string or '{' in the stack-frame table")

    # --- computations -------------------------------------------------------------------
    def computation(self, known: dict[str, HloComputation]) -> tuple[HloComputation, bool, int]:
        self.skip_ws()
        entry_pos = self.pos
        is_entry = self.accept_keyword("ENTRY")
        name, name_pos = self.name("a computation name" if not is_entry else "a computation name after 'ENTRY'")
        if name in known:
            raise self.error_at(name_pos, f"duplicate computation name '{name}'")
        signature = self.signature() if self.peek() == "(" else None
        comp = self.computation_body(name)
        if signature is not None:
            self.signatures.append((comp, *signature))
        return comp, is_entry, entry_pos

    def computation_body(self, name: str) -> HloComputation:
        """`{ instruction+ }`: its names are scoped to it, as XLA scopes them."""
        self.expect("{", f"to start the body of computation '{name}'")
        comp = HloComputation(name)
        scope = _ComputationScope(comp)
        while not self.accept("}"):
            if self.at_end():
                raise self.expected(f"an instruction or '}}' to close computation '{name}'")
            self.instruction(scope)
        if not comp.instructions:
            raise self.error_at(self.pos - 1, f"computation '{name}' has no instructions")
        comp.root = scope.root if scope.root is not None else comp.instructions[-1]
        for ref, pos in scope.control_refs:
            if ref not in scope.by_name:
                raise self.error_at(pos, f"undefined control predecessor '{ref}' in computation '{name}'")
        return comp

    def signature(self) -> tuple[Shape, int]:
        """`(p: f32[2], q: s32[]) -> f32[2]`: (the result shape, where it is written), checked
        against the root once every shape is known (check_signatures)."""
        self.expect("(", "to start the computation signature")
        if not self.accept(")"):
            while True:
                self.name("a parameter name in the signature")
                self.expect(":", "after the parameter name in the signature")
                self.shape("a parameter shape in the signature")
                if self.accept(","):
                    continue
                self.expect(")", "to close the computation signature")
                break
        self.expect("->", "after the signature's parameters")
        self.skip_ws()
        start = self.pos
        return self.shape("the result shape of the signature"), start

    def check_signatures(self) -> None:
        """A computation's written result shape must be its root's, layouts aside, as XLA's
        parser requires. The parameters written there are not checked: XLA's own tests have
        signatures whose parameters differ from the body's, and XLA takes the body's."""
        for comp, result, pos in self.signatures:
            root = comp.root
            assert root is not None   # computation_body always sets one
            if not compatible_as_text(root.shape, result):
                raise self.error_at(pos, f"the shape of computation '{comp.name}', {result.to_text(False)}, "
                                         f"is not that of its root instruction '{root.name}', "
                                         f"{root.shape.to_text(False)}")

    # --- instructions -------------------------------------------------------------------
    def instruction(self, scope: _ComputationScope) -> None:
        self.skip_ws()
        root_pos = self.pos
        if self.accept_keyword("ENTRY"):
            raise self.error_at(root_pos, f"expected '}}' to close computation '{scope.comp.name}' "
                                          "before the next computation, found 'ENTRY'")
        is_root = self.accept_keyword("ROOT")
        name, name_pos = self.name("an instruction name" + (" after 'ROOT'" if is_root else " or '}'"))
        if name in scope.by_name:
            raise self.error_at(name_pos, f"duplicate instruction name '{name}' in computation "
                                          f"'{scope.comp.name}'")
        if self.peek() in ("{", "("):   # `name {`: a computation header, so a '}' is missing
            raise self.expected(f"'=' after instruction name '{name}' (or a '}}' to close "
                                f"computation '{scope.comp.name}')")
        self.expect("=", f"after instruction name '{name}'")
        instr = self.instruction_after_name(name, name_pos, scope)
        self.attributes(instr, scope)
        if is_root:
            if scope.root is not None:
                raise self.error_at(root_pos, f"second ROOT in computation '{scope.comp.name}' "
                                              f"(the first is '{scope.root.name}')")
            scope.root = instr

    def instruction_after_name(self, name: str, name_pos: int, scope: _ComputationScope) -> HloInstruction:
        """`shape? opcode(operands)`, added to the computation. A shape left out (XLA infers
        it) is inferred once the whole module is read: a call's shape is its callee's."""
        shape: Shape | None = self.shape(f"a shape for instruction '{name}'") if self.looks_like_shape() else None
        self.skip_ws()
        opcode_pos = self.pos
        m = self.match(WORD)
        if not m:
            raise self.expected(f"an opcode for instruction '{name}'" if shape is not None
                                else f"a shape or an opcode for instruction '{name}'")
        opcode = m.group()
        if not known_opcode(opcode):
            raise self.error_at(opcode_pos, f"unknown opcode '{opcode}'")
        if shape is None and opcode in ("parameter", "constant"):
            raise self.error_at(opcode_pos, f"expected a shape for instruction '{name}', found '{opcode}' "
                                            f"(a {opcode}'s shape cannot be inferred)")
        self.expect("(", f"after opcode '{opcode}'")
        instr = HloInstruction(name, opcode, shape if shape is not None else OMITTED_SHAPE)
        if shape is None:
            self.omitted_shapes.append((instr, name_pos))
        self.operand_list(instr, scope)
        scope.by_name[name] = instr
        scope.comp.add_instruction(instr)
        return instr

    def operand_list(self, instr: HloInstruction, scope: _ComputationScope) -> None:
        """What stands between the parentheses: a parameter's number, a constant's literal or
        operand names."""
        if instr.opcode == "parameter":
            self.skip_ws()
            number_pos = self.pos
            number = self.integer("a parameter number", 0, INT64_MAX)
            if number in scope.parameter_numbers:
                raise self.error_at(number_pos, f"parameter number {number} is already used by "
                                                f"'{scope.parameter_numbers[number].name}'")
            scope.parameter_numbers[number] = instr
            instr.parameter_number = number
            self.expect(")", "after the parameter number")
        elif instr.opcode == "constant":
            instr.literal = self.literal(instr.shape)
            self.expect(")", "after the constant's literal")
        else:
            instr.operands = self.operands(scope)

    def operands(self, scope: _ComputationScope) -> list[HloInstruction]:
        operands: list[HloInstruction] = []
        if self.accept(")"):
            return operands
        while True:
            self.skip_ws()
            start = self.pos
            declared = self.shape("an operand shape") if self.looks_like_shape() else None
            operand = self.operand(scope, declared, start)
            operands.append(operand)
            if self.accept(","):
                continue
            self.expect(")", "after the operands")
            return operands

    def operand(self, scope: _ComputationScope, declared: Shape | None, start: int) -> HloInstruction:
        """An operand's name, or an instruction written in its place (`add(s32[] parameter(0),
        s32[] constant(1))`), which becomes an instruction of its own before its user."""
        self.skip_ws()
        m = INLINE_OPCODE.match(self.text, self.pos)
        if m and known_opcode(m.group(1)):
            self.inline_count += 1
            inline_name = f"{m.group(1)}.inline{self.inline_count}"
            if declared is not None:   # the shape written belongs to the inline instruction
                self.pos = start
            return self.instruction_after_name(inline_name, self.pos, scope)
        name, name_pos = self.name("an operand name")
        operand = scope.by_name.get(name)
        if operand is None:
            raise self.error_at(name_pos, f"undefined operand '{name}'")
        if (declared is not None and operand.shape is not OMITTED_SHAPE
                and not compatible_as_text(declared, operand.shape)):
            raise self.error_at(start, f"operand '{name}' is written as {declared.to_text(False)} "
                                       f"but its shape is {operand.shape.to_text(False)}")
        return operand

    def attributes(self, instr: HloInstruction, scope: _ComputationScope) -> None:
        while self.accept(","):
            name, name_pos = self.attribute_name()
            if name in instr.attrs:
                raise self.error_at(name_pos, f"duplicate attribute '{name}' on instruction '{instr.name}'")
            instr.attrs[name] = self.attribute_value(name, instr, scope)

    # --- attribute values, by kind (attributes.py) --------------------------------------
    def attribute_value(self, name: str, instr: HloInstruction, scope: _ComputationScope) -> Any:
        kind = attribute_kind(name)
        what = f"the value of attribute '{name}'"
        if kind == "ints":
            return tuple(self.braced_list(lambda: self.integer(f"an integer in '{name}'"), what))
        if kind == "int":
            return self.integer(f"an integer for attribute '{name}'")
        if kind == "bool":
            m = self.match(BOOL)
            if not m:
                raise self.expected(f"true or false for attribute '{name}'")
            return m.group(1) == "true"
        if kind == "enum":
            m = self.match(WORD)
            if not m:
                raise self.expected(f"a name for attribute '{name}'")
            return m.group()
        if kind == "string":
            return self.string(f'a quoted string for attribute \'{name}\'')
        if kind == "float":
            self.skip_ws()
            m = self.match(SCALAR)
            if not m or m.group() in ("true", "false"):
                raise self.expected(f"a number for attribute '{name}'")
            return float(m.group())
        if kind == "computation" and self.peek() == "{":   # a computation written in place
            comp = self.computation_body(f"{instr.name}.{name}")
            self.inline_computations.append(comp)
            return comp
        if kind == "computation":
            ref = self.name(f"a computation name for attribute '{name}'")
            self.computation_refs.append((instr, name, [ref], True))
            return ref[0]
        if kind == "computations":
            refs = self.braced_list(lambda: self.name(f"a computation name in '{name}'"), what)
            self.computation_refs.append((instr, name, refs, False))
            return tuple(r[0] for r in refs)
        if kind == "names":
            refs = self.braced_list(lambda: self.name(f"an instruction name in '{name}'"), what)
            scope.control_refs.extend(refs)
            return tuple(r[0] for r in refs)
        if kind == "slice":
            return tuple(self.braced_list(self.slice_dim, what))
        if kind == "padding":
            return self.padding()
        if kind == "window":
            return self.window()
        if kind == "dim_labels":
            self.skip_ws()
            start = self.pos
            m = self.match(DIM_LABELS)
            if not m:
                raise self.expected("dim_labels such as b01f_01io->b01f")
            try:
                return ConvDimensionNumbers.from_labels(m.group())
            except ValueError as e:
                raise self.error_at(start, str(e)) from None
        if kind == "metadata":
            return self.metadata()
        return self.raw_value(what)

    def braced_list(self, item: Callable[[], T], what: str) -> list[T]:
        """`{a, b, c}` (possibly empty) with `item()` parsing one element."""
        self.expect("{", f"to start {what}")
        out: list[T] = []
        if self.accept("}"):
            return out
        while True:
            out.append(item())
            if self.accept(","):
                continue
            self.expect("}", f"to close {what}")
            return out

    def slice_dim(self) -> SliceDim:
        self.expect("[", "to start a slice range [start:limit:stride]")
        start = self.integer("a slice start")
        self.expect(":", "after the slice start")
        limit = self.integer("a slice limit")
        stride = self.integer("a slice stride") if self.accept(":") else 1
        self.expect("]", "to close the slice range")
        return SliceDim(start, limit, stride)

    def int_parts(self, text: str, start: int) -> list[int]:
        """The integers of a `1_-2_0` / `2x2` piece, each within int64."""
        values = [parse_int(v) for v in re.findall(r"-?\d+", text)]
        for v in values:
            if not INT64_MIN <= v <= INT64_MAX:
                raise self.error_at(start, f"value {v} in '{text}' is out of range")
        return values

    def padding(self) -> tuple[PadDim, ...]:
        right_after_equals = self.pos
        self.skip_ws()
        start = self.pos
        m = self.match(PADDING)
        if not m:
            # A rank-0 pad prints an empty config: `padding=` followed by ',' or the line's end.
            if right_after_equals >= self.n or self.text[right_after_equals] in ",\r\n":
                return ()
            raise self.expected("padding such as 0_1x2_2_1 (low_high[_interior] per dimension)")
        dims = []
        for part in m.group().split("x"):
            values = self.int_parts(part, start)
            dims.append(PadDim(*values))
        return tuple(dims)

    def window(self) -> tuple[WindowDim, ...]:
        """`{size=2x2 stride=2x1 pad=0_0x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=0x1}`."""
        self.expect("{", "to start the window")
        fields: dict[str, list] = {}
        rank = None
        while not self.accept("}"):
            self.skip_ws()
            key_pos = self.pos
            m = self.match(WORD)
            if not m:
                raise self.expected("a window field (size, stride, pad, lhs_dilate, rhs_dilate, "
                                    "rhs_reversal) or '}'")
            key = m.group()
            if key not in ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
                raise self.error_at(key_pos, f"unknown window field '{key}'")
            if key in fields:
                raise self.error_at(key_pos, f"duplicate window field '{key}'")
            self.expect("=", f"after window field '{key}'")
            self.skip_ws()
            value_pos = self.pos
            values: list[tuple[int, ...]] | list[int]
            if key == "pad":
                m = self.match(WINDOW_PAD)
                if not m:
                    raise self.expected("window padding such as 0_0x1_1")
                values = [tuple(self.int_parts(p, value_pos)) for p in m.group().split("x")]
            else:
                m = self.match(DXD)
                if not m:
                    raise self.expected(f"window {key} such as 2x2")
                values = [self.int_parts(p, value_pos)[0] for p in m.group().split("x")]
                if key == "rhs_reversal" and any(v not in (0, 1) for v in values):
                    raise self.error_at(value_pos, "rhs_reversal values must be 0 or 1")
            if rank is not None and len(values) != rank:
                raise self.error_at(value_pos, f"window {key} has {len(values)} dimensions, "
                                               f"the other fields have {rank}")
            rank = len(values)
            fields[key] = values
        if rank is None:
            return ()
        if "size" not in fields:
            raise self.error_at(self.pos - 1, "window needs a size")
        dims = []
        for i in range(rank):
            pad = fields["pad"][i] if "pad" in fields else (0, 0)
            dims.append(WindowDim(
                size=fields["size"][i],
                stride=fields["stride"][i] if "stride" in fields else 1,
                pad_low=pad[0], pad_high=pad[1],
                lhs_dilate=fields["lhs_dilate"][i] if "lhs_dilate" in fields else 1,
                rhs_dilate=fields["rhs_dilate"][i] if "rhs_dilate" in fields else 1,
                reversal=bool(fields["rhs_reversal"][i]) if "rhs_reversal" in fields else False))
        return tuple(dims)

    def metadata(self) -> dict:
        """`{op_name="x" source_line=3 preserve_layout=true profile_type={a,b}}`."""
        self.expect("{", "to start the metadata")
        out: dict[str, Any] = {}
        while not self.accept("}"):
            self.accept(",")
            self.skip_ws()
            key_pos = self.pos
            m = self.match(WORD)
            if not m:
                raise self.expected("a metadata field or '}'")
            key = m.group()
            if key in out:
                raise self.error_at(key_pos, f"duplicate metadata field '{key}'")
            self.expect("=", f"after metadata field '{key}'")
            c = self.peek()
            if c == '"':
                out[key] = self.string(f"a string for metadata field '{key}'")
            elif c == "{":
                out[key] = tuple(w for w, _ in self.braced_list(
                    lambda: self.name(f"a name in metadata field '{key}'"), f"metadata field '{key}'"))
            elif self.accept_keyword("true"):
                out[key] = True
            elif self.accept_keyword("false"):
                out[key] = False
            else:
                out[key] = self.integer(f"a value for metadata field '{key}'")
        return out

    # --- name resolution ----------------------------------------------------------------
    def resolve_computation_refs(self, computations: dict[str, HloComputation]) -> None:
        for instr, attr, refs, single in self.computation_refs:
            resolved = []
            for ref, pos in refs:
                comp = computations.get(ref)
                if comp is None:
                    raise self.error_at(pos, f"computation '{ref}' is not defined")
                resolved.append(comp)
            instr.attrs[attr] = resolved[0] if single else tuple(resolved)
            if instr.opcode == "fusion" and attr == "calls":
                resolved[0].is_fusion_computation = True
