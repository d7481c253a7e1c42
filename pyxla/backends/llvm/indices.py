"""Index arithmetic in LLVM IR: a multi-index's offset in a buffer of a given layout, and back."""
from __future__ import annotations

import llvmlite.ir as ir

from .ir_types import i64


def linear_index(b: ir.IRBuilder, index: tuple, dims: tuple, minor_to_major: tuple) -> ir.Value:
    """The offset of `index` in a buffer of `dims` laid out minor_to_major."""
    offset = i64(0)
    stride = 1
    for d in minor_to_major:
        if dims[d] != 1:
            offset = b.add(offset, b.mul(index[d], i64(stride))) if stride != 1 else b.add(offset, index[d])
        stride *= dims[d]
    return offset


def delinearize(b: ir.IRBuilder, offset: ir.Value, dims: tuple, minor_to_major: tuple) -> tuple:
    index = [i64(0)] * len(dims)
    for d in minor_to_major:
        if dims[d] == 1:
            continue
        index[d] = b.urem(offset, i64(dims[d]))
        offset = b.udiv(offset, i64(dims[d]))
    return tuple(index)
