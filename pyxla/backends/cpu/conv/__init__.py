"""Convolution on the CPU. geometry.py holds what every route shares (and the elemental rule
any convolution can fall back to). Each kernel module registers its emitter in
tiles.EMITTERS when imported, and a convolution goes to the first that fits; with the
imports in cpu/__init__.py that order is winograd.py (3x3, stride 1), pointwise.py (1x1 as
pyxla's GEMM), planes.py (NCHW feature planes), tiles.py (register tiles, the general
f32/f64 route), depthwise.py (groups with few output features)."""
