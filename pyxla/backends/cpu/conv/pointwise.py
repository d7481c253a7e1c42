"""Pointwise (1x1) convolution of one image as pyxla's own GEMM (f32, f64), alone or with
its elementwise epilogue.

With a 1x1 window, stride 1, no padding or dilation, one group and a batch of one, every
output position is the kernel's [input features, output features] matrix applied to the
input's features there. When input and output hold their features before their spatial
dimensions (NCHW) or after them (NHWC), in the default layout, the convolution is a matrix
product of the buffers as they lie:

    NCHW: out[O, HW] = W^T[O, C] x[C, HW]        NHWC: out[HW, O] = x[HW, C] W[C, O]

so it runs as dot/tasks.py's blocks on the worker pool, each block by the GEMM kernel with
the epilogue applied while the block is in cache. The register tiles of conv/tiles.py would
first copy an NCHW input to NHWC and write the output back feature by feature. NHWC
convolutions (all of a model's, after passes/convolution_layout.py) mostly go to those
tiles instead: see SHALLOW_DEPTH.
"""
from __future__ import annotations

from math import prod

from ....hlo.attributes import features_first
from ....hlo.instruction import HloInstruction
from ....hlo.shape import ArrayShape, default_layout
from ...llvm.convolution import ConvGeometry
from ...llvm.indices import delinearize
from ...llvm.ir_types import etype, i64
from ..codegen import GEMV_PARALLEL_MIN_WORK, TASKS_PER_THREAD
from ..dot.gemv import emit_gemv
from ..dot.tasks import emit_dot_tasks
from ..runtime.parallel import worker_pool
from .tiles import EMITTERS, conv_operand

# NHWC convolutions go to the register tiles (conv/tiles.py), which read a constant kernel
# in panel order and scale across threads where this GEMM packs the kernel on every call
# (ResNet-50's 2048 -> 512 at 7x7: 562 -> 392 us, 1024 -> 256 at 14x14: 443 -> 368 us;
# ResNet-50 34.5 -> 30.5 ms). But for a shallow expansion (at most SHALLOW_DEPTH input
# features into EXPANSION times as many outputs) the GEMM, writing its product in place, is
# faster (64 -> 256 at 56x56: 329 against 372 us).
SHALLOW_DEPTH = 64
EXPANSION = 4


def row_major_float(conv: HloInstruction) -> bool:
    """Whether `conv` is f32 or f64 throughout, with every array row-major and a non-empty
    result: what the GEMM and plane kernels read by strides."""
    t = etype(conv)
    if t.name not in ("f32", "f64") or any(etype(op) != t for op in conv.operands):
        return False
    return all(s.is_row_major for s in (*(op.shape for op in conv.operands), conv.shape)) and conv.shape.size > 0


def pointwise(g: ConvGeometry) -> bool:
    """A 1x1 window with no padding, dilation or reversal (a stride is allowed)."""
    return all(w.size == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1 and w.rhs_dilate == 1
               and not w.reversal for w in g.window)


def fits(conv: HloInstruction) -> bool:
    if not row_major_float(conv) or worker_pool() is None:
        return False
    x = conv.operands[0]
    g = ConvGeometry.of(conv)
    dn = g.dn
    if g.groups != 1 or g.batch_groups != 1 or x.shape.dims[dn.input_batch] != 1 or g.input_features == 0:
        return False
    if not pointwise(g):
        return False
    x_first = features_first(x.shape.rank, dn.input_batch, dn.input_feature, dn.input_spatial)
    out_first = features_first(conv.shape.rank, dn.output_batch, dn.output_feature, dn.output_spatial)
    if x_first is False and out_first is False and prod(g.output_spatial) > 1:
        return g.input_features <= SHALLOW_DEPTH and g.group_features >= EXPANSION * g.input_features
    return x_first is not None and out_first is not None


