"""BLAS for dot: SciPy's cython_blas exports sgemm/dgemm function pointers, which the
generated code calls directly (column-major Fortran convention, every argument by pointer)."""
from __future__ import annotations

import ctypes
from functools import cache

import llvmlite.ir as ir

from ...llvm.ir_types import F32, F64, I8, I32, PTR, VOID, FunctionPointer, i64
from ..runtime.native_target import aot_emission
from ..runtime.parallel import emit_yield_cores

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@cache
def gemm_address(dtype_name: str) -> int:
    from scipy.linalg import cython_blas
    capsule = cython_blas.__pyx_capi__[{"f32": "sgemm", "f64": "dgemm"}[dtype_name]]
    return _get_pointer(capsule, _get_name(capsule))


def emit_gemm(b: ir.IRBuilder, dtype_name: str, c_ptr, a_ptr, b_ptr, m: int, n: int, k: int,
              a_transposed: bool, b_transposed: bool, beta: float = 0.0) -> None:
    """C[m,n] = A[m,k] @ B[k,n] (row-major; A given as [k,m] when a_transposed, B as [n,k]
    when b_transposed). Row-major C = A B is column-major C^T = B^T A^T: swap the operands."""
    if aot_emission() is not None:
        raise RuntimeError("BLAS is not part of an object file: an AOT build calls pyxla's own GEMM")
    scalar = F32 if dtype_name == "f32" else F64
    fnty = ir.FunctionType(VOID, [PTR] * 13)
    fn = b.inttoptr(i64(gemm_address(dtype_name)), PTR)

    def cell(ty, value):
        p = b.alloca(ty)
        b.store(ir.Constant(ty, value), p)
        return p

    trans_b = cell(I8, ord("T") if b_transposed else ord("N"))
    trans_a = cell(I8, ord("T") if a_transposed else ord("N"))
    lda = k if not a_transposed else m
    ldb = n if not b_transposed else k
    args = [trans_b, trans_a, cell(I32, n), cell(I32, m), cell(I32, k), cell(scalar, 1.0),
            b_ptr, cell(I32, ldb), a_ptr, cell(I32, lda), cell(scalar, beta), c_ptr, cell(I32, n)]
    emit_yield_cores(b)   # BLAS runs threads of its own: pyxla's workers sleep rather than spin against them
    b.call(FunctionPointer(fn, fnty), args)
