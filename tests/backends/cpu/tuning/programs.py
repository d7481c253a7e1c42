"""Small programs whose kernels have something to tune, and their float64 references."""
import numpy as np

CONV = """HloModule conv
ENTRY e {
  x = f32[2,16,16,16]{3,2,1,0} parameter(0)
  w = f32[3,3,16,16]{3,2,1,0} parameter(1)
  ROOT c = f32[2,16,16,16]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
"""

DOT = """HloModule dot
ENTRY e {
  a = f32[128,256]{1,0} parameter(0)
  b = f32[256,96]{1,0} parameter(1)
  ROOT d = f32[128,96]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def conv_inputs(rng):
    return [rng.standard_normal((2, 16, 16, 16)).astype(np.float32),
            rng.standard_normal((3, 3, 16, 16)).astype(np.float32)]


def conv_reference(x, w):
    """NHWC 3x3 SAME convolution in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, h, wd, _ = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, wd, w.shape[3]))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,co->nhwo", xp[:, i:i + h, j:j + wd, :], w[i, j])
    return out


def dot_inputs(rng):
    return [rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((256, 96)).astype(np.float32)]


def compile_text(text):
    from pyxla.backends.cpu import BACKEND
    from pyxla.hlo.stablehlo import parse_program
    return BACKEND.compile(parse_program(text))


PLANES = """HloModule planes
ENTRY e {
  x = f32[2,32,12,12]{3,2,1,0} parameter(0)
  w = f32[48,32,1,1]{3,2,1,0} parameter(1)
  ROOT c = f32[2,48,12,12]{3,2,1,0} convolution(x, w), window={size=1x1}, dim_labels=bf01_oi01->bf01
}
"""


def planes_inputs(rng):
    return [rng.standard_normal((2, 32, 12, 12)).astype(np.float32),
            rng.standard_normal((48, 32, 1, 1)).astype(np.float32)]


def planes_reference(x, w):
    """NCHW 1x1 convolution in float64."""
    return np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
