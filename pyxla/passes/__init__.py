"""Target-independent HLO passes: each one a function over a module that says whether it changed it.

The default pipeline (pipeline.py's default_pipeline), in the order it runs them:

  call-inliner                 call_inliner.py       inline every `call`
  batch-norm-expander          expanders.py          batch-norm ops into elementwise ops and reductions
  zero-sized-elimination       zero_sized.py         an instruction with no elements becomes a constant
  simplify (repeated until nothing changes):
    algebraic-simplifier       algebraic_simplifier.py  local rewrites that never change a value
    tuple-simplifier           tuple_simplifier.py   get-tuple-element of a tuple is its element
    constant-folding           constant_folding.py   compute what depends only on constants
    cse                        cse.py                common subexpression elimination
    while-loop-simplifier      while_loop_simplifier.py  0/1-trip loops, dead loop state, invariant hoisting
    reshape-mover              reshape_mover.py      sink reshapes and transposes below elementwise ops
    dce                        dce.py                dead code elimination
  convolution-layout           convolution_layout.py  convolutions over features-last activations
  dot-canonicalizer            dot_canonicalizer.py  every dot as (batch..., M, K) x (batch..., K, N)
  cleanup (repeated until nothing changes):
    algebraic-simplifier, cse, dce

After fusion the compiler (pyxla/compiler.py) runs reshape-to-bitcast (reshape_to_bitcast.py).
Passes a backend asks for (pipeline.py's optional_passes): logistic-expander and
rng-bit-generator-expander (expanders.py).

The machinery: hlo_pass.py (HloPass, the hlo_pass decorator, FixedPoint groups), pipeline.py
(run_pipeline and its instruments: PYXLA_VERIFY, PYXLA_DUMP, PYXLA_DEBUG=passes) and rewrite.py
(the driver for tables of local rewrite rules).
"""
