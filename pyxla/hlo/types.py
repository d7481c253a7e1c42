"""Element types of HLO arrays: the thirteen XLA primitive types pyxla supports.

Each type knows its NumPy storage dtype (bf16 comes from ml_dtypes), its width and
its kind, so shape inference and the evaluator never switch on type names.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class ElementType:
    name: str          # XLA's spelling: "f32", "pred", ...
    np_dtype: np.dtype  # how the evaluator stores one element
    bits: int
    kind: str          # "pred", "signed", "unsigned" or "float"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("signed", "unsigned")

    @property
    def is_signed(self) -> bool:
        return self.kind == "signed"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "unsigned"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


def _t(name, dtype, bits, kind):
    return ElementType(name, np.dtype(dtype), bits, kind)


PRED = _t("pred", np.bool_, 8, "pred")
S8 = _t("s8", np.int8, 8, "signed")
S16 = _t("s16", np.int16, 16, "signed")
S32 = _t("s32", np.int32, 32, "signed")
S64 = _t("s64", np.int64, 64, "signed")
U8 = _t("u8", np.uint8, 8, "unsigned")
U16 = _t("u16", np.uint16, 16, "unsigned")
U32 = _t("u32", np.uint32, 32, "unsigned")
U64 = _t("u64", np.uint64, 64, "unsigned")
F16 = _t("f16", np.float16, 16, "float")
BF16 = _t("bf16", ml_dtypes.bfloat16, 16, "float")
F32 = _t("f32", np.float32, 32, "float")
F64 = _t("f64", np.float64, 64, "float")

ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t for t in (PRED, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64)
}
_BY_DTYPE = {t.np_dtype: t for t in ELEMENT_TYPES.values()}


def element_type(name: str) -> ElementType:
    """The element type spelled `name` in HLO text; KeyError names what was asked for."""
    try:
        return ELEMENT_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown element type {name!r}; known: {', '.join(ELEMENT_TYPES)}") from None


def from_numpy_dtype(dtype) -> ElementType:
    """The element type that stores arrays of NumPy `dtype`."""
    dtype = np.dtype(dtype)
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        raise TypeError(f"NumPy dtype {dtype} has no HLO element type") from None


def unsigned_of_width(bits: int) -> ElementType:
    return {8: U8, 16: U16, 32: U32, 64: U64}[bits]


def signed_of_width(bits: int) -> ElementType:
    return {8: S8, 16: S16, 32: S32, 64: S64}[bits]
