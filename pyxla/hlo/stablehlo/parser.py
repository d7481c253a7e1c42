"""Parser of StableHLO MLIR text into the op tree (optree.py).

The grammar it reads (what JAX's `lower().as_text()` and `jax.export` print):

  file       ::= (alias | module | function)*          alias ::= '#' name '=' attr (skipped)
  module     ::= 'module' '@'name? ('attributes' dict)? '{' (function | sdy.mesh)* '}'
  function   ::= 'func.func' ('public'|'private')? '@'name '(' (arg (',' arg)*)? ')'
                 ('->' (type | '(' type attrs? (',' ...)* ')'))? ('attributes' dict)? region
  region     ::= '{' ('^'label ('(' arg, ... ')')? ':')? op* '}'
  op         ::= (results '=')? (generic | pretty) loc?
  generic    ::= '"'name'"' '(' values ')' ('<' dict '>')? ('(' region, ... ')')? dict? ':' functype
  pretty     ::= name item* (':' signature)? trailing-regions
  item       ::= value | '@'sym group? | string | group | '[..]' | '<..>' | dict
                 | word '=' pretty-value | 'dense<..>' | word
  group      ::= '(' (value ('init:' value)? | value '=' value | word '=' value), ... ')'
  signature  ::= '(' types ')' '->' types | type '->' types | type (',' type)*

Pretty forms are read generically (operands, `key = value` attributes, bare keywords,
parenthesised groups, raw `[...]`/`<...>` runs, then the type signature); the converter
picks out what each op needs. Every problem is a ParseError at its line and column.
"""
from __future__ import annotations

import re
from typing import Any

from ...errors import ParseError
from ..shape import Shape
from .lexer import BARE, NUMBER, RESULT, SCALAR_TYPE, SYMBOL, TYPE_START, VALUE, MlirLexer
from .optree import Block, Dense, DenseArray, DialectAttr, Function, MlirModule, Op, Region, Symbol, ValueRef

_MAX_DEPTH = 64
_FIELDS = re.compile(r"\s*[A-Za-z_][\w.]*\s*=(?!=)")
_TRAILING_REGIONS = ("cond", "do", "reducer", "else")


