"""Opcode records, one file per family; importing this package registers them all."""
from importlib import import_module

from .registry import REGISTRY, OpDef, has_side_effects, known_opcodes, op_def, register  # noqa: F401

# Families in the order a reader meets them in XLA's operation semantics.
OP_FILES = ("elementwise", "shape_ops", "indexing", "reduction", "dot_conv", "normalization", "linalg", "sort", "rng",
            "control", "single_device", "composite")

for _name in OP_FILES:
    import_module(f"{__name__}.{_name}")
