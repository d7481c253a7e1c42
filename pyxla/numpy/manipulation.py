"""Array manipulation: shapes, axes, joining, splitting, flipping, rolling, tiling, padding.

These move elements and never compute with them, so each becomes HLO reshape,
transpose, broadcast, slice, concatenate, reverse or pad (NumPy's index-mapping pad modes
become a gather of static positions).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..frontend.tracing import Tracer, bind, where
from ..hlo.attributes import PadDim, SliceDim
from ..hlo.dims import DimExpr, InconclusiveDimensionOperation, symbols_of
from .core import broadcast_shapes as _broadcast_shapes
from .core import broadcast_to as _broadcast_to
from .core import (
    convert,
    dtype_of,
    export,
    fail,
    normalize_axes,
    normalize_axis,
    operand,
    reshape_to,
    result_type,
    shape_of,
    static_dim,
    static_int,
    transpose_to,
)


def _array(name: str, a: Any) -> Any:
    """An operand that is an array (Python scalars become 0-d arrays of their default dtype)."""
    a = operand(name, a)
    return np.asarray(a) if not isinstance(a, (Tracer, np.ndarray)) else a


def slice_axis(x: Any, axis: int, start: int, stop: int, step: int = 1) -> Any:
    """x[..., start:stop:step, ...] along `axis` (static, positive step, in-bounds)."""
    shape = shape_of(x)
    if (start, stop, step) == (0, shape[axis], 1):
        return x
    spec = tuple(SliceDim(start, stop, step) if d == axis else SliceDim(0, n, 1) for d, n in enumerate(shape))
    return bind("slice", x, slice=spec)


# --- shapes ---------------------------------------------------------------------------------

@export
def shape(a):
    return shape_of(operand("shape", a))


@export
def ndim(a):
    return len(shape_of(operand("ndim", a)))


@export
def size(a, axis=None):
    dims = shape_of(operand("size", a))
    return math.prod(dims) if axis is None else dims[axis]


def _resolve_shape(name: str, total: int, shape: Any) -> tuple[int, ...]:
    """A requested shape with its one -1 filled in; an error when the sizes disagree."""
    shape = (shape,) if isinstance(shape, DimExpr) or np.ndim(shape) == 0 else shape
    dims = [static_dim(name, d, "a shape") for d in shape]
    unknown = [i for i, d in enumerate(dims) if isinstance(d, int) and d == -1]
    if len(unknown) > 1:
        raise ValueError(f"pyxla.numpy.{name}: can only specify one unknown dimension (-1)")
    known = math.prod(d for i, d in enumerate(dims) if i not in unknown)
    if unknown:
        if isinstance(known, int) and isinstance(total, int):
            if known == 0 or total % known:
                raise fail(name, f"cannot reshape an array of size {total} into shape {tuple(shape)}")
            dims[unknown[0]] = total // known
        else:
            try:   # symbolic sizes: the division must be exact for every value of the symbols
                dims[unknown[0]] = total // known
            except InconclusiveDimensionOperation:
                raise InconclusiveDimensionOperation(
                    f"pyxla.numpy.{name}: cannot reshape an array of size {total} into shape {tuple(shape)}: "
                    f"{total} is not divisible by {known} for every value of the dimension "
                    f"{', '.join(sorted(s.name for s in symbols_of([total, known])))}{where()}") from None
    if not (math.prod(dims) == total):
        raise fail(name, f"cannot reshape an array of size {total} into shape {tuple(dims)}")
    return tuple(dims)


@export
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """The elements of `a` in row-major order, with a new shape (one dimension may be -1)."""
    if order != "C":
        raise NotImplementedError(f"pyxla.numpy.reshape: order={order!r} (only 'C' is supported)")
    shape = newshape if shape is None else shape
    a = _array("reshape", a)
    return reshape_to(a, _resolve_shape("reshape", math.prod(shape_of(a)), shape))


@export
def ravel(a, order="C"):
    return reshape(a, (-1,), order)


@export(aliases=("permute_dims",))
def transpose(a, axes=None):
    a = _array("transpose", a)
    rank = len(shape_of(a))
    if axes is None:
        perm = tuple(reversed(range(rank)))
    else:
        perm = tuple(normalize_axis("transpose", ax, rank) for ax in axes)
        if sorted(perm) != list(range(rank)):
            raise ValueError(f"pyxla.numpy.transpose: axes {tuple(axes)} do not match an array of "
                             f"dimension {rank}")
    return transpose_to(a, perm)


@export
def matrix_transpose(x):
    return swapaxes(x, -1, -2)


@export
def swapaxes(a, axis1, axis2):
    a = _array("swapaxes", a)
    rank = len(shape_of(a))
    i, j = normalize_axis("swapaxes", axis1, rank), normalize_axis("swapaxes", axis2, rank)
    perm = list(range(rank))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose_to(a, perm)


@export
def moveaxis(a, source, destination):
    a = _array("moveaxis", a)
    rank = len(shape_of(a))
    src = [normalize_axis("moveaxis", s, rank) for s in np.atleast_1d(source)]
    dst = [normalize_axis("moveaxis", d, rank) for d in np.atleast_1d(destination)]
    if len(src) != len(dst):
        raise ValueError("pyxla.numpy.moveaxis: source and destination must have the same number of elements")
    order = [d for d in range(rank) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose_to(a, order)


@export
def expand_dims(a, axis):
    a = _array("expand_dims", a)
    dims = shape_of(a)
    axes = normalize_axes("expand_dims", axis, len(dims) + (1 if np.ndim(axis) == 0 else len(axis)))
    out, rest = [], iter(dims)
    for d in range(len(dims) + len(axes)):
        out.append(1 if d in axes else next(rest))
    return reshape_to(a, out)


@export
def squeeze(a, axis=None):
    a = _array("squeeze", a)
    dims = shape_of(a)
    if axis is None:
        axes = tuple(d for d, n in enumerate(dims) if n == 1)
    else:
        axes = normalize_axes("squeeze", axis, len(dims))
        for d in axes:
            if dims[d] != 1:
                raise ValueError(f"pyxla.numpy.squeeze: cannot select an axis to squeeze out which "
                                 f"has size not equal to one (axis {d} of shape {dims})")
    return reshape_to(a, [n for d, n in enumerate(dims) if d not in axes])


@export
def broadcast_to(array, shape):
    shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    return _broadcast_to(_array("broadcast_to", array), shape, "broadcast_to")


@export
def broadcast_shapes(*shapes):
    return _broadcast_shapes("broadcast_shapes", *[(s,) if np.ndim(s) == 0 else s for s in shapes])


@export
def broadcast_arrays(*args):
    arrays = [_array("broadcast_arrays", a) for a in args]
    target = _broadcast_shapes("broadcast_arrays", *[shape_of(a) for a in arrays])
    return [_broadcast_to(a, target, "broadcast_arrays") for a in arrays]


def _at_least(name: str, rank: int, arys: tuple) -> Any:
    out = []
    for a in arys:
        a = _array(name, a)
        dims = shape_of(a)
        if len(dims) < rank:
            if rank == 3 and len(dims) == 1:
                dims = (1,) + dims + (1,)
            elif rank == 3 and len(dims) == 2:
                dims = dims + (1,)
            else:
                dims = (1,) * (rank - len(dims)) + dims
            a = reshape_to(a, dims)
        out.append(a)
    return out[0] if len(out) == 1 else out


@export
def atleast_1d(*arys):
    return _at_least("atleast_1d", 1, arys)


@export
def atleast_2d(*arys):
    return _at_least("atleast_2d", 2, arys)


@export
def atleast_3d(*arys):
    return _at_least("atleast_3d", 3, arys)


# --- joining ----------------------------------------------------------------------------------

@export(aliases=("concat",))
def concatenate(arrays, axis=0, dtype=None):
    """The arrays joined along `axis` (axis=None: flattened first); dtypes promoted."""
    arrays = [_array("concatenate", a) for a in arrays]
    if not arrays:
        raise ValueError("pyxla.numpy.concatenate: need at least one array to concatenate")
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    first = shape_of(arrays[0])
    if not first:
        raise ValueError("pyxla.numpy.concatenate: zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis("concatenate", axis, len(first))
    for a in arrays[1:]:
        s = shape_of(a)
        if len(s) != len(first) or any(x != y for d, (x, y) in enumerate(zip(s, first)) if d != axis):
            raise fail("concatenate", f"all the input array dimensions except for the concatenation "
                       f"axis {axis} must match exactly; got shapes {first} and {s}")
    dt = result_type(*arrays) if dtype is None else np.dtype(dtype)
    arrays = [convert(a, dt) for a in arrays]
    if len(arrays) == 1:
        return arrays[0]
    return bind("concatenate", *arrays, dimensions=(axis,))


@export
def stack(arrays, axis=0, dtype=None):
    arrays = [_array("stack", a) for a in arrays]
    if not arrays:
        raise ValueError("pyxla.numpy.stack: need at least one array to stack")
    shapes = {shape_of(a) for a in arrays}
    if len(shapes) > 1:
        raise fail("stack", f"all input arrays must have the same shape; got {sorted(shapes)}")
    axis = normalize_axis("stack", axis, len(shape_of(arrays[0])) + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis, dtype)


@export
def hstack(tup, dtype=None):
    arrays = [atleast_1d(a) for a in tup]
    return concatenate(arrays, 0 if len(shape_of(arrays[0])) == 1 else 1, dtype)


@export
def vstack(tup, dtype=None):
    return concatenate([atleast_2d(a) for a in tup], 0, dtype)


@export
def dstack(tup):
    return concatenate([atleast_3d(a) for a in tup], 2)


@export
def column_stack(tup):
    arrays = [_array("column_stack", a) for a in tup]
    arrays = [reshape_to(a, (shape_of(a)[0], 1)) if len(shape_of(a)) < 2 else a for a in arrays]
    return concatenate(arrays, 1)


@export
def append(arr, values, axis=None):
    if axis is None:
        return concatenate([ravel(arr), ravel(values)])
    return concatenate([arr, values], axis)


# --- splitting --------------------------------------------------------------------------------

def _split_points(name: str, n: int, indices_or_sections: Any, even: bool) -> list[int]:
    if np.ndim(indices_or_sections) == 0:
        sections = static_int(name, indices_or_sections, "the number of sections")
        if sections <= 0:
            raise ValueError(f"pyxla.numpy.{name}: number sections must be larger than 0")
        if even and n % sections:
            raise ValueError(f"pyxla.numpy.{name}: array split does not result in an equal division "
                             f"({n} into {sections})")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        return list(np.cumsum([0] + sizes))
    points = [static_int(name, i, "a split index") for i in indices_or_sections]
    return [0] + points + [n]


def _split(name: str, ary: Any, indices_or_sections: Any, axis: int, even: bool) -> list:
    ary = _array(name, ary)
    dims = shape_of(ary)
    axis = normalize_axis(name, axis, len(dims))
    n = dims[axis]
    points = _split_points(name, n, indices_or_sections, even)
    pieces = []
    for lo, hi in zip(points[:-1], points[1:]):
        lo = min(max(lo + n if lo < 0 else lo, 0), n)
        hi = min(max(hi + n if hi < 0 else hi, 0), n)
        pieces.append(slice_axis(ary, axis, lo, max(lo, hi)))
    return pieces


@export
def split(ary, indices_or_sections, axis=0):
    return _split("split", ary, indices_or_sections, axis, even=True)


@export
def array_split(ary, indices_or_sections, axis=0):
    return _split("array_split", ary, indices_or_sections, axis, even=False)


@export
def hsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, 1 if len(shape_of(operand("hsplit", ary))) > 1 else 0)


@export
def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, 0)


@export
def dsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, 2)


# --- reordering -------------------------------------------------------------------------------

@export
def flip(m, axis=None):
    m = _array("flip", m)
    axes = normalize_axes("flip", axis, len(shape_of(m)))
    return bind("reverse", m, dimensions=axes) if axes else m


@export
def fliplr(m):
    return flip(m, 1)


@export
def flipud(m):
    return flip(m, 0)


@export
def rot90(m, k=1, axes=(0, 1)):
    """`m` rotated by 90° k times in the plane of `axes` (as NumPy does it: flips and a swap)."""
    m = _array("rot90", m)
    k = static_int("rot90", k, "k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, axes[0]), axes[1])
    if k == 1:
        return swapaxes(flip(m, axes[1]), axes[0], axes[1])
    return flip(swapaxes(m, axes[0], axes[1]), axes[1])


def _roll_axis(x: Any, shift: Any, axis: int) -> Any:
    n = shape_of(x)[axis]
    if n == 0:
        return x
    if not isinstance(shift, Tracer):
        s = static_int("roll", shift, "shift") % n
        if s == 0:
            return x
        return concatenate([slice_axis(x, axis, n - s, n), slice_axis(x, axis, 0, n - s)], axis)
    # A traced shift: the window of [x, x] that starts at (n - shift) mod n.
    from .elementwise import remainder, subtract
    start = convert(remainder(subtract(n, shift), n), np.int64)
    doubled = concatenate([x, x], axis)
    zero = np.zeros((), np.int64)
    starts = [start if d == axis else zero for d in range(len(shape_of(x)))]
    return bind("dynamic-slice", doubled, *starts, dynamic_slice_sizes=shape_of(x))


@export
def roll(a, shift, axis=None):
    """Elements shifted along axes, wrapping around (the shift may be traced)."""
    a = _array("roll", a)
    if axis is None:
        return reshape_to(roll(ravel(a), shift, 0), shape_of(a))
    shifts = shift if isinstance(shift, (tuple, list)) else None
    axes = axis if isinstance(axis, (tuple, list)) else None
    if shifts is None and axes is None:
        return _roll_axis(a, shift, normalize_axis("roll", axis, len(shape_of(a))))
    shifts = list(shifts) if shifts is not None else [shift] * len(axes)
    axes = list(axes) if axes is not None else [axis] * len(shifts)
    shifts, axes = np.broadcast_arrays(np.asarray(shifts, dtype=object), np.asarray(axes))
    for s, ax in zip(shifts, axes):
        a = _roll_axis(a, s, normalize_axis("roll", int(ax), len(shape_of(a))))
    return a


# --- repetition -------------------------------------------------------------------------------

@export
def tile(A, reps):
    """`A` repeated reps[i] times along each axis (broadcast in interleaved dims, then merged)."""
    A = _array("tile", A)
    reps = tuple(static_int("tile", r, "reps") for r in ((reps,) if np.ndim(reps) == 0 else reps))
    dims = shape_of(A)
    rank = max(len(dims), len(reps))
    dims = (1,) * (rank - len(dims)) + dims
    reps = (1,) * (rank - len(reps)) + reps
    interleaved = reshape_to(A, [v for d in dims for v in (1, d)])
    grown = _broadcast_to(interleaved, [v for r, d in zip(reps, dims) for v in (r, d)], "tile")
    return reshape_to(grown, [r * d for r, d in zip(reps, dims)])


@export
def repeat(a, repeats, axis=None):
    """Each element repeated `repeats` times along `axis` (repeats static: an int or a list)."""
    a = _array("repeat", a)
    if axis is None:
        a, axis = ravel(a), 0
    dims = shape_of(a)
    axis = normalize_axis("repeat", axis, len(dims))
    if isinstance(repeats, Tracer):
        raise TypeError("pyxla.numpy.repeat: repeats must be static (it decides the result's shape)")
    if np.ndim(repeats) == 0:
        r = int(repeats)
        expanded = reshape_to(a, dims[:axis + 1] + (1,) + dims[axis + 1:])
        grown = _broadcast_to(expanded, dims[:axis + 1] + (r,) + dims[axis + 1:], "repeat")
        return reshape_to(grown, dims[:axis] + (dims[axis] * r,) + dims[axis + 1:])
    positions = np.repeat(np.arange(dims[axis]), np.asarray(repeats))
    from .indexing import take
    return take(a, positions, axis=axis)


# --- padding --------------------------------------------------------------------------------

_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pad_widths(name: str, pad_width: Any, rank: int) -> np.ndarray:
    if isinstance(pad_width, Tracer):
        raise TypeError(f"pyxla.numpy.{name}: pad_width must be static")
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError(f"pyxla.numpy.{name}: pad_width must be integers, got {pad_width!r}")
    try:
        widths = np.broadcast_to(widths, (rank, 2))
    except ValueError:
        raise ValueError(f"pyxla.numpy.{name}: pad_width {pad_width!r} does not fit an array of "
                         f"dimension {rank}") from None
    if (widths < 0).any():
        raise ValueError(f"pyxla.numpy.{name}: pad_width must not be negative, got {pad_width!r}")
    return widths


@export
def pad(array, pad_width, mode="constant", **kwargs):
    """NumPy's pad for modes constant (also per-side values), edge, reflect, symmetric, wrap."""
    array = _array("pad", array)
    rank = len(shape_of(array))
    widths = _pad_widths("pad", pad_width, rank)
    if mode == "constant" or mode == "empty":
        return _pad_constant(array, widths, kwargs.get("constant_values", 0))
    if mode in _INDEX_MODES:
        if kwargs.get("reflect_type", "even") != "even":
            raise NotImplementedError(f"pyxla.numpy.pad: reflect_type={kwargs['reflect_type']!r}")
        return _pad_by_index(array, widths, mode)
    raise NotImplementedError(f"pyxla.numpy.pad: mode={mode!r} is not implemented "
                              f"(supported: constant, edge, reflect, symmetric, wrap)")


