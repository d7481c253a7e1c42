"""pyxla.vmap, with JAX's signature and semantics.

`vmap(f)` traces `f` once on one example's shapes (autodiff's staging), then re-emits the
traced computation with every instruction batched by its opcode's rule (interpreter.py):
inside `pyxla.jit` the batched program is ordinary HLO in the compiled module; outside any
trace each batched instruction runs at once on the reference evaluator.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..autodiff.staging import argument_value, stage
from ..frontend.jit import Jitted
from ..frontend.pytree import PyTreeDef, tree_flatten, tree_unflatten
from ..frontend.tracing import Tracer, current_trace, shape_of
from ..hlo.shape import ArrayShape
from .axes import broadcast_prefix, check_spec, inconsistent_sizes, leaf_paths, rank_error, type_text
from .interpreter import batch_instructions
from .rule_helpers import move_axis, to_front


def _name(fun: Callable) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "", getattr(fun, "__name__", "fn"))
    return name if name and not name[0].isdigit() else f"fn{name}"


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_size: int | None = None) -> Callable:
    """`fun` mapped over an axis of its arguments: the result stacks `fun` of each example
    along `out_axes`. `in_axes` / `out_axes`: an int, None (not mapped) or a pytree prefix
    of the positional arguments / the output; keyword arguments are mapped along axis 0."""
    if isinstance(in_axes, list):   # JAX reads a top-level list as the tuple of the arguments' axes
        in_axes = tuple(in_axes)
    check_spec("in_axes", in_axes)
    check_spec("out_axes", out_axes)
    compiled: dict[str, Jitted] = {}

    @functools.wraps(fun, updated=())
    def vmapped(*args: Any, **kwargs: Any) -> Any:
        if (isinstance(fun, Jitted) and current_trace() is None and not fun.static_argnums
                and not fun.static_argnames):
            # vmap(jit(f)): compile the batched program, once per signature.
            if "program" not in compiled:
                compiled["program"] = Jitted(vmap(fun.fn, in_axes, out_axes, axis_size), backend=fun.backend)
            return compiled["program"](*args, **kwargs)
        return _vmap_call(fun, in_axes, out_axes, axis_size, args, kwargs)

    return vmapped


def _in_axes(in_axes: Any, args: tuple, kwargs: dict, tree: PyTreeDef) -> list[int | None]:
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise ValueError("vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                         f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}, "
                         f"len(args)={len(args)}")
    return broadcast_prefix((in_axes, {k: 0 for k in kwargs}), tree, "in_axes")


def _example(value: Any, axis: int | None) -> ArrayShape:
    """One example's shape and type, which `fun` is traced for (its sizes may be symbolic)."""
    shape = shape_of(value)
    dims = list(shape.dims)
    if axis is not None:
        del dims[axis]
    return ArrayShape(shape.dtype, tuple(dims))


def _batch_size(values: list[Any], axes: list[int | None], paths: list[str], axis_size: int | None) -> int:
    entries = []
    for v, a, p in zip(values, axes, paths):
        if a is not None:
            s = shape_of(v)
            entries.append((s.dims[a], f"axis {a} of argument {p} of type {type_text(s.dtype.np_dtype, s.dims)}"))
    if axis_size is not None:
        entries.append((int(axis_size), f"axis_size={axis_size}"))
    if not entries:
        raise ValueError("vmap must have at least one non-None value in in_axes")
    if len({size for size, _ in entries}) > 1:
        raise inconsistent_sizes(entries)
    return entries[0][0]


def _inputs(args: tuple, kwargs: dict, in_axes: Any, axis_size: int | None):
    leaves, tree = tree_flatten((args, kwargs))
    axes = _in_axes(in_axes, args, kwargs, tree)
    values, weak = [], []
    for leaf in leaves:
        v, w = argument_value("pyxla.vmap", leaf)
        values.append(v)
        weak.append(w)
    canonical = []
    for v, axis in zip(values, axes):
        dims = shape_of(v).dims
        if axis is not None and not -len(dims) <= axis < len(dims):
            raise rank_error(axis, dims)
        canonical.append(None if axis is None else axis % len(dims))
    paths = leaf_paths(tree.children[0], "args") + leaf_paths(tree.children[1], "kwargs")
    size = _batch_size(values, canonical, paths, axis_size)
    return values, weak, canonical, tree, size


def _vmap_call(fun: Callable, in_axes: Any, out_axes: Any, axis_size: int | None, args: tuple, kwargs: dict) -> Any:
    name = _name(fun)
    values, weak, axes, tree, size = _inputs(args, kwargs, in_axes, axis_size)
    examples = [_example(v, a) for v, a in zip(values, axes)]
    staged = stage(lambda a, k: fun(*a, **k), examples, weak, tree, name)
    batched = [v if a is None else (move_axis(v, a, 0) if isinstance(v, Tracer) else np.moveaxis(v, a, 0))
               for v, a in zip(values, axes)]
    outs, dims = batch_instructions(staged.inputs, batched, [None if a is None else 0 for a in axes],
                                    staged.outputs, scope=f"vmap({name})",
                                    gradient_stops=staged.trace.gradient_stops, captures=staged.captures)
    placed = [_place(out, d, axis, size) for out, d, axis in
              zip(outs, dims, broadcast_prefix(out_axes, staged.out_tree, "out_axes"))]
    return tree_unflatten(staged.out_tree, placed)


def _place(out: Any, d: int | None, axis: int | None, size: int) -> Any:
    """An output moved to its out_axes position (an unbatched one broadcast to the batch)."""
    if axis is None:
        if d is not None:
            raise ValueError("vmap has mapped output but out_axes is None")
        return out
    rank = len(shape_of(out).dims) + (1 if d is None else 0)
    if not -rank <= axis < rank:
        raise ValueError(f"vmap out_axes {axis} is out of range for an output of rank {rank} (one example's "
                         f"rank {rank - 1}, plus the mapped axis)")
    return move_axis(to_front(out, d, size), 0, axis % rank)
