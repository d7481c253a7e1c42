"""`dense<...>` literals as NumPy arrays of a pyxla element type.

MLIR writes a dense literal as nested lists (`[[1, 2], [3, 4]]`), a splat (one value for the
whole tensor), or a hex string of the raw little-endian bytes (`"0x0000803F..."`, also a
splat when it holds one element). Float elements are decimals or, for NaN, infinities and
exact bit patterns, hex integers of the element's bits (`0x7FC00000`). Integers print as
decimals (unsigned types unsigned); i1 as true/false.
"""
from __future__ import annotations

import re

import numpy as np

from ..shape import ArrayShape

_TOKEN = re.compile(r"\s*(?:(\[)|(\])|(,)|(\()|([-+]?0x[0-9A-Fa-f]+|true|false|[-+]?inf|nan"
                    r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))", re.A)


class _Bits(int):
    """A float element written as the hex of its bits."""


class DenseError(ValueError):
    """Raised with the offset, inside the literal's text, of the problem."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


def dense_array(body: str, shape: ArrayShape) -> np.ndarray:
    """The value of `dense<body> : shape`."""
    text = body.strip()
    if text.startswith('"'):
        return _hex_bytes(text.strip('"'), shape)
    items, nested = _tokens(body)
    values = [_element(tok, shape, off) for tok, off in items]
    etype = shape.dtype
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    if not nested and len(values) == 1:
        return np.full(shape.dims, _cast(arr, etype)[0], dtype=etype.np_dtype)
    if len(values) != shape.size:
        raise DenseError(f"dense literal has {len(values)} elements, {shape.to_text(False)} needs {shape.size}")
    if not nested and shape.rank != 0:
        raise DenseError(f"a dense literal of {shape.to_text(False)} needs brackets")
    return _cast(arr, etype).reshape(shape.dims)


def _tokens(body: str) -> tuple[list[tuple[str, int]], bool]:
    out: list[tuple[str, int]] = []
    pos, n, nested, depth = 0, len(body), False, 0
    while True:
        while pos < n and body[pos].isspace():
            pos += 1
        if pos >= n:
            break
        m = _TOKEN.match(body, pos)
        if not m:
            raise DenseError(f"unexpected {body[pos:pos + 10]!r} in the dense literal", pos)
        if m.group(4):
            raise DenseError("complex values are not supported by pyxla", pos)
        if m.group(1):
            nested, depth = True, depth + 1
        elif m.group(2):
            depth -= 1
        elif m.group(5):
            out.append((m.group(5), m.start(5)))
        pos = m.end()
    if depth:
        raise DenseError("unbalanced brackets in the dense literal", 0)
    return out, nested


def _element(tok: str, shape: ArrayShape, offset: int):
    etype = shape.dtype
    if etype.kind == "pred":
        if tok in ("true", "false"):
            return tok == "true"
        if tok in ("0", "1"):
            return tok == "1"
        raise DenseError(f"an i1 element is true or false, found {tok!r}", offset)
    if tok in ("true", "false"):
        raise DenseError(f"a {etype.name} element cannot be {tok}", offset)
    if etype.is_integral:
        try:
            v = int(tok, 16) if "0x" in tok else int(tok)
        except ValueError:
            raise DenseError(f"expected an integer for {etype.name}, found {tok!r}", offset) from None
        return v % (1 << etype.bits)   # two's complement bits; _cast gives the type its sign
    if "0x" in tok:
        return _Bits(int(tok, 16))
    return float(tok)


def _cast(arr: np.ndarray, etype) -> np.ndarray:
    """Object elements (bools, ints as unsigned bits, floats, _Bits) to etype's dtype."""
    if etype.kind == "pred":
        return arr.astype(np.bool_)
    if etype.is_integral:
        bits = np.array([int(v) for v in arr], dtype=np.uint64)
        if etype.bits < 8:
            signed = etype.name.startswith("s")
            vals = [int(v) - (1 << etype.bits) if signed and int(v) >= 1 << (etype.bits - 1) else int(v)
                    for v in bits]
            return np.array(vals, dtype=np.int64).astype(etype.np_dtype)
        width = max(8, etype.bits)
        unsigned = bits.astype(np.dtype(f"u{width // 8}"))
        return unsigned.view(etype.np_dtype)
    out = np.empty(arr.shape, dtype=etype.np_dtype)
    uint = np.dtype(f"u{max(1, etype.bits // 8)}")
    for i, v in enumerate(arr):
        if isinstance(v, _Bits):
            out[i] = np.array([int(v)], dtype=uint).view(etype.np_dtype)[0]
        else:
            wide = np.float64(v)
            out[i] = wide if etype.name == "f64" else np.float32(wide).astype(etype.np_dtype)
    return out


def _hex_bytes(hex_text: str, shape: ArrayShape) -> np.ndarray:
    if not hex_text.startswith("0x"):
        raise DenseError("a quoted dense literal must be hex bytes '0x...'")
    try:
        raw = bytes.fromhex(hex_text[2:])
    except ValueError:
        raise DenseError("bad hex digits in the dense literal") from None
    etype = shape.dtype
    itemsize = np.dtype(etype.np_dtype).itemsize
    if etype.kind == "pred":
        arr = np.frombuffer(raw, dtype=np.uint8).astype(np.bool_)
    else:
        arr = np.frombuffer(raw, dtype=np.dtype(etype.np_dtype).newbyteorder("<")).astype(etype.np_dtype)
    if arr.size == 1 and shape.size != 1:
        return np.full(shape.dims, arr[0], dtype=etype.np_dtype)
    if arr.size != shape.size:
        raise DenseError(f"hex literal holds {len(raw) // max(1, itemsize)} elements, "
                         f"{shape.to_text(False)} needs {shape.size}")
    return arr.reshape(shape.dims).copy()
