"""The target-independent LLVM emitter that pyxla's LLVM targets share.

How HLO element types live in LLVM IR (ir_types.py, low_precision.py), index arithmetic over
layouts (indices.py), loop builders and control structures (loops.py), the elemental emitter
(elemental.py: the IR for one element of an instruction, so fused chains never materialise
intermediates), inline transcendentals (fast_math*.py), bit-level ops (bits.py) and blocked
transposes (transpose_loops.py). A target adds its kernels, its runtime and its entry
function around these; nothing here imports from a target's package.
"""
from . import bits  # noqa: F401  (registers the bit-level elemental rules)
