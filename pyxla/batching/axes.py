"""vmap's axis specifications: in_axes and out_axes as pytree prefixes, checked as JAX
checks them, and the sizes of the mapped axes.

A specification is an int, None (not mapped), or a container of the value's structure
(tuple, list, dict, namedtuple, registered type) whose entries are specifications of the
value's entries: a prefix of the value's tree, each int or None standing for every leaf
below it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..frontend.pytree import PyTreeDef, tree_flatten, tree_unflatten


def check_spec(what: str, spec: Any) -> None:
    """A TypeError unless every leaf of `spec` is an int or None (JAX's message)."""
    leaves, _ = tree_flatten(spec)
    if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in leaves):
        raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those types as leaves, "
                        f"but got {spec}.")


def _children(spec: Any, tree: PyTreeDef) -> list[Any] | None:
    """The entries of container `spec` matching the children of `tree`, or None when `spec`
    is not a container of `tree`'s kind."""
    leaves, spec_tree = tree_flatten(spec)
    if spec_tree.kind != tree.kind or len(spec_tree.children) != len(tree.children):
        return None
    if tree.kind is dict and spec_tree.aux != tree.aux:
        return None
    out, start = [], 0
    for child in spec_tree.children:   # rebuild each entry (None entries come back as None)
        out.append(tree_unflatten(child, leaves[start:start + child.num_leaves]))
        start += child.num_leaves
    return out


def _broadcast(spec: Any, tree: PyTreeDef, what: str, whole: Any, value_tree: PyTreeDef) -> list[Any]:
    if spec is None or isinstance(spec, (int, np.integer)):
        return [None if spec is None else int(spec)] * tree.num_leaves
    if tree.kind in ("leaf", "none", "float0"):
        entries = None
    else:
        entries = _children(spec, tree)
    if entries is None:
        raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding value, got "
                         f"specification {whole} for value tree {value_tree}.")
    return [axis for s, child in zip(entries, tree.children) for axis in _broadcast(s, child, what, whole, value_tree)]


def broadcast_prefix(spec: Any, tree: PyTreeDef, what: str) -> list[int | None]:
    """The axis (or None) of every leaf of `tree`, from `spec`, a prefix of it."""
    return _broadcast(spec, tree, what, spec, tree)


def leaf_paths(tree: PyTreeDef, prefix: str) -> list[str]:
    """A readable path (args[0]['w']) for every leaf of `tree`."""
    if tree.kind == "leaf":
        return [prefix]
    if tree.kind is dict:
        keys = [f"[{k!r}]" for k in tree.aux]
    elif hasattr(tree.kind, "_fields"):
        keys = [f".{f}" for f in tree.kind._fields]
    else:
        keys = [f"[{i}]" for i in range(len(tree.children))]
    return [p for key, child in zip(keys, tree.children) for p in leaf_paths(child, prefix + key)]


def type_text(dtype: Any, shape: Sequence[int]) -> str:
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


def inconsistent_sizes(entries: list[tuple[int, str]]) -> ValueError:
    """JAX's error for mapped axes of different sizes; `entries` are (size, description)."""
    groups: dict[int, list[str]] = {}
    for size, text in entries:
        groups.setdefault(size, []).append(text)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    lines = []
    for i, (size, texts) in enumerate(ordered):
        if len(texts) == 1:
            lines.append(f"  * one axis had size {size}: {texts[0]}")
        else:
            many = "most axes" if i == 0 else "some axes"
            lines.append(f"  * {many} ({len(texts)} of them) had size {size}, e.g. {texts[0]}")
    return ValueError("vmap got inconsistent sizes for array axes to be mapped:\n" + ";\n".join(lines))


def rank_error(axis: int, shape: Sequence[int]) -> ValueError:
    return ValueError(f"vmap was requested to map its argument along axis {axis}, which implies that its rank "
                      f"should be at least {axis + 1 if axis >= 0 else -axis}, but is only {len(shape)} (its shape "
                      f"is {tuple(shape)})")


__all__ = ["broadcast_prefix", "check_spec", "inconsistent_sizes", "leaf_paths", "rank_error", "type_text"]
