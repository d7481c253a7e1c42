"""The dynamic padder's rewrites of data operations (see the package's doc): each takes the
padder, the computation and an instruction with symbolic dimensions, rewrites what would see
the padding, and says whether it changed anything."""
from __future__ import annotations

from fractions import Fraction
from math import prod
from typing import Any

import numpy as np

from ...hlo.attributes import ConvDimensionNumbers, PadDim, SliceDim
from ...hlo.computation import HloComputation
from ...hlo.dims import Dim, DimExpr, dim, evaluate_dim
from ...hlo.instruction import HloInstruction
from ...hlo.shape import ArrayShape, Shape, TupleShape, describe_shape
from ...hlo.types import PRED
from .padder import SIZE_TYPE, Padder, refuse, symbolic

# --- reductions -------------------------------------------------------------------------------

def _reduce(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    n = len(instr.operands) // 2
    dims = tuple(instr.attrs["dimensions"])
    changed = False
    for i in range(n):
        x, init = instr.operands[i], instr.operands[n + i]
        masked = p.masked(comp, x, dims, init, instr)
        if masked is not x:
            set_operand(instr, i, masked)
            changed = True
    return changed


def drop_user(old: HloInstruction, user: HloInstruction) -> None:
    if old not in user.operands and user in old.users:
        old.users.remove(user)


def set_operand(instr: HloInstruction, index: int, new: HloInstruction) -> None:
    old = instr.operands[index]
    instr.operands[index] = new
    if instr not in new.users:
        new.users.append(instr)
    drop_user(old, instr)


def _reduce_window(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    n = len(instr.operands) // 2
    window = instr.attrs["window"]
    changed = False
    for i in range(n):
        x, init = instr.operands[i], instr.operands[n + i]
        dims = [d for d, w in enumerate(window)
                if not (w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1)]
        masked = p.masked(comp, x, dims, init, instr)
        if masked is not x:
            set_operand(instr, i, masked)
            changed = True
    return changed


def _dot(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    lhs, rhs = instr.operands
    lc, rc = tuple(instr.attrs.get("lhs_contracting_dims", ())), tuple(instr.attrs.get("rhs_contracting_dims", ()))
    if not any(symbolic(lhs.array_shape.dims[d]) for d in lc):
        return False
    set_operand(instr, 0, p.masked(comp, lhs, lc, p.zero(comp, lhs.array_shape.dtype), instr))
    set_operand(instr, 1, p.masked(comp, rhs, rc, p.zero(comp, rhs.array_shape.dtype), instr))
    return True


# --- sizes as values --------------------------------------------------------------------------

def _get_dimension_size(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    value = instr.operands[0].array_shape.dims[instr.attrs["dimensions"][0]]
    comp.replace_instruction(instr, p.size(comp, value, instr))
    return True


# --- data movement ----------------------------------------------------------------------------

def _concatenate(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    d = instr.attrs["dimensions"][0]
    sizes = [o.array_shape.dims[d] for o in instr.operands]
    if not any(symbolic(s) for s in sizes[:-1]):
        return False   # the padding of the last operand lands in the result's padding
    shape = instr.array_shape
    result = p.add(comp, "broadcast", shape.without_layout(), (p.zero(comp, shape.dtype),), dimensions=())
    zero = p.zero(comp, SIZE_TYPE)
    offset: Dim = 0
    for operand, size in zip(instr.operands, sizes):
        starts = [zero] * shape.rank
        starts[d] = p.size(comp, offset, instr)
        result = p.add(comp, "dynamic-update-slice", shape.without_layout(), (result, operand, *starts))
        offset = offset + size
    comp.replace_instruction(instr, result)
    return True


def _pad(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, value = instr.operands
    padding = instr.attrs["padding"]
    dims = [d for d, pd in enumerate(padding) if symbolic(x.array_shape.dims[d]) and (pd.high != 0 or pd.interior)]
    for d, pd in enumerate(padding):
        if symbolic(pd.low) or (symbolic(pd.interior)):
            raise refuse(instr, f"the padding of dimension {d} ({pd.low}_{pd.high}_{pd.interior}) has a symbolic "
                                 "low or interior part")
    masked = p.masked(comp, x, dims, value, instr)
    if masked is x:
        return False
    set_operand(instr, 0, masked)
    return True


def _slice(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x = instr.operands[0]
    spec: tuple[SliceDim, ...] = instr.attrs["slice"]
    moving = [d for d, s in enumerate(spec) if symbolic(s.start)]
    if not moving:
        return False
    shape = x.array_shape
    zero = p.zero(comp, SIZE_TYPE)
    starts = [zero] * shape.rank
    sizes = list(shape.dims)
    for d in moving:
        s = spec[d]
        count = instr.array_shape.dims[d]
        span = (count - 1) * s.stride + 1 if not (isinstance(count, int) and count == 0) else 0
        if not _grows(shape.dims[d] - s.start - span):
            raise refuse(instr, f"dimension {d} is sliced from the symbolic start {s.start} with "
                                 f"{count} elements out of {shape.dims[d]}: the padded slice may not fit")
        starts[d] = p.size(comp, s.start, instr)
        sizes[d] = span
    window = p.add(comp, "dynamic-slice", ArrayShape(shape.dtype, tuple(sizes)), (x, *starts),
                   dynamic_slice_sizes=tuple(sizes))
    rest = tuple(SliceDim(0, sizes[d], s.stride) if d in moving else s for d, s in enumerate(spec))
    result = p.add(comp, "slice", instr.shape, (window,), slice=rest)
    comp.replace_instruction(instr, result)
    return True


def _grows(value: Dim) -> bool:
    """Whether `value` is >= 0 for all sizes in a bucket when it is at the bounds: an int >= 0,
    or an expression with no negative term but possibly the constant, itself >= 0."""
    if isinstance(value, DimExpr):
        return all(c >= 0 for m, c in value.terms.items() if m) and value.constant >= 0
    return value >= 0


def _clamped_start(p: Padder, comp: HloComputation, start: HloInstruction, limit: Dim,
                   user: HloInstruction) -> HloInstruction:
    """`start` clamped to [0, limit] at the actual sizes (limit: operand size - slice size)."""
    dtype = start.array_shape.dtype
    return p.add(comp, "clamp", start.shape, (p.zero(comp, dtype), start, p.size(comp, limit, user, dtype)))


def _dynamic_slice(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, *starts = instr.operands
    shape = x.array_shape
    sizes = instr.attrs["dynamic_slice_sizes"]
    changed = False
    for d, (full, size) in enumerate(zip(shape.dims, sizes)):
        if not (symbolic(full) or symbolic(size)):
            continue
        if symbolic(size) and not _grows(full - size):
            raise refuse(instr, f"dimension {d}: a slice of {size} out of {full} may not fit when padded")
        set_operand(instr, 1 + d, _clamped_start(p, comp, starts[d], full - size, instr))
        changed = True
    return changed


def _dynamic_update_slice(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    x, update, *starts = instr.operands
    shape, ushape = x.array_shape, update.array_shape
    changed = False
    clamped = list(starts)
    for d, (full, size) in enumerate(zip(shape.dims, ushape.dims)):
        if not (symbolic(full) or symbolic(size)):
            continue
        if symbolic(size) and not _grows(full - size):
            raise refuse(instr, f"dimension {d}: an update of {size} into {full} may not fit when padded")
        clamped[d] = _clamped_start(p, comp, starts[d], full - size, instr)
        set_operand(instr, 2 + d, clamped[d])
        changed = True
    symbolic_update = [d for d, size in enumerate(ushape.dims) if symbolic(size)]
    if symbolic_update:
        # The update's padding must not overwrite the operand: merge it with what is there.
        old = p.add(comp, "dynamic-slice", ushape.without_layout(), (x, *clamped),
                    dynamic_slice_sizes=tuple(ushape.dims))
        mask = p.valid(comp, ushape, symbolic_update, instr)
        assert mask is not None
        merged = p.add(comp, "select", ushape.without_layout(), (mask, update, old))
        set_operand(instr, 1, merged)
    return changed or bool(symbolic_update)


def _reshape(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    problem = reshape_problem(instr.operands[0].array_shape.dims, instr.array_shape.dims)
    if problem:
        raise refuse(instr, f"reshape {describe_shape(instr.operands[0].shape)} -> {describe_shape(instr.shape)}: "
                             f"{problem}")
    return False


def reshape_problem(source: tuple[int, ...], target: tuple[int, ...]) -> str | None:
    """Why a reshape of padded arrays would mix padding into valid elements, or None when it
    keeps them apart. It keeps them apart when the symbolic dimensions of both sides pair up,
    in order, so that each pair starts at the same row-major stride boundary (equal products
    of the dimensions before) and spans the same extent (equal products from it on), with
    the dimensions after each in a constant ratio: then a padded element's flat position is
    padding on both sides."""
    src = [d for d, size in enumerate(source) if symbolic(size)]
    dst = [d for d, size in enumerate(target) if symbolic(size)]
    if len(src) != len(dst):
        return (f"it turns {len(src)} symbolic dimension(s) into {len(dst)}, so padding would be interleaved "
                "with valid elements")
    for a, b in zip(src, dst):
        before_a, before_b = prod(source[:a]), prod(target[:b])
        after_a, after_b = prod(source[a + 1:]), prod(target[b + 1:])
        if not (dim(before_a) == dim(before_b) and dim(source[a] * after_a) == dim(target[b] * after_b)
                and _constant_ratio(after_a, after_b)):
            return (f"symbolic dimension {a} ({source[a]}) does not map onto symbolic dimension {b} ({target[b]}) "
                    "as the outermost dimension of its group")
    return None


def _constant_ratio(a: Dim, b: Dim) -> bool:
    """Whether a / b is a constant (the same for every value of the symbols)."""
    ea = a if isinstance(a, DimExpr) else DimExpr({(): a})
    eb = b if isinstance(b, DimExpr) else DimExpr({(): b})
    if set(ea.terms) != set(eb.terms):
        return False
    ratios = {Fraction(ea.terms[m], eb.terms[m]) for m in ea.terms}
    return len(ratios) <= 1


# --- ops that look along a dimension ------------------------------------------------------------

def _sort(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Along a symbolic dimension, a leading key operand (1 in the padding, 0 elsewhere) sorts
    the padding after every valid element; between valid elements the comparator decides, so
    the valid elements end first, in the order the actual size gives them."""
    (d,) = instr.attrs["dimensions"]
    shape = instr.operands[0].array_shape
    if not symbolic(shape.dims[d]):
        return False
    valid = p.valid(comp, shape, [d], instr)
    assert valid is not None
    key_shape = ArrayShape(SIZE_TYPE, shape.without_layout().dims)
    key = p.add(comp, "select", key_shape,
                (valid, *(p.add(comp, "broadcast", key_shape, (p.constant(comp, v, SIZE_TYPE),), dimensions=())
                          for v in (0, 1))))
    elements = [o.shape for o in instr.operands]
    loop = p.add(comp, "sort", TupleShape((key_shape, *elements)), (key, *instr.operands),
                 **{**instr.attrs, "to_apply": _padding_last(p, comp, instr.attrs["to_apply"])})
    if isinstance(instr.shape, TupleShape):
        result = p.add(comp, "tuple", instr.shape,
                       [p.add(comp, "get-tuple-element", e, (loop,), index=k + 1) for k, e in enumerate(elements)])
    else:
        result = p.add(comp, "get-tuple-element", instr.shape, (loop,), index=1)
    comp.replace_instruction(instr, result)
    return True


def _padding_last(p: Padder, caller: HloComputation, comparator: HloComputation) -> HloComputation:
    """`(key_l, key_r, *params) -> key_l < key_r if key_l != key_r else comparator(*params)`."""
    module = p.module
    new = HloComputation(module.fresh_name(f"{comparator.name}_padding_last"))
    scalar, pred = ArrayShape(SIZE_TYPE, ()), ArrayShape(PRED, ())

    def param(number: int, shape: Shape) -> HloInstruction:
        return new.add_instruction(HloInstruction(module.fresh_name("p"), "parameter", shape,
                                                  parameter_number=number))

    left, right = param(0, scalar), param(1, scalar)
    copies: dict[int, HloInstruction] = {}
    for instr in comparator.post_order():
        if instr.opcode == "parameter":
            assert instr.parameter_number is not None
            copies[id(instr)] = param(instr.parameter_number + 2, instr.shape)
        else:
            copies[id(instr)] = new.add_instruction(HloInstruction(
                module.fresh_name(instr.opcode), instr.opcode, instr.shape, [copies[id(o)] for o in instr.operands],
                dict(instr.attrs), literal=instr.literal))
    assert comparator.root is not None
    differ = p.add(new, "compare", pred, (left, right), direction="NE")
    first = p.add(new, "compare", pred, (left, right), direction="LT")
    new.root = p.add(new, "select", pred, (differ, first, copies[id(comparator.root)]))
    module.computations.insert(module.computations.index(caller), new)
    return new


def _topk(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Along a symbolic last dimension the padding is set to the value that comes last in the
    total order top-k sorts by (-NaN with every payload bit for the largest k, +NaN for the
    smallest; the extreme integers), and ties go to the lower, valid, index."""
    x = instr.operands[0]
    shape = x.array_shape
    if not symbolic(shape.dims[-1]):
        return False
    storage = np.dtype(shape.dtype.np_dtype)
    largest = instr.attrs.get("largest", True)
    if shape.dtype.is_float:
        bits = np.dtype(f"u{storage.itemsize}")
        ones = np.array(np.iinfo(bits).max, bits)
        value = (ones if largest else ones >> np.array(1, bits)).view(storage)
    elif shape.dtype.is_integral:
        value = np.array(np.iinfo(storage).min if largest else np.iinfo(storage).max, storage)
    else:
        raise refuse(instr, f"top-k of {shape.dtype} along the symbolic dimension {shape.rank - 1} is not supported")
    fill = comp.add_instruction(HloInstruction(p.module.fresh_name("constant"), "constant",
                                               ArrayShape(shape.dtype, ()), literal=np.array(value)))
    set_operand(instr, 0, p.masked(comp, x, [shape.rank - 1], fill, instr))
    return True


def _matrix_op(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    for i, o in enumerate(instr.operands):
        shape = o.array_shape
        for d in range(max(shape.rank - 2, 0), shape.rank):
            if symbolic(shape.dims[d]):
                raise refuse(instr, f"{instr.opcode} over the symbolic matrix dimension {d} ({shape.dims[d]}) of "
                                     f"operand {i} is not supported (batch dimensions may be symbolic)")
    return False


def _convolution(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """The input's padding along symbolic spatial dimensions becomes zeros, which is what the
    convolution's own padding and base dilation hold, so every valid output position sees
    what it sees at the actual size; a symbolic input feature dimension is contracted like a
    dot's (both operands masked to 0). The batch dimension needs nothing."""
    lhs, rhs = instr.operands
    dn: ConvDimensionNumbers = instr.attrs["dim_labels"]
    lshape, rshape = lhs.array_shape, rhs.array_shape
    fgc, bgc = instr.attrs.get("feature_group_count", 1), instr.attrs.get("batch_group_count", 1)
    if bgc != 1 and symbolic(lshape.dims[dn.input_batch]):
        raise refuse(instr, "convolution with batch groups over a symbolic batch dimension "
                             f"{dn.input_batch} ({lshape.dims[dn.input_batch]}) is not supported")
    feature = lshape.dims[dn.input_feature]
    if symbolic(feature) and (fgc != 1 or bgc != 1):
        raise refuse(instr, f"convolution with groups over the symbolic feature dimension {dn.input_feature} "
                             f"({feature}) is not supported")
    for d in dn.kernel_spatial:
        if symbolic(rshape.dims[d]):
            raise refuse(instr, f"convolution with the symbolic kernel dimension {d} ({rshape.dims[d]}) is not "
                                 "supported")
    lhs_dims = [d for d in (dn.input_feature, *dn.input_spatial) if symbolic(lshape.dims[d])]
    if not lhs_dims:
        return False
    set_operand(instr, 0, p.masked(comp, lhs, lhs_dims, p.zero(comp, lshape.dtype), instr))
    if symbolic(feature):
        set_operand(instr, 1, p.masked(comp, rhs, [dn.kernel_input_feature], p.zero(comp, rshape.dtype), instr))
    return True


def _reverse(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Reversed, the valid elements of a symbolic dimension end the padded array: they are
    moved back to the front with a dynamic-slice at (padded size - actual size), from the
    reversed array padded by its own size so the slice never clamps."""
    x = instr.operands[0]
    shape = x.array_shape
    moved = [d for d in instr.attrs["dimensions"] if symbolic(shape.dims[d])]
    if not moved:
        return False
    flipped = p.add(comp, "reverse", shape.without_layout(), (x,), **instr.attrs)
    grown = tuple(2 * size if d in moved else size for d, size in enumerate(shape.dims))
    padding = tuple(PadDim(0, size if d in moved else 0) for d, size in enumerate(shape.dims))
    extended = p.add(comp, "pad", ArrayShape(shape.dtype, grown), (flipped, p.zero(comp, shape.dtype)),
                     padding=padding)
    starts = [p.zero(comp, SIZE_TYPE)] * shape.rank
    for d in moved:
        starts[d] = p.add(comp, "subtract", ArrayShape(SIZE_TYPE, ()),
                          (p.constant(comp, evaluate_dim(shape.dims[d], p.bounds), SIZE_TYPE),
                           p.size(comp, shape.dims[d], instr)))
    result = p.add(comp, "dynamic-slice", instr.shape, (extended, *starts), dynamic_slice_sizes=tuple(shape.dims))
    comp.replace_instruction(instr, result)
    return True


def _index_limits(p: Padder, comp: HloComputation, instr: HloInstruction, indices: HloInstruction,
                  index_map: tuple[int, ...], window: list[Dim], other: int) -> HloInstruction | None:
    """An array shaped like `indices` holding, for each index component that addresses a
    symbolic operand dimension d, the largest start whose window fits the actual size
    (size(d) - window[d]), and `other` for the other components; None when no component
    addresses a symbolic dimension."""
    shape, ishape = instr.operands[0].array_shape, indices.array_shape
    if not any(symbolic(shape.dims[d]) for d in index_map):
        return None
    dtype, vector = ishape.dtype, instr.attrs["index_vector_dim"]
    one = ArrayShape(dtype, (1,))
    parts = [p.size(comp, shape.dims[d] - window[d], instr, dtype) if symbolic(shape.dims[d])
             else p.constant(comp, other, dtype) for d in index_map]
    bounds_shape = ArrayShape(dtype, ishape.without_layout().dims)
    if vector == ishape.rank:
        return p.add(comp, "broadcast", bounds_shape, (parts[0],), dimensions=())
    pieces = [p.add(comp, "reshape", one, (part,)) for part in parts]
    vector_limits = p.add(comp, "concatenate", ArrayShape(dtype, (len(parts),)), pieces, dimensions=(0,))
    return p.add(comp, "broadcast", bounds_shape, (vector_limits,), dimensions=(vector,))


def _gather(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Gather clamps each start so its slice fits the operand: into a symbolic dimension, the
    starts are first clamped to fit the actual size."""
    shape = instr.operands[0].array_shape
    sizes = instr.attrs["slice_sizes"]
    for d, (full, size) in enumerate(zip(shape.dims, sizes)):
        if symbolic(size) and not full == size:
            raise refuse(instr, f"gather with the symbolic slice size {size} in dimension {d} is not supported")
    indices = instr.operands[1]
    largest = int(np.iinfo(indices.array_shape.dtype.np_dtype).max)
    limits = _index_limits(p, comp, instr, indices, tuple(instr.attrs["start_index_map"]), list(sizes), largest)
    if limits is None:
        return False
    set_operand(instr, 1, p.add(comp, "minimum", limits.shape, (indices, limits)))
    return True


def _scatter(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    """Scatter skips an update window that does not fit the operand. Index rows in the padding
    of the indices, and starts whose window does not fit a symbolic dimension's actual size,
    are set out of bounds (the type's largest value), so they are skipped too."""
    n = (len(instr.operands) - 1) // 2
    shape = instr.operands[0].array_shape
    indices, updates = instr.operands[n], instr.operands[n + 1].array_shape
    ishape = indices.array_shape
    index_map = tuple(instr.attrs["scatter_dims_to_operand_dims"])
    largest = int(np.iinfo(ishape.dtype.np_dtype).max)
    for d in index_map:
        if largest < evaluate_dim(shape.dims[d], p.bounds):
            raise refuse(instr, f"the indices' type {ishape.dtype} cannot hold an index out of bounds of operand "
                                 f"dimension {d} ({shape.dims[d]}), which the padding needs")
    far = p.constant(comp, largest, ishape.dtype)
    vector = instr.attrs["index_vector_dim"]
    masked = p.masked(comp, indices, [d for d in range(ishape.rank) if d != vector], far, instr)
    dropped = set(instr.attrs.get("inserted_window_dims", ())) | set(instr.attrs.get("input_batching_dims", ()))
    window: list[Dim] = [1] * shape.rank
    for d, w in zip([d for d in range(shape.rank) if d not in dropped], instr.attrs["update_window_dims"]):
        window[d] = updates.dims[w]
    limits = _index_limits(p, comp, instr, indices, index_map, window, largest)
    if limits is not None:
        beyond = p.add(comp, "compare", ArrayShape(PRED, limits.array_shape.dims), (masked, limits), direction="GT")
        masked = p.add(comp, "select", limits.shape,
                       (beyond, p.add(comp, "broadcast", limits.shape, (far,), dimensions=()), masked))
    if masked is indices:
        return False
    set_operand(instr, n, masked)
    return True


def _select_and_scatter(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    shape = instr.operands[0].array_shape
    for d, w in enumerate(instr.attrs["window"]):
        if symbolic(shape.dims[d]) and not (w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0):
            raise refuse(instr, f"select-and-scatter with a window over the symbolic dimension {d} "
                                 f"({shape.dims[d]}) is not supported")
    return False


def _batch_norm(p: Padder, comp: HloComputation, instr: HloInstruction) -> bool:
    shape = instr.operands[0].array_shape
    feature = instr.attrs["feature_index"]
    for d, size in enumerate(shape.dims):
        if symbolic(size) and d != feature:
            raise refuse(instr, f"{instr.opcode} reduces over the symbolic dimension {d} ({size}); expand it into "
                                 "reductions before tracing symbolically")
    return False


REWRITES: dict[str, Any] = {
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "dot": _dot,
    "get-dimension-size": _get_dimension_size,
    "concatenate": _concatenate,
    "pad": _pad,
    "slice": _slice,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "reshape": _reshape,
    "sort": _sort,
    "reverse": _reverse,
    "topk": _topk,
    "cholesky": _matrix_op,
    "triangular-solve": _matrix_op,
    "convolution": _convolution,
    "gather": _gather,
    "scatter": _scatter,
    "select-and-scatter": _select_and_scatter,
    "batch-norm-training": _batch_norm,
    "batch-norm-grad": _batch_norm,
}
