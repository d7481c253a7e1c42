"""pyxla.lax: one function per HLO operation, with XLA's semantics and JAX's signatures.

    from pyxla import lax

    @pyxla.jit
    def f(x, w):
        h = lax.dot_general(x, w, (((1,), (0,)), ((), ())))
        return lax.reduce_max(lax.tanh(h), axes=(1,))

Every function works on traced values (inside `jit`, a loop body, a branch) by emitting
HLO, and on concrete values (NumPy arrays, Python numbers) by running that operation on
the reference evaluator at once, so results agree.

Types are not promoted: operands of one operation must share an element type. Python
numbers are weakly typed and take the other operands' type (`lax.mul(x, 2.0)`).
Elementwise operations also broadcast NumPy-style.

Files, in the order of XLA's operation semantics:
  elementwise.py    arithmetic, math, bits, comparisons, select, clamp, conversions
  shapes.py         broadcast, reshape, transpose, slices, concatenate, pad, rev, iota
  indexing.py       gather and the scatter family
  contractions.py   dot, dot_general, conv_general_dilated
  reductions.py     reduce, monoid reductions, argmax/argmin, windows, cumulative ops
  sorting.py        sort, sort_key_val, top_k
  rng.py            rng_bit_generator
  control_flow.py   while_loop, fori_loop, cond, switch, scan, optimization_barrier
  special.py        erf_inv (XLA's expansion, on the elementwise functions)
  linalg.py         linalg.cholesky, linalg.triangular_solve (JAX's jax.lax.linalg)
  gradients.py      stop_gradient
"""
from . import linalg  # noqa: F401  (pyxla.lax.linalg, as jax.lax.linalg)
from ._windows import padtype_to_pads
from .contractions import ConvDimensionNumbers, conv_dimension_numbers, conv_general_dilated, dot, dot_general
from .control_flow import cond, fori_loop, optimization_barrier, scan, switch, while_loop
from .elementwise import (
    RoundingMethod,
    abs,
    add,
    atan2,
    bitcast_convert_type,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    cbrt,
    ceil,
    clamp,
    clz,
    compare,
    convert_element_type,
    cos,
    div,
    eq,
    erf,
    exp,
    expm1,
    floor,
    ge,
    gt,
    integer_pow,
    is_finite,
    le,
    log,
    log1p,
    logistic,
    lt,
    max,
    min,
    mul,
    ne,
    neg,
    population_count,
    pow,
    reciprocal,
    reduce_precision,
    rem,
    round,
    rsqrt,
    select,
    select_n,
    shift_left,
    shift_right_arithmetic,
    shift_right_logical,
    sign,
    sin,
    sqrt,
    square,
    sub,
    tan,
    tanh,
)
from .gradients import stop_gradient
from .indexing import (
    GatherDimensionNumbers,
    GatherScatterMode,
    ScatterDimensionNumbers,
    gather,
    scatter,
    scatter_add,
    scatter_max,
    scatter_min,
    scatter_mul,
)
from .reductions import (
    argmax,
    argmin,
    cummax,
    cummin,
    cumprod,
    cumsum,
    reduce,
    reduce_and,
    reduce_max,
    reduce_min,
    reduce_or,
    reduce_prod,
    reduce_sum,
    reduce_window,
    reduce_window_max,
    reduce_window_min,
    reduce_window_sum,
    reduce_xor,
    select_and_scatter_add,
)
from .rng import RandomAlgorithm, rng_bit_generator
from .shapes import (
    broadcast,
    broadcast_in_dim,
    broadcasted_iota,
    concatenate,
    dynamic_index_in_dim,
    dynamic_slice,
    dynamic_slice_in_dim,
    dynamic_update_index_in_dim,
    dynamic_update_slice,
    expand_dims,
    full,
    full_like,
    index_in_dim,
    iota,
    pad,
    reshape,
    rev,
    slice,
    slice_in_dim,
    squeeze,
    transpose,
)
from .sorting import sort, sort_key_val, top_k
from .special import erf_inv

__all__ = [
    # elementwise
    "abs", "add", "atan2", "bitcast_convert_type", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor",
    "cbrt", "ceil", "clamp", "clz", "compare", "convert_element_type", "cos", "div", "eq", "erf", "erf_inv", "exp",
    "expm1", "floor", "ge", "gt", "integer_pow", "is_finite", "le", "log", "log1p", "logistic", "lt", "max",
    "min", "mul", "ne", "neg", "population_count", "pow", "reciprocal", "reduce_precision", "rem", "round",
    "RoundingMethod", "rsqrt", "select", "select_n", "shift_left", "shift_right_arithmetic",
    "shift_right_logical", "sign", "sin", "sqrt", "square", "sub", "tan", "tanh",
    # shapes
    "broadcast", "broadcast_in_dim", "broadcasted_iota", "concatenate", "dynamic_index_in_dim",
    "dynamic_slice", "dynamic_slice_in_dim", "dynamic_update_index_in_dim", "dynamic_update_slice",
    "expand_dims", "full", "full_like", "index_in_dim", "iota", "pad", "reshape", "rev", "slice",
    "slice_in_dim", "squeeze", "transpose",
    # indexing
    "GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers", "gather", "scatter",
    "scatter_add", "scatter_max", "scatter_min", "scatter_mul",
    # contractions
    "ConvDimensionNumbers", "conv_dimension_numbers", "conv_general_dilated", "dot", "dot_general",
    "padtype_to_pads",
    # reductions
    "argmax", "argmin", "cummax", "cummin", "cumprod", "cumsum", "reduce", "reduce_and", "reduce_max",
    "reduce_min", "reduce_or", "reduce_prod", "reduce_sum", "reduce_window", "reduce_window_max",
    "reduce_window_min", "reduce_window_sum", "reduce_xor", "select_and_scatter_add",
    # sorting, random bits
    "sort", "sort_key_val", "top_k", "RandomAlgorithm", "rng_bit_generator",
    # differentiation
    "stop_gradient",
    # control flow
    "cond", "fori_loop", "optimization_barrier", "scan", "switch", "while_loop",
]
