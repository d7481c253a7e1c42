"""The lexical layer of the StableHLO (MLIR text) parser: a cursor over the text, MLIR's
tokens (SSA names, symbols, dialect attributes, balanced raw runs) and its types.

Errors are the HLO parser's: a ParseError with `source:line:column`, the line and a caret
(it shares pyxla.hlo.lexer.Lexer). Types become pyxla shapes: `tensor<2x3xf32>` is
f32[2,3], `tensor<i1>` pred[], `!stablehlo.token` a token, `tuple<...>` a tuple.
"""
from __future__ import annotations

import bisect
import re

from ..lexer import STRING, Lexer
from ..shape import ArrayShape, Shape, TokenShape, TupleShape
from ..types import ELEMENT_TYPES, ElementType

VALUE = re.compile(r"%([\w$.\-]+)(?:#(\d+))?", re.A)
RESULT = re.compile(r"%([\w$.\-]+)(?::(\d+))?", re.A)
SYMBOL = re.compile(r"@(?:([\w$.\-]+)|(\"[^\"]*\"))", re.A)
BARE = re.compile(r"[A-Za-z_][\w$.\-]*", re.A)
NUMBER = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)(?![\w.])", re.A)
SCALAR_TYPE = re.compile(r"(?:[su]?i\d+|bf16|f\d+|f\d+E\w+|index)(?![\w<])", re.A)
TYPE_START = re.compile(r"tensor<|tuple<|!|complex<|(?:[su]?i\d+|bf16|f\d+|f\d+E\w+|index)(?![\w<])", re.A)
DIM = re.compile(r"(\d+|\?)x", re.A)

# MLIR's element type names that differ from HLO's (the f8/f4 names are HLO's lower-cased).
_MLIR_TYPES = {"i1": "pred", "index": "s64"}


def element_type_name(word: str) -> str | None:
    """HLO's name of MLIR element type `word` (`i32` -> s32, `ui8` -> u8, `f8E4M3FN` -> f8e4m3fn)."""
    if word in _MLIR_TYPES:
        return _MLIR_TYPES[word]
    m = re.fullmatch(r"(s|u)?i(\d+)", word)
    if m:
        return f"{'u' if m.group(1) == 'u' else 's'}{m.group(2)}"
    return word.lower() if word.startswith("f") or word == "bf16" else None


class MlirLexer(Lexer):
    """A position in MLIR text with MLIR's token readers."""

    def __init__(self, text: str, source: str):
        super().__init__(text, source)
        self._newlines = [i for i, c in enumerate(text) if c == "\n"]

    def line_of(self, pos: int) -> int:
        return bisect.bisect_left(self._newlines, pos) + 1

    def looking_at(self, regex: re.Pattern) -> re.Match | None:
        self.skip_ws()
        return regex.match(self.text, self.pos)

    def word(self, what: str) -> str:
        m = self.match(BARE)
        if not m:
            raise self.expected(what)
        return m.group()

    def string(self, what: str) -> str:
        self.skip_ws()
        m = STRING.match(self.text, self.pos)
        if not m:
            raise self.expected(what)
        self.pos = m.end()
        return m.group()[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")

    def balanced(self, opener: str, what: str) -> str:
        """The text between `opener` (at the cursor) and its closer; `->` is no closer."""
        closer = {"<": ">", "(": ")", "[": "]", "{": "}"}[opener]
        self.expect(opener, f"to start {what}")
        start = depth = self.pos
        depth = 1
        text, n = self.text, self.n
        i = start
        while i < n:
            c = text[i]
            if c == '"':
                m = STRING.match(text, i)
                if not m:
                    raise self.error_at(i, "unterminated string")
                i = m.end()
                continue
            if c == opener and not (c == "<" and text[i - 1] == "-"):
                depth += 1
            elif c == closer and not (c == ">" and text[i - 1] == "-"):
                depth -= 1
                if depth == 0:
                    self.pos = i + 1
                    return text[start:i]
            i += 1
        raise self.error_at(start - 1, f"'{opener}' of {what} is never closed")

    def skip_location(self) -> None:
        """`loc(...)` after an op, an argument or a result: debug information, skipped."""
        while self.looking_at(re.compile(r"loc\(")):
            self.pos += 3
            self.balanced("(", "a location")

    # --- types --------------------------------------------------------------------------
    def type(self, what: str = "a type") -> Shape:
        self.skip_ws()
        start = self.pos
        if self.accept("tensor<"):
            return self.tensor_type(start)
        if self.accept("tuple<"):
            elements: list[Shape] = []
            if not self.accept(">"):
                while True:
                    elements.append(self.type("a tuple element type"))
                    if self.accept(","):
                        continue
                    self.expect(">", "to close the tuple type")
                    break
            return TupleShape(tuple(elements))
        if self.accept("!stablehlo.token"):
            return TokenShape()
        if self.text.startswith("complex<", start):
            raise self.error_at(start, "complex element types are not supported by pyxla")
        m = self.match(SCALAR_TYPE)
        if m:
            return ArrayShape(self.element_type(m.group(), start), ())
        raise self.expected(what)

    def tensor_type(self, start: int) -> ArrayShape:
        dims: list[int] = []
        while True:
            self.skip_ws()
            m = DIM.match(self.text, self.pos)
            if not m:
                break
            if m.group(1) == "?":
                raise self.error_at(self.pos, "dynamic dimensions are not supported")
            dims.append(int(m.group(1)))
            self.pos = m.end()
        self.skip_ws()
        type_pos = self.pos
        if self.text.startswith("complex<", type_pos):
            raise self.error_at(type_pos, "complex element types are not supported by pyxla")
        m = self.match(BARE)
        if not m:
            raise self.expected("an element type in the tensor type")
        etype = self.element_type(m.group(), type_pos)
        if self.accept(","):   # an encoding (sparsity, bounds): not supported
            raise self.error_at(self.pos, "tensor encodings are not supported")
        self.expect(">", "to close the tensor type")
        return ArrayShape(etype, tuple(dims))

    def element_type(self, word: str, pos: int) -> ElementType:
        name = element_type_name(word)
        etype = ELEMENT_TYPES.get(name) if name else None
        if etype is None:
            raise self.error_at(pos, f"element type '{word}' is not supported by pyxla")
        return etype

    def type_list_until(self, closer: str) -> list[Shape]:
        types: list[Shape] = []
        if self.accept(closer):
            return types
        while True:
            types.append(self.type())
            self.skip_attr_dict()
            if self.accept(","):
                continue
            self.expect(closer, "to close the type list")
            return types

    def skip_attr_dict(self) -> None:
        """`{jax.result_info = ...}` after a result type: annotations, skipped."""
        if self.peek() == "{":
            self.balanced("{", "an attribute dictionary")
        self.skip_location()