def _pad_constant(x: Any, widths: np.ndarray, constant_values: Any) -> Any:
    dt = dtype_of(x)
    if isinstance(constant_values, Tracer) or np.ndim(constant_values) == 0:
        value = convert(operand("pad", constant_values), dt)
        if isinstance(value, Tracer) and value.shape != ():
            raise ValueError("pyxla.numpy.pad: a traced constant value must be a scalar")
        return bind("pad", x, value, padding=tuple(PadDim(int(lo), int(hi)) for lo, hi in widths))
    values = np.broadcast_to(np.asarray(constant_values), (len(widths), 2))
    # One pad per side with its own value: low sides first, each axis in turn.
    for axis, ((lo, hi), (v_lo, v_hi)) in enumerate(zip(widths, values)):
        for side, width, value in (("low", lo, v_lo), ("high", hi, v_hi)):
            if width:
                spec = [PadDim(0, 0)] * len(widths)
                spec[axis] = PadDim(int(width), 0) if side == "low" else PadDim(0, int(width))
                x = bind("pad", x, convert(value.item(), dt), padding=tuple(spec))
    return x


def _pad_by_index(x: Any, widths: np.ndarray, mode: str) -> Any:
    """Modes whose padding copies elements: the positions come from np.pad of a ramp."""
    from .indexing import take
    for axis, (lo, hi) in enumerate(widths):
        if lo == 0 and hi == 0:
            continue
        n = shape_of(x)[axis]
        if n == 0:
            raise ValueError(f"pyxla.numpy.pad: can't extend empty axis {axis} using modes other than "
                             "'constant' or 'empty'")
        positions = np.pad(np.arange(n), (int(lo), int(hi)), mode=mode)
        x = take(x, positions, axis=axis)
    return x


@export
def diff(a, n=1, axis=-1, prepend=None, append=None):
    """n-th discrete difference along `axis` (not_equal for booleans, as NumPy)."""
    from .elementwise import not_equal, subtract
    a = _array("diff", a)
    axis = normalize_axis("diff", axis, len(shape_of(a)))
    pieces = [p for p in (prepend, a, append) if p is not None]
    if len(pieces) > 1:
        def fit(p):
            p = _array("diff", p)
            if not shape_of(p):
                dims = list(shape_of(a))
                dims[axis] = 1
                p = _broadcast_to(p, dims)
            return p
        a = concatenate([fit(p) for p in pieces], axis)
    op = not_equal if dtype_of(a) == np.bool_ else subtract
    for _ in range(int(n)):
        length = shape_of(a)[axis]
        a = op(slice_axis(a, axis, 1, length), slice_axis(a, axis, 0, max(length - 1, 0)))
    return a
