"""Pytrees: flatten and rebuild nested containers; structures are hashable cache keys."""
from collections import namedtuple

import pytest

from pyxla.frontend.pytree import register_pytree_node, tree_flatten, tree_map, tree_unflatten

Point = namedtuple("Point", "x y")


class Box:
    def __init__(self, value, label):
        self.value, self.label = value, label


register_pytree_node(Box, lambda b: ([b.value], b.label), lambda label, children: Box(children[0], label))


@pytest.mark.parametrize("tree", [
    1,
    (1, 2),
    [1, (2, 3), {"b": 4, "a": [5, None]}],
    {"z": Point(1, 2), "y": (3,)},
    (),
    None,
    [None, (None,), {}],
])
def test_round_trip(tree):
    leaves, treedef = tree_flatten(tree)
    assert tree_unflatten(treedef, leaves) == tree
    assert treedef.num_leaves == len(leaves)


def test_dict_leaves_in_sorted_key_order():
    leaves, _ = tree_flatten({"b": 2, "a": 1, "c": 3})
    assert leaves == [1, 2, 3]


def test_structures_compare_and_hash():
    _, a = tree_flatten({"w": [1, 2], "b": 3})
    _, b = tree_flatten({"w": [7, 8], "b": 9})
    _, c = tree_flatten({"w": (7, 8), "b": 9})
    assert a == b and hash(a) == hash(b)
    assert a != c


def test_registered_node():
    leaves, treedef = tree_flatten([Box(3, "three"), Box((4, 5), "pair")])
    assert leaves == [3, 4, 5]
    rebuilt = tree_unflatten(treedef, [30, 40, 50])
    assert rebuilt[0].value == 30 and rebuilt[0].label == "three" and rebuilt[1].value == (40, 50)


def test_tree_map_and_mismatch():
    assert tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    with pytest.raises(ValueError, match="structures differ"):
        tree_map(lambda a, b: a, (1, 2), [1, 2])


def test_unflatten_wrong_leaf_count():
    _, treedef = tree_flatten((1, 2))
    with pytest.raises(ValueError, match="too few"):
        tree_unflatten(treedef, [1])
    with pytest.raises(ValueError, match="left over"):
        tree_unflatten(treedef, [1, 2, 3])
