"""Element types of HLO arrays: the twenty-five XLA primitive types pyxla supports.

Each type knows its NumPy storage dtype (bf16 and the low-precision types come from
ml_dtypes), its width and its kind, and a float type its bit layout, so shape inference,
the evaluator and the code generators never switch on type names.

The low-precision types (8- and 4-bit floats, 4- and 2-bit integers) are storage types:
one element per byte in arrays (as ml_dtypes stores them: the value in the low bits, the
high bits zero), arithmetic on the floats in f32 as for f16 and bf16.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

if TYPE_CHECKING:   # (numpy.typing takes milliseconds to import: annotations only)
    from numpy.typing import DTypeLike


@dataclass(frozen=True)
class FloatFormat:
    """The bit layout of a float type: a sign bit, then `exponent_bits` and `mantissa_bits`,
    the exponent biased by `bias`, and which encodings are special (`nan`):

    - "ieee": an all-ones exponent is inf (zero mantissa) or NaN (any other mantissa);
    - "fn": no inf; NaN is the all-ones pattern of either sign (f8e4m3fn);
    - "fnuz": no inf and no negative zero; NaN is the negative-zero pattern, the sign bit
      alone (f8e4m3fnuz, f8e5m2fnuz, f8e4m3b11fnuz);
    - "none": finite values only (f4e2m1fn).
    """
    exponent_bits: int
    mantissa_bits: int
    bias: int
    nan: str

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def max_finite_bits(self) -> int:
        """The bit pattern of the largest finite value (sign bit clear)."""
        all_ones = (1 << (self.bits - 1)) - 1
        inf = ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        return {"ieee": inf - 1, "fn": all_ones - 1, "fnuz": all_ones, "none": all_ones}[self.nan]


@dataclass(frozen=True)
class ElementType:
    name: str          # XLA's spelling: "f32", "pred", ...
    np_dtype: np.dtype  # how the evaluator stores one element
    bits: int
    kind: str          # "pred", "signed", "unsigned" or "float"
    float_format: FloatFormat | None = None   # floats only

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

    @property
    def computes_in_f32(self) -> bool:
        """Floats narrower than f32 (f16, bf16, the 8- and 4-bit floats) are storage types:
        arithmetic on them runs in f32 and each result is rounded back to the type."""
        return self.is_float and self.bits < 32

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


def _t(name, dtype, bits, kind):
    return ElementType(name, np.dtype(dtype), bits, kind)


def _float(name, dtype, nan="ieee"):
    """A float type whose layout ml_dtypes.finfo describes."""
    info = ml_dtypes.finfo(dtype)
    fmt = FloatFormat(int(info.nexp), int(info.nmant), 1 - int(info.minexp), nan)
    return ElementType(name, np.dtype(dtype), fmt.bits, "float", fmt)


PRED = _t("pred", np.bool_, 8, "pred")
S2 = _t("s2", ml_dtypes.int2, 2, "signed")
S4 = _t("s4", ml_dtypes.int4, 4, "signed")
S8 = _t("s8", np.int8, 8, "signed")
S16 = _t("s16", np.int16, 16, "signed")
S32 = _t("s32", np.int32, 32, "signed")
S64 = _t("s64", np.int64, 64, "signed")
U2 = _t("u2", ml_dtypes.uint2, 2, "unsigned")
U4 = _t("u4", ml_dtypes.uint4, 4, "unsigned")
U8 = _t("u8", np.uint8, 8, "unsigned")
U16 = _t("u16", np.uint16, 16, "unsigned")
U32 = _t("u32", np.uint32, 32, "unsigned")
U64 = _t("u64", np.uint64, 64, "unsigned")
F4E2M1FN = _float("f4e2m1fn", ml_dtypes.float4_e2m1fn, "none")
F8E3M4 = _float("f8e3m4", ml_dtypes.float8_e3m4)
F8E4M3 = _float("f8e4m3", ml_dtypes.float8_e4m3)
F8E4M3FN = _float("f8e4m3fn", ml_dtypes.float8_e4m3fn, "fn")
F8E4M3FNUZ = _float("f8e4m3fnuz", ml_dtypes.float8_e4m3fnuz, "fnuz")
F8E4M3B11FNUZ = _float("f8e4m3b11fnuz", ml_dtypes.float8_e4m3b11fnuz, "fnuz")
F8E5M2 = _float("f8e5m2", ml_dtypes.float8_e5m2)
F8E5M2FNUZ = _float("f8e5m2fnuz", ml_dtypes.float8_e5m2fnuz, "fnuz")
F16 = _float("f16", np.float16)
BF16 = _float("bf16", ml_dtypes.bfloat16)
F32 = _float("f32", np.float32)
F64 = _float("f64", np.float64)

# The 8- and 4-bit floats, in XLA's order of its PrimitiveType enum.
LOW_PRECISION_FLOATS = (F8E5M2, F8E4M3, F8E4M3FN, F8E4M3B11FNUZ, F8E3M4, F8E5M2FNUZ, F8E4M3FNUZ, F4E2M1FN)

ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t for t in (PRED, S2, S4, S8, S16, S32, S64, U2, U4, U8, U16, U32, U64, F16, BF16, F32, F64,
                        *LOW_PRECISION_FLOATS)
}
_BY_DTYPE = {t.np_dtype: t for t in ELEMENT_TYPES.values()}


def element_type(name: str) -> ElementType:
    """The element type spelled `name` in HLO text; KeyError names what was asked for."""
    try:
        return ELEMENT_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown element type {name!r}; known: {', '.join(ELEMENT_TYPES)}") from None


def from_numpy_dtype(dtype: DTypeLike) -> ElementType:
    """The element type that stores arrays of NumPy `dtype`."""
    dtype = np.dtype(dtype)
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        raise TypeError(f"NumPy dtype {dtype} has no HLO element type") from None


def unsigned_of_width(bits: int) -> ElementType:
    return {2: U2, 4: U4, 8: U8, 16: U16, 32: U32, 64: U64}[bits]


def signed_of_width(bits: int) -> ElementType:
    return {2: S2, 4: S4, 8: S8, 16: S16, 32: S32, 64: S64}[bits]


def integer_limits(t: ElementType) -> tuple[int, int]:
    """The least and greatest value of an integer type (np.iinfo does not know s4/u4/s2/u2)."""
    info = ml_dtypes.iinfo(t.np_dtype)
    return int(info.min), int(info.max)
