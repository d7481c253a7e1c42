"""Fourier transforms: DFT and STFT.

ONNX holds complex signals as a last dimension of 2 (real, imaginary), or 1 for a real
signal. A transform along one axis is a matrix product with the DFT matrix, made in NumPy
when the model is loaded (lengths are static), as two real products: (P + iQ)(a + ib) =
(Pa - Qb) + i(Qa + Pb).
"""
from __future__ import annotations

import numpy as np

from ..registry import converter, known
from .common import axis_of, shape_of


def _matmul_last(xp, x, m):
    """x (..., j) times m^T: (..., k)."""
    return xp.matmul(x, np.ascontiguousarray(m.T).astype(x.dtype))


def _dft_matrix(n_in: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """Complex (bins, n_in): the signal truncated or zero-padded to n, transformed."""
    k = np.arange(n // 2 + 1 if onesided else n)[:, None]
    j = np.arange(min(n_in, n))[None, :]
    m = np.exp((2j if inverse else -2j) * np.pi * k * j / n)
    if inverse:
        m = m / n
    out = np.zeros((k.shape[0], n_in), np.complex128)
    out[:, :j.shape[1]] = m
    return out


def _irfft_matrices(m_in: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Real (n, m_in) matrices A, B with irfft(re + i im) = A re + B im (NumPy's irfft: the
    one-sided spectrum truncated or padded to n//2 + 1 bins; the imaginary parts of the
    zero and Nyquist bins do not count)."""
    bins = n // 2 + 1
    t = np.arange(n)[:, None]
    k = np.arange(min(m_in, bins))[None, :]
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
    theta = 2 * np.pi * k * t / n
    a, b = np.zeros((n, m_in)), np.zeros((n, m_in))
    a[:, :k.shape[1]] = weight * np.cos(theta) / n
    b[:, :k.shape[1]] = -weight * np.sin(theta) / n
    b[:, 0] = 0.0
    if n % 2 == 0 and n // 2 < m_in:
        b[:, n // 2] = 0.0
    return a, b


def dft(ctx, xp, x, axis: int, n: int | None, inverse: bool, onesided: bool):
    """ONNX's DFT of x (..., 1 or 2) along `axis` (not the last)."""
    dims = shape_of(x)
    if dims[-1] not in (1, 2):
        raise ctx.error(f"the last dimension holds {dims[-1]} values, not 1 (real) or 2 (complex)")
    last = len(dims) - 2
    moved = xp.moveaxis(x, axis, last) if axis != last else x
    re = moved[..., 0]
    im = moved[..., 1] if dims[-1] == 2 else None
    n_in = shape_of(re)[-1]
    if inverse and onesided:
        n = 2 * (n_in - 1) if n is None else n
        a, b = _irfft_matrices(n_in, n)
        out = _matmul_last(xp, re, a)
        if im is not None:
            out = xp.add(out, _matmul_last(xp, im, b))
        out = xp.expand_dims(out, -1)
    else:
        n = n_in if n is None else n
        m = _dft_matrix(n_in, n, inverse, onesided)
        p, q = m.real, m.imag
        out_re, out_im = _matmul_last(xp, re, p), _matmul_last(xp, re, q)
        if im is not None:
            out_re = xp.subtract(out_re, _matmul_last(xp, im, q))
            out_im = xp.add(out_im, _matmul_last(xp, im, p))
        out = xp.stack([out_re, out_im], axis=-1)
    return xp.moveaxis(out, last, axis) if axis != last else out


@converter("DFT", since=17)
def dft_op(ctx, x, dft_length=None, axis=None):
    rank = len(shape_of(x))
    if ctx.opset >= 20:
        axis = -2 if axis is None else int(known(ctx, axis, "axis").reshape(()))
    else:
        axis = ctx.attr("axis", 1)
    axis = axis_of(ctx, axis, rank)
    if axis == rank - 1:
        raise ctx.error("axis is the last dimension, which holds the real and imaginary parts")
    n = None if dft_length is None else int(known(ctx, dft_length, "dft_length").reshape(()))
    return dft(ctx, ctx.xp, x, axis, n, bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0)))


@converter("STFT", since=17)
def stft(ctx, signal, frame_step, window=None, frame_length=None):
    xp = ctx.xp
    step = int(known(ctx, frame_step, "frame_step").reshape(()))
    if frame_length is not None:
        length = int(known(ctx, frame_length, "frame_length").reshape(()))
    elif window is not None:
        length = shape_of(window)[0]
    else:
        raise ctx.error("needs a window or a frame_length")
    onesided = bool(ctx.attr("onesided", 1))
    batch, total, parts = shape_of(signal)
    frames = (total - length) // step + 1
    positions = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = xp.take(signal, positions, axis=1)                # (batch, frames, length, parts)
    if window is not None:
        framed = xp.multiply(framed, xp.reshape(window, (1, 1, length, 1)))
    return dft(ctx, xp, framed, 2, None, False, onesided)
