"""The target-independent LLVM emitter that pyxla's LLVM targets share.

How HLO element types live in LLVM IR (llvm/ir_types.py, llvm/low_precision.py), index arithmetic over
layouts (indices.py), loop builders and control structures (llvm/loops.py), the elemental emitter
(llvm/elemental.py: the IR for one element of an instruction, so fused chains never materialise
intermediates), inline transcendentals (fast_math*.py), bit-level ops (llvm/bits.py) and blocked
transposes (llvm/transpose_loops.py). A target adds its kernels, its runtime and its entry
function around these; nothing here imports from a target's package.
"""
# The modules that register elemental rules (bits, convolution, indexing, windows) are
# imported by elemental.register_rules when the first emitter is made, not here: a process
# that loads cached code imports ir_types and nothing that emits.
