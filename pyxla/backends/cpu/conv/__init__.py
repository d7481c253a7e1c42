"""Convolution on the CPU. llvm/convolution.py holds the geometry every route shares (and
the elemental rule any convolution can fall back to, on every target). Each kernel module
registers its emitter in tiles.EMITTERS when imported, and a convolution goes to the first
that fits; with the imports in cpu/__init__.py (planes.py imports pointwise.py first,
weight_gradient.py imports winograd.py first) that order is weight_gradient.py (weight
gradients: a window at least as large as the result, one GEMM per tap), winograd.py (3x3,
stride 1), planes.py (NCHW feature planes), pointwise.py (1x1 as pyxla's GEMM), tiles.py
(register tiles, the general f32/f64 route), depthwise.py (groups with few output
features). The plan of a tiled convolution is tile_plan.py."""
