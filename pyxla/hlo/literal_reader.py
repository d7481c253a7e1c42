"""Literal values of HLO text: `constant(...)` operands, read into NumPy arrays.

`LiteralReader` is the part of the parser that reads scalars, nested-brace arrays, tuple
literals and elided `{...}` literals, rounding decimal text to each element type as XLA's
parser does; the parser (parser.py) inherits it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .lexer import ELIDED, INT, SCALAR, WS, Lexer, parse_int
from .printer import FLOAT_FORMATS
from .shape import ArrayShape, Shape, TupleShape
from .types import ElementType, FloatFormat, integer_limits

MAX_NESTING = 64             # tuple shapes / tuple literals: no unbounded recursion
_MAX_CONSTANT_RANK = 32
_MAX_ELIDED_ELEMENTS = 1 << 24  # `constant({...})` is filled with zeros; refuse absurd sizes


class LiteralReader(Lexer):
    def literal(self, shape: Shape, depth: int = 0) -> Any:
        self.skip_ws()
        if isinstance(shape, TupleShape):
            if ELIDED.match(self.text, self.pos):   # XLA elides tuple literals
                start = self.pos
                self.pos = self.text.index("}", start) + 1
                return self.elided(shape, start)
            if depth >= MAX_NESTING:
                raise self.error(f"tuple literal nests deeper than {MAX_NESTING} levels")
            self.expect("(", f"to start the tuple literal of {shape.to_text(False)}")
            values = []
            for i, element in enumerate(shape.elements):
                if i:
                    self.expect(",", "between tuple literal elements")
                values.append(self.literal(element, depth + 1))
            self.expect(")", f"to close the tuple literal of {shape.to_text(False)}")
            return tuple(values)
        if not isinstance(shape, ArrayShape):
            raise self.error(f"a constant cannot have shape {shape.to_text(False)}")
        if shape.rank == 0:
            start = self.pos
            m = self.match(SCALAR)
            if not m:
                raise self.expected(f"a scalar literal of type {shape.dtype.name}")
            return _elements_to_array(self, [m.group()], [start], shape.dtype).reshape(())
        if shape.rank > _MAX_CONSTANT_RANK:
            raise self.error(f"constants of rank {shape.rank} are not supported "
                             f"(at most {_MAX_CONSTANT_RANK})")
        return self.array_literal(shape)

    def array_literal(self, shape: ArrayShape) -> np.ndarray:
        """Nested braces, one level per dimension; `{...}` (an elided literal) gives zeros."""
        text, dims, rank = self.text, shape.dims, shape.rank
        shape_text = shape.to_text(False)
        self.skip_ws()
        if not text.startswith("{", self.pos):
            raise self.expected(f"'{{' to start the literal of {shape_text}")
        self.pos += 1
        if self.accept("..."):
            self.expect("}", "after '{...'")
            return self.elided(shape, self.pos - 1)
        counts = [0] * rank
        surplus_at: list[int | None] = [None] * rank
        level = 1                 # how many '{' are open
        after_item = False        # the last thing read in this list was an element
        tokens: list[str] = []
        positions: list[int] = []
        ws = WS
        while True:
            ws_end = ws.match(text, self.pos)
            assert ws_end is not None   # WS matches the empty string
            pos = ws_end.end()
            self.pos = pos
            c = text[pos] if pos < self.n else ""
            if c == "}":
                d = level - 1
                if not after_item and counts[d]:
                    raise self.error_at(pos, "expected a literal element after ','")
                if counts[d] != dims[d]:
                    surplus = surplus_at[d]
                    where = surplus if surplus is not None else pos
                    raise self.error_at(where, _count_message(counts[d], d, dims, shape_text))
                self.pos = pos + 1
                level -= 1
                if level == 0:
                    break
                after_item = True
                continue
            if after_item:
                if c != ",":
                    raise self.expected(f"',' or '}}' in the literal of {shape_text}")
                self.pos = pos + 1
                after_item = False
                continue
            d = level - 1
            counts[d] += 1
            if counts[d] == dims[d] + 1:
                surplus_at[d] = pos
            if level < rank:
                if c != "{":
                    raise self.expected(f"'{{' for dimension {level} of {shape_text}")
                level += 1
                counts[level - 1] = 0
                self.pos = pos + 1
                continue
            if c == "{":
                raise self.error_at(pos, f"literal nests deeper than the rank of {shape_text}")
            m = SCALAR.match(text, pos)
            if not m:
                raise self.expected(f"a literal element of type {shape.dtype.name}")
            tokens.append(m.group())
            positions.append(pos)
            self.pos = m.end()
            after_item = True
        return _elements_to_array(self, tokens, positions, shape.dtype).reshape(dims)

    def elided(self, shape: Shape, pos: int) -> Any:
        """The value of an elided literal `{...}`: zeros, as XLA's parser leaves it."""
        if isinstance(shape, TupleShape):
            return tuple(self.elided(e, pos) for e in shape.elements)
        if not isinstance(shape, ArrayShape):
            raise self.error_at(pos, f"a constant cannot have shape {shape.to_text(False)}")
        if shape.size > _MAX_ELIDED_ELEMENTS or shape.rank > _MAX_CONSTANT_RANK:
            raise self.error_at(pos, f"elided constant of {shape.to_text(False)} is too large to fill")
        return np.zeros(shape.dims, dtype=shape.dtype.np_dtype)