def parse_mlir(text: str, source: str = "<stablehlo>") -> MlirModule:
    """Parse MLIR text into an MlirModule (syntax and nesting only, no meaning)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_stablehlo needs a str, got {type(text).__name__}")
    parser = MlirParser(text, source)
    try:
        return parser.file()
    except ParseError:
        raise
    except RecursionError:
        raise parser.error_at(parser.pos, "nesting too deep") from None


class MlirParser(MlirLexer):
    def __init__(self, text: str, source: str):
        super().__init__(text, source)
        self.depth = 0

    # --- module and functions -----------------------------------------------------------
    def file(self) -> MlirModule:
        module = MlirModule("module", {})
        seen_module = False
        while not self.at_end():
            self.skip_ws()
            start = self.pos
            if self.text.startswith("#", start):
                self.alias()
            elif self.accept_keyword("module"):
                if seen_module:
                    raise self.error_at(start, "a second 'module' in the file")
                seen_module = True
                self.module_body(module)
            elif self.looking_at(re.compile(r"func\.func\b")):
                self.function(module)
            else:
                raise self.expected("'module' or 'func.func'")
        if not module.functions:
            raise self.error_at(self.n, "no function in the module (expected 'func.func')")
        return module

    def alias(self) -> None:
        """`#loc1 = loc("x")`, `#map = ...`: attribute aliases, skipped."""
        self.pos += 1
        self.word("an alias name after '#'")
        self.expect("=", "after the alias name")
        self.attr_value()

    def module_body(self, module: MlirModule) -> None:
        m = self.match(SYMBOL)
        if m:
            module.name = m.group(1) or m.group(2)[1:-1]
        if self.accept_keyword("attributes"):
            self.attr_dict()
        self.expect("{", "to start the module body")
        while not self.accept("}"):
            if self.at_end():
                raise self.expected("'}' to close the module")
            if self.looking_at(re.compile(r"func\.func\b")):
                self.function(module)
            elif self.looking_at(re.compile(r"sdy\.mesh\b")):
                self.op()   # a sharding mesh declaration: no value
            else:
                raise self.expected("'func.func' or '}' in the module body")
        self.skip_location()

    def function(self, module: MlirModule) -> None:
        self.skip_ws()
        start = self.pos
        self.pos += len("func.func")
        visibility = "public"
        for word in ("public", "private", "nested"):
            if self.accept_keyword(word):
                visibility = word
        m = self.match(SYMBOL)
        if not m:
            raise self.expected("'@name' of the function")
        name = m.group(1) or m.group(2)[1:-1]
        if name in module.functions:
            raise self.error_at(start, f"duplicate function '@{name}'")
        self.expect("(", f"to start the arguments of '@{name}'")
        args = self.block_args()
        results: list[Shape] = []
        if self.accept("->"):
            if self.accept("("):
                results = self.type_list_until(")")
            else:   # a lone result type carries no attributes: a '{' here is the body
                results = [self.type("a result type")]
        if self.accept_keyword("attributes"):
            self.attr_dict()
        body = self.region() if self.peek() == "{" else None
        self.skip_location()
        module.functions[name] = Function(name, start, visibility == "public", args, results, body)

    def block_args(self) -> list[tuple[str, Shape]]:
        """`%a: type {attrs} loc(..), ...)` after the '(' of a function or block."""
        args: list[tuple[str, Shape]] = []
        if self.accept(")"):
            return args
        while True:
            m = self.match(VALUE)
            if not m:
                raise self.expected("an argument '%name'")
            self.expect(":", f"after argument '%{m.group(1)}'")
            args.append((m.group(1), self.type("the argument's type")))
            self.skip_attr_dict()
            if self.accept(","):
                continue
            self.expect(")", "to close the arguments")
            return args

    # --- regions and ops ----------------------------------------------------------------
    def region(self) -> Region:
        self.skip_ws()
        start = self.pos
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error_at(start, f"regions nest deeper than {_MAX_DEPTH} levels")
        self.expect("{", "to start a region")
        blocks: list[Block] = []
        block = Block()
        while not self.accept("}"):
            if self.at_end():
                raise self.expected("'}' to close the region")
            if self.peek() == "^":
                if block.ops or blocks:
                    blocks.append(block)
                block = Block()
                self.pos += 1
                self.word("a block label after '^'")
                if self.accept("("):
                    block.args = self.block_args()
                self.expect(":", "after the block label")
                continue
            block.ops.append(self.op())
        blocks.append(block)
        self.depth -= 1
        return Region(blocks, start)

    def op(self) -> Op:
        self.skip_ws()
        start = self.pos
        results = self.results()
        self.skip_ws()
        name_pos = self.pos
        if self.peek() == '"':
            op = Op(self.string("an op name"), name_pos, self.line_of(name_pos), results, generic=True)
            self.generic_body(op)
        else:
            m = self.match(BARE)
            if not m:
                raise self.expected("an op" if not results else "an op name after '='")
            name = m.group()
            op = Op(name if "." in name else f"func.{name}", name_pos, self.line_of(name_pos), results)
            self.pretty_body(op)
        self.skip_location()
        del start
        return op

    def results(self) -> list[tuple[str, int]]:
        if self.peek() != "%":
            return []
        results: list[tuple[str, int]] = []
        while True:
            m = self.match(RESULT)
            if not m:
                raise self.expected("a result '%name'")
            results.append((m.group(1), int(m.group(2) or 1)))
            if self.accept(","):
                continue
            self.expect("=", "after the op's results")
            return results

    def value(self) -> ValueRef:
        self.skip_ws()
        start = self.pos
        m = self.match(VALUE)
        if not m:
            raise self.expected("a value '%name'")
        return ValueRef(m.group(1), int(m.group(2) or 0), start)

    def generic_body(self, op: Op) -> None:
        self.expect("(", f"after \"{op.name}\"")
        if not self.accept(")"):
            while True:
                op.operands.append(self.value())
                if self.accept(","):
                    continue
                self.expect(")", "to close the operands")
                break
        if self.accept("<{"):
            self.pos -= 1
            op.attrs.update(self.attr_dict())
            self.expect(">", "to close the properties")
        if self.peek() == "(":
            self.pos += 1
            while True:
                op.regions.append(self.region())
                if self.accept(","):
                    continue
                self.expect(")", "to close the regions")
                break
        if self.peek() == "{":
            op.attrs.update(self.attr_dict())
        self.expect(":", f"and the type of \"{op.name}\"")
        self.signature(op)

    def pretty_body(self, op: Op) -> None:
        while True:
            c = self.peek()
            if c in (":", "}", "") or self.looking_at(re.compile(r"loc\(")) or self.at_next_op(op):
                break
            self.pretty_item(op)
            self.accept(",")
        if self.accept(":"):
            self.signature(op)
        self.trailing_regions(op)
        flatten_groups(op)

    def at_next_op(self, op: Op) -> bool:
        """A result list or an op with no results begins: the current op had no type."""
        if self.looking_at(re.compile(r"%[\w$.\-]+(?::\d+)?\s*(?:,\s*%[\w$.\-]+(?::\d+)?\s*)*=(?!=)")):
            return True
        m = self.looking_at(BARE)
        return bool(m and m.group() in ("return", "stablehlo.return", "func.return", "func.func")) or \
            bool(m and m.group() in _TRAILING_REGIONS and op.name != "sdy.mesh")

    def pretty_item(self, op: Op) -> None:
        c = self.peek()
        start = self.pos
        if c == "%":
            op.operands.append(self.value())
        elif c == "@":
            m = self.match(SYMBOL)
            assert m is not None
            op.attrs.setdefault("callee", Symbol(m.group(1) or m.group(2)[1:-1]))
            if self.accept("="):
                op.attrs["value"] = self.attr_value()
        elif c == '"':
            op.attrs["name"] = self.string("a string")
        elif c == "(":
            op.groups.append(self.group(op))
        elif c in "[<":
            op.raw.append(self.balanced(c, "a bracketed value"))
        elif c == "{":
            op.attrs.update(self.attr_dict())
        else:
            m = self.match(BARE)
            if not m:
                raise self.expected(f"an operand, attribute or ':' in '{op.name}'")
            word = m.group()
            if word in ("dense", "array") and self.peek() == "<":
                self.pos = start
                op.attrs["value"] = self.attr_value(allow_type=False)
            elif self.accept("="):
                op.attrs[word] = self.pretty_value()
            else:
                op.keywords.append(word)

    def group(self, op: Op) -> list[tuple]:
        """`(%x init: %c)`, `(%iterArg = %a, ...)`, `(%x, k = 3)`, `(%a, %b)`."""
        self.expect("(", "to start a group")
        entries: list[tuple] = []
        if self.accept(")"):
            return entries
        while True:
            if self.peek() == "%":
                v = self.value()
                if self.accept_keyword("init"):
                    self.expect(":", "after 'init'")
                    entries.append(("init", v, self.value()))
                elif self.accept("="):
                    entries.append(("bind", v.name, self.value()))
                else:
                    entries.append(("operand", v))
            else:
                key = self.word("an operand or 'name = value' in the group")
                self.expect("=", f"after '{key}'")
                entries.append(("attr", key, self.pretty_value()))
            if self.accept(","):
                continue
            self.expect(")", "to close the group")
            return entries

    def trailing_regions(self, op: Op) -> None:
        """`cond {..} do {..}` of while, `reducer(%a: t, %b: t) (..) {..}` of reduce."""
        while True:
            m = self.looking_at(BARE)
            if not m or m.group() not in _TRAILING_REGIONS:
                return
            self.pos = m.end()
            word = m.group()
            args: list[tuple[str, Shape]] = []
            while word == "reducer" and self.accept("("):
                args.extend(self.block_args())
            region = self.region()
            if args:
                pairs = [args[i:i + 2] for i in range(0, len(args), 2)]   # (lhs_i, rhs_i) per operand
                region.blocks[0].args = [p[0] for p in pairs] + [p[1] for p in pairs]
            op.regions.append(region)
            op.region_names.append(word)

    def signature(self, op: Op) -> None:
        self.skip_ws()
        if self.accept("("):
            op.operand_types = self.type_list_until(")")
            self.expect("->", "after the operand types")
            op.result_types = self.result_types()
            return
        first = self.type("the op's type")
        if self.accept("->"):
            op.operand_types = [first]
            op.result_types = self.result_types()
            return
        types = [first]
        while self.peek() == "," and TYPE_START.match(self.text, _after(self.text, self.pos + 1)):
            self.pos += 1
            types.append(self.type())
        op.operand_types = types
        n = op.num_results
        op.result_types = types[-n:] if n else []

    def result_types(self) -> list[Shape]:
        if self.accept("("):
            return self.type_list_until(")")
        return [self.type("a result type")]

    # --- attribute values ---------------------------------------------------------------
    def attr_dict(self) -> dict[str, Any]:
        self.expect("{", "to start an attribute dictionary")
        out: dict[str, Any] = {}
        if self.accept("}"):
            return out
        while True:
            self.skip_ws()
            key = self.string("an attribute name") if self.peek() == '"' else self.word("an attribute name")
            out[key] = self.attr_value() if self.accept("=") else True
            if self.accept(","):
                continue
            self.expect("}", "to close the attribute dictionary")
            return out

    def attr_value(self, allow_type: bool = True) -> Any:
        self.skip_ws()
        start, c = self.pos, self.peek()
        if c == "[":
            return self.attr_list()
        if c == "{":
            return self.attr_dict()
        if c == '"':
            return self.string("a string")
        if c == "@":
            m = self.match(SYMBOL)
            assert m is not None
            return Symbol(m.group(1) or m.group(2)[1:-1])
        if c == "#":
            return self.dialect_attr()
        if c == "(":   # a complex number or similar
            raise self.error_at(start, "complex values are not supported by pyxla")
        if c == "<":   # `sdy.mesh @m = <["d"=1]>`
            return DialectAttr("", self.balanced("<", "a bracketed value"), None)
        m = self.looking_at(NUMBER)
        if m:
            self.pos = m.end()
            self.scalar_type_suffix()
            return number_value(m.group())
        if TYPE_START.match(self.text, self.pos) and not self.text.startswith("index", self.pos):
            return self.type()
        word = self.word("an attribute value")
        if word == "dense" and self.peek() == "<":
            body = self.balanced("<", "the dense literal")
            dtype = self.type() if allow_type and self.accept(":") else None
            return Dense(body, dtype, start)
        if word == "array" and self.peek() == "<":
            return self.dense_array()
        if word == "loc" and self.peek() == "(":
            self.balanced("(", "a location")
            return None
        if word in ("true", "false"):
            self.scalar_type_suffix()
            return word == "true"
        if self.peek() == "<" and self.text[self.pos] == "<":
            return DialectAttr(word, self.balanced("<", f"the value of '{word}'"), None)
        return word

    def scalar_type_suffix(self) -> None:
        """`: i64` after an integer attribute (not `: tensor<..>`, the op's type)."""
        self.skip_ws()
        save = self.pos
        if self.accept(":") and self.looking_at(SCALAR_TYPE):
            self.match(SCALAR_TYPE)
            return
        self.pos = save

    def attr_list(self) -> list:
        self.expect("[", "to start a list")
        out: list = []
        if self.accept("]"):
            return out
        while True:
            out.append(self.attr_value())
            if self.accept(","):
                continue
            self.expect("]", "to close the list")
            return out

    def dense_array(self) -> DenseArray:
        self.expect("<", "after 'array'")
        element = self.word("the element type of the array")
        values: list = []
        if self.accept(":"):
            while True:
                v = self.attr_value()
                values.append(v)
                if self.accept(","):
                    continue
                break
        self.expect(">", "to close the array")
        return DenseArray(element, tuple(values))

    def dialect_attr(self) -> DialectAttr:
        """`#stablehlo.gather<k = v, ...>` (fields parsed), `#stablehlo<precision X>` (raw),
        `#loc3` (an alias)."""
        self.pos += 1
        name = self.word("a dialect attribute name after '#'")
        if self.text.startswith("<", self.pos):
            save = self.pos
            if _FIELDS.match(self.text, self.pos + 1):
                self.pos += 1
                fields: dict[str, Any] = {}
                while True:
                    key = self.word("a field name")
                    self.expect("=", f"after field '{key}'")
                    fields[key] = self.attr_value()
                    if self.accept(","):
                        continue
                    self.expect(">", f"to close #{name}<...>")
                    return DialectAttr(name, self.text[save + 1:self.pos - 1], fields)
            return DialectAttr(name, self.balanced("<", f"#{name}<...>"), None)
        return DialectAttr(name, "", None)

    def pretty_value(self) -> Any:
        """A value after `key =` in a pretty form: also `[1] x [0]`, the convolution's
        `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]` and the window's `{stride = [..], ...}`."""
        if self.peek() == "[":
            first = self.attr_list_words()
            if self.accept("x"):
                second = self.attr_list_words()
                if self.accept("->"):
                    return (first, second, self.attr_list_words())
                return (first, second)
            return first
        if self.peek() == "{":
            return self.attr_dict()
        return self.attr_value(allow_type=False)

    def attr_list_words(self) -> list:
        """`[b, 0, 1, f]`, `[[0, 1], [1, 1]]`, `[DEFAULT, DEFAULT]`: ints, words, lists."""
        self.expect("[", "to start a list")
        out: list = []
        if self.accept("]"):
            return out
        while True:
            if self.peek() == "[":
                out.append(self.attr_list_words())
            else:
                out.append(self.attr_value(allow_type=False))
            if self.accept(","):
                continue
            self.expect("]", "to close the list")
            return out


def flatten_groups(op: Op) -> None:
    """The values in a pretty form's groups join its operands in HLO's order: a reduce's
    inputs then its inits, a while's initial values, a call's or a convolution's arguments."""
    inputs: list[ValueRef] = []
    inits: list[ValueRef] = []
    for group in op.groups:
        for entry in group:
            if entry[0] == "operand":
                inputs.append(entry[1])
            elif entry[0] == "init":
                inputs.append(entry[1])
                inits.append(entry[2])
            elif entry[0] == "bind":
                inputs.append(entry[2])
            else:
                op.attrs[entry[1]] = entry[2]
    op.operands = inputs + inits + op.operands


def number_value(text: str) -> int | float:
    """An MLIR number token as int (decimal or 0x hex) or float."""
    body = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    if body.startswith("0x"):
        return sign * int(body, 16)
    if body.isdigit():
        return sign * int(body)
    return float(text)


def _after(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos
