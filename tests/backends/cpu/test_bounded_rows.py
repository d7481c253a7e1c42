"""Kernels of a padded module that stop at the run-time row count (`bounded_rows`): loop
kernels, row reductions, pyxla's GEMM and its epilogue, serial and split across threads.

Results are checked on the valid rows against NumPy in float64 with the padding of the
arguments filled with NaN (any use of it shows); that the padding rows are really skipped
is checked on the output buffer itself: an output of REUSED_OUTPUT_BYTES or more is handed
out again once dropped, so rows a call leaves alone still hold the previous call's values."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
import pyxla.numpy as pnp
from pyxla.backends.cpu import CpuBackend
from pyxla.backends.cpu.codegen import ModuleCodegen
from pyxla.backends.cpu.runtime.executable import REUSED_OUTPUT_BYTES
from pyxla.compiler import compile_module
from pyxla.hlo.builder import HloBuilder
from pyxla.hlo.dims import DimExpr, Symbol
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import F32
from pyxla.passes.dynamic_padder import pad_to_bounds


def _softmax_rows(x):
    return pyxla.nn.softmax(x, axis=-1)


def _np_softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _mlp(x, w1, b1, w2):
    return pnp.maximum(x @ w1 + b1, 0.0) @ w2


def _np_mlp(x, w1, b1, w2):
    return np.maximum(x @ w1 + b1, 0.0) @ w2


def _merged_rows(x, w):
    return pnp.exp(x.reshape(x.shape[0] * 2, -1) @ w)   # rows 2*b


def _attention(x):
    """(heads, b, 32): scores (heads, b, b), softmax over the last, weighted sum of rows."""
    p = pyxla.nn.softmax(x @ pnp.transpose(x, (0, 2, 1)) * 0.125, axis=-1)
    return p @ x


def _np_attention(x):
    return _np_softmax_rows(x @ x.transpose(0, 2, 1) * 0.125) @ x


CASES = {
    # name: (function, NumPy reference, shape of x with None for b, other arguments' shapes, bound)
    "small loop": (lambda x: pnp.tanh(x) * 2.0 + 1.0, lambda x: np.tanh(x) * 2.0 + 1.0, (None, 8), [], 16),
    "parallel loop": (lambda x: pnp.tanh(x) * 2.0 + 1.0, lambda x: np.tanh(x) * 2.0 + 1.0, (None, 700), [], 256),
    "row softmax": (_softmax_rows, _np_softmax_rows, (None, 300), [], 128),
    "mlp": (_mlp, _np_mlp, (None, 256), [(256, 512), (512,), (512, 24)], 128),
    "merged rows": (_merged_rows, lambda x, w: np.exp(x.reshape(x.shape[0] * 2, -1) @ w), (None, 2, 96),
                    [(96, 64)], 64),
    # bounded along dimension 1: split before it (16 outer), and across it (2 outer)
    "inner loop, outer split": (lambda x: pnp.tanh(x) + 1.0, lambda x: np.tanh(x) + 1.0, (16, None, 512), [], 64),
    "inner loop, split across": (lambda x: pnp.tanh(x) + 1.0, lambda x: np.tanh(x) + 1.0, (2, None, 2048), [], 64),
    "attention": (_attention, _np_attention, (4, None, 32), [], 128),
    "rows b - 1": (lambda x: pnp.tanh(x[1:] - x[:-1]), lambda x: np.tanh(x[1:] - x[:-1]), (None, 40), [], 32),
}


def _at(shape, size):
    return tuple(size if n is None else n for n in shape)


def _bucket(fn, shape, others, bound, rng):
    weights = [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in others]
    spec = ", ".join("b" if n is None else "_" for n in shape)
    f = pyxla.jit(fn, polymorphic_shapes=(spec,) + (None,) * len(others),
                  shape_constraints=(f"b <= {bound}",), size_buckets={"b": (bound,)})
    full = rng.standard_normal(_at(shape, bound)).astype(np.float32)
    return f.bucket_executable(full, *weights), weights


def _padded(rng, shape, bound, size, fill=np.nan):
    values = rng.standard_normal(_at(shape, size)).astype(np.float32)
    buffer = np.full(_at(shape, bound), fill, np.float32)
    buffer[tuple(slice(0, n) for n in values.shape)] = values
    return values, buffer


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_rows_are_exact_with_nan_padding(name):
    fn, reference, shape, others, bound = CASES[name]
    rng = np.random.default_rng(7)
    bucket, weights = _bucket(fn, shape, others, bound, rng)
    assert "bounded_rows=" in bucket.compiled.as_text()
    for size in (1, 3, bound // 2 + 1, bound - 1, bound):
        values, buffer = _padded(rng, shape, bound, size)
        (out,) = bucket.compiled.executable.run_flat([buffer, *weights, np.int32(size)])
        want = reference(values.astype(np.float64), *[w.astype(np.float64) for w in weights])
        valid = out[tuple(slice(0, n) for n in want.shape)]
        assert np.isfinite(valid).all(), (name, size)
        np.testing.assert_allclose(valid, want, rtol=2e-5, atol=2e-5, err_msg=f"{name} at size {size}")


SKIPPED = {
    # name: (function, shape of x with None for b, other arguments' shapes, bound): outputs
    # of at least 1 MiB
    "loop": (lambda x: pnp.tanh(x) * 2.0 + 1.0, (None, 1024), [], 256),
    "row softmax": (_softmax_rows, (None, 1024), [], 256),
    "gemm with epilogue": (lambda x, w: pnp.maximum(x @ w, 0.0) + 0.5, (None, 64), [(64, 1024)], 256),
    "loop along dimension 1": (lambda x: pnp.tanh(x) * 2.0 + 1.0, (4, None, 256), [], 256),
}


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_padding_rows_of_the_output_are_left_as_they_were(name):
    fn, shape, others, bound = SKIPPED[name]
    rng = np.random.default_rng(11)
    bucket, weights = _bucket(fn, shape, others, bound, rng)
    run = bucket.compiled.executable.run_flat
    _, whole = _padded(rng, shape, bound, bound)
    (first,) = run([whole, *weights, np.int32(bound)])
    assert first.nbytes >= REUSED_OUTPUT_BYTES
    before, address = first.copy(), first.ctypes.data
    assert np.isfinite(before).all()
    del first
    size = 5
    _, buffer = _padded(rng, shape, bound, size)   # NaN padding: computing it would give NaN rows
    (second,) = run([buffer, *weights, np.int32(size)])
    assert second.ctypes.data == address, "the output buffer was not reused, so this test shows nothing"
    d = shape.index(None)
    valid, padding = (tuple([slice(None)] * d + [s]) for s in (slice(0, size), slice(size, None)))
    np.testing.assert_array_equal(second[padding], before[padding])
    assert not np.array_equal(second[valid], before[valid])


def _llvm_ir(module) -> str:
    backend = CpuBackend()
    work = module.clone()
    backend.prepare(work)
    compiled = compile_module(work)
    return ModuleCodegen(compiled.module, compiled.buffers).emit()


def _tanh_module(rows):
    hb = HloBuilder("m")
    x = hb.parameter(ArrayShape(F32, (rows, 64)), "x")
    return hb.module(hb.op("tanh", hb.op("exponential", x)))


def test_the_kernel_reads_its_bound_at_entry_and_static_kernels_do_not():
    b = DimExpr.symbol(Symbol("b"))
    padded = pad_to_bounds(_tanh_module(b), {"b": 32})
    text = _llvm_ir(padded.module)
    kernels = [k for k in text.split("\ndefine ") if k.startswith("internal void @\"kernel.") or
               k.startswith("internal void @kernel.")]
    bounded = [k for k in kernels if "%\"rows.bound\"" in k or "%rows.bound" in k]
    assert len(bounded) == 1, text
    assert "load i32" in bounded[0].split("\n\n")[0] or "load i32" in bounded[0]
    assert "rows.bound" not in _llvm_ir(_tanh_module(32))
