"""Printer of XLA's HLO text: the inverse of parser.py, in the style of XLA's module.hlo dumps.

    HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

    add.1 {
      a = f32[] parameter(0)
      ...
    }

    ENTRY main.2 {
      ...
    }

Names print without `%` sigils unless they need one. Computations print without
signatures (XLA's parser does not need them). Every attribute prints from its value by
the kind attributes.py gives it, as XLA prints that attribute; literals print as XLA
prints them (`{ { 0, 1 }, { 2, 3 } }`, `nan`, `-0`, pred arrays as `{1, 0}`).
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .attributes import attribute_kind
from .computation import HloComputation, predecessors_first
from .instruction import HloInstruction
from .shape import ArrayShape, Shape, TupleShape
from .types import LOW_PRECISION_FLOATS, ElementType

if TYPE_CHECKING:
    from .module import HloModule


@dataclass(frozen=True)
class FloatFormat:
    """Bit layout of a float type and the digits XLA prints it with (xla/util.cc
    RoundTripFpToString: `%.{short}g` when that round-trips, else `%.{long}g`, the long
    form being max_digits10). NaN payloads print (and parse) for the IEEE-like types only:
    the fn and fnuz types have one NaN per sign (or one NaN)."""
    uint_dtype: Any
    bits: int
    mantissa_bits: int
    short_digits: int | None
    long_digits: int
    nan_payloads: bool = True

    @property
    def quiet_nan_payload(self) -> int:
        return 1 << (self.mantissa_bits - 1)

    def nan_bits(self, negative: bool, payload: int) -> int:
        exponent_mask = ((1 << (self.bits - 1 - self.mantissa_bits)) - 1) << self.mantissa_bits
        return (int(negative) << (self.bits - 1)) | exponent_mask | payload


FLOAT_FORMATS = {
    "f16": FloatFormat(np.uint16, 16, 10, None, 5),
    "bf16": FloatFormat(np.uint16, 16, 7, None, 4),
    "f32": FloatFormat(np.uint32, 32, 23, 6, 9),
    "f64": FloatFormat(np.uint64, 64, 52, 15, 17),
}
for _t in LOW_PRECISION_FLOATS:
    # max_digits10 = 2 + floor(digits * log10(2)), digits counting the implicit bit (as
    # ml_dtypes' numeric_limits, which XLA prints with; it gives the four above as well).
    FLOAT_FORMATS[_t.name] = FloatFormat(np.uint8, _t.bits, _t.float_format.mantissa_bits, None,
                                         2 + (_t.float_format.mantissa_bits + 1) * 30103 // 100000,
                                         _t.float_format.nan == "ieee")

_BARE_NAME = re.compile(r"[A-Za-z_][\w.\-]*", re.A)
_KEYWORDS = frozenset({"ROOT", "ENTRY", "HloModule"})
# XLA prints constants with more elements as `{...}` unless asked to print them all.
_SMALL_CONSTANT_ELEMENTS = 10


def print_module(module: HloModule, *, print_metadata: bool = True, print_large_constants: bool = True) -> str:
    """The module as HLO text that parse_module reads back to the same module.

    print_metadata=False drops `metadata={...}`; print_large_constants=False prints constants
    of more than ten elements as `{...}` (XLA's short form: readable, but the values are lost).
    """
    attrs = dict(module.header_attrs)
    if module.entry is not None and module.entry.root is not None and "entry_computation_layout" in attrs:
        attrs["entry_computation_layout"] = entry_computation_layout(module.entry)
    header = "HloModule " + module.name + "".join(f", {k}={v}" for k, v in attrs.items())
    computations = list(module.computations)
    if module.entry is not None and module.entry not in computations:
        computations.append(module.entry)
    computations = _callees_first(computations)
    bodies = [print_computation(c, is_entry=c is module.entry, print_metadata=print_metadata,
                                print_large_constants=print_large_constants) for c in computations]
    # XLA ends every computation with a blank line, the last one included.
    return header + "\n\n" + "".join(body + "\n\n" for body in bodies)


def _callees_first(computations: list[HloComputation]) -> list[HloComputation]:
    """The module's order, but each computation after those it calls: XLA's parser needs a
    computation defined before its use, which a computation defined later in the text (or
    added by a pass) would break."""
    members = {id(c) for c in computations}

    def callees(comp: HloComputation) -> list[HloComputation]:
        return [c for i in comp.instructions for c in i.called_computations()
                if isinstance(c, HloComputation) and id(c) in members]

    return predecessors_first(computations, callees)


def entry_computation_layout(entry: HloComputation) -> str:
    """`{(parameter shapes)->result shape}` from the ENTRY computation as it is now, so the
    header never goes stale when passes change the signature's layouts."""
    params = TupleShape(tuple(p.shape for p in entry.parameters)).to_text()   # "(a, b, /*index=5*/f)"
    return "{" + params + "->" + entry.result_shape.to_text() + "}"


def print_computation(comp: HloComputation, *, is_entry: bool = False, print_metadata: bool = True,
                      print_large_constants: bool = True) -> str:
    lines = [("ENTRY " if is_entry else "") + name_text(comp.name) + " {"]
    root = comp.root if comp.root is not None else (comp.instructions[-1] if comp.instructions else None)
    for instr in _printing_order(comp):
        prefix = "  ROOT " if instr is root else "  "
        lines.append(prefix + print_instruction(instr, print_metadata=print_metadata,
                                                print_large_constants=print_large_constants))
    lines.append("}")
    return "\n".join(lines)


def _printing_order(comp: HloComputation) -> list[HloInstruction]:
    """The instruction list when every operand comes before its users (text order survives a
    round trip), else a post order: the text must define names before using them."""
    seen: set[int] = set()
    for instr in comp.instructions:
        if any(id(op) not in seen for op in instr.operands):
            return comp.post_order()
        seen.add(id(instr))
    return comp.instructions


def print_instruction(instr: HloInstruction, *, print_metadata: bool = True,
                      print_large_constants: bool = True) -> str:
    """`name = shape opcode(operands), attributes` (no ROOT, no indentation)."""
    if instr.opcode == "parameter":
        operands = str(instr.parameter_number)
    elif instr.opcode == "constant":
        operands = literal_text(instr.literal, instr.shape, print_large_constants)
    else:
        operands = ", ".join(name_text(op.name) for op in instr.operands)
    parts = [f"{name_text(instr.name)} = {instr.shape.to_text()} {instr.opcode}({operands})"]
    for key, value in instr.attrs.items():
        if key == "metadata" and not print_metadata:
            continue
        parts.append(f"{key}={attribute_text(key, value)}")
    return ", ".join(parts)


def name_text(name: str) -> str:
    """A name as text: bare when it is an identifier, else with its `%` sigil (the parser
    reads anything up to a delimiter after a sigil)."""
    if _BARE_NAME.fullmatch(name) and name not in _KEYWORDS:
        return name
    return "%" + name


# --- attributes, by kind ----------------------------------------------------------------

def attribute_text(name: str, value: Any) -> str:
    kind = attribute_kind(name)
    return _ATTRIBUTE_PRINTERS.get(kind, str)(value)


def _ints(v) -> str:
    return "{" + ",".join(str(int(x)) for x in v) + "}"


def _computation_name(c) -> str:
    return name_text(c if isinstance(c, str) else c.name)


def _slice(dims) -> str:
    # XLA omits the strides when every one is 1.
    with_stride = any(d.stride != 1 for d in dims)
    return "{" + ", ".join(f"[{d.start}:{d.limit}" + (f":{d.stride}" if with_stride else "") + "]"
                           for d in dims) + "}"


def _padding(dims) -> str:
    # XLA prints interior padding for every dimension or for none.
    with_interior = any(d.interior != 0 for d in dims)
    return "x".join(f"{d.low}_{d.high}" + (f"_{d.interior}" if with_interior else "") for d in dims)


def _window(dims) -> str:
    """Only the fields that differ from their defaults, in XLA's order (window_util::ToString)."""
    fields = []
    if dims:
        fields.append("size=" + "x".join(str(d.size) for d in dims))
    optional = (("stride", lambda d: d.stride, 1),
                ("pad", lambda d: f"{d.pad_low}_{d.pad_high}", "0_0"),
                ("lhs_dilate", lambda d: d.lhs_dilate, 1),
                ("rhs_dilate", lambda d: d.rhs_dilate, 1),
                ("rhs_reversal", lambda d: int(bool(d.reversal)), 0))
    for field, get, default in optional:
        values = [get(d) for d in dims]
        if any(v != default for v in values):
            fields.append(f"{field}=" + "x".join(str(v) for v in values))
    return "{" + " ".join(fields) + "}"


def _metadata(md: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, (tuple, list)):
            return "{" + ",".join(str(x) for x in v) + "}"
        return quote(str(v))
    return "{" + " ".join(f"{k}={value(v)}" for k, v in md.items()) + "}"


def quote(s: str) -> str:
    """A double-quoted string escaped as XLA's CEscape does: quotes, backslashes and control
    characters, and every byte of a non-ASCII character as octal."""
    out = []
    for byte in utf8_bytes(s):
        ch = chr(byte)
        if ch in "\"'\\":
            out.append("\\" + ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif byte < 0x20 or byte >= 0x7F:
            out.append(f"\\{byte:03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def utf8_bytes(s: str) -> bytes:
    """UTF-8 of `s`; bytes that came from invalid UTF-8 (surrogate escapes) go back as they
    were, and any other lone surrogate is passed through rather than refused."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


_ATTRIBUTE_PRINTERS: dict[str, Callable[[Any], str]] = {
    "ints": _ints,
    "int": lambda v: str(int(v)),
    "bool": lambda v: "true" if v else "false",
    "enum": str,
    "string": lambda v: quote(str(v)),
    "computation": _computation_name,
    "computations": lambda v: "{" + ", ".join(_computation_name(c) for c in v) + "}",
    "slice": _slice,
    "padding": _padding,
    "window": _window,
    "dim_labels": lambda v: v.to_labels(),
    "metadata": _metadata,
    "names": lambda v: "{" + ", ".join(name_text(n) for n in v) + "}",
    "raw": str,
}


# --- literals ---------------------------------------------------------------------------

def literal_text(literal: Any, shape: Shape, print_large_constants: bool = True) -> str:
    """A constant's literal as XLA prints it on one line (LiteralBase::PrintWithoutShapeOneline)."""
    if isinstance(shape, TupleShape):
        if not print_large_constants or literal is None:
            return "{...}"
        return "( " + ", ".join(literal_text(v, s, True) for v, s in zip(literal, shape.elements)) + " )"
    if literal is None:
        return "{...}"
    arr = np.asarray(literal)
    if arr.ndim and arr.size > _SMALL_CONSTANT_ELEMENTS and not print_large_constants:
        return "{...}"
    if arr.size == 0 and _empty_lists(arr.shape) > _SMALL_CONSTANT_ELEMENTS:
        # f32[50,49,48,47,46,0] would be 5.3 million empty braces; `{...}` (zeros, as the
        # parser reads it) loses nothing when there are no elements.
        return "{...}"
    etype = shape.dtype if isinstance(shape, ArrayShape) else None
    if etype is not None and arr.dtype != etype.np_dtype:   # e.g. a float64 array given for f32
        with np.errstate(all="ignore"):
            arr = arr.astype(etype.np_dtype)
    texts = element_texts(arr, etype)
    if arr.ndim == 0:
        return texts[0]
    return _nested_text(texts, arr.shape)


def _empty_lists(dims: tuple[int, ...]) -> int:
    """How many brace pairs the literal of a zero-element array of `dims` prints."""
    count, width = 0, 1
    for d in dims:
        count += width
        width *= d
        if width == 0:
            break
    return count


def element_texts(arr: np.ndarray, etype: ElementType | None) -> list[str]:
    """Each element of `arr` (row-major) as XLA prints it."""
    flat = arr.reshape(-1)
    kind = etype.kind if etype is not None else None
    if arr.dtype == np.bool_ or kind == "pred":
        if arr.ndim == 0:
            return ["true" if bool(flat[0]) else "false"]
        return ["1" if b else "0" for b in flat.tolist()]
    if arr.dtype.kind in "iu" or kind in ("signed", "unsigned"):
        return [str(int(v)) for v in flat.tolist()]
    name = etype.name if etype is not None else {2: "f16", 4: "f32", 8: "f64"}[arr.dtype.itemsize]
    return _float_texts(flat, name)


def _float_texts(flat: np.ndarray, type_name: str) -> list[str]:
    fmt = FLOAT_FORMATS[type_name]
    bits = flat.view(fmt.uint_dtype).tolist()
    with np.errstate(invalid="ignore"):   # signalling NaNs widen quietly; their bits print below
        values = flat.astype(np.float64).tolist()
    mantissa_mask = (1 << fmt.mantissa_bits) - 1
    sign_bit = 1 << (fmt.bits - 1)
    out = []
    for v, b in zip(values, bits):
        if v != v:
            payload = b & mantissa_mask
            text = ("-" if b & sign_bit else "") + "nan"
            if fmt.nan_payloads and payload != fmt.quiet_nan_payload:
                text += f"(0x{payload:x})"
            out.append(text)
        elif v in (float("inf"), float("-inf")):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(_shortest_of_two(v, fmt, type_name))
    return out


def _shortest_of_two(v: float, fmt: FloatFormat, type_name: str) -> str:
    if fmt.short_digits is not None:
        text = "%.*g" % (fmt.short_digits, v)   # noqa: UP031  (C's %.*g, as XLA prints floats)
        if _round_trips(text, v, type_name):
            return text
    return "%.*g" % (fmt.long_digits, v)   # noqa: UP031


def _round_trips(text: str, v: float, type_name: str) -> bool:
    parsed = float(text)
    if type_name == "f32":
        try:
            parsed = struct.unpack("f", struct.pack("f", parsed))[0]
        except OverflowError:
            return False
    return parsed == v


def _nested_text(texts: list[str], dims: tuple[int, ...]) -> str:
    """XLA's one-line layout of nested braces: `{ { 1, 2 }, { 3, 4 } }`, `{  }`, `{ {}, {} }`,
    and `/*iK=N*/` markers on the outer lists of arrays of rank > 3."""
    rank = len(dims)
    pieces: list[str] = []
    cursor = 0

    def brace_open(depth: int, index: list[int]) -> str:
        left = rank - depth              # dimensions not yet opened, this one included
        if rank == 1:
            return "{"
        if left == 1:
            return "{" + ("" if dims[depth] <= 1 else " ")
        if rank > 3 and index:
            return "{ " + f"/*i{len(index) - 1}={index[-1]}*/" + (" " if dims[depth] > 0 else "")
        return "{ "

    def brace_close(depth: int) -> str:
        left = rank - depth
        if rank == 1:
            return "}"
        if left == 1:
            return ("" if dims[depth] <= 1 else " ") + "}"
        return " }"

    def emit(depth: int, index: list[int]) -> None:
        nonlocal cursor
        if depth == rank:
            pieces.append(texts[cursor])
            cursor += 1
            return
        pieces.append(brace_open(depth, index))
        for i in range(dims[depth]):
            index.append(i)
            emit(depth + 1, index)
            index.pop()
            if i < dims[depth] - 1:
                pieces.append(", ")
        pieces.append(brace_close(depth))

    emit(0, [])
    return "".join(pieces)
