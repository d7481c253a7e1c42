"""Index arithmetic in LLVM IR: a multi-index's offset in a buffer of a given layout, and back;
and an element of a buffer loaded or stored at a multi-index."""
from __future__ import annotations

import llvmlite.ir as ir

from ...hlo.shape import ArrayShape
from .ir_types import i64, storage_type, to_compute, to_storage


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


def load_element(b: ir.IRBuilder, ptr: ir.Value, shape: ArrayShape, index: tuple) -> ir.Value:
    """The element of a buffer laid out as `shape` at `index`, as its compute type."""
    offset = linear_index(b, index, shape.dims, shape.minor_to_major) if shape.rank else i64(0)
    st = storage_type(shape.dtype)
    return to_compute(b, b.load(b.gep(ptr, [offset], source_etype=st), typ=st), shape.dtype)


def store_element(b: ir.IRBuilder, ptr: ir.Value, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
    """`value` (its compute type) stored as the element of a buffer laid out as `shape` at `index`."""
    offset = linear_index(b, index, shape.dims, shape.minor_to_major) if shape.rank else i64(0)
    st = storage_type(shape.dtype)
    b.store(to_storage(b, value, shape.dtype), b.gep(ptr, [offset], source_etype=st))