class PointwiseGemm:
    """The emitter (tiles.EMITTERS' protocol) of a convolution that `fits`. A strided
    one (ResNet's downsampling 1x1 convolutions) first copies the input elements its
    windows read into kernel scratch, in the input's layout: a copy of a quarter of the
    input for stride 2, against the tiles' 88 GFLOP/s on ResNet-50's 512 -> 1024 at 14x14."""

    ROUTE = "pointwise"

    def __init__(self, ke, conv: HloInstruction):
        self.ke, self.conv = ke, conv
        self.g = ConvGeometry.of(conv)

    def emit(self, out_ptr, out_shape: ArrayShape, epilogue: HloInstruction | None) -> None:
        ke, conv, g = self.ke, self.conv, self.g
        dn = g.dn
        x_ptr, x_shape = conv_operand(ke, conv.operands[0])
        w_ptr, w_shape = conv_operand(ke, conv.operands[1])
        if any(w.stride != 1 for w in g.window):
            x_ptr, x_shape = subsampled_input(ke, conv, x_ptr, x_shape)
        features, outputs = g.input_features, g.groups * g.group_features
        positions = prod(conv.shape.dims[d] for d in dn.output_spatial)
        spatial = tuple(conv.shape.dims[d] for d in dn.output_spatial)
        x_first = features_first(x_shape.rank, dn.input_batch, dn.input_feature, dn.input_spatial)
        out_first = features_first(conv.shape.rank, dn.output_batch, dn.output_feature, dn.output_spatial)
        w_io = dn.kernel_input_feature < dn.kernel_output_feature   # W stored [C, O] (else [O, C])
        if out_first:    # out[O, HW] = W^T x: A is W, read transposed when stored [C, O]
            a, b, m, n = w_ptr, x_ptr, outputs, positions
            a_t, b_t = w_io, not x_first
        else:            # out[HW, O] = x W
            a, b, m, n = x_ptr, w_ptr, positions, outputs
            a_t, b_t = x_first, not w_io

        def conv_index(i, j):
            """The output index of element (i, j) of the product."""
            feature, position = (i, j) if out_first else (j, i)
            index = [None] * conv.shape.rank
            index[dn.output_batch] = i64(0)
            index[dn.output_feature] = feature
            at = delinearize(ke.b, position, spatial, default_layout(len(spatial))) if spatial else ()
            for d, v in zip(dn.output_spatial, at):
                index[d] = v
            return tuple(index)

        def apply(prefix, i, j):   # the epilogue of one element, in place over the product
            index = conv_index(i, j)
            ke.e.push_scope()
            product = ke.load(out_ptr, out_shape, index)
            ke.e.buffer_reads[id(conv)] = lambda _index, value=product: value
            ke.store(out_ptr, out_shape, index, ke.e.value(epilogue, index))
            ke.e.pop_scope()

        # The product lands in the output itself when that is laid out as the convolution's
        # result; otherwise in kernel scratch, and a loop writes the output (through the epilogue).
        in_place = out_shape.is_row_major and out_shape.dims == conv.shape.dims
        product_ptr = out_ptr if in_place else ke.reserve_scratch(conv.shape.size * etype(conv).bytes)
        if positions == 1:   # a classifier over a 1x1 map: y = x W, every weight read once where it lies
            tasks = worker_pool().threads * TASKS_PER_THREAD if outputs * features >= GEMV_PARALLEL_MIN_WORK else 1
            emit_gemv(ke, etype(conv).name, product_ptr, x_ptr, w_ptr, 1, outputs, features, not w_io, tasks,
                      (lambda flat: apply((), flat, i64(0)) if out_first else apply((), i64(0), flat))
                      if epilogue is not None and in_place else None)
        else:
            emit_dot_tasks(ke, etype(conv).name, product_ptr, a, b, (), m, n, features, a_t, b_t,
                           worker_pool().threads * TASKS_PER_THREAD,
                           apply if epilogue is not None and in_place else None)
        if not in_place:
            ke.e.buffer_reads[id(conv)] = lambda index: ke.load(product_ptr, conv.shape, index)
            ke.emit_loop(epilogue if epilogue is not None else conv)


def subsampled_input(ke, conv: HloInstruction, x_ptr, x_shape: ArrayShape):
    """The input of a strided 1x1 convolution at its windows' positions only (every
    stride-th along each spatial dimension), in kernel scratch, laid out as the input is:
    (pointer, shape)."""
    g = ConvGeometry.of(conv)
    dn = g.dn
    dims = list(x_shape.dims)
    for d, n in zip(dn.input_spatial, g.output_spatial):
        dims[d] = n
    shape = ArrayShape(x_shape.dtype, tuple(dims))
    ptr = ke.reserve_scratch(shape.size * etype(conv).bytes)

    def copy(index):
        source = list(index)
        for d, w in zip(dn.input_spatial, g.window):
            source[d] = ke.b.mul(index[d], i64(w.stride)) if w.stride != 1 else index[d]
        ke.store(ptr, shape, index, ke.load(x_ptr, x_shape, tuple(source)))

    ke.loop_nest(list(dims), copy, shape.size)
    return ptr, shape


EMITTERS.insert(0, (fits, PointwiseGemm))