def _count_message(count: int, d: int, dims: tuple[int, ...], shape_text: str) -> str:
    noun = "element" if count == 1 else "elements"
    if len(dims) == 1:
        return f"literal has {count} {noun}, shape {shape_text} needs {dims[0]}"
    return f"literal has {count} {noun} in dimension {d}, shape {shape_text} needs {dims[d]}"


def _elements_to_array(parser: Lexer, tokens: list[str], positions: list[int],
                       etype: ElementType) -> np.ndarray:
    """Literal element texts as a 1-D array of `etype`'s storage dtype; a value that does not
    fit the type is a ParseError at that element."""
    if etype.kind == "pred":
        values: list[bool] = []
        for tok, pos in zip(tokens, positions):
            if tok in ("true", "1"):
                values.append(True)
            elif tok in ("false", "0"):
                values.append(False)
            else:
                raise parser.error_at(pos, f"a pred literal element is true, false, 1 or 0, found '{tok}'")
        return np.array(values, dtype=np.bool_)
    if etype.is_integral:
        least, greatest = integer_limits(etype)
        ints: list[int] = []
        for tok, pos in zip(tokens, positions):
            if not INT.fullmatch(tok):
                raise parser.error_at(pos, f"expected an integer for a {etype.name} literal, found '{tok}'")
            v = parse_int(tok)
            if not least <= v <= greatest:
                raise parser.error_at(pos, f"value {v} is out of range for {etype.name} "
                                           f"[{least}, {greatest}]")
            ints.append(v)
        return np.array(ints, dtype=np.int64 if etype.bits < 8 else etype.np_dtype).astype(etype.np_dtype)
    return _floats_to_array(parser, tokens, positions, etype)


def _floats_to_array(parser: Lexer, tokens, positions, etype: ElementType) -> np.ndarray:
    """Decimal -> double -> the target type, as XLA's parser rounds (types narrower than f32
    via f32). A finite value that rounds past the type's largest value is out of range.

    NaNs get their exact bits: sign, all-ones exponent, and the payload written as
    `nan(0x..)` or, by default, the quiet bit alone. The fn and fnuz types have no payloads
    (f8e4m3fn has a NaN of each sign, the fnuz types one NaN).
    """
    fmt = FLOAT_FORMATS[etype.name]
    doubles = []
    nans: list[tuple[int, bool, int]] = []   # (index, negative, payload)
    for i, (tok, pos) in enumerate(zip(tokens, positions)):
        if tok in ("true", "false"):
            raise parser.error_at(pos, f"expected a number for a {etype.name} literal, found '{tok}'")
        if "nan" in tok:
            negative = tok.startswith("-")
            payload = fmt.quiet_nan_payload
            if "(" in tok:
                if not fmt.nan_payloads:
                    raise parser.error_at(pos, f"{etype.name} has no NaN payloads, found '{tok}'")
                payload = int(tok[tok.index("(") + 3:-1], 16)
                if not 0 < payload < (1 << fmt.mantissa_bits):
                    raise parser.error_at(pos, f"NaN payload {payload:#x} does not fit the "
                                               f"{fmt.mantissa_bits} mantissa bits of {etype.name}")
            nans.append((i, negative, payload))
            doubles.append(-math.nan if negative else math.nan)
        else:
            value = float(tok)
            if math.isinf(value) and "inf" not in tok:
                raise parser.error_at(pos, f"value {tok} is out of range for {etype.name}")
            doubles.append(value)
    with np.errstate(over="ignore", invalid="ignore"):
        wide = np.array(doubles, dtype=np.float64)
        arr = wide if etype.name == "f64" else wide.astype(np.float32)
        if etype.bits < 32:
            arr = arr.astype(etype.np_dtype)
        # (inf for IEEE types, NaN for the fn/fnuz ones; f4e2m1fn saturates instead)
        overflow = ~np.isfinite(arr.astype(np.float64)) & np.isfinite(wide)
        if _float_format(etype).nan == "none":
            overflow |= np.abs(wide.astype(np.float32)) >= _saturation_threshold(etype)
    if overflow.any():
        i = int(np.argmax(overflow))
        raise parser.error_at(positions[i], f"value {tokens[i]} is out of range for {etype.name}")
    if nans and fmt.nan_payloads:
        bits = arr.view(fmt.uint_dtype)
        for i, negative, payload in nans:
            bits[i] = fmt.nan_bits(negative, payload)
    return arr


def _saturation_threshold(etype: ElementType) -> float:
    """For a type without inf or NaN: the least magnitude that rounds past its largest value
    (the largest value plus half its ulp; its mantissa is all ones, so the tie rounds up)."""
    fmt = _float_format(etype)
    largest, below = np.array([fmt.max_finite_bits, fmt.max_finite_bits - 1], np.uint8).view(etype.np_dtype)
    return float(largest) + (float(largest) - float(below)) / 2


def _float_format(etype: ElementType) -> FloatFormat:
    """The bit layout of float type `etype`."""
    fmt = etype.float_format
    assert fmt is not None, f"{etype.name} is not a float type"
    return fmt
