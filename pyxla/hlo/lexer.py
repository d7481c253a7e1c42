"""The lexical layer of the HLO text parser: token patterns, and a cursor over the text.

`Lexer` holds the text and a position in it; it skips whitespace and comments, reads one
token at a time (names, words, integers, quoted strings, raw balanced values) and makes
ParseErrors that point at a line and column. The parser (parser.py) builds the grammar on
it, and reads the other patterns here directly (shapes, literals, attribute values).
"""
from __future__ import annotations

import re

from ..errors import ParseError
from .printer import utf8_bytes

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

WS = re.compile(r"(?:[ \t\r\n\f\v]+|/\*.*?\*/|//[^\n]*)*", re.S)
# A bare name is an identifier; after a `%` sigil anything up to a delimiter will do
# (`%jit_<lambda>.1`), so every name the IR can hold prints in a form that parses back.
# (':' and '/' only inside: `%p: f32[]` in a signature and `/*` comments stay delimiters.)
SIGIL_NAME = r"[^\s,(){}\[\]=:\"/%*]+(?:[:/][^\s,(){}\[\]=:\"/%*]+)*"
NAME = re.compile(r"%(" + SIGIL_NAME + r")|([A-Za-z_][\w.\-]*)", re.A)
WORD = re.compile(r"[A-Za-z_][\w.\-]*", re.A)
TYPE_WORD = re.compile(r"([A-Za-z][A-Za-z0-9]*)[ \t]*\[", re.A)
UINT = re.compile(r"\d+", re.A)
# One piece of a layout after its ':': `T(8,128)(4,1)`, `S(5)`, `E(4)`, `L(2)`, `*`.
# An instruction written in an operand's place: `parameter(0)`, `constant(1)`.
INLINE_OPCODE = re.compile(r"([a-z][a-z\-]*)[ \t]*\(", re.A)
LAYOUT_DETAIL = re.compile(r"[A-Za-z#*]+(?:\s*\([^()]*\))*", re.A)
INT = re.compile(r"[-+]?\d+", re.A)
STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
SCALAR = re.compile(r"-?(?:nan(?:\(0x[0-9a-fA-F]+\))?|inf)(?![\w.])|true(?![\w.])|false(?![\w.])"
                    r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", re.A)
PADDING = re.compile(r"-?\d+_-?\d+(?:_-?\d+)?(?:x-?\d+_-?\d+(?:_-?\d+)?)*", re.A)
WINDOW_PAD = re.compile(r"-?\d+_-?\d+(?:x-?\d+_-?\d+)*", re.A)
DXD = re.compile(r"-?\d+(?:x-?\d+)*", re.A)
DIM_LABELS = re.compile(r"[0-9A-Za-z?]+_[0-9A-Za-z?]+->[0-9A-Za-z?]+")
RAW_RUN = re.compile(r'[^"{}\[\]()\s,]+')
MODULE_NAME = re.compile(r"%?(" + SIGIL_NAME + ")")
BOOL = re.compile(r"(true|false)(?![\w.\-])")
ELIDED = re.compile(r"\{\s*\.\.\.\s*\}")
TOKEN_FOR_MESSAGE = re.compile(r'%?[\w.\-]+|"[^"\n]{0,30}"?|\S', re.A)

CLOSERS = {"{": "}", "[": "]", "(": ")"}
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "?": "?",
           "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def skip_whitespace(text: str, pos: int) -> int:
    """Where the whitespace and comments at `pos` end (`pos` itself when there are none)."""
    m = WS.match(text, pos)
    assert m is not None   # WS matches the empty string
    return m.end()


def decode_text(data: bytes, source: str = "<hlo>") -> str:
    """HLO text from a file's bytes (UTF-8, as XLA reads it); a byte that is not UTF-8 is a
    ParseError at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[:e.start]
        line_start = before.rfind(b"\n") + 1
        line_end = data.find(b"\n", e.start)
        line_text = data[line_start:line_end if line_end >= 0 else len(data)].decode("utf-8", "replace")
        column = len(data[line_start:e.start].decode("utf-8", "replace")) + 1
        raise ParseError(f"byte 0x{data[e.start]:02x} is not UTF-8 text ({e.reason})", before.count(b"\n") + 1,
                         column, line_text.rstrip("\r"), source) from None


def parse_int(digits: str) -> int:
    """int() of a decimal token; absurdly long ones (past Python's int-string limit) become a
    value far out of every range, so range checks report them."""
    if len(digits) > 40:
        return -(10 ** 40) if digits.startswith("-") else 10 ** 40
    return int(digits)


class Lexer:
    """A position in HLO text, with the token readers and error constructors of the parser."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.n = len(text)
        self.pos = 0

    # --- errors -------------------------------------------------------------------------
    def error_at(self, pos: int, message: str) -> ParseError:
        text = self.text
        if pos >= self.n:   # at end of input: point just past the last real character
            pos = len(text.rstrip())
        line_start = text.rfind("\n", 0, pos) + 1
        line_end = text.find("\n", pos)
        if line_end < 0:
            line_end = self.n
        line = text.count("\n", 0, pos) + 1
        return ParseError(message, line, pos - line_start + 1, text[line_start:line_end].rstrip("\r"),
                          self.source)

    def error(self, message: str) -> ParseError:
        self.skip_ws()
        return self.error_at(self.pos, message)

    def found(self, pos: int | None = None) -> str:
        """The token at `pos` as error messages quote it."""
        if pos is None:
            self.skip_ws()
            pos = self.pos
        if pos >= self.n:
            return "end of input"
        m = TOKEN_FOR_MESSAGE.match(self.text, pos)
        tok = m.group() if m else self.text[pos]
        return f"'{tok}'"

    def expected(self, what: str) -> ParseError:
        return self.error(f"expected {what}, found {self.found()}")

    # --- tokens -------------------------------------------------------------------------
    def skip_ws(self) -> None:
        self.pos = skip_whitespace(self.text, self.pos)
        if self.text.startswith("/*", self.pos):
            raise self.error_at(self.pos, "unterminated comment: '/*' without '*/'")

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= self.n

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < self.n else ""

    def accept(self, token: str) -> bool:
        self.skip_ws()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str, context: str) -> None:
        if not self.accept(token):
            raise self.expected(f"'{token}' {context}")

    def accept_keyword(self, word: str) -> bool:
        self.skip_ws()
        m = WORD.match(self.text, self.pos)
        if m and m.group() == word:
            self.pos = m.end()
            return True
        return False

    def match(self, regex: re.Pattern) -> re.Match | None:
        self.skip_ws()
        m = regex.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        return m

    def name(self, what: str) -> tuple[str, int]:
        """A name with or without its `%` sigil, and where it starts."""
        self.skip_ws()
        start = self.pos
        m = self.match(NAME)
        if not m:
            raise self.expected(what)
        return m.group(1) or m.group(2), start

    def integer(self, what: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
        self.skip_ws()
        start = self.pos
        m = self.match(INT)
        if not m:
            raise self.expected(what)
        value = parse_int(m.group())
        if not lo <= value <= hi:
            raise self.error_at(start, f"{what} {value} is out of range [{lo}, {hi}]")
        return value

    def string(self, what: str) -> str:
        """A double-quoted string with C escapes, unescaped."""
        self.skip_ws()
        start = self.pos
        if self.peek() != '"':
            raise self.expected(what)
        m = STRING.match(self.text, start)
        if not m:
            raise self.error_at(start, "unterminated string: '\"' without a closing '\"'")
        self.pos = m.end()
        return self.unescape(m.group()[1:-1], start + 1)

    def unescape(self, body: str, pos: int) -> str:
        """C escapes (absl::CUnescape): octal and hex escapes are bytes of UTF-8 text."""
        if "\\" not in body:
            return body
        out = bytearray()
        i = 0
        while i < len(body):
            c = body[i]
            if c != "\\":
                out += utf8_bytes(c)
                i += 1
                continue
            e = body[i + 1]
            octal = re.match(r"[0-7]{1,3}", body[i + 1:i + 4])
            hexa = re.match(r"x([0-9a-fA-F]{1,2})", body[i + 1:i + 4])
            if e in ESCAPES:
                out += ESCAPES[e].encode()
                i += 2
            elif octal and int(octal.group(), 8) < 256:
                out.append(int(octal.group(), 8))
                i += 1 + len(octal.group())
            elif hexa:
                out.append(int(hexa.group(1), 16))
                i += 1 + len(hexa.group())
            else:
                raise self.error_at(pos + i, f"invalid escape sequence '\\{e}' in string")
        return out.decode("utf-8", "surrogateescape")

    def raw_value(self, what: str) -> str:
        """The exact text of a value: balanced (), [], {} and quoted strings, up to a ',' or
        whitespace outside any bracket."""
        self.skip_ws()
        text, start = self.text, self.pos
        stack: list[tuple[str, int]] = []
        i = start
        while i < self.n:
            c = text[i]
            if c == '"':
                m = STRING.match(text, i)
                if not m:
                    raise self.error_at(i, "unterminated string: '\"' without a closing '\"'")
                i = m.end()
                continue
            if c in CLOSERS:
                stack.append((c, i))
            elif c in "}])":
                if not stack:
                    break
                opener, at = stack.pop()
                if CLOSERS[opener] != c:
                    raise self.error_at(i, f"expected '{CLOSERS[opener]}' to close '{opener}' "
                                           f"of {what}, found '{c}'")
            elif not stack and (c == "," or c.isspace()):
                break
            else:
                m = RAW_RUN.match(text, i)
                if m:
                    i = m.end()
                    continue
            i += 1
        if stack:
            opener, at = stack[-1]
            raise self.error_at(at, f"'{opener}' of {what} is never closed")
        if i == start:
            raise self.error_at(start, f"expected {what}, found {self.found(start)}")
        self.pos = i
        return text[start:i]
