"""The opcode registry: one record per HLO opcode, holding all of that opcode's rules.

A record says how many operands the opcode takes, which attributes it requires and
accepts, how its result shape follows from operands and attributes, how fusion should
treat it, and what it computes (its reference semantics, in NumPy). The op files in this
package (elementwise.py, shape_ops.py, ...) fill the registry; nothing else switches on
opcode names to learn these facts.

Contracts for the two functions of a record:

  shape(operand_shapes, attrs, declared) -> Shape
      The result shape. `declared` is the shape written in the text (or given to the
      builder), or None. Opcodes whose result is not determined by operands and
      attributes (broadcast's dims, convert's element type, parameter, ...) take those
      parts from `declared` and raise ShapeError when it is None. Raise ShapeError
      with a plain message when operands or attributes do not fit.

  evaluate(instr, operands, ctx) -> value
      Values are NumPy arrays (element type's storage dtype, logical row-major order)
      or Python tuples of values. Elementwise opcodes must compute from the operand
      arrays alone (never from instr.shape's dims), so that a scalar computation (a
      reducer, a comparator) can be evaluated on whole arrays of lanes at once. `ctx`
      evaluates called computations: ctx.call(computation, [values]).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import ShapeError

if TYPE_CHECKING:
    from ..instruction import HloInstruction
    from ..shape import Shape

# How fusion treats an opcode (XLA's classification):
#   elementwise  every output element depends on the same-index element of each operand
#   broadcast    output elements read operand elements by a projection of the index
#   injective    a data-movement op: each output element reads one operand element
#   reduce       combines many operand elements into one
#   opaque       anything else (dot, convolution, sort, control flow, side effects)
FUSION_KINDS = ("elementwise", "broadcast", "injective", "reduce", "opaque")


@dataclass
class OpDef:
    opcode: str
    fusion_kind: str
    shape: Callable[..., Any]
    evaluate: Callable[..., Any]
    arity: int | tuple[int, int | None]   # exact count, or (min, max) with max None = any
    required_attrs: tuple[str, ...] = ()
    optional_attrs: tuple[str, ...] = ()
    side_effects: bool = False
    doc: str = ""
    extra: dict = field(default_factory=dict)   # op-family facts (e.g. an elementwise op's NumPy ufunc)

    def check_arity(self, n: int) -> str | None:
        """A message when `n` operands is wrong for this opcode, else None."""
        if isinstance(self.arity, int):
            if n != self.arity:
                return f"{self.opcode} takes {self.arity} operand(s), got {n}"
            return None
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = f"at least {lo}" if hi is None else f"{lo} to {hi}"
            return f"{self.opcode} takes {want} operands, got {n}"
        return None

    @property
    def allowed_attrs(self) -> frozenset[str]:
        return frozenset(self.required_attrs) | frozenset(self.optional_attrs)


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.opcode in REGISTRY:
        raise ValueError(f"opcode {opdef.opcode} registered twice")
    if opdef.fusion_kind not in FUSION_KINDS:
        raise ValueError(f"{opdef.opcode}: unknown fusion kind {opdef.fusion_kind}")
    REGISTRY[opdef.opcode] = opdef
    return opdef


def op_def(opcode: str) -> OpDef:
    """The record of `opcode`; an opcode pyxla does not know is a NotImplementedError naming it."""
    _load_op_files()
    try:
        return REGISTRY[opcode]
    except KeyError:
        raise NotImplementedError(f"HLO opcode '{opcode}' is not supported by pyxla") from None


def has_side_effects(instr: HloInstruction) -> bool:
    """Whether `instr` must stay even when nothing uses its result.

    The opcode's record says so (its `side_effects` fact); a custom-call says so itself, by its
    custom_call_has_side_effect attribute; an opcode pyxla does not know counts as having side
    effects, so that passes keep it.
    """
    if instr.opcode == "custom-call":
        return bool(instr.attrs.get("custom_call_has_side_effect"))
    try:
        return op_def(instr.opcode).side_effects
    except NotImplementedError:
        return True


def known_opcodes() -> list[str]:
    _load_op_files()
    return sorted(REGISTRY)


def require_declared(opcode: str, declared: Shape | None) -> Shape:
    if declared is None:
        raise ShapeError(f"{opcode} needs its result shape given: it does not follow from the operands")
    return declared


# Cost classes of ops, as XLA draws them. Cost analysis counts the transcendental ops'
# elements apart (HloCostAnalysis); the expensive ones (XLA's IsExpensive: those and
# division, remainder, gather) cost enough per element that fusion does not duplicate them
# into several consumers, and a loop kernel's work estimate weighs them more.
TRANSCENDENTAL_OPS = frozenset({"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
                                "cbrt", "sine", "cosine", "tan", "tanh", "logistic", "erf", "power", "atan2"})
EXPENSIVE_OPS = TRANSCENDENTAL_OPS | {"divide", "remainder", "gather"}


def is_transcendental(opcode: str) -> bool:
    """Whether cost analysis counts `opcode`'s elements as transcendentals."""
    return opcode in TRANSCENDENTAL_OPS


def is_expensive(opcode: str) -> bool:
    """Whether `opcode` costs enough per element that computing it twice is not free."""
    return opcode in EXPENSIVE_OPS


_loaded = False


def _load_op_files() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import OP_FILES  # noqa: F401  (importing the package registers every op file)


# custom-call targets the evaluator understands: target name -> evaluate(instr, operands, ctx).
# The op family that owns the semantics registers its target (sort.py registers "TopK").
CUSTOM_CALL_TARGETS: dict[str, Callable[..., Any]] = {}


def register_custom_call(target: str, evaluate: Callable[..., Any]) -> None:
    if target in CUSTOM_CALL_TARGETS:
        raise ValueError(f"custom-call target {target} registered twice")
    CUSTOM_CALL_TARGETS[target] = evaluate
