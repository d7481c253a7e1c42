"""pyxla.jacfwd, jacrev and hessian, with JAX's signatures, semantics and output layout.

As in JAX, each is a vmap over a basis: `jacfwd` pushes every standard basis vector of the
inputs forward with `jvp` (one batched forward pass), `jacrev` pulls every basis vector of
the outputs back with `vjp` (one batched backward pass), and `hessian` is
`jacfwd(jacrev(f))`. The Jacobian of an output leaf of shape S with respect to an input
leaf of shape T has shape S + T; for pytrees of both, the result is the output's structure
with the inputs' structure (a tuple of them for a tuple `argnums`) at each leaf.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..batching import vmap
from ..frontend.pytree import PyTreeDef, tree_flatten, tree_unflatten
from ..frontend.tracing import shape_of
from .api import jvp, vjp
from .staging import argument_value


def _argnums(argnums: int | Sequence[int], n_args: int, what: str) -> tuple[tuple[int, ...], bool]:
    multiple = not isinstance(argnums, int)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if any(not isinstance(i, int) or not -n_args <= i < n_args for i in nums):
        raise TypeError(f"{what}: argnums={argnums!r} does not name positional arguments of the "
                        f"{n_args} given")
    return tuple(i % n_args for i in nums), multiple


def _with_arguments(fun: Callable, args: tuple, kwargs: dict, nums: tuple[int, ...]) -> Callable:
    def partial_fun(*diff: Any) -> Any:
        full = list(args)
        for i, value in zip(nums, diff):
            full[i] = value
        return fun(*full, **kwargs)
    partial_fun.__name__ = getattr(fun, "__name__", "fn")
    return partial_fun


def _float_leaves(what: str, role: str, tree: Any) -> tuple[list[Any], PyTreeDef]:
    leaves, treedef = tree_flatten(tree)
    values = [argument_value(what, leaf)[0] for leaf in leaves]
    for v in values:
        dtype = shape_of(v).dtype
        if not dtype.is_float:
            raise TypeError(f"{what} requires real-valued {role} (a floating-point dtype), but got "
                            f"{dtype.np_dtype.name}.")
    return values, treedef


def _std_basis(leaves: list[Any]) -> list[np.ndarray]:
    """The identity of size N (the leaves' total size) cut into one block per leaf:
    block i has shape [N, *shape_i] and the leaf's dtype."""
    shapes = [shape_of(x) for x in leaves]
    total = sum(int(np.prod(s.dims)) for s in shapes)
    eye = np.eye(total)
    blocks, start = [], 0
    for s in shapes:
        n = int(np.prod(s.dims))
        blocks.append(eye[:, start:start + n].reshape((total, *s.dims)).astype(s.dtype.np_dtype))
        start += n
    return blocks


def _split_axis(x: Any, axis: int, shapes: list[tuple[int, ...]]) -> list[Any]:
    """`x` cut along `axis` into pieces of the sizes of `shapes`, each piece's axis reshaped
    to its shape."""
    dims = list(shape_of(x).dims)
    pieces, start = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        piece = lax.slice_in_dim(x, start, start + n, axis=axis)
        pieces.append(lax.reshape(piece, (*dims[:axis], *shape, *dims[axis + 1:])))
        start += n
    return pieces


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The Jacobian of `fun` with respect to the arguments at `argnums`, by forward mode
    (vmap of jvp over the inputs' basis); with has_aux, (jacobian, aux)."""
    @functools.wraps(fun, updated=())
    def jacfun(*args: Any, **kwargs: Any) -> Any:
        nums, multiple = _argnums(argnums, len(args), "jacfwd")
        diff = tuple(args[i] for i in nums)
        x_leaves, x_tree = _float_leaves("jacfwd", "inputs", diff if multiple else diff[0])
        partial_fun = _with_arguments(fun, args, kwargs, nums)

        def pushfwd(*tangent_leaves: Any) -> Any:
            tangents = tree_unflatten(x_tree, tangent_leaves)
            return jvp(partial_fun, diff, tangents if multiple else (tangents,), has_aux=has_aux)

        out_axes = (None, -1, None) if has_aux else (None, -1)
        result = vmap(pushfwd, out_axes=out_axes)(*_std_basis(x_leaves))
        y, jac = result[0], result[1]
        y_leaves, y_tree = tree_flatten(y)
        jac_leaves = tree_flatten(jac)[0]
        in_shapes = [shape_of(x).dims for x in x_leaves]
        per_output = [tree_unflatten(x_tree, _split_axis(j, len(shape_of(o).dims), in_shapes))
                      for o, j in zip(y_leaves, jac_leaves)]
        out = tree_unflatten(y_tree, per_output)
        return (out, result[2]) if has_aux else out

    return jacfun


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The Jacobian of `fun` with respect to the arguments at `argnums`, by reverse mode
    (vmap of vjp over the outputs' basis); with has_aux, (jacobian, aux)."""
    @functools.wraps(fun, updated=())
    def jacfun(*args: Any, **kwargs: Any) -> Any:
        nums, multiple = _argnums(argnums, len(args), "jacrev")
        diff = tuple(args[i] for i in nums)
        x_leaves, x_tree = _float_leaves("jacrev", "inputs", diff if multiple else diff[0])
        partial_fun = _with_arguments(fun, args, kwargs, nums)
        if has_aux:
            y, pullback, aux = vjp(partial_fun, *diff, has_aux=True)
        else:
            y, pullback = vjp(partial_fun, *diff)
        y_leaves, y_tree = _float_leaves("jacrev", "outputs", y)

        def pull(*cotangent_leaves: Any) -> Any:
            cts = pullback(tree_unflatten(y_tree, cotangent_leaves))
            return cts if multiple else cts[0]

        jac = vmap(pull)(*_std_basis(y_leaves))          # per input leaf: [M, *input shape]
        jac_leaves = tree_flatten(jac)[0]
        out_shapes = [shape_of(o).dims for o in y_leaves]
        rows = [_split_axis(j, 0, out_shapes) for j in jac_leaves]   # rows[i][k]: output k, input i
        per_output = [tree_unflatten(x_tree, [rows[i][k] for i in range(len(x_leaves))])
                      for k in range(len(y_leaves))]
        out = tree_unflatten(y_tree, per_output)
        return (out, aux) if has_aux else out

    return jacfun


def hessian(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Hessian of scalar `fun`: jacfwd(jacrev(fun)), JAX's layout (input shape twice)."""
    return jacfwd(jacrev(fun, argnums), argnums)


__all__ = ["hessian", "jacfwd", "jacrev"]
