"""Pytrees: nested containers of arrays, flattened to leaves and rebuilt.

Tuples, lists, dicts (keys sorted), None and namedtuples are containers; anything else is
a leaf. `register_pytree_node(type, flatten, unflatten)` teaches a new container type:
flatten(x) -> (children, aux) and unflatten(aux, children) -> x.

A NumPy array of dtype `float0` (JAX's dtype of the derivatives of integer values, which
pyxla.grad and vjp return for integer arguments) holds no data: it is structure, its shape
kept in the tree, not a leaf. So it passes through `jit`'s results and `tree_map` as it is.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

float0 = np.dtype([("float0", np.void, 0)])

_REGISTRY: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    _REGISTRY[cls] = (flatten, unflatten)


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


@dataclass(frozen=True)
class PyTreeDef:
    """The structure of a pytree: hashable, so it can key a cache."""
    kind: Any                 # "leaf", "none", tuple, list, dict, a namedtuple class or a registered class
    aux: Any                  # dict keys, or a registered type's aux data
    children: tuple[PyTreeDef, ...]

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "float0":
            return f"float0{list(self.aux)}"
        inner = ", ".join(map(repr, self.children))
        if self.kind is dict:
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.aux, self.children)) + "}"
        if self.kind is list:
            return f"[{inner}]"
        if self.kind is tuple:
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        return f"{getattr(self.kind, '__name__', self.kind)}({inner})"


LEAF = PyTreeDef("leaf", None, ())


def tree_flatten(tree: Any) -> tuple[list[Any], PyTreeDef]:
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves)


def _flatten(x: Any, leaves: list) -> PyTreeDef:
    if x is None:
        return PyTreeDef("none", None, ())
    cls = type(x)
    if cls in _REGISTRY:
        children, aux = _REGISTRY[cls][0](x)
        return PyTreeDef(cls, aux, tuple(_flatten(c, leaves) for c in children))
    if _is_namedtuple(x):
        return PyTreeDef(cls, None, tuple(_flatten(c, leaves) for c in x))
    if cls in (tuple, list):
        return PyTreeDef(cls, None, tuple(_flatten(c, leaves) for c in x))
    if cls is dict:
        keys = tuple(sorted(x))
        return PyTreeDef(dict, keys, tuple(_flatten(x[k], leaves) for k in keys))
    if cls is np.ndarray and x.dtype.kind == "V" and x.dtype == float0:
        return PyTreeDef("float0", x.shape, ())
    leaves.append(x)
    return LEAF


def tree_unflatten(treedef: PyTreeDef, leaves) -> Any:
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over for structure {treedef}")
    return out


def _unflatten(t: PyTreeDef, it) -> Any:
    if t.kind == "leaf":
        try:
            return next(it)
        except StopIteration:
            raise ValueError("tree_unflatten: too few leaves") from None
    if t.kind == "none":
        return None
    if t.kind == "float0":
        return np.zeros(t.aux, float0)
    children = [_unflatten(c, it) for c in t.children]
    if t.kind in _REGISTRY:
        return _REGISTRY[t.kind][1](t.aux, children)
    if t.kind is dict:
        return dict(zip(t.aux, children))
    if t.kind is list:
        return children
    if t.kind is tuple:
        return tuple(children)
    return t.kind(*children)   # a namedtuple


def tree_map(fn: Callable, tree: Any, *rest: Any) -> Any:
    leaves, treedef = tree_flatten(tree)
    others = [tree_flatten(r) for r in rest]
    for _leaves_r, treedef_r in others:
        if treedef_r != treedef:
            raise ValueError(f"tree_map: structures differ: {treedef} and {treedef_r}")
    return tree_unflatten(treedef, [fn(*xs) for xs in zip(leaves, *(lr for lr, _ in others))])


def tree_leaves(tree: Any) -> list[Any]:
    return tree_flatten(tree)[0]
